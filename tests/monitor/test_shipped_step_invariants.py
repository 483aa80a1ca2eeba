"""The shipped lifecycles' step invariants (the monitor's and the outbox's): they hold on
every edge the checker explores, each of them can fail, and the auditor pages list them.
Step invariants themselves are tested in tests/engine/test_step_invariants.py."""

from __future__ import annotations

from typing import Any

import attrs

from lifecycles.diagrams import generate
from lifecycles.invariants.monitor import MonitorRecord, MonitorStatus
from lifecycles.invariants.outbox import OutboxRecord
from lifecycles.machines import explore
from lifecycles.machines.monitor import MONITOR, MonitorInputs
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION
from lifecycles.machines.outbox import OUTBOX, OutboxInputs
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION


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
    files = generate({"monitor": MONITOR, "outbox": OUTBOX}, graphviz=None).files
    for lifecycle in (MONITOR, OUTBOX):
        text = files[f"{lifecycle.name}.md"].decode()
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
