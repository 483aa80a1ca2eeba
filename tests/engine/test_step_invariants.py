"""Step invariants: rules over the record before and after a row fires.

Declared beside the state invariants (``InvariantSet(..., steps=[...])``), they are
checked whenever a row fires (refused with the lifecycle's state-invalid code, nothing
written), so on every edge the checker walks and every step of the generated tests;
the auditor pages list them. A tiny lifecycle with a row that breaks one shows each of
these; the shipped lifecycles' own step invariants hold on every edge the checker
explores and each of them can fail.
"""

from __future__ import annotations

import sqlite3
from enum import StrEnum
from typing import Any

import attrs
import pytest

from lifecycles.diagrams_page import page
from lifecycles.invariants.core import InvariantSet, StepViolation, step_invariant
from lifecycles.invariants.monitor import MonitorRecord, MonitorStatus
from lifecycles.invariants.outbox import OutboxRecord
from lifecycles.machines.core import Lifecycle
from lifecycles.machines.declaration import Changes, effect
from lifecycles.machines.exhaustive import explore
from lifecycles.machines.exploration import Exploration, trigger_move
from lifecycles.machines.monitor import MONITOR, MonitorInputs
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION
from lifecycles.machines.outbox import OUTBOX, OutboxInputs
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION
from lifecycles.machines.work import Step
from lifecycles.stores.memory import MemoryStore
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


def test_the_shipped_step_invariants_hold_on_every_explored_edge() -> None:
    assert [rule.name for rule in MONITOR.invariants.steps] == [
        "claim_mints_a_new_lease_token", "poll_attempts_never_decrease",
        "failures_reset_only_by_an_answer", "final_records_never_change",
        "claimed_only_when_due", "lease_ends_by_its_holder_or_by_expiry",
        "lost_lease_fails_only_the_last_failure", "retryable_failure_retried",
        "registering_again_changes_nothing",
    ]
    assert [rule.name for rule in OUTBOX.invariants.steps] == [
        "attempts_never_decrease", "intent_never_changes", "enqueue_again_changes_nothing",
        "delivered_only_after_an_attempt", "failure_answers_an_attempt",
    ]
    for exploration in (MONITOR_EXPLORATION, OUTBOX_EXPLORATION):
        assert explore(exploration).violation is None


def monitor_record(status: MonitorStatus, **fields: Any) -> MonitorRecord:
    reached = explore(MONITOR_EXPLORATION, keep_records=True).records
    record = next(r for r in reached if r.status == status)
    return attrs.evolve(record, **fields)


def test_each_monitor_step_invariant_can_fail() -> None:
    pending = monitor_record(MonitorStatus.PENDING)
    leased = monitor_record(MonitorStatus.LEASED)
    succeeded = monitor_record(MonitorStatus.SUCCEEDED)
    broken = {
        "claim_mints_a_new_lease_token": (
            attrs.evolve(pending, lease_token="same"), attrs.evolve(leased, lease_token="same")),
        "poll_attempts_never_decrease": (
            attrs.evolve(pending, poll_attempts=2), attrs.evolve(pending, poll_attempts=1)),
        "failures_reset_only_by_an_answer": (
            attrs.evolve(pending, failures=2), attrs.evolve(pending, failures=0)),
        "final_records_never_change": (
            succeeded, attrs.evolve(succeeded, updated_at=succeeded.updated_at + 1)),
    }
    for name, (before, after) in broken.items():
        assert MONITOR.invariants.broken_steps(before, after) == [name], name


def test_each_outbox_step_invariant_can_fail() -> None:
    reached: list[OutboxRecord] = explore(OUTBOX_EXPLORATION, keep_records=True).records
    record = max(reached, key=lambda r: r.attempts)
    assert record.attempts > 0
    assert OUTBOX.invariants.broken_steps(record, attrs.evolve(record, attempts=0)) == [
        "attempts_never_decrease"]
    flipped = "fail" if record.action == "complete" else "complete"
    assert OUTBOX.invariants.broken_steps(record, attrs.evolve(record, action=flipped)) == [
        "intent_never_changes"]


