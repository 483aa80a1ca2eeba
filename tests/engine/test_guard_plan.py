"""``Lifecycle.guard_plan`` and the row chosen from the outcomes coverage hands back.

The plan of a (trigger, status) lists every guard of the machine's candidate rows; the
coverage observer evaluates them all and returns their outcomes, and ``select_row``
chooses the row (or the refusal's blocking guard) from those instead of running the
guards again. The plan must list exactly the table's rows and guards in table order (as
coverage and ``blocking_guard`` listed them before), and the row chosen from the outcomes
must be the one ``Event.trigger`` chooses, refusals alike (code and guard).
"""

from __future__ import annotations

from typing import Any

import pytest
from support.dispatch import decided, every_lifecycle, firings_asked

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._coverage import Coverage


@pytest.mark.parametrize("lifecycle", every_lifecycle(), ids=lambda lifecycle: lifecycle.name)
def test_the_plan_lists_the_table_rows_and_guards_in_order(
        lifecycle: Lifecycle[Any, Any]) -> None:
    for trigger in lifecycle.triggers:
        for status in lifecycle.statuses:
            rows = [row for row in lifecycle.rows if (row.trigger, row.source) == (trigger, status)]
            plan = lifecycle.guard_plan(trigger, status.value)
            assert [row for row, _ in plan.candidates] == rows
            assert list(plan.checks) == [
                (name, lifecycle.guards[name].test, target) for row in rows
                for names, target in ((row.conditions, True), (row.unless, False))
                for name in names]


@pytest.mark.parametrize("lifecycle", every_lifecycle(), ids=lambda lifecycle: lifecycle.name)
def test_the_row_chosen_from_coverage_outcomes_is_event_triggers(
        lifecycle: Lifecycle[Any, Any]) -> None:
    coverage = Coverage(lifecycle)
    compared = 0
    for current, inputs in firings_asked(lifecycle, 3):
        for trigger in lifecycle.triggers:
            with lifecycle.observing(coverage):
                told = decided(lifecycle.select_row, trigger, current, inputs)
            slow = decided(lifecycle.select_row_by_trigger, trigger, current, inputs)
            assert told == slow, (trigger, current, inputs)
            compared += 1
    assert compared > 100
    assert coverage.attempts == compared
