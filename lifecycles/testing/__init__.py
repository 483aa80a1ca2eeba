"""Testing lifecycles: generated stateful tests, the pytest plugin, and test inputs.

* :mod:`lifecycles.testing._machine`: :func:`build_state_machine` turns a lifecycle's
  exploration inputs and a store factory into a Hypothesis ``RuleBasedStateMachine``
  that checks the store against the pure machine, with transition coverage;
* :mod:`lifecycles.testing._plugin`: the pytest plugin (Hypothesis profiles ``ci`` and
  ``deep``, the coverage report, ``--lifecycles-require-coverage``);
* :mod:`lifecycles.monitor.strategies` and :mod:`lifecycles.outbox.strategies`: the
  Hypothesis strategies that the shipped lifecycles' generated tests draw their inputs
  from (their explorations name them; Hypothesis is imported only when they draw), for
  users writing their own tests of the monitor or the outbox.

This package is the plugin's entry point (``pytest11: lifecycles = lifecycles.testing``,
or ``pytest_plugins = ["lifecycles.testing"]``): pytest finds the hooks among the names
below. It imports neither Hypothesis nor pytest until a hook runs or a machine is built.
"""

from lifecycles.testing._machine import (
    COVERAGE_RUNS,
    StepCoverage,
    StepFailed,
    build_state_machine,
    coverage_of,
    generated_test_settings,
)
from lifecycles.testing._plugin import (
    DEFAULT_PROFILE,
    PENDING_PROFILE,
    PROFILE_VARIABLE,
    REQUIRE_COVERAGE_OPTION,
    merged_by_lifecycle,
    pytest_addoption,
    pytest_configure,
    pytest_load_initial_conftests,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
)

__all__ = [
    "COVERAGE_RUNS",
    "DEFAULT_PROFILE",
    "PENDING_PROFILE",
    "PROFILE_VARIABLE",
    "REQUIRE_COVERAGE_OPTION",
    "StepCoverage",
    "StepFailed",
    "build_state_machine",
    "coverage_of",
    "generated_test_settings",
    "merged_by_lifecycle",
    "pytest_addoption",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]