def test_the_auditor_pages_list_them() -> None:
    for lifecycle in (MONITOR, OUTBOX):
        text = page(lifecycle, "", svg_name="x.svg", dot_name="x.dot", mermaid_name="x.mmd")
        assert "## Step invariants" in text
        for rule in lifecycle.invariants.steps:
            assert f"| `{rule.name}` | {rule.meaning} |" in text


def test_each_monitor_lease_rule_reads_who_asks_and_when() -> None:
    leased = monitor_record(MonitorStatus.LEASED, failures=0, max_failures=3)
    expiry = leased.lease_expires_at
    assert expiry is not None
    holder = MonitorInputs(now=expiry - 1, worker_id=leased.lease_owner,
                           lease_token=leased.lease_token)
    stranger = MonitorInputs(now=expiry - 1, worker_id="worker-z", lease_token="other")
    watching = attrs.evolve(leased, status=MonitorStatus.WATCHING, lease_owner=None,
                            lease_token=None, lease_expires_at=None)
    failed = attrs.evolve(watching, status=MonitorStatus.FAILED, failures=1,
                          last_error_code="terminal_processing_monitor.lease_expired")
    rule = "lease_ends_by_its_holder_or_by_expiry"
    assert rule not in MONITOR.invariants.broken_steps(leased, watching, holder)
    assert rule in MONITOR.invariants.broken_steps(leased, watching, stranger)  # live lease
    late = attrs.evolve(holder, now=expiry)
    assert rule in MONITOR.invariants.broken_steps(leased, watching, late)  # expired lease
    assert rule not in MONITOR.invariants.broken_steps(
        leased, watching, attrs.evolve(stranger, now=expiry))
    # Expired and lost on the first of three failures: retried, never failed.
    assert "lost_lease_fails_only_the_last_failure" in MONITOR.invariants.broken_steps(
        leased, failed, attrs.evolve(stranger, now=expiry))
    retryable = attrs.evolve(holder, error_code="cms.timeout", retryable=True)
    assert "retryable_failure_retried" in MONITOR.invariants.broken_steps(
        leased, attrs.evolve(failed, last_error_code="cms.timeout"), retryable)
    # Without the inputs, the rules that read them are not asked.
    assert MONITOR.invariants.broken_steps(leased, watching) == []


def test_a_claim_before_its_poll_time_and_a_foreign_registration_are_caught() -> None:
    pending = monitor_record(MonitorStatus.PENDING)
    leased = monitor_record(MonitorStatus.LEASED)
    early = attrs.evolve(leased, updated_at=pending.next_poll_at - 1)
    assert "claimed_only_when_due" in MONITOR.invariants.broken_steps(pending, early)
    other = attrs.evolve(pending, notification_id="ntf-other")
    again = MonitorInputs(now=pending.updated_at, registration=other)
    assert MONITOR.invariants.broken_steps(pending, pending, again) == [
        "registering_again_changes_nothing"]
    same = MonitorInputs(now=pending.updated_at, registration=pending)
    assert MONITOR.invariants.broken_steps(pending, pending, same) == []


def test_each_new_outbox_step_rule_can_fail() -> None:
    reached: list[OutboxRecord] = explore(OUTBOX_EXPLORATION, keep_records=True).records
    fresh = next(r for r in reached if r.attempts == 0 and r.state == "pending")
    delivered = attrs.evolve(fresh, state="delivered")
    assert "delivered_only_after_an_attempt" in OUTBOX.invariants.broken_steps(
        fresh, delivered)
    failure = OutboxInputs(now="2026-01-01T00:05:00+00:00", error="timed out")
    answered = attrs.evolve(fresh, last_error="timed out")
    assert "failure_answers_an_attempt" in OUTBOX.invariants.broken_steps(
        fresh, answered, failure)
    other = OutboxInputs(now="2026-01-01T00:05:00+00:00", intent_digest="0" * 64)
    assert OUTBOX.invariants.broken_steps(fresh, fresh, other) == [
        "enqueue_again_changes_nothing"]


def test_every_answer_the_monitor_exploration_feeds_declares_where_it_ends() -> None:
    from lifecycles.machines.monitor.inputs import ANSWER_ENDS
    from lifecycles.machines.monitor.responses import responses

    record = monitor_record(MonitorStatus.LEASED)
    labels = [label for label, _ in responses(record)]
    assert sorted(labels) == sorted(ANSWER_ENDS)  # each declared, none left over
