"""The pure monitor machine against the reference's arithmetic and status changes.

The reference runs on an in-memory SQLite database as the oracle: claims, the sweep
of expired leases, completions and failures are made on both sides from the same
clock, and the rows must be equal field for field (the lease token is the one the
reference drew, passed into the machine as an input).
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from support.monitor import reference_monitor

from lifecycles.invariants import InvariantViolation
from lifecycles.invariants.monitor import (
    COLUMNS,
    MONITOR_INVARIANTS,
    RESPONSE_INVALID,
    STATE_INVALID,
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
)
from lifecycles.invariants.monitor_messages import ANSWER_RULES, ANSWER_SHAPE, STATUS_SCHEMA
from lifecycles.machines import Backoff, TransitionRefused, explore, liveness
from lifecycles.machines.monitor import (
    MONITOR,
    AnswerRefused,
    MonitorInputs,
    ReceiverAnswer,
    RetryPolicy,
    complete_with_answer,
    new_record,
    parse_answer,
    poll_step,
    read_answer,
    reader_error_code,
    retry_delay,
    trigger_for_answer,
)
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION

CODE = "terminal_processing_monitor."
CAPS = "c0ffee" + "0" * 58
OTHER_CAPS = "d" * 64
T0 = 1_000.0
WORKER, TOKEN = "worker-1", "token-1"
EVENT = "evt-1"


REAL_COLUMNS = frozenset(name for name in COLUMNS if name.endswith("_at"))


def as_row(record: MonitorRecord) -> dict[str, Any]:
    """The record as the reference's table stores it: statuses as text, and times in
    REAL columns, whose affinity turns integers into floats (2**63 - 1 is stored as
    9.223372036854776e18, which no longer equals the integer)."""
    row = {
        name: value.value if isinstance(value, Enum) else value
        for name, value in attrs.asdict(record).items()
    }
    for name in REAL_COLUMNS:
        if isinstance(row[name], int) and not isinstance(row[name], bool):
            row[name] = float(row[name])
    return row


def notification(event_id: str) -> tuple[dict[str, Any], str]:
    """A notification the reference registers, with its canonical SHA-256."""
    body = {
        "schema": "blun.cms-source-terminal-notification.v1",
        "notification_id": f"ntf-{event_id}", "event_id": event_id, "site_id": "site-1",
        "plan_id": "plan-1", "website_version": 3, "source_sequence": 7, "job_count": 2,
        "change_sha256": "1" * 64, "lifecycle_binding_sha256": "2" * 64,
        "terminal_status": "published", "lifecycle_sha256": "3" * 64,
    }
    rendered = json.dumps(body, ensure_ascii=False, allow_nan=False, sort_keys=True,
                          separators=(",", ":"))
    return body, hashlib.sha256(rendered.encode()).hexdigest()


DEFAULTS = RetryPolicy()


class Reference:
    """The reference monitor on an in-memory database, driven one call at a time."""

    def __init__(self, policy: RetryPolicy = DEFAULTS) -> None:
        self.module = reference_monitor()
        self.connection = sqlite3.connect(":memory:")
        self.monitor = self.module.DurableTerminalProcessingMonitor(
            self.connection, CAPS,
            poll_interval_seconds=policy.poll_interval_seconds,
            base_delay_seconds=policy.base_delay_seconds,
            max_delay_seconds=policy.max_delay_seconds,
        )

    def register(self, event_id: str, max_failures: int, now: float) -> None:
        body, sha = notification(event_id)
        self.monitor.register(body, sha, max_failures=max_failures, now=now)

    def row(self, event_id: str = EVENT) -> dict[str, Any]:
        found = self.connection.execute(
            "SELECT * FROM cms_source_terminal_processing WHERE event_id = ?", (event_id,)
        ).fetchone()
        return dict(zip(COLUMNS, tuple(found), strict=True))

    def claim(self, now: float, lease_seconds: float = 600) -> Any:
        return self.monitor.claim(WORKER, now=now, lease_seconds=lease_seconds)

    def complete(self, claim: Any, response: object, now: float) -> str | None:
        """The code the reference blocked with, or None when it wrote the completion."""
        try:
            self.monitor._complete(claim, response, now)
        except self.module.TerminalProcessingMonitorBlocked as blocked:
            return str(blocked.code)
        return None

    def fail(self, claim: Any, code: str, retryable: bool, now: float) -> str | None:
        try:
            self.monitor._fail(claim, code, retryable, now)
        except self.module.TerminalProcessingMonitorBlocked as blocked:
            return str(blocked.code)
        return None

    def row_is_valid(self, event_id: str = EVENT) -> bool:
        try:
            self.module.DurableTerminalProcessingMonitor._validated_row(self.row(event_id))
        except self.module.TerminalProcessingMonitorBlocked:
            return False
        return True


def registered(max_failures: int = 5, now: float = T0, event_id: str = EVENT) -> MonitorRecord:
    body, sha = notification(event_id)
    return new_record(
        event_id=event_id, notification_id=body["notification_id"], site_id=body["site_id"],
        terminal_status=body["terminal_status"], notification_sha256=sha,
        max_failures=max_failures, now=now,
    )


def held(now: float, token: str = TOKEN, **changes: Any) -> MonitorInputs:
    return MonitorInputs(now=now, worker_id=WORKER, lease_token=token, **changes)


def response_for(record: MonitorRecord, status: str, **changes: Any) -> dict[str, Any]:
    """A valid receiver answer of kind ``status`` about ``record``."""
    waiting = status in ("retry_wait", "failed")
    answer = {
        "schema": STATUS_SCHEMA, "notification_id": record.notification_id,
        "event_id": record.event_id, "site_id": record.site_id,
        "terminal_status": record.terminal_status,
        "notification_sha256": record.notification_sha256,
        "processing_status": status, "attempts": 1, "max_attempts": 4,
        "next_attempt_at": T0 + 45,
        "lease_expires_at": T0 + 90 if status == "leased" else None,
        "lease_expired": status == "leased",
        "last_error_code": "receiver.busy" if waiting else None,
        "processed_at": T0 + 2 if status == "succeeded" else None,
        "capabilities_sha256": CAPS,
    }
    answer.update(changes)
    return answer


def observe(record: MonitorRecord, response: Mapping[str, Any], now: float,
            policy: RetryPolicy = DEFAULTS) -> MonitorRecord:
    """Complete the poll of the lease ``record`` holds with the receiver's ``response``."""
    parsed = parse_answer(response, record, CAPS)
    assert parsed is not None
    return MONITOR.fire(trigger_for_answer(parsed), record, MonitorInputs(
        now=now, worker_id=record.lease_owner, lease_token=record.lease_token,
        answer=parsed, policy=policy))


