"""``Lifecycle.guard_plan`` and the row chosen from the outcomes coverage hands back.

The plan of a (trigger, status) lists every guard of the machine's candidate rows; the
coverage observer evaluates them all and returns their outcomes, and ``select_row``
chooses the row (or the refusal's blocking guard) from those instead of running the
guards again. The plan must list exactly the table's rows and guards in table order (as
coverage and ``blocking_guard`` listed them before), and the row chosen from the outcomes
must be the one ``Event.trigger`` chooses, refusals alike (code and guard).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycles.loading import find_exploration
from lifecycles.machines.core import Lifecycle, Row, TransitionRefused
from lifecycles.machines.coverage import Coverage
from lifecycles.registry import registered

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # examples/ imports as from a clone's root


def lifecycles() -> list[Lifecycle[Any, Any]]:
    from examples.review.lifecycle import REVIEW

    return [*registered().values(), REVIEW]


@pytest.mark.parametrize("lifecycle", lifecycles(), ids=lambda lifecycle: lifecycle.name)
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


def decided(select: Any, trigger: str, record: Any, inputs: Any) -> Row | tuple[str, str | None]:
    try:
        row: Row = select(trigger, record, inputs)
        return row
    except TransitionRefused as refusal:
        return (refusal.code, refusal.guard)


@pytest.mark.parametrize("lifecycle", lifecycles(), ids=lambda lifecycle: lifecycle.name)
def test_the_row_chosen_from_coverage_outcomes_is_event_triggers(
        lifecycle: Lifecycle[Any, Any]) -> None:
    found = find_exploration(lifecycle)
    assert found is not None
    exploration = found[0]
    coverage = Coverage(lifecycle)
    frontier, seen, compared = list(exploration.initial()), set(), 0
    for _ in range(3):
        reached: list[Any] = []
        for record in frontier:
            if exploration.abstraction(record) in seen:
                continue
            seen.add(exploration.abstraction(record))
            for move in exploration.moves:
                for choice in move.choices(record):
                    asked: list[tuple[Any, Any]] = []

                    def fire(trigger: str, current: Any, inputs: Any,
                             asked: list[tuple[Any, Any]] = asked) -> Any:
                        asked.append((current, inputs))
                        return lifecycle.fire(trigger, current, inputs)

                    with contextlib.suppress(Exception):
                        reached.append(move.perform(fire, record, choice))
                    for current, inputs in asked:
                        for trigger in lifecycle.triggers:
                            with lifecycle.observing(coverage):
                                told = decided(lifecycle.select_row, trigger, current, inputs)
                            slow = decided(lifecycle.select_row_by_trigger, trigger, current,
                                           inputs)
                            assert told == slow, (trigger, current, inputs)
                            compared += 1
        frontier = reached
    assert compared > 100
    assert coverage.attempts == compared
