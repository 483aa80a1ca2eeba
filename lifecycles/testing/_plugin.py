"""The pytest plugin of lifecycles (entry point ``pytest11: lifecycles``, through
:mod:`lifecycles.testing`): Hypothesis profiles, the coverage report and
``--lifecycles-require-coverage``.

This module is a pytest plugin (entry point ``pytest11: lifecycles``), active in every
project that installs lifecycles. Besides the coverage report and option above it
provides two Hypothesis profiles, so a downstream suite needs no conftest for them:

* ``ci`` (the default): ``max_examples=60, stateful_step_count=30, deadline=None``,
  ``too_slow`` suppressed, ``print_blob=True``, ``derandomize=True`` (reproducible, so
  a coverage gate cannot flake);
* ``deep``: ``max_examples=2000, stateful_step_count=100, deadline=None``, ``too_slow``
  suppressed, random: for long runs by hand.

``HYPOTHESIS_PROFILE=<name> pytest`` selects a profile (default ``ci``);
``pytest --hypothesis-profile=<name>`` (Hypothesis' own option) wins over both.

When it happens, and what it leaves alone. pytest imports the plugins, then calls
``pytest_load_initial_conftests``, during which it imports the conftest files of the
rootdir and of the test paths on the command line, then ``pytest_configure``; conftest
files deeper down are imported later, during collection. So the plugin:

1. registers ``ci`` and ``deep`` in ``pytest_load_initial_conftests``, before any
   conftest runs: a conftest that registers a profile under the same name replaces
   ours. It also loads the current settings under a placeholder name,
   ``lifecycles-pending``, so that it can tell afterwards whether a conftest loaded a
   profile (any profile, even ``default``);
2. in ``pytest_configure`` (ahead of other plugins, so Hypothesis' ``--hypothesis-*``
   options apply on top): if a conftest loaded a profile, leaves it, whatever
   ``HYPOTHESIS_PROFILE`` says (that conftest can read the variable itself);
   otherwise loads the profile ``HYPOTHESIS_PROFILE`` names, ours or one a conftest
   registered; an unknown name is a usage error.

A profile loaded later (by a conftest's own ``pytest_configure``, a deeper conftest, a
test module) replaces ours as usual. When the plugin is only registered by a conftest
(``pytest_plugins``, plugin autoload disabled), step 1 happens in step 2 and a profile
other than ``default`` that is loaded by then is left alone.

Without Hypothesis installed the plugin leaves profiles alone; the plugin imports
Hypothesis only in these hooks and when a machine is built.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lifecycles.machines._coverage import Coverage
from lifecycles.testing._machine import COVERAGE_RUNS, StepCoverage, keep_explain_phase

if TYPE_CHECKING:
    import pytest

F = TypeVar("F", bound=Callable[..., Any])

REQUIRE_COVERAGE_OPTION = "--lifecycles-require-coverage"
PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"
PROFILES: dict[str, dict[str, Any]] = {
    # Reproducible, so a coverage gate cannot flake.
    "ci": {"max_examples": 60, "stateful_step_count": 30, "print_blob": True,
           "derandomize": True},
    # For long runs by hand.
    "deep": {"max_examples": 2000, "stateful_step_count": 100},
}
"""The profiles the plugin registers, beyond what both share (no deadline, too_slow
suppressed; parent: Hypothesis' own defaults)."""

PENDING_PROFILE = "lifecycles-pending"
"""Loaded from before the conftests until ``pytest_configure``: any load replaces it."""


@functools.cache
def _pending_key() -> pytest.StashKey[bool]:
    import pytest

    return pytest.StashKey[bool]()


def _register_profiles() -> bool:
    """Register ``ci`` and ``deep``; False when Hypothesis is not installed."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # lifecycles without its test extra: nothing to configure
        return False
    # Hypothesis' own defaults as parent, not whatever is loaded (its "ci" on CI hosts).
    base = settings.get_profile("default")
    for name, own in PROFILES.items():
        settings.register_profile(
            name, base, deadline=None, suppress_health_check=[HealthCheck.too_slow], **own
        )
    return True


def _first(hook: F) -> F:
    """Run ``hook`` before other plugins' and conftests' implementations of it."""
    try:
        import pytest
    except ImportError:  # imported for build_state_machine alone: no hook is ever called
        return hook
    marked: F = pytest.hookimpl(tryfirst=True)(hook)
    return marked


@_first
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if not _register_profiles():
        return
    from hypothesis import settings

    # The same settings under a name of ours: if a conftest loads any profile, even the
    # one that was current, the name changes, and pytest_configure leaves it.
    settings.register_profile(PENDING_PROFILE, settings.default)
    settings.load_profile(PENDING_PROFILE)
    early_config.stash[_pending_key()] = True


@_first
def pytest_configure(config: pytest.Config) -> None:
    keep_explain_phase(bool(config.getoption("hypothesis_explain", default=False)))
    if config.stash.get(_pending_key(), False):
        unchosen = PENDING_PROFILE
    elif _register_profiles():
        # Registered late (``pytest_plugins`` of a conftest, which ran before us): a
        # profile other than Hypothesis' own default was loaded on purpose.
        unchosen = "default"
    else:
        return
    import pytest
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    if settings.get_current_profile_name() != unchosen:
        return  # a conftest loaded a profile: it stays
    name = os.environ.get(PROFILE_VARIABLE, DEFAULT_PROFILE)
    try:
        settings.get_profile(name)  # load_profile would take the unknown name as current
    except InvalidArgument as error:
        raise pytest.UsageError(f"{PROFILE_VARIABLE}={name}: {error}") from None
    settings.load_profile(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    keep_explain_phase(False)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("lifecycles").addoption(
        REQUIRE_COVERAGE_OPTION, action="store_true", default=False,
        help="fail the run when a generated lifecycle test left a table row unexercised",
    )


def _ran() -> dict[str, Coverage]:
    return {name: c for name, c in COVERAGE_RUNS.items() if c.attempts}


def merged_by_lifecycle() -> dict[str, StepCoverage]:
    """The coverage of every generated test that ran, merged per lifecycle (all stores)."""
    merged: dict[str, StepCoverage] = {}
    for coverage in _ran().values():
        name = coverage.lifecycle.name
        if name not in merged:
            merged[name] = StepCoverage(coverage.lifecycle)
        merged[name].merge(coverage)
    return merged


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption(REQUIRE_COVERAGE_OPTION, default=False):
        return
    if any(c.unfired_rows for c in merged_by_lifecycle().values()) and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    ran = _ran()
    if not ran:
        return
    required = config.getoption(REQUIRE_COVERAGE_OPTION, default=False)
    terminalreporter.section("lifecycles transition coverage")
    for name, coverage in ran.items():
        terminalreporter.write_line(f"[{name}] " + coverage.report())
    for name, coverage in merged_by_lifecycle().items():
        if coverage.unfired_rows:
            labels = [row.label for row in coverage.unfired_rows]
            terminalreporter.write_line(
                f"{name}: rows never exercised by any generated test: {labels}"
                + (" (FAILS the run: --lifecycles-require-coverage)" if required else ""),
                red=required,
            )
        else:
            terminalreporter.write_line(
                f"{name}: every row exercised ({coverage.attempts} attempts)", green=True
            )
        if coverage.failed_rows:
            labels = [row.label for row in coverage.failed_rows]
            terminalreporter.write_line(f"{name}: rows fired, failed: {labels}", red=True)