def unchanged(before: MonitorRecord, after: MonitorRecord, *written: str) -> None:
    """Every field not in ``written`` (nor the status) kept its value."""
    for name in COLUMNS:
        if name not in (*written, "status"):
            assert getattr(after, name) == getattr(before, name), name


# --- claim ------------------------------------------------------------------------

PENDING = registered()
LEASED = MONITOR.fire("claim", PENDING, held(T0))
WATCHING = observe(LEASED, response_for(LEASED, "pending"), T0 + 1)
RETRY_WAIT = MONITOR.fire("fail_attempt", LEASED,
                          held(T0 + 1, error_code="reader.timeout", retryable=True))
CLAIMABLE = {"pending": PENDING, "watching": WATCHING, "retry_wait": RETRY_WAIT}


@pytest.mark.parametrize("status", CLAIMABLE)
def test_claim_from_each_claimable_status(status: str) -> None:
    record = CLAIMABLE[status]
    now = record.next_poll_at + 3  # due
    claimed = MONITOR.fire("claim", record, MonitorInputs(
        now=now, worker_id="worker-7", lease_token="tok-9", lease_seconds=45))
    assert claimed.status == MonitorStatus.LEASED
    assert claimed.poll_attempts == record.poll_attempts + 1
    assert (claimed.lease_owner, claimed.lease_token) == ("worker-7", "tok-9")
    assert claimed.lease_expires_at == now + 45
    assert claimed.last_error_code is None
    assert claimed.updated_at == now
    unchanged(record, claimed, "poll_attempts", "lease_owner", "lease_token",
              "lease_expires_at", "last_error_code", "updated_at")


@pytest.mark.parametrize("status", CLAIMABLE)
def test_claim_is_due_at_next_poll_at_exactly_and_not_before(status: str) -> None:
    record = CLAIMABLE[status]
    assert MONITOR.fire("claim", record, held(record.next_poll_at)).status == "leased"
    with pytest.raises(TransitionRefused) as refused:
        MONITOR.fire("claim", record, held(math.nextafter(record.next_poll_at, 0)))
    assert refused.value.guard == "poll_is_due"


@pytest.mark.parametrize("status", CLAIMABLE)
def test_claim_matches_the_reference(status: str) -> None:
    ref = Reference()
    ref.register(EVENT, 5, T0)
    if status != "pending":
        claim = ref.claim(T0)
    if status == "watching":
        assert ref.complete(claim, response_for(LEASED, "pending"), T0 + 1) is None
    elif status == "retry_wait":
        assert ref.fail(claim, "reader.timeout", True, T0 + 1) is None
    assert ref.row() == as_row(CLAIMABLE[status])  # the set-up itself matches
    record = CLAIMABLE[status]
    now = record.next_poll_at + 1
    row = ref.claim(now, lease_seconds=77)
    assert row is not None
    claimed = MONITOR.fire("claim", record, MonitorInputs(
        now=now, worker_id=WORKER, lease_token=row["lease_token"], lease_seconds=77))
    assert as_row(claimed) == ref.row()


# --- expiry -----------------------------------------------------------------------


