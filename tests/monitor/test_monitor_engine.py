"""The engine's refusals and derived sets as the monitor's own table declares them.

The engine's rules are tested on the tests' tasks (tests/engine/test_engine.py); here is
what they give on the monitor: which of its guards refuses with which of its codes (the
reference's ``claim_lost`` and ``lease_expired``), a claim refused once failures are
spent, an effect's bad error code named as ``state_invalid``, registration only into
``pending``, the labels of its expiry rows, its table version following its table, and
the claimable, leased and final statuses the reference has.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest
from support.monitor import T0, TOKEN, WORKER, held, registered

from lifecycles.invariants import InvariantViolation
from lifecycles.invariants.monitor import (
    STATE_INVALID,
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
)
from lifecycles.machines import Lifecycle, TransitionRefused
from lifecycles.machines.monitor import MONITOR, TABLE, MonitorInputs, ReceiverAnswer

NOT_ALLOWED = "terminal_processing_monitor.claim_lost"


# --- monitor records in every status, made by firing real transitions ----------


def answer(status: ReceiverStatus) -> ReceiverAnswer:
    return ReceiverAnswer(
        processing_status=status, attempts=1, max_attempts=5, next_attempt_at=T0,
        lease_expires_at=T0 + 60 if status == ReceiverStatus.LEASED else None,
        lease_expired=False,
        last_error_code="receiver.busy"
        if status in (ReceiverStatus.RETRY_WAIT, ReceiverStatus.FAILED) else None,
        processed_at=T0 if status == ReceiverStatus.SUCCEEDED else None,
    )


def records_by_status() -> dict[MonitorStatus, MonitorRecord]:
    pending = registered()
    leased = MONITOR.fire("claim", pending, held(T0))
    done = T0 + 1
    return {
        MonitorStatus.PENDING: pending,
        MonitorStatus.LEASED: leased,
        MonitorStatus.WATCHING: MONITOR.fire(
            "observe_progress", leased, held(done, answer=answer(ReceiverStatus.PENDING))
        ),
        MonitorStatus.RETRY_WAIT: MONITOR.fire(
            "fail_attempt", leased, held(done, error_code="reader.timeout", retryable=True)
        ),
        MonitorStatus.SUCCEEDED: MONITOR.fire(
            "observe_success", leased, held(done, answer=answer(ReceiverStatus.SUCCEEDED))
        ),
        MonitorStatus.FAILED: MONITOR.fire(
            "observe_failure", leased, held(done, answer=answer(ReceiverStatus.FAILED))
        ),
    }


RECORDS = records_by_status()


# --- false guards ------------------------------------------------------------


GUARD_CASES = [
    # (trigger, status, inputs, blocking guard, code)
    ("claim", MonitorStatus.PENDING, held(T0 - 1), "poll_is_due", NOT_ALLOWED),
    ("claim", MonitorStatus.WATCHING, held(T0 + 2), "poll_is_due", NOT_ALLOWED),
    ("expire_lease", MonitorStatus.LEASED, held(T0 + 599), "lease_has_expired", NOT_ALLOWED),
    ("observe_progress", MonitorStatus.LEASED,
     MonitorInputs(now=T0 + 1, worker_id="worker-2", lease_token=TOKEN,
                   answer=answer(ReceiverStatus.PENDING)),
     "lease_is_held", NOT_ALLOWED),
    ("observe_success", MonitorStatus.LEASED,
     MonitorInputs(now=T0 + 1, worker_id=WORKER, lease_token="token-2",
                   answer=answer(ReceiverStatus.SUCCEEDED)),
     "lease_is_held", NOT_ALLOWED),
    ("observe_failure", MonitorStatus.LEASED,
     held(T0 + 600, answer=answer(ReceiverStatus.FAILED)),
     "lease_is_live", "terminal_processing_monitor.lease_expired"),
    ("fail_attempt", MonitorStatus.LEASED,
     held(T0 + 600, error_code="reader.timeout", retryable=True),
     "lease_is_live", "terminal_processing_monitor.lease_expired"),
    ("fail_attempt", MonitorStatus.LEASED,
     MonitorInputs(now=T0 + 1, worker_id=None, lease_token=None, error_code="reader.timeout"),
     "lease_is_held", NOT_ALLOWED),
]


@pytest.mark.parametrize(
    ("trigger", "status", "inputs", "blocking", "code"),
    GUARD_CASES,
    ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(GUARD_CASES)],
)
def test_a_false_guard_refuses_with_its_code_and_name(
    trigger: str, status: MonitorStatus, inputs: MonitorInputs, blocking: str, code: str
) -> None:
    record = RECORDS[status]
    before = copy.deepcopy(record)
    with pytest.raises(TransitionRefused) as refused:
        MONITOR.fire(trigger, record, inputs)
    assert refused.value.guard == blocking
    assert refused.value.code == code == MONITOR.guards[blocking].refusal_code
    assert f"guard {blocking} is false" in str(refused.value)
    assert record == before


def test_exhausted_failures_block_a_claim_from_retry_wait() -> None:
    record = attrs.evolve(RECORDS[MonitorStatus.RETRY_WAIT], failures=5, poll_attempts=5)
    with pytest.raises(TransitionRefused) as refused:
        MONITOR.fire("claim", record, held(T0 + 10_000))
    assert refused.value.guard == "failures_remain"
    assert refused.value.code == NOT_ALLOWED


def test_a_field_rule_broken_by_an_effect_is_reported_as_an_invariant_violation() -> None:
    leased = RECORDS[MonitorStatus.LEASED]
    with pytest.raises(InvariantViolation) as broken:
        MONITOR.fire("fail_attempt", leased, held(T0 + 1, error_code="Not A Code"))
    assert broken.value.rules == ("error_code_syntax",)
    assert broken.value.code == STATE_INVALID


def test_create_admits_only_the_initial_status_with_every_invariant() -> None:
    assert MONITOR.create(RECORDS[MonitorStatus.PENDING]) is RECORDS[MonitorStatus.PENDING]
    with pytest.raises(TransitionRefused) as refused:
        MONITOR.create(RECORDS[MonitorStatus.WATCHING])
    assert (refused.value.trigger, refused.value.code) == ("register", NOT_ALLOWED)
    broken = attrs.evolve(RECORDS[MonitorStatus.PENDING], updated_at=T0 - 1)
    with pytest.raises(InvariantViolation) as invalid:
        MONITOR.create(broken)
    assert invalid.value.rules == ("updated_not_before_created",)


def test_rows_name_guards_and_unless_in_their_label() -> None:
    labels = {row.label for row in MONITOR.rows if row.trigger == "expire_lease"}
    assert labels == {
        "expire_lease [lease_has_expired, another_failure_allowed]",
        "expire_lease [lease_has_expired, !another_failure_allowed]",
    }


def _monitor_with(table: list[dict[str, Any]]) -> Lifecycle[MonitorRecord, MonitorInputs]:
    return Lifecycle(
        module=__name__,
        name=MONITOR.name, statuses=MonitorStatus, table=table, initial=MONITOR.initial,
        final=MONITOR.final, creation=MONITOR.creation, guards=MONITOR.guards.values(),
        effects=MONITOR.effects.values(), invariants=MONITOR.invariants,
        record_type=MonitorRecord, key_field="event_id", not_allowed_code=NOT_ALLOWED,
        lease=MONITOR.lease, handling=MONITOR.handling,
        beside_the_table=MONITOR.beside_the_table,
    )


def test_table_version_follows_the_monitor_table() -> None:
    assert _monitor_with([dict(row) for row in TABLE]).table_version == MONITOR.table_version
    cancel = {"trigger": "cancel", "source": "pending", "dest": "failed"}
    assert _monitor_with([*TABLE, cancel]).table_version != MONITOR.table_version
    narrower = [dict(row) for row in TABLE]
    narrower[0] = {**narrower[0], "source": ["pending", "retry_wait"]}
    narrower.append({"trigger": "claim", "source": "watching", "dest": "leased",
                     "conditions": ["poll_is_due", "failures_remain", "lease_is_held"],
                     "after": "grant_lease"})
    assert _monitor_with(narrower).table_version != MONITOR.table_version


def test_derived_sets_match_the_reference_statuses() -> None:
    # The reference claims from pending, watching and retry_wait into leased; its
    # terminal statuses are succeeded and failed, which nothing leaves.
    assert MONITOR.claimable == {
        MonitorStatus.PENDING, MonitorStatus.WATCHING, MonitorStatus.RETRY_WAIT
    }
    assert MONITOR.leased == MonitorStatus.LEASED
    assert MONITOR.final == {MonitorStatus.SUCCEEDED, MonitorStatus.FAILED}
    for status in MONITOR.final:  # only the re-registration that changes nothing
        assert MONITOR.allowed_triggers(status) == ("register",)
    assert MONITOR.sources("expire_lease") == {MonitorStatus.LEASED}
    assert MONITOR.dests("expire_lease") == {MonitorStatus.RETRY_WAIT, MonitorStatus.FAILED}
    assert MONITOR.dests("fail_attempt") == {MonitorStatus.RETRY_WAIT, MonitorStatus.FAILED}
