"""Step invariants: rules over the record before and after a row fires.

Declared beside the state invariants (``InvariantSet(..., steps=[...])``), they are
checked whenever a row fires (refused with the lifecycle's state-invalid code, nothing
written), so on every edge the checker walks and every step of the generated tests;
the auditor pages list them. A tiny lifecycle with a row that breaks one shows each of
these; the tests' leased tasks' step invariants hold on every edge the checker explores
and each of them can fail (the shipped lifecycles' own, in
tests/monitor/test_shipped_step_invariants.py).
"""

from __future__ import annotations

import sqlite3
from enum import StrEnum
from typing import Any

import attrs
import pytest
from support.tasks import TASKS, TaskStatus
from support.tasks_inputs import EXPLORATION as TASKS_EXPLORATION

from lifecycles._diagrams_page import page
from lifecycles.invariants._core import InvariantSet, StepViolation, step_invariant
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration, trigger_move
from lifecycles.machines._work import Step
from lifecycles.stores._memory import MemoryStore
from lifecycles.stores.sqlite import SQLiteStore


class Phase(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


@attrs.frozen
class Tally:
    key: str
    status: Phase
    count: int = 0


@effect("count")
def add_one(r: Tally, i: dict[str, Any]) -> Changes:
    """Add one to the count."""
    return {"count": r.count + 1}


@effect("count")
def start_over(r: Tally, i: dict[str, Any]) -> Changes:
    """Set the count back to zero (the mistake the step invariant catches)."""
    return {"count": 0}


@step_invariant
def count_never_decreases(before: Tally, after: Tally) -> bool:
    """The count never decreases."""
    return after.count >= before.count


TALLY: Lifecycle[Tally, dict[str, Any]] = Lifecycle(
    module=__name__,
    name="tally",
    statuses=Phase,
    table=[
        {"trigger": "add", "source": "open", "dest": "open", "after": "add_one"},
        {"trigger": "reset", "source": "open", "dest": "open", "after": "start_over"},
        {"trigger": "close", "source": "open", "dest": "closed"},
    ],
    initial=Phase.OPEN,
    final=[Phase.CLOSED],
    creation="create",
    guards=[],
    effects=[add_one, start_over],
    invariants=InvariantSet("tally.invalid", [], steps=[count_never_decreases]),
    record_type=Tally,
    key_field="key",
    not_allowed_code="tally.not_allowed",
)


def test_a_row_breaking_a_step_invariant_is_refused_naming_it() -> None:
    counted = TALLY.fire("add", Tally("t", Phase.OPEN), {})
    with pytest.raises(StepViolation) as refused:
        TALLY.fire("reset", counted, {})
    assert (refused.value.code, refused.value.rules) == ("tally.invalid",
                                                         ("count_never_decreases",))
    assert TALLY.fire("reset", Tally("t", Phase.OPEN), {}) == Tally("t", Phase.OPEN)  # 0 -> 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_through_a_store_nothing_is_written(kind: str) -> None:
    store = (MemoryStore(TALLY) if kind == "memory"
             else SQLiteStore(TALLY, sqlite3.connect(":memory:")))
    store.insert(Tally("t", Phase.OPEN))
    with store.transaction():
        record = store.get("t")
        assert record is not None
        store.fire(record, "add", {})
    with pytest.raises(StepViolation), store.transaction():
        record = store.get("t")
        assert record is not None
        store.fire(record, "reset", {})
    assert store.get("t") == Tally("t", Phase.OPEN, 1)


def test_the_checker_finds_it_with_the_shortest_trace() -> None:
    exploration = Exploration(
        lifecycle=TALLY,
        initial=lambda: [Tally("t", Phase.OPEN)],
        moves=tuple(trigger_move(trigger, lambda r: [{}]) for trigger in TALLY.triggers),
        abstraction=lambda r: (r.status, min(r.count, 3)),
        abstraction_doc="count capped at 3",
        bounds="count up to 3",
    )
    found = explore(exploration).violation
    assert found is not None
    assert (found.kind, found.rules) == ("invariant", ("count_never_decreases",))
    assert [step.move for step in found.trace] == ["add", "reset"]


def test_a_poll_step_never_hides_one_behind_its_fallback() -> None:
    def breaks_a_step(trigger: str, record: Any, inputs: Any) -> Any:
        raise StepViolation("terminal_processing_monitor.state_invalid", ["some_step"])

    step = Step("observe_progress", inputs=None, fallback=Step("fail_attempt", None))
    with pytest.raises(StepViolation):
        step.fire(None, breaks_a_step)  # type: ignore[arg-type]


def test_the_tasks_step_invariants_hold_on_every_explored_edge_and_each_can_fail() -> None:
    assert [rule.name for rule in TASKS.invariants.steps] == [
        "claim_mints_a_new_token", "renewal_keeps_the_token"]
    reached = explore(TASKS_EXPLORATION, keep_records=True)
    assert reached.violation is None
    running = next(r for r in reached.records if r.status == TaskStatus.RUNNING)
    queued = attrs.evolve(running, status=TaskStatus.QUEUED, worker_id=None,
                          lease_token=None, lease_expires_at=None)
    assert TASKS.invariants.broken_steps(queued, running) == []
    assert TASKS.invariants.broken_steps(
        attrs.evolve(queued, lease_token=running.lease_token), running) == [
        "claim_mints_a_new_token"]
    assert TASKS.invariants.broken_steps(
        running, attrs.evolve(running, lease_token="another")) == ["renewal_keeps_the_token"]
    assert TASKS.invariants.broken_steps(
        running, attrs.evolve(running, worker_id="another")) == ["renewal_keeps_the_token"]


def test_the_auditor_page_lists_them() -> None:
    text = page(TASKS, "", svg_name="x.svg", dot_name="x.dot", mermaid_name="x.mmd")
    assert "## Step invariants" in text
    for rule in TASKS.invariants.steps:
        assert f"| `{rule.name}` | {rule.meaning} |" in text