@pytest.mark.parametrize("max_failures", [1, 2, 3, 20])
def test_expiry_goes_to_retry_wait_or_failed_at_the_max_failures_boundary(
    max_failures: int,
) -> None:
    for failures in range(max_failures):
        leased = attrs.evolve(LEASED, max_failures=max_failures, failures=failures,
                              poll_attempts=failures + 1)
        now = leased.lease_expires_at  # expiry is inclusive: lease_expires_at <= now
        assert now is not None
        expired = MONITOR.fire("expire_lease", leased, MonitorInputs(now=now))
        exhausted = failures + 1 >= max_failures
        assert expired.status == ("failed" if exhausted else "retry_wait")
        assert expired.failures == failures + 1
        assert expired.next_poll_at == now
        assert expired.last_error_code == CODE + "lease_expired"
        assert (expired.lease_owner, expired.lease_token, expired.lease_expires_at) == (
            None, None, None)
        assert expired.updated_at == now
        unchanged(leased, expired, "failures", "next_poll_at", "last_error_code",
                  "lease_owner", "lease_token", "lease_expires_at", "updated_at")


def test_a_live_lease_does_not_expire() -> None:
    assert LEASED.lease_expires_at is not None
    with pytest.raises(TransitionRefused) as refused:
        MONITOR.fire("expire_lease", LEASED,
                     MonitorInputs(now=math.nextafter(LEASED.lease_expires_at, 0)))
    assert (refused.value.guard, refused.value.code) == ("lease_has_expired", CODE + "claim_lost")


@pytest.mark.parametrize("max_failures", [1, 2, 5])
def test_expiry_matches_the_reference_sweep(max_failures: int) -> None:
    # The reference sweeps expired leases inside claim(); a second, earlier item is due
    # so that claim takes it and leaves the swept item as the sweep wrote it.
    ref = Reference()
    ref.register(EVENT, max_failures, T0)
    claim = ref.claim(T0, lease_seconds=60)
    ref.register("evt-0", 5, T0 - 1)  # created earlier: claimed first from now on
    record = MONITOR.fire("claim", registered(max_failures), held(
        T0, token=claim["lease_token"], lease_seconds=60))
    assert as_row(record) == ref.row()
    now = T0 + 60
    assert ref.claim(now)["event_id"] == "evt-0"
    expired = MONITOR.fire("expire_lease", record, MonitorInputs(now=now))
    assert as_row(expired) == ref.row()


# --- completion by the receiver's answer ---------------------------------------------


ANSWER_KINDS = {
    "pending": ("watching", None),
    "leased": ("watching", None),
    "retry_wait": ("watching", None),
    "succeeded": ("succeeded", None),
    "failed": ("failed", CODE + "remote_failed"),
}


@pytest.mark.parametrize("kind", ANSWER_KINDS)
def test_each_receiver_answer_kind(kind: str) -> None:
    policy = RetryPolicy(poll_interval_seconds=17, base_delay_seconds=2, max_delay_seconds=9)
    # A lease after a failure: failures are reset by any answer.
    leased = MONITOR.fire("claim", RETRY_WAIT, held(RETRY_WAIT.next_poll_at))
    assert leased.failures == 1
    now = leased.next_poll_at + 4
    done = observe(leased, response_for(leased, kind), now, policy)
    status, local_error = ANSWER_KINDS[kind]
    assert done.status == status
    assert done.last_error_code == local_error
    assert done.failures == 0
    assert done.next_poll_at == (now + 17 if status == "watching" else now)
    assert (done.lease_owner, done.lease_token, done.lease_expires_at) == (None, None, None)
    assert done.updated_at == now
    answer = response_for(leased, kind)
    assert done.receiver_status == kind
    assert done.receiver_attempts == answer["attempts"]
    assert done.receiver_max_attempts == answer["max_attempts"]
    assert done.receiver_next_attempt_at == answer["next_attempt_at"]
    assert done.receiver_lease_expires_at == answer["lease_expires_at"]
    assert done.receiver_lease_expired == int(answer["lease_expired"])
    assert type(done.receiver_lease_expired) is int
    assert done.receiver_error_code == answer["last_error_code"]
    assert done.receiver_processed_at == answer["processed_at"]
    assert done.poll_attempts == leased.poll_attempts


@pytest.mark.parametrize("kind", ANSWER_KINDS)
def test_each_receiver_answer_kind_matches_the_reference(kind: str) -> None:
    policy = RetryPolicy(poll_interval_seconds=17, base_delay_seconds=2, max_delay_seconds=9)
    ref = Reference(policy)
    ref.register(EVENT, 5, T0)
    claim = ref.claim(T0)
    record = MONITOR.fire("claim", registered(), held(T0, token=claim["lease_token"]))
    response = response_for(record, kind)
    assert ref.complete(claim, response, T0 + 5) is None
    done = observe(record, response, T0 + 5, policy)
    assert as_row(done) == ref.row()
    assert ref.row_is_valid()


def test_trigger_for_answer_maps_each_receiver_status() -> None:
    record = LEASED
    triggers = {}
    for kind in ReceiverStatus:
        parsed = parse_answer(response_for(record, kind.value), record, CAPS)
        assert parsed is not None
        triggers[kind.value] = trigger_for_answer(parsed)
    assert triggers == {
        "pending": "observe_progress", "leased": "observe_progress",
        "retry_wait": "observe_progress", "succeeded": "observe_success",
        "failed": "observe_failure",
    }


