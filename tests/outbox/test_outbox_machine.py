"""The outbox table: what each row does, what each guard refuses, and that nothing else moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest

from lifecycles.invariants import InvariantViolation
from lifecycles.invariants.outbox import OutboxRecord, OutboxStatus, entry_id_for, intent_digest
from lifecycles.machines import TransitionRefused, explore, liveness
from lifecycles.machines.outbox import (
    CONFLICT,
    NOT_ALLOWED,
    OUTBOX,
    TABLE,
    CopyFate,
    OutboxInputs,
    delivery_outcome,
    identity_quarantined,
    is_tail_of_a_move,
    pending_copy_fate,
)
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION
from lifecycles.project import resolve

T0 = "2026-05-01T10:00:00+00:00"
T1 = "2026-05-01T10:05:00+02:00"


def pending() -> OutboxRecord:
    return OUTBOX.create(
        OutboxRecord(
            version="1", run_id="run-1", transaction_id="tx-1", action="complete",
            result={"ok": True}, error="", reopen=False, entry_id=entry_id_for("run-1", "tx-1"),
            state=OutboxStatus.PENDING, attempts=0, created_at=T0, last_attempt_at=None,
            last_error=None,
        )
    )


def attempted() -> OutboxRecord:
    return OUTBOX.fire("attempt", pending(), OutboxInputs(T1))


def delivered() -> OutboxRecord:
    return OUTBOX.fire("deliver", attempted(), OutboxInputs(T1))


def quarantined() -> OutboxRecord:
    return OUTBOX.fire("quarantine", pending(), OutboxInputs(T1, reason="cannot be trusted"))


def refusal(trigger: str, record: OutboxRecord, inputs: OutboxInputs) -> TransitionRefused:
    with pytest.raises(TransitionRefused) as refused:
        OUTBOX.fire(trigger, record, inputs)
    return refused.value


def test_the_outbox_is_registered_with_its_derived_sets() -> None:
    assert resolve("outbox") is OUTBOX
    assert OUTBOX.initial is OutboxStatus.PENDING
    assert OUTBOX.final == {OutboxStatus.DELIVERED, OutboxStatus.QUARANTINED}
    assert OUTBOX.triggers == ("enqueue", "attempt", "deliver", "fail_delivery", "quarantine")
    assert OUTBOX.sources("enqueue") == {OutboxStatus.PENDING, OutboxStatus.DELIVERED}
    assert OUTBOX.dests("deliver") == {OutboxStatus.DELIVERED}
    assert OUTBOX.allowed_triggers(OutboxStatus.QUARANTINED) == ()
    assert OUTBOX.lease is None and OUTBOX.claimable == frozenset()
    assert len(TABLE) == 6


def test_creation_admits_only_a_valid_pending_record() -> None:
    record = pending()
    assert record.state is OutboxStatus.PENDING
    with pytest.raises(TransitionRefused) as refused:
        OUTBOX.create(attrs.evolve(record, state=OutboxStatus.DELIVERED))
    assert (refused.value.code, refused.value.trigger) == (NOT_ALLOWED, "enqueue")
    with pytest.raises(InvariantViolation) as broken:
        OUTBOX.create(attrs.evolve(record, entry_id="0" * 32))
    assert broken.value.rules == ("entry_id_matches_identity",)


@pytest.mark.parametrize("record", [pending(), delivered()], ids=["pending", "delivered"])
def test_an_identical_enqueue_is_a_row_that_changes_nothing(record: OutboxRecord) -> None:
    same = OutboxInputs(T1, intent_digest=intent_digest(record.intent()))
    row = OUTBOX.select_row("enqueue", record, same)
    assert (row.source, row.dest, row.effect) == (record.state.value, record.state.value, None)
    assert OUTBOX.fire("enqueue", record, same) == record


@pytest.mark.parametrize("record", [pending(), delivered()], ids=["pending", "delivered"])
def test_a_different_intent_is_refused_as_a_conflict(record: OutboxRecord) -> None:
    other = intent_digest({**record.intent(), "result": {"ok": False}})
    refused = refusal("enqueue", record, OutboxInputs(T1, intent_digest=other))
    assert (refused.code, refused.guard) == (CONFLICT, "same_intent")
    missing = refusal("enqueue", record, OutboxInputs(T1))
    assert missing.code == CONFLICT


def test_enqueue_of_a_quarantined_identity_is_not_allowed() -> None:
    record = quarantined()
    same = OutboxInputs(T1, intent_digest=intent_digest(record.intent()))
    refused = refusal("enqueue", record, same)
    assert (refused.code, refused.guard) == (NOT_ALLOWED, None)


def test_an_attempt_counts_and_clears_the_last_error() -> None:
    failed = OUTBOX.fire("fail_delivery", attempted(), OutboxInputs(T1, error="Boom: x"))
    assert (failed.attempts, failed.last_error, failed.state) == (1, "Boom: x", "pending")
    again = OUTBOX.fire("attempt", failed, OutboxInputs(datetime(2026, 5, 2, tzinfo=UTC)))
    assert again.attempts == 2
    assert again.last_attempt_at == "2026-05-02T00:00:00+00:00"
    assert again.last_error is None
    assert again.created_at == T0


def test_deliver_needs_the_attempt_recorded_first() -> None:
    refused = refusal("deliver", pending(), OutboxInputs(T1))
    assert (refused.code, refused.guard) == ("close_outbox.not_attempted", "attempt_recorded")
    failed = OUTBOX.fire("fail_delivery", attempted(), OutboxInputs(T1, error="Boom"))
    assert refusal("deliver", failed, OutboxInputs(T1)).guard == "attempt_recorded"
    done = delivered()
    assert done.state is OutboxStatus.DELIVERED
    assert (done.attempts, done.last_attempt_at, done.last_error) == (1, T1, None)


def test_a_failed_delivery_keeps_a_bounded_normalised_error() -> None:
    failed = OUTBOX.fire(
        "fail_delivery", attempted(), OutboxInputs(T1, error="  Long\n error " + "x" * 2000)
    )
    assert failed.last_error is not None
    assert failed.last_error.startswith("Long error x") and len(failed.last_error) == 1000
    refused = refusal("fail_delivery", attempted(), OutboxInputs(T1, error=" \n "))
    assert (refused.code, refused.guard) == ("close_outbox.error_missing", "error_described")


def test_quarantine_keeps_its_reason_and_needs_one() -> None:
    record = quarantined()
    assert (record.state, record.last_error) == (OutboxStatus.QUARANTINED, "cannot be trusted")
    refused = refusal("quarantine", pending(), OutboxInputs(T1, reason=""))
    assert (refused.code, refused.guard) == ("close_outbox.reason_missing", "reason_given")


@pytest.mark.parametrize(
    ("trigger", "inputs"),
    [
        ("attempt", OutboxInputs(T1)),
        ("deliver", OutboxInputs(T1)),
        ("fail_delivery", OutboxInputs(T1, error="e")),
        ("quarantine", OutboxInputs(T1, reason="r")),
        ("forget", OutboxInputs(T1)),
    ],
)
@pytest.mark.parametrize("record", [delivered(), quarantined()], ids=["delivered", "quarantined"])
def test_nothing_leaves_a_final_status(
    trigger: str, inputs: OutboxInputs, record: OutboxRecord
) -> None:
    refused = refusal(trigger, record, inputs)
    assert (refused.code, refused.guard) == (NOT_ALLOWED, None)


def test_time_is_an_input_with_a_timezone() -> None:
    assert OutboxInputs(datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5)))).now == (
        "2026-01-01T00:00:00-05:00"
    )
    for bad in (datetime(2026, 1, 1), "2026-01-01T00:00:00", "soon", 1.5):
        with pytest.raises(ValueError):
            OutboxInputs(bad)  # type: ignore[arg-type]


def test_every_row_changes_only_the_fields_it_writes() -> None:
    setups = {
        ("enqueue", "pending"): (pending(), OutboxInputs(
            T1, intent_digest=intent_digest(pending().intent()))),
        ("enqueue", "delivered"): (delivered(), OutboxInputs(
            T1, intent_digest=intent_digest(pending().intent()))),
        ("attempt", "pending"): (pending(), OutboxInputs(T1)),
        ("deliver", "pending"): (attempted(), OutboxInputs(T1)),
        ("fail_delivery", "pending"): (attempted(), OutboxInputs(T1, error="E: x")),
        ("quarantine", "pending"): (pending(), OutboxInputs(T1, reason="why")),
    }
    assert set(setups) == {(row.trigger, row.source) for row in OUTBOX.rows}
    for row in OUTBOX.rows:
        before, inputs = setups[(row.trigger, row.source)]
        assert OUTBOX.select_row(row.trigger, before, inputs) == row
        after = OUTBOX.apply_row(row, before, inputs)
        changed = {
            f.name for f in attrs.fields(OutboxRecord)
            if getattr(after, f.name) != getattr(before, f.name)
        }
        assert changed <= set(OUTBOX.writes(row)), row.label
        assert after.state.value == row.dest


# --- the logic beside the table --------------------------------------------------------


def test_a_delivery_outcome_fires_deliver_or_fail_delivery_without_the_message() -> None:
    assert delivery_outcome(None, T1) == ("deliver", OutboxInputs(T1))
    trigger, inputs = delivery_outcome(ConnectionError("secret token=abc"), T1)
    assert (trigger, inputs.error) == ("fail_delivery", "ConnectionError: close delivery failed")
    after = OUTBOX.fire(trigger, attempted(), inputs)
    assert after.last_error == "ConnectionError: close delivery failed"


def test_a_pending_copy_is_replayed_discarded_or_quarantined() -> None:
    source = attempted()
    assert pending_copy_fate(source, source) is CopyFate.REPLAY
    assert pending_copy_fate(source, delivered()) is CopyFate.DISCARD
    assert is_tail_of_a_move(source, delivered())
    # a copy older than the delivered record's source (before its attempt): no row
    # makes one of the other, so the two conflict
    assert not is_tail_of_a_move(pending(), delivered())
    assert pending_copy_fate(pending(), delivered()) is CopyFate.QUARANTINE
    assert pending_copy_fate(source, None) is CopyFate.QUARANTINE  # untrusted material


def test_an_identity_with_quarantined_material_is_refused() -> None:
    assert identity_quarantined(quarantined(), material_in_quarantine=False)
    assert identity_quarantined(None, material_in_quarantine=True)
    assert not identity_quarantined(None, material_in_quarantine=False)
    assert not identity_quarantined(pending(), material_in_quarantine=True)
    assert not identity_quarantined(delivered(), material_in_quarantine=False)


def test_the_outbox_keeps_a_way_out_and_declares_its_cycles() -> None:
    """No stuck state, only declared cycles; taken away, each declaration is a finding."""
    result = explore(OUTBOX_EXPLORATION, keep_graph=True)
    assert result.graph is not None and not result.truncated
    found = liveness(result.graph, OUTBOX_EXPLORATION.accepted_cycles)
    assert found.ok
    assert found.cycles  # it retries for as long as the delivery fails
    undeclared = liveness(result.graph, ())
    assert undeclared.findings == tuple(attrs.evolve(c, accepted=None) for c in found.cycles)
