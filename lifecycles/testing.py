"""Generated stateful tests for any lifecycle on any store, with transition coverage.

:func:`build_state_machine` turns a lifecycle's exploration inputs (declared beside its
table, see :mod:`lifecycles.machines.exploration`) and a store factory into a Hypothesis
``RuleBasedStateMachine``:

* ``create`` (first, then up to ``max_records`` more times): admit a record drawn
  from the lifecycle's ``new_records`` strategy (repeating a key is idempotent: the
  stored record must not change);
* one rule per move (a move per trigger, or a named function beside the table that
  chooses among triggers, like the monitor's ``complete_with_answer``), enabled only
  when some stored record holds a status the table lets it fire from; it draws a record
  and inputs, runs the move through the store in one transaction and through the pure
  machine, and asserts they agree: same refusal code, or the same new record;
* after every step: every stored record holds every invariant, no record was lost or
  appeared (the model's keys are exactly the store's), each stored record equals the
  model's, and ``count_by_status`` agrees.

A generated test leaves out Hypothesis' *explain* phase (``Machine.TestCase.settings``
is the loaded profile minus ``Phase.explain``): on a failing stateful run it replays
variations of every step, and a planted bug in document review took 104 s to report
with it, 7 s without (``python benchmarks/plugin_failure_time.py [--explain]``).
Shrinking stays on; it is bounded by the profile's ``stateful_step_count`` (the length
of an example) and by Hypothesis' own limits (500 shrinks, 5 minutes). Settings put
in ``TestX.settings`` by hand replace these: wrap them in
:func:`generated_test_settings`. ``pytest --hypothesis-explain`` keeps the explain
phase.

Coverage (rows fired, guards seen true and false) is recorded for every store run and,
under pytest, printed at the end; ``pytest --lifecycles-require-coverage`` fails the
run when no generated test of a lifecycle (on any store) exercised one of its table
rows. A row whose firing made a step fail (its effect broke an invariant, say) counts
as exercised and is reported as "fired, failed".

The pytest plugin
-----------------

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

import attrs

from lifecycles.machines.core import Lifecycle, Row, TransitionRefused
from lifecycles.machines.exploration import Coverage, Exploration, Move

if TYPE_CHECKING:
    import pytest
    from hypothesis import settings as Settings
    from hypothesis.stateful import RuleBasedStateMachine

    from lifecycles.stores.base import Store

R = TypeVar("R")
S = TypeVar("S", bound="Store[Any]")
F = TypeVar("F", bound=Callable[..., Any])

REQUIRE_COVERAGE_OPTION = "--lifecycles-require-coverage"
PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"

COVERAGE_RUNS: dict[str, Coverage] = {}
"""Coverage of every generated machine that ran a step in this process, by name."""


class StepFailed(AssertionError):
    """A generated step went wrong; the message holds the steps of this example so far."""


@attrs.define
class StepCoverage(Coverage):
    """:class:`Coverage` that also counts the rows whose firing made a step fail.

    The engine tells observers of a row only once its record passed every invariant,
    so without this a row whose effect breaks one would read "never fired".
    """

    row_failures: dict[Row, int] = attrs.field(factory=dict)

    def failed(self, row: Row) -> None:
        self.attempts += 1
        self.row_failures[row] = self.row_failures.get(row, 0) + 1

    def merge(self, other: Coverage) -> None:
        super().merge(other)
        if isinstance(other, StepCoverage):
            for row, count in other.row_failures.items():
                self.row_failures[row] = self.row_failures.get(row, 0) + count

    @property
    def unfired_rows(self) -> list[Row]:
        return [row for row in super().unfired_rows if row not in self.row_failures]

    @property
    def failed_rows(self) -> list[Row]:
        return [row for row in self.lifecycle.rows if row in self.row_failures]

    def report(self) -> str:
        lines = super().report().split("\n")
        # One line per row, in table order, after the title line.
        for index, row in enumerate(self.lifecycle.rows, 1):
            if row in self.row_failures:
                lines[index] = (lines[index].removesuffix("   <-- never fired")
                                + f"   <-- fired, failed {self.row_failures[row]} times")
        return "\n".join(lines)


def _exploration_of(subject: Exploration[R] | Lifecycle[R, Any]) -> Exploration[R]:
    if isinstance(subject, Exploration):
        return subject
    from lifecycles.checker import find_exploration

    found = find_exploration(subject)
    if found is None:
        raise LookupError(f"{subject.name} declares no exploration inputs beside its table")
    exploration: Exploration[R] = found[0]
    return exploration


def build_state_machine(
    subject: Exploration[R] | Lifecycle[R, Any],
    store_factory: Callable[[], S],
    *,
    name: str | None = None,
    record_coverage: bool = True,
    max_records: int = 3,
    teardown: Callable[[S], None] | None = None,
) -> type[RuleBasedStateMachine]:
    """A ``RuleBasedStateMachine`` driving ``subject`` on fresh stores from ``store_factory``.

    ``subject`` is an :class:`Exploration` or a lifecycle whose exploration is declared
    beside its table. ``name`` labels the coverage report (default
    ``"<lifecycle> on <factory>"``); with ``record_coverage=False`` the run is left out of
    the session's coverage report and ``--lifecycles-require-coverage`` (for machines
    built to fail, like a defect demonstration). The class's ``coverage`` attribute holds
    the counts either way. Every run starts by creating one record, and ``create`` may
    run ``max_records`` times more (a repeated key is an idempotent insert; more when
    every record is final), so the remaining steps go to transitions.
    ``teardown(store)`` runs after each example (close a connection, say).
    Use it as ``TestX = build_state_machine(...).TestCase``: its settings are the profile
    loaded when ``.TestCase`` is read, without the explain phase.
    """
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        initialize,
        invariant,
        precondition,
        rule,
    )

    exploration = _exploration_of(subject)
    lifecycle = exploration.lifecycle
    factory_name = getattr(store_factory, "__name__", type(store_factory).__name__)
    label = name or f"{lifecycle.name} on {factory_name}"
    coverage = StepCoverage(lifecycle)
    movable = frozenset().union(*(exploration.sources(move) for move in exploration.moves))

    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store: S = store_factory()
            self.model: dict[str, R] = {}
            self.steps: list[str] = []
            self.creates = 0
            if record_coverage:
                COVERAGE_RUNS.setdefault(label, coverage)

        @classmethod
        @functools.cache
        def _to_test_case(cls) -> Any:
            # Hypothesis builds the TestCase class, with settings from the loaded profile,
            # when ``.TestCase`` is first read; this is its only hook.
            case = super()._to_test_case()
            case.settings = generated_test_settings(case.settings)
            return case

        def teardown(self) -> None:
            if teardown is not None:
                teardown(self.store)

        def can_move(self) -> bool:
            return any(str(lifecycle.status_of(r)) in movable for r in self.model.values())

        def expect(self, condition: bool, message: str) -> None:
            if not condition:
                raise self.failure(message)

        def failure(self, message: str) -> StepFailed:
            trace = "\n".join(f"  {n}. {s}" for n, s in enumerate(self.steps, 1))
            return StepFailed(f"{label}: {message}\nsteps of this example:\n{trace}")

        @initialize(record=exploration.new_record_strategy())
        def create_first(self, record: R) -> None:
            self.create(record)

        @precondition(lambda self: self.creates < max_records or not self.can_move())
        @rule(record=exploration.new_record_strategy())
        def create(self, record: R) -> None:
            key = lifecycle.key_of(record)
            self.creates += 1
            self.steps.append(f"create {key}")
            lifecycle.create(record)
            stored = self.store.insert(record)
            if key in self.model:
                self.expect(stored == self.model[key], f"insert of {key} changed it")
            else:
                self.expect(stored == record, f"insert of {key} returned another")
                self.model[key] = record

        @invariant()
        def every_record_valid_none_lost(self) -> None:
            stored = {lifecycle.key_of(record): record for record in self.store.scan()}
            lost = sorted(set(self.model) - set(stored))
            self.expect(not lost, f"records lost: {lost}")
            appeared = sorted(set(stored) - set(self.model))
            self.expect(not appeared, f"records appeared: {appeared}")
            for key, record in stored.items():
                broken = lifecycle.invariants.broken(record)
                self.expect(not broken, f"{key} breaks {broken}")
                self.expect(record == self.model[key], f"{key} differs from the model")
            counts = self.store.count_by_status()
            expected = {status.value: 0 for status in lifecycle.statuses}
            for record in self.model.values():
                expected[str(lifecycle.status_of(record))] += 1
            self.expect(counts == expected, f"count_by_status {counts} != {expected}")

    def add_move_rule(move: Move[R, Any]) -> None:
        sources = exploration.sources(move)

        def enabled(machine: LifecycleMachine) -> bool:
            return any(str(lifecycle.status_of(r)) in sources for r in machine.model.values())

        def step(machine: LifecycleMachine, data: st.DataObject) -> None:
            keys = sorted(k for k, r in machine.model.items()
                          if str(lifecycle.status_of(r)) in sources)
            key = data.draw(st.sampled_from(keys), label="key")
            before = machine.model[key]
            choice = data.draw(move.draw_from(before), label=move.name)
            machine.steps.append(f"{move.name} {key}: {move.describe_choice(before, choice)}")
            applied: list[Row] = []

            def pure_fire(trigger: str, record: R, inputs: Any) -> R:
                # Lifecycle.fire in its two steps, to know the row if its effect fails.
                row = lifecycle.select_row(trigger, record, inputs)
                applied.append(row)
                fired: R = lifecycle.apply_row(row, record, inputs)
                return fired

            try:
                expected: R | TransitionRefused = move.perform(pure_fire, before, choice)
            except TransitionRefused as refusal:
                expected = refusal
            except Exception as error:
                if applied:
                    coverage.failed(applied[-1])
                raise machine.failure(f"{move.name} raised {type(error).__name__}: {error}"
                                      ) from error

            def store_fire(trigger: str, record: R, inputs: Any) -> R:
                fired: R = machine.store.fire(record, trigger, inputs)
                return fired

            try:
                with lifecycle.observing(coverage), machine.store.transaction():
                    current = machine.store.get(key)
                    if current is None:
                        raise machine.failure(f"{key} vanished")
                    outcome: R | TransitionRefused = move.perform(store_fire, current, choice)
            except TransitionRefused as refusal:
                outcome = refusal
            except AssertionError:
                raise
            except Exception as error:
                if applied:  # the row the pure machine fired, which the store could not
                    coverage.failed(applied[-1])
                raise machine.failure(f"{move.name} through the store raised "
                                      f"{type(error).__name__}: {error}") from error
            if isinstance(expected, TransitionRefused) or isinstance(outcome, TransitionRefused):
                if not (
                    isinstance(expected, TransitionRefused)
                    and isinstance(outcome, TransitionRefused)
                    and expected.code == outcome.code
                ):
                    raise machine.failure(f"store gave {outcome!r}, pure machine {expected!r}")
                after = machine.store.get(key)
                machine.expect(after == before, f"refused {move.name} changed {key}")
                machine.steps[-1] += f" -> refused {outcome.code}"
                return
            machine.expect(outcome == expected, "store and pure machine disagree")
            machine.model[key] = outcome
            machine.steps[-1] += f" -> {lifecycle.status_of(outcome)}"

        step.__name__ = move.name
        guarded = precondition(enabled)(rule(data=st.data())(step))
        setattr(LifecycleMachine, move.name, guarded)

    for move in exploration.moves:
        add_move_rule(move)
    LifecycleMachine.__name__ = f"{lifecycle.name.title()}StateMachine"
    LifecycleMachine.__qualname__ = LifecycleMachine.__name__
    LifecycleMachine.coverage = coverage
    return LifecycleMachine


def coverage_of(machine: type[RuleBasedStateMachine]) -> StepCoverage:
    """The coverage a class from :func:`build_state_machine` has recorded so far."""
    coverage: StepCoverage = getattr(machine, "coverage")  # noqa: B009 - set on the built class
    return coverage


_keep_explain = False
"""Set by the plugin under ``pytest --hypothesis-explain``."""


def generated_test_settings(base: Settings | None = None) -> Settings:
    """``base`` (default: the loaded profile) without the explain phase.

    What a generated ``TestCase`` runs with; pass it your own settings when you replace
    ``TestX.settings``, to keep the explain phase out of those too.
    """
    from hypothesis import Phase, settings

    base = base if base is not None else settings()
    if _keep_explain:
        return base
    return settings(base, phases=[phase for phase in base.phases if phase is not Phase.explain])


# --- the pytest plugin --------------------------------------------------------------


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
    settings.register_profile(
        "ci",
        base,
        max_examples=60,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
        derandomize=True,
    )
    settings.register_profile(
        "deep",
        base,
        max_examples=2000,
        stateful_step_count=100,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
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
    global _keep_explain
    _keep_explain = bool(config.getoption("hypothesis_explain", default=False))
    if config.stash.get(_pending_key(), False):
        from hypothesis import settings

        chosen = settings.get_current_profile_name() != PENDING_PROFILE
    elif _register_profiles():
        # Registered late (``pytest_plugins`` of a conftest, which ran before us): a
        # profile other than Hypothesis' own default was loaded on purpose.
        from hypothesis import settings

        chosen = settings.get_current_profile_name() != "default"
    else:
        return
    if chosen:
        return
    import pytest
    from hypothesis.errors import InvalidArgument

    name = os.environ.get(PROFILE_VARIABLE, DEFAULT_PROFILE)
    try:
        settings.get_profile(name)  # load_profile would take the unknown name as current
    except InvalidArgument as error:
        raise pytest.UsageError(f"{PROFILE_VARIABLE}={name}: {error}") from None
    settings.load_profile(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _keep_explain
    _keep_explain = False


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