@pytest.mark.parametrize("kind", ["retry_wait", "failed"])
def test_the_reference_defect_is_refused_by_the_invariants(kind: str) -> None:
    # The reference accepts a retry_wait/failed answer without an error code and writes
    # a row that breaks its own _validated_row; here the transition is refused instead.
    ref = Reference()
    ref.register(EVENT, 5, T0)
    claim = ref.claim(T0)
    record = MONITOR.fire("claim", registered(), held(T0, token=claim["lease_token"]))
    response = response_for(record, kind, last_error_code=None)
    assert ref.complete(claim, response, T0 + 5) is None
    assert not ref.row_is_valid()
    with pytest.raises(ref.module.TerminalProcessingMonitorBlocked) as blocked:
        ref.monitor.status(EVENT, now=T0 + 6)
    assert blocked.value.code == STATE_INVALID

    parsed = parse_answer(response, record, CAPS)
    assert parsed is not None  # the answer itself is well-formed ...
    with pytest.raises(InvariantViolation) as refused:  # ... the row it makes is not
        MONITOR.fire(trigger_for_answer(parsed), record,
                     held(T0 + 5, token=claim["lease_token"], answer=parsed))
    assert refused.value.rules == ("receiver_error_iff_receiver_waiting_or_failed",)
    assert refused.value.code == STATE_INVALID
    # What the facade does instead: fail the item with response_invalid.
    failed = MONITOR.fire("fail_attempt", record, held(
        T0 + 5, token=claim["lease_token"], error_code=CODE + "response_invalid"))
    assert (failed.status, failed.last_error_code) == ("failed", CODE + "response_invalid")
    assert MONITOR_INVARIANTS.broken(failed) == []


# --- failure of the read or of the answer -----------------------------------------


def test_retry_delay_is_capped_exponential_backoff() -> None:
    policy = RetryPolicy(base_delay_seconds=5, max_delay_seconds=300)
    assert [retry_delay(policy, n) for n in range(1, 10)] == [
        5, 10, 20, 40, 80, 160, 300, 300, 300
    ]
    assert retry_delay(policy, 0) == 5  # the exponent never goes negative
    odd = RetryPolicy(base_delay_seconds=0.75, max_delay_seconds=4)
    assert [retry_delay(odd, n) for n in range(1, 6)] == [0.75, 1.5, 3.0, 4, 4]


def test_the_default_retry_delay_is_the_backoff_block_with_base_5_cap_300() -> None:
    backoff = Backoff(base=5.0, cap=300.0)
    assert all(backoff.delay(n) == retry_delay(RetryPolicy(), n) for n in range(1, 60))


@pytest.mark.parametrize(
    "policy",
    [RetryPolicy(), RetryPolicy(base_delay_seconds=0.75, max_delay_seconds=4),
     RetryPolicy(base_delay_seconds=86_400, max_delay_seconds=86_400)],
    ids=["defaults", "small", "one-day"],
)
def test_retryable_failures_back_off_until_exhausted(policy: RetryPolicy) -> None:
    max_failures = 20
    record = registered(max_failures)
    now = T0
    for failures in range(1, max_failures + 1):
        leased = MONITOR.fire("claim", record, held(now))
        now += 1
        record = MONITOR.fire("fail_attempt", leased, held(
            now, error_code="reader.timeout", retryable=True, policy=policy))
        assert record.failures == failures
        assert record.last_error_code == "reader.timeout"
        assert (record.lease_owner, record.lease_token, record.lease_expires_at) == (
            None, None, None)
        if failures < max_failures:
            expected = min(policy.max_delay_seconds,
                           policy.base_delay_seconds * 2 ** (failures - 1))
            assert record.status == "retry_wait"
            assert record.next_poll_at == now + expected
            now = record.next_poll_at
        else:
            assert record.status == "failed"
            assert record.next_poll_at == now
    assert record.poll_attempts == max_failures


@pytest.mark.parametrize("failures", [0, 1, 3])
def test_a_non_retryable_failure_is_final(failures: int) -> None:
    leased = attrs.evolve(LEASED, failures=failures, poll_attempts=failures + 1)
    failed = MONITOR.fire("fail_attempt", leased,
                          held(T0 + 3, error_code="reader.broken", retryable=False))
    assert (failed.status, failed.failures, failed.next_poll_at) == (
        "failed", failures + 1, T0 + 3)
    assert failed.last_error_code == "reader.broken"


@pytest.mark.parametrize("max_failures", [1, 2, 5])
@pytest.mark.parametrize("retryable", [True, False])
def test_failures_match_the_reference(max_failures: int, retryable: bool) -> None:
    policy = RetryPolicy(poll_interval_seconds=10, base_delay_seconds=3, max_delay_seconds=20)
    ref = Reference(policy)
    ref.register(EVENT, max_failures, T0)
    record = registered(max_failures)
    now = T0
    while record.status not in MONITOR.final:
        claim = ref.claim(now)
        record = MONITOR.fire("claim", record, held(now, token=claim["lease_token"]))
        now += 2
        assert ref.fail(claim, "reader.timeout", retryable, now) is None
        record = MONITOR.fire("fail_attempt", record, held(
            now, token=claim["lease_token"], error_code="reader.timeout", retryable=retryable,
            policy=policy))
        assert as_row(record) == ref.row()
        now = record.next_poll_at
    assert record.failures == (max_failures if retryable else 1)


def test_a_lease_is_live_until_just_before_it_expires() -> None:
    assert LEASED.lease_expires_at is not None
    last_moment = math.nextafter(LEASED.lease_expires_at, 0)
    done = MONITOR.fire("fail_attempt", LEASED, held(last_moment, error_code="x"))
    assert done.status == "failed"
    answer = parse_answer(response_for(LEASED, "pending"), LEASED, CAPS)
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("fail_attempt", {"error_code": "x"}), ("observe_progress", {"answer": answer})]
    for trigger, changes in attempts:
        with pytest.raises(TransitionRefused) as refused:
            MONITOR.fire(trigger, LEASED, held(LEASED.lease_expires_at, **changes))
        assert (refused.value.guard, refused.value.code) == (
            "lease_is_live", CODE + "lease_expired")


def test_the_reference_refuses_completion_at_expiry_with_the_same_code() -> None:
    ref = Reference()
    ref.register(EVENT, 5, T0)
    claim = ref.claim(T0, lease_seconds=60)
    assert ref.fail(claim, "x", False, T0 + 60) == CODE + "lease_expired"
    assert ref.complete(claim, response_for(LEASED, "pending"), T0 + 60) == (
        CODE + "lease_expired")


# --- parse_answer against the reference's _complete ---------------------------------

RESPONSE_KEYS = sorted(response_for(LEASED, "pending"))
ANY_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 4, 20, 21, 1.0, 0.5, -0.5, math.nan, math.inf, -math.inf,
    "", "x", "a b", "pending", "leased", "retry_wait", "succeeded", "failed", "watching",
    "SUCCEEDED", "receiver.busy", "Bad.Code", "a" * 129, "a" * 128, STATUS_SCHEMA, CAPS,
    OTHER_CAPS, "C0FFEE" + "0" * 58, EVENT, "evt-2", "published", "deleted", 2**63 - 1,
    [], {}, b"bytes",
]


def _identity_values(record: MonitorRecord, key: str) -> list[Any]:
    if key in ("notification_id", "event_id", "site_id", "terminal_status",
               "notification_sha256"):
        own = getattr(record, key)
        return [own, own.upper(), own + " ", "other"]
    return []


@st.composite
def responses(draw: st.DrawFn, record: MonitorRecord) -> object:
    """Receiver answers: valid ones of each kind, then broken in up to three ways."""
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from([None, [], "answer", 42, ("a", 1)]))
    kind = draw(st.sampled_from([s.value for s in ReceiverStatus]))
    response: dict[Any, Any] = response_for(record, kind)
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
        key = draw(st.sampled_from(RESPONSE_KEYS))
        if how == "drop":
            response.pop(key, None)
        elif how == "add":
            response[draw(st.sampled_from(["extra", "Schema", 1, "status"]))] = None
        else:
            response[key] = draw(st.one_of(
                st.sampled_from(ANY_VALUES),
                st.sampled_from(_identity_values(record, key) or [None]),
                st.integers(-2, 22),
                st.floats(allow_nan=True, allow_infinity=True),
            ))
    if draw(st.integers(0, 10)) == 0:
        return MappingProxyType(response)
    return response


@settings(max_examples=max(250, settings().max_examples))
@given(st.data())
def test_parse_answer_accepts_exactly_what_the_reference_completes(data: st.DataObject) -> None:
    ref = Reference()
    ref.register(EVENT, 5, T0)
    claim = ref.claim(T0)
    record = MonitorRecord(**dict(zip(COLUMNS, tuple(claim), strict=True)))
    response = data.draw(responses(record))
    now = T0 + 5
    assert ref.complete(claim, response, now) is None
    row = ref.row()
    accepted_by_reference = row["last_error_code"] != CODE + "response_invalid"
    parsed = parse_answer(response, record, CAPS)
    assert (parsed is not None) == accepted_by_reference
    inputs = held(now, token=record.lease_token or "")
    completed = complete_with_answer(record, parsed, inputs)
    assert MONITOR_INVARIANTS.broken(completed) == []
    if parsed is None:
        event("both refuse")
        assert as_row(completed) == row  # failed with response_invalid, on both sides
        return
    try:
        MONITOR.fire(trigger_for_answer(parsed), record, attrs.evolve(inputs, answer=parsed))
    except InvariantViolation as refused:
        # Only the reference's known defect gets here: it wrote a row it cannot read,
        # where lifecycles fails the item with response_invalid and writes nothing invalid.
        event("the reference's defect: refused here, written there")
        assert refused.rules == ("receiver_error_iff_receiver_waiting_or_failed",)
        assert not ref.row_is_valid()
        assert (completed.status, completed.last_error_code) == (
            "failed", CODE + "response_invalid")
        assert completed.receiver_status is None
        return
    event(f"both accept: {parsed.processing_status.value}")
    assert as_row(completed) == row
    assert ref.row_is_valid()


# Each wrong field breaks exactly the answer rule named for it.
BROKEN_ANSWERS: dict[str, tuple[dict[str, Any], str]] = {
    "other schema": ({"schema": "blun.other.v1"}, "answer_schema_is_status_schema"),
    "other event": ({"event_id": "evt-2"}, "answer_about_this_notification"),
    "other capabilities": ({"capabilities_sha256": OTHER_CAPS},
                           "answer_under_expected_capabilities"),
    "unknown status": ({"processing_status": "watching"}, "answer_status_known"),
    "attempts above max": ({"attempts": 5, "max_attempts": 3}, "answer_attempts_consistent"),
    "max above 20": ({"max_attempts": 21}, "answer_attempts_consistent"),
    "NaN time": ({"next_attempt_at": math.nan}, "answer_times_are_times"),
    "flag not bool": ({"lease_expired": 0}, "answer_lease_expired_is_bool"),
    "bad error code": ({"processing_status": "failed", "last_error_code": "Bad Code"},
                       "answer_error_code_syntax"),
    "leased without expiry": ({"processing_status": "leased"}, "answer_lease_iff_leased"),
    "processed while pending": ({"processed_at": T0}, "answer_processed_iff_succeeded"),
    "error while pending": ({"last_error_code": "receiver.busy"},
                            "answer_error_only_when_waiting_or_failed"),
    "expired while pending": ({"lease_expired": True}, "answer_lease_expired_only_when_leased"),
}


@pytest.mark.parametrize("kind", BROKEN_ANSWERS)
def test_read_answer_names_the_one_rule_a_wrong_field_breaks(kind: str) -> None:
    fields, rule = BROKEN_ANSWERS[kind]
    assert read_answer(response_for(LEASED, "pending", **fields), LEASED, CAPS) == (
        AnswerRefused((rule,)))


def test_every_answer_rule_is_named_by_some_broken_answer() -> None:
    named = {rule for _, rule in BROKEN_ANSWERS.values()}
    assert named == {rule.name for rule in ANSWER_RULES}
    assert read_answer(["pending"], LEASED, CAPS) == AnswerRefused(
        tuple(rule.name for rule in ANSWER_SHAPE))
    missing = response_for(LEASED, "pending")
    del missing["processed_at"]
    # A wrong shape is reported alone: the field rules are not read on it.
    assert read_answer(missing, LEASED, CAPS) == AnswerRefused(("answer_fields_exact",))
    assert read_answer({**response_for(LEASED, "pending"), 1: 2}, LEASED, CAPS) == (
        AnswerRefused(("answer_fields_exact",)))


def test_poll_step_decides_the_trigger_from_the_read() -> None:
    lease = held(T0 + 1)
    answer = parse_answer(response_for(LEASED, "succeeded"), LEASED, CAPS)
    assert answer is not None
    step = poll_step(lease, answer)
    assert (step.trigger, step.inputs.answer) == ("observe_success", answer)
    assert step.fallback is not None
    assert (step.fallback.trigger, step.fallback.inputs.error_code) == (
        "fail_attempt", RESPONSE_INVALID)
    refused = poll_step(lease, AnswerRefused(("answer_status_known",)))
    assert (refused.trigger, refused.inputs.error_code, refused.inputs.retryable) == (
        "fail_attempt", RESPONSE_INVALID, False)
    assert refused.fallback is None
    failed = poll_step(lease, reader_error("reader.timeout", True, True))
    assert (failed.trigger, failed.inputs.error_code, failed.inputs.retryable) == (
        "fail_attempt", "reader.timeout", True)
    assert poll_step(lease, None) == refused


def test_parse_answer_reads_every_field_of_a_valid_answer() -> None:
    response = response_for(LEASED, "leased", attempts=3, max_attempts=20,
                            next_attempt_at=0, lease_expires_at=5, lease_expired=False)
    assert parse_answer(response, LEASED, CAPS) == ReceiverAnswer(
        processing_status=ReceiverStatus.LEASED, attempts=3, max_attempts=20,
        next_attempt_at=0, lease_expires_at=5, lease_expired=False, last_error_code=None,
        processed_at=None,
    )
    assert parse_answer(MappingProxyType(response), LEASED, CAPS) is not None


@pytest.mark.parametrize(
    ("key", "value"),
    [("schema", "blun.cms-terminal-receiver-status-response.v2"),
     ("event_id", "evt-2"), ("notification_id", "ntf-other"), ("site_id", "site-2"),
     ("terminal_status", "deleted"), ("notification_sha256", "f" * 64),
     ("capabilities_sha256", OTHER_CAPS), ("attempts", True), ("max_attempts", 21),
     ("attempts", 5), ("next_attempt_at", -1), ("next_attempt_at", math.nan),
     ("lease_expired", 1), ("last_error_code", "receiver.busy"), ("processed_at", T0),
     ("lease_expires_at", T0), ("processing_status", "watching")],
)
def test_parse_answer_refuses_a_wrong_field(key: str, value: Any) -> None:
    response = response_for(LEASED, "pending", **{key: value})
    assert parse_answer(response, LEASED, CAPS) is None
    refused = read_answer(response, LEASED, CAPS)
    assert isinstance(refused, AnswerRefused) and refused.rules
    assert set(refused.rules) <= {rule.name for rule in ANSWER_RULES}
    ref = Reference()
    ref.register(EVENT, 5, T0)
    claim = ref.claim(T0)
    ref.complete(claim, response, T0 + 1)
    assert ref.row()["last_error_code"] == CODE + "response_invalid"


def test_parse_answer_refuses_a_time_no_float_can_hold() -> None:
    # A JSON body may carry an integer of 400 digits. The reference crashes with
    # OverflowError inside _complete (and run_once then records reader_failure); the
    # answer is invalid, and parse_answer must say so rather than raise.
    for key in ("next_attempt_at", "processed_at"):
        response = response_for(LEASED, "succeeded", **{key: 10**400})
        assert parse_answer(response, LEASED, CAPS) is None


# --- reader errors, as run_once records them -----------------------------------------

MISSING = object()


class ReaderError(Exception):
    pass


def reader_error(code: Any, cms: Any, retryable: Any) -> ReaderError:
    error = ReaderError("the reader failed")
    for name, value in (("code", code), ("cms_notification_failure", cms),
                        ("retryable", retryable)):
        if value is not MISSING:
            setattr(error, name, value)
    return error


CODES = [MISSING, None, "reader.timeout", "cms.notification_unavailable", "Bad", "", 5,
         "a" * 128, "a" * 129, CODE + "reader_failure", b"reader.timeout"]
FLAGS = [MISSING, True, True, True, False, 1, "True", None]


@settings(max_examples=max(150, settings().max_examples))
@given(st.sampled_from(CODES), st.sampled_from(FLAGS), st.sampled_from(FLAGS),
       st.sampled_from([ReaderError, ValueError, OSError, KeyError]))
def test_reader_error_code_matches_run_once(
    code: Any, cms: Any, retryable: Any, kind: type[Exception]
) -> None:
    error: Exception = reader_error(code, cms, retryable)
    if kind is not ReaderError:
        error = kind("the reader failed")
        for name, value in vars(reader_error(code, cms, retryable)).items():
            setattr(error, name, value)

    def reader(event_id: str, site_id: str) -> Any:
        raise error

    ref = Reference()
    ref.register(EVENT, 5, T0)
    outcome = ref.monitor.run_once(reader, WORKER, now=T0)
    row = ref.row()
    expected_code, expected_retryable = reader_error_code(error)
    assert outcome.error_code == row["last_error_code"] == expected_code
    assert row["status"] == ("retry_wait" if expected_retryable else "failed")
    event(f"{'retryable' if expected_retryable else 'final'}")


def test_reader_error_code_rules() -> None:
    assert reader_error_code(reader_error("reader.timeout", True, True)) == (
        "reader.timeout", True)
    assert reader_error_code(reader_error("reader.timeout", True, 1)) == (
        "reader.timeout", False)
    assert reader_error_code(reader_error("reader.timeout", MISSING, True)) == (
        "reader.timeout", False)
    assert reader_error_code(reader_error("Bad Code", True, True)) == (
        CODE + "reader_failure", False)
    assert reader_error_code(RuntimeError("plain")) == (CODE + "reader_failure", False)


# --- the whole lifecycle, step by step, against the reference ---------------------------

STALE = st.sampled_from([False, False, False, True])  # answer with an older claim
STEP = st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([0, 1, 2.5, 17, 29.999, 30, 59, 60, 61,
                                                300, 599, 600, 601, 5_000])),
    st.tuples(st.just("claim"), st.sampled_from([60, 600])),
    st.tuples(st.just("claim"), st.sampled_from([60, 600])),
    st.tuples(st.just("answer"),
              st.sampled_from(["pending", "leased", "retry_wait", "pending", "succeeded",
                               "failed"]),
              STALE),
    st.tuples(st.just("invalid_answer"), STALE),
    st.tuples(st.just("reader_error"), st.sampled_from(["reader.timeout", "cms.down"]),
              st.sampled_from([True, True, True, False]), STALE),
)


@settings(max_examples=max(150, settings().max_examples))
@given(
    max_failures=st.integers(1, 6),
    policy=st.sampled_from([
        RetryPolicy(), RetryPolicy(poll_interval_seconds=1, base_delay_seconds=0.5,
                                   max_delay_seconds=2),
        RetryPolicy(poll_interval_seconds=600, base_delay_seconds=60, max_delay_seconds=61),
    ]),
    steps=st.lists(STEP, max_size=16),
)
def test_every_step_matches_the_reference(
    max_failures: int, policy: RetryPolicy, steps: list[tuple[Any, ...]]
) -> None:
    ref = Reference(policy)
    ref.register(EVENT, max_failures, T0)
    record = registered(max_failures)
    assert as_row(record) == ref.row()
    now = T0
    claims: list[Any] = []
    for step in steps:
        if step[0] == "tick":
            now += step[1]
            continue
        if step[0] == "claim":
            row = ref.claim(now, lease_seconds=step[1])
            if record.status == MonitorStatus.LEASED:
                assert record.lease_expires_at is not None
                if record.lease_expires_at <= now:
                    record = MONITOR.fire("expire_lease", record, MonitorInputs(now=now))
                    event("lease expired")
            due = (record.status in MONITOR.claimable and record.next_poll_at <= now
                   and record.failures < record.max_failures)
            assert (row is not None) == due
            if row is not None:
                record = MONITOR.fire("claim", record, MonitorInputs(
                    now=now, worker_id=WORKER, lease_token=row["lease_token"],
                    lease_seconds=step[1]))
                claims.append(row)
        else:
            if not claims:
                continue
            stale = step[-1] if step[0] != "reader_error" else step[3]
            claim = claims[0] if stale else claims[-1]
            inputs = MonitorInputs(now=now, policy=policy, worker_id=claim["lease_owner"],
                                   lease_token=claim["lease_token"])
            if step[0] == "answer":
                response: object = response_for(record, step[1])
            elif step[0] == "invalid_answer":
                response = response_for(record, "pending", capabilities_sha256=OTHER_CAPS)
            if step[0] == "reader_error":
                code, retryable = step[1], step[2]
                blocked = ref.fail(claim, code, retryable, now)
                trigger = "fail_attempt"
                inputs = attrs.evolve(inputs, error_code=code, retryable=retryable)
            else:
                blocked = ref.complete(claim, response, now)
                parsed = parse_answer(response, record, CAPS)
                trigger = "complete_with_answer"
            try:
                if trigger == "complete_with_answer":
                    record = complete_with_answer(record, parsed, inputs)
                else:
                    record = MONITOR.fire(trigger, record, inputs)
            except TransitionRefused as refused:
                assert refused.code == blocked
                event(f"refused: {refused.code}")
            else:
                assert blocked is None
                event(f"{step[0]} -> {record.status}")
        assert as_row(record) == ref.row()
        assert ref.row_is_valid()
        assert MONITOR_INVARIANTS.broken(record) == []


# --- complete_with_answer: the one rule for a receiver's answer -------------------------


def test_complete_with_answer_fires_the_answer_trigger() -> None:
    for kind, (status, local_error) in ANSWER_KINDS.items():
        parsed = parse_answer(response_for(LEASED, kind), LEASED, CAPS)
        done = complete_with_answer(LEASED, parsed, held(T0 + 1))
        assert (done.status, done.last_error_code, done.receiver_status) == (
            status, local_error, kind)


@pytest.mark.parametrize("defect", [False, True], ids=["untrusted", "invariant-breaking"])
def test_complete_with_answer_fails_a_bad_answer_with_response_invalid(defect: bool) -> None:
    # Even with failures left and a retryable flag in the inputs, it is final.
    leased = attrs.evolve(LEASED, max_failures=20)
    parsed = (
        parse_answer(response_for(leased, "retry_wait", last_error_code=None), leased, CAPS)
        if defect else None
    )
    assert (parsed is not None) == defect
    done = complete_with_answer(leased, parsed, held(T0 + 1, retryable=True,
                                                     error_code="reader.timeout"))
    assert (done.status, done.last_error_code, done.failures) == (
        "failed", CODE + "response_invalid", 1)
    assert done.receiver_status is None  # nothing of the answer is kept
    assert MONITOR_INVARIANTS.broken(done) == []


@pytest.mark.parametrize("answer_kind", [None, "pending", "defect"])
def test_complete_with_answer_lets_lease_refusals_through(answer_kind: str | None) -> None:
    if answer_kind == "defect":
        response = response_for(LEASED, "failed", last_error_code=None)
    else:
        response = response_for(LEASED, answer_kind or "pending", capabilities_sha256=(
            OTHER_CAPS if answer_kind is None else CAPS))
    parsed = parse_answer(response, LEASED, CAPS)
    assert LEASED.lease_expires_at is not None
    with pytest.raises(TransitionRefused) as expired:
        complete_with_answer(LEASED, parsed, held(LEASED.lease_expires_at))
    assert expired.value.code == CODE + "lease_expired"
    with pytest.raises(TransitionRefused) as lost:
        complete_with_answer(LEASED, parsed, held(T0 + 1, token="someone-else"))
    assert lost.value.code == CODE + "claim_lost"
    with pytest.raises(TransitionRefused) as finished:
        complete_with_answer(WATCHING, parsed, held(T0 + 1))
    assert finished.value.code == CODE + "claim_lost"


def test_complete_with_answer_fires_through_the_given_fire() -> None:
    calls: list[str] = []

    def fire(trigger: str, record: MonitorRecord, inputs: MonitorInputs) -> MonitorRecord:
        calls.append(trigger)
        return MONITOR.fire(trigger, record, inputs)

    bad = parse_answer(response_for(LEASED, "retry_wait", last_error_code=None), LEASED, CAPS)
    complete_with_answer(LEASED, bad, held(T0 + 1), fire)
    assert calls == ["observe_progress", "fail_attempt"]


def test_the_monitor_keeps_a_way_out_and_declares_its_cycles() -> None:
    """No stuck state, only declared cycles; taken away, each declaration is a finding."""
    result = explore(MONITOR_EXPLORATION, keep_graph=True)
    assert result.graph is not None and not result.truncated
    found = liveness(result.graph, MONITOR_EXPLORATION.accepted_cycles)
    assert found.ok
    assert found.cycles  # it polls for as long as the receiver says
    undeclared = liveness(result.graph, ())
    assert undeclared.findings == tuple(attrs.evolve(c, accepted=None) for c in found.cycles)
