"""The terminal-processing monitor: observe a receiver until it finishes a notification.

Rules, in prose (the table below is the spec):

* ``register`` creates an item in ``pending``, due at once. Registering the very same
  notification again is a row that changes nothing, from any status; a different one
  under the same event id is refused by ``same_registration``: ``idempotency_collision``.
* ``claim`` leases a due item (``pending``, ``watching``, ``retry_wait``) to one worker.
* A lease that outlives its expiry is recovered by ``expire_lease``: the item counts a
  failure and waits to be retried at once, or fails once its failures are spent.
* While the lease is held and live, the receiver's answer completes the poll:
  ``observe_success`` / ``observe_failure`` end the item, ``observe_progress`` keeps
  watching it. Which one fires is :func:`trigger_for_answer`, beside the table.
* A reader error or an invalid answer is ``fail_attempt``: retried with exponential
  backoff (:func:`retry_delay`) while it is retryable and failures remain, else final.

What a finished poll fires, from the receiver's answer or the reader's error, is one
pure function, :func:`poll_step`; the facade only fires its result through its store.

This package is the monitor's table; its submodules are what the checker and the pages
read beside it: ``inputs`` (the exploration), ``responses`` (receiver answers it draws),
``audit`` (page notes), ``mutants`` (equivalent mutants). The app that runs it is
:mod:`lifecycles.monitor`; the record is :mod:`lifecycles.invariants.monitor` (what it
reads from outside: :mod:`lifecycles.invariants.monitor_messages`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from lifecycles.invariants._core import FieldRuleViolation
from lifecycles.invariants.monitor import (
    MONITOR_INVARIANTS,
    RESPONSE_INVALID,
    STATE_INVALID,
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
    delay,
    error_code,
    poll_interval,
    same_notification,
    time,
    token,
)
from lifecycles.invariants.monitor_messages import (
    ANSWER_RULES,
    ANSWER_SHAPE,
    AnswerRead,
    answer_rules_broken,
)
from lifecycles.machines._builders import builder, evolver
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, Lease, effect, guard
from lifecycles.machines._work import Handling, Result, Returned, Step

CODE = "terminal_processing_monitor."

TABLE: list[dict[str, Any]] = [
    {"trigger": "claim", "source": ["pending", "watching", "retry_wait"], "dest": "leased",
     "conditions": ["poll_is_due", "failures_remain"], "after": "grant_lease"},
    {"trigger": "expire_lease", "source": "leased", "dest": "retry_wait",
     "conditions": ["lease_has_expired", "another_failure_allowed"],
     "after": "count_expired_lease"},
    {"trigger": "expire_lease", "source": "leased", "dest": "failed",
     "conditions": ["lease_has_expired"], "unless": ["another_failure_allowed"],
     "after": "count_expired_lease"},
    {"trigger": "observe_progress", "source": "leased", "dest": "watching",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "record_progress"},
    {"trigger": "observe_success", "source": "leased", "dest": "succeeded",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "record_success"},
    {"trigger": "observe_failure", "source": "leased", "dest": "failed",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "record_remote_failure"},
    {"trigger": "fail_attempt", "source": "leased", "dest": "retry_wait",
     "conditions": ["lease_is_held", "lease_is_live", "retry_is_allowed"],
     "after": "schedule_retry"},
    {"trigger": "fail_attempt", "source": "leased", "dest": "failed",
     "conditions": ["lease_is_held", "lease_is_live"], "unless": ["retry_is_allowed"],
     "after": "record_final_failure"},
    # Registering the very same notification again changes nothing, in any status.
    {"trigger": "register", "source": "*", "dest": "=", "conditions": ["same_registration"]},
]


# --- inputs: everything a transition needs from outside, passed in ----------


@attrs.frozen
class RetryPolicy:
    """The monitor's timing: poll interval while watching, and the backoff bounds.

    Each bound is a named rule, checked in the reference's order: a value that is no
    time breaks ``time_finite_non_negative`` before its own bounds are read.
    """

    poll_interval_seconds: float = attrs.field(default=30.0, validator=[time, poll_interval])
    base_delay_seconds: float = attrs.field(default=5.0, validator=[time, delay])
    max_delay_seconds: float = attrs.field(default=300.0, validator=[time, delay])

    @max_delay_seconds.validator
    def _base_within_max(self, attribute: attrs.Attribute[float], value: float) -> None:
        if self.base_delay_seconds > value:
            raise FieldRuleViolation("base_delay_within_max_delay", attribute.name, value)


@attrs.frozen
class ReceiverAnswer:
    """A receiver status response that passed :func:`parse_answer`."""

    processing_status: ReceiverStatus
    attempts: int
    max_attempts: int
    next_attempt_at: float
    lease_expires_at: float | None
    lease_expired: bool
    last_error_code: str | None
    processed_at: float | None


@attrs.frozen
class MonitorInputs:
    """What one transition of the monitor reads besides the record."""

    now: float
    policy: RetryPolicy = RetryPolicy()
    worker_id: str | None = None
    lease_token: str | None = None
    lease_seconds: float = 600.0
    answer: ReceiverAnswer | None = None
    error_code: str | None = None
    retryable: bool = False
    registration: MonitorRecord | None = None


# --- logic beside the table --------------------------------------------------


def retry_delay(policy: RetryPolicy, failures: int) -> float:
    """Backoff before retry number ``failures``: min(max_delay, base_delay * 2^(failures-1))."""
    delay: float = policy.base_delay_seconds * 2 ** max(0, failures - 1)
    return min(policy.max_delay_seconds, delay)


TRIGGER_FOR_RECEIVER_STATUS: Mapping[ReceiverStatus, str] = {
    ReceiverStatus.SUCCEEDED: "observe_success",
    ReceiverStatus.FAILED: "observe_failure",
    ReceiverStatus.PENDING: "observe_progress",
    ReceiverStatus.LEASED: "observe_progress",
    ReceiverStatus.RETRY_WAIT: "observe_progress",
}


def trigger_for_answer(answer: ReceiverAnswer) -> str:
    """succeeded -> observe_success; failed -> observe_failure; otherwise observe_progress."""
    return TRIGGER_FOR_RECEIVER_STATUS[answer.processing_status]


_PLAIN = frozenset({str, int, float, bool, type(None)})  # plain_value returns them as they are


def plain_value(value: Any) -> Any:
    """The plain ``str``, ``int`` or ``float`` that a subclass of one holds; anything
    else unchanged.

    Read through the base type's own slot, so the subclass's methods (which may lie
    about equality, hashing or order, or raise) never run: a ``StrEnum`` member reads
    as its string, as in the reference, while a ``str`` subclass claiming to equal an
    allowed value is judged by the value it holds, the one a database would store.
    ``bool`` stays a ``bool``, for the integer rules to refuse.
    """
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return value


_inputs_with = evolver(MonitorInputs)  # attrs.evolve at half its cost (twice a poll)
_build_record = builder(MonitorRecord)  # MonitorRecord(**values) at half its cost


@attrs.frozen
class AnswerRefused:
    """A response the answer rules refuse; ``rules`` names each one it breaks."""

    rules: tuple[str, ...]


def read_answer(
    response: object, record: MonitorRecord, capabilities_sha256: str
) -> ReceiverAnswer | AnswerRefused:
    """The receiver's answer about ``record``, or the answer rules it breaks.

    It must be exactly the status schema, about this very notification, under the
    expected capabilities, with consistent receiver fields: each of these is a named
    rule (``ANSWER_RULES`` in ``lifecycles.invariants.monitor_messages``). Whether the
    row it produces is valid is decided afterwards by the invariants, not here.
    """
    # Copying the mapping runs its own code, which may raise: the caller records that as
    # the reader's failure, as the reference does. After the copy no method of a key or
    # value runs: each is read as the plain value it holds (plain_value), and the rules
    # compare only exact str, so what is checked is what is stored.
    value = None
    if isinstance(response, Mapping):
        value = {  # plain_value, with its common case inline: a key or value of an exact type
            key if type(key) is str else plain_value(key):
            item if type(item) in _PLAIN else plain_value(item)
            for key, item in dict(response).items()
        }
    broken = answer_rules_broken(AnswerRead(value, record, capabilities_sha256))
    if broken or value is None:
        return AnswerRefused(tuple(broken))
    return ReceiverAnswer(
        processing_status=ReceiverStatus(value["processing_status"]),
        attempts=value["attempts"],
        max_attempts=value["max_attempts"],
        next_attempt_at=value["next_attempt_at"],
        lease_expires_at=value["lease_expires_at"],
        lease_expired=value["lease_expired"],
        last_error_code=value["last_error_code"],
        processed_at=value["processed_at"],
    )


def parse_answer(
    response: object, record: MonitorRecord, capabilities_sha256: str
) -> ReceiverAnswer | None:
    """:func:`read_answer`, with ``None`` for an answer it refuses (the rules unnamed)."""
    read = read_answer(response, record, capabilities_sha256)
    return read if isinstance(read, ReceiverAnswer) else None


def reader_error_code(error: BaseException) -> tuple[str, bool]:
    """The error code and retryability a failed read is recorded with.

    An error carrying a valid ``code`` keeps it; it is retryable only when it says
    both ``cms_notification_failure is True`` and ``retryable is True``. Anything else
    is a final ``reader_failure``.
    """
    # A code is read as the plain str it holds (a StrEnum member keeps working). An error
    # whose attributes raise when read says nothing that can be trusted: a final
    # reader_failure, never an exception that would leave the item leased.
    code: object
    try:
        code = plain_value(getattr(error, "code", None))
        if not error_code.check(code):
            return CODE + "reader_failure", False
        retryable = (
            getattr(error, "cms_notification_failure", False) is True
            and getattr(error, "retryable", None) is True
        )
    except Exception:  # its own properties raised: nothing it says can be trusted
        return CODE + "reader_failure", False
    return str(code), retryable


FireMonitor = Callable[[str, MonitorRecord, MonitorInputs], MonitorRecord]


def poll_step(
    lease: MonitorInputs, read: ReceiverAnswer | AnswerRefused | BaseException | None
) -> Step[MonitorInputs]:
    """The trigger and inputs that finish a leased poll, from what the read gave.

    ``lease`` is the poll's time, policy and lease; ``read`` the receiver's answer
    (:func:`read_answer`), the rules it broke (or ``None``: refused), or the
    exception the reader raised. A reader error fails the attempt with
    :func:`reader_error_code`. A refused answer fails it with ``response_invalid``,
    not retryable. A trusted answer fires :func:`trigger_for_answer`, and falls back
    to that same ``response_invalid`` failure when its record would break an
    invariant (the reference's defect: remote ``retry_wait``/``failed`` with no error
    code), so nothing invalid is ever written. The record itself decides nothing here:
    the table's guards (lease held and live) and effects read it when the step fires.
    """
    if isinstance(read, BaseException):
        code, retryable = reader_error_code(read)
        return Step("fail_attempt", _inputs_with(lease, {"error_code": code,
                                                         "retryable": retryable}))
    rejected = _inputs_with(
        lease, {"answer": None, "error_code": RESPONSE_INVALID, "retryable": False})
    if not isinstance(read, ReceiverAnswer):
        return Step("fail_attempt", rejected)
    return Step(trigger_for_answer(read), _inputs_with(lease, {"answer": read}),
                Step("fail_attempt", rejected))


def finish_poll(
    held: MonitorRecord, inputs: MonitorInputs, result: Result
) -> Step[MonitorInputs]:
    """What a worker's read of the receiver fires: :func:`poll_step` of what the reader
    gave, the answer read from its response (:func:`read_answer`) or what it raised."""
    return poll_step(inputs, result.value if isinstance(result, Returned) else result.error)


def monitor_handling(policy: RetryPolicy) -> Handling[MonitorRecord, MonitorInputs]:
    """How a worker runs the monitor's records under ``policy``: its leases' inputs carry
    the policy, and a read ends as :func:`finish_poll` says. No renewal row: a poll that
    outlives its lease is rescued, as in the reference."""
    def inputs(now: float, worker_id: str, token: str, seconds: float) -> MonitorInputs:
        return MonitorInputs(now=now, policy=policy, worker_id=worker_id, lease_token=token,
                             lease_seconds=seconds)

    return Handling(inputs=inputs, finish=finish_poll, holder="lease_owner",
                    attempt=lambda record: record.poll_attempts + 1)


def complete_with_answer(
    record: MonitorRecord,
    answer: ReceiverAnswer | None,
    inputs: MonitorInputs,
    fire: FireMonitor | None = None,
) -> MonitorRecord:
    """Finish a leased poll with the receiver's answer (``None``: it failed parse_answer).

    :func:`poll_step` fired through ``fire(trigger, record, inputs)`` (default: the
    pure ``MONITOR.fire``). The checker and the generated tests run this; the facade
    runs :func:`poll_step` itself, so the rule lives in one place.
    """
    after: MonitorRecord = poll_step(inputs, answer).fire(record, fire or MONITOR.fire)
    return after


def new_record(
    *,
    event_id: str,
    notification_id: str,
    site_id: str,
    terminal_status: str,
    notification_sha256: str,
    max_failures: int,
    now: float,
) -> MonitorRecord:
    """The record ``register`` creates: pending, due now, nothing attempted (built by
    the code the framework generates for the record class: the class's own field rules,
    in its order, at half the cost of its ``__init__``)."""
    return _build_record(
        event_id=event_id, notification_id=notification_id, site_id=site_id,
        terminal_status=terminal_status, notification_sha256=notification_sha256,
        status=MonitorStatus.PENDING, poll_attempts=0, failures=0,
        max_failures=max_failures, next_poll_at=now, lease_owner=None, lease_token=None,
        lease_expires_at=None, last_error_code=None, receiver_status=None,
        receiver_attempts=None, receiver_max_attempts=None, receiver_next_attempt_at=None,
        receiver_lease_expires_at=None, receiver_lease_expired=None,
        receiver_error_code=None, receiver_processed_at=None, created_at=now, updated_at=now,
    )


# --- guards ------------------------------------------------------------------

Record = MonitorRecord
Inputs = MonitorInputs



@guard(refusal_code=CODE + "idempotency_collision")
def same_registration(r: Record, i: Inputs) -> bool:
    """The notification registered again is the stored one (ids, status, digest, max_failures)."""
    new = i.registration
    return new is not None and same_notification(new, r)


@guard(refusal_code=CODE + "claim_lost")
def poll_is_due(r: Record, i: Inputs) -> bool:
    """The item's next poll time has come: next_poll_at <= now."""
    return r.next_poll_at <= i.now


@guard(refusal_code=CODE + "claim_lost")
def failures_remain(r: Record, i: Inputs) -> bool:
    """The item has failed fewer times than its max_failures."""
    return r.failures < r.max_failures


def lease_expired(r: MonitorRecord, now: float) -> bool:
    """The record holds a lease whose expiry has passed: lease_expires_at <= now."""
    # Declared once: the guards below and the facade's ``lease_expired`` field read it.
    return r.lease_expires_at is not None and r.lease_expires_at <= now


@guard(refusal_code=CODE + "claim_lost")
def lease_has_expired(r: Record, i: Inputs) -> bool:
    """The lease's expiry has passed: lease_expires_at <= now."""
    return lease_expired(r, i.now)


@guard(refusal_code=CODE + "claim_lost")
def another_failure_allowed(r: Record, i: Inputs) -> bool:
    """Counting one more failure stays below max_failures: failures + 1 < max_failures."""
    return r.failures + 1 < r.max_failures


@guard(refusal_code=CODE + "claim_lost")
def lease_is_held(r: Record, i: Inputs) -> bool:
    """The caller holds this lease: same owner and same lease token."""
    return r.lease_owner == i.worker_id and r.lease_token == i.lease_token


@guard(refusal_code=CODE + "lease_expired")
def lease_is_live(r: Record, i: Inputs) -> bool:
    """The lease has not expired: now < lease_expires_at."""
    return r.lease_expires_at is not None and not lease_expired(r, i.now)


@guard(refusal_code=CODE + "claim_lost")
def retry_is_allowed(r: Record, i: Inputs) -> bool:
    """The failure is retryable and failures + 1 < max_failures."""
    return i.retryable and r.failures + 1 < r.max_failures


# --- effects -----------------------------------------------------------------

LEASE_CLEARED = {"lease_owner": None, "lease_token": None, "lease_expires_at": None}


@effect("poll_attempts", "lease_owner", "lease_token", "lease_expires_at",
        "last_error_code", "updated_at")
def grant_lease(r: Record, i: Inputs) -> Changes:
    """Count a poll attempt and lease the item to the worker until now + lease_seconds."""
    return {
        "poll_attempts": r.poll_attempts + 1,
        "lease_owner": i.worker_id,
        "lease_token": i.lease_token,
        "lease_expires_at": i.now + i.lease_seconds,
        "last_error_code": None,
        "updated_at": i.now,
    }


@effect("failures", "next_poll_at", "lease_owner", "lease_token", "lease_expires_at",
        "last_error_code", "updated_at")
def count_expired_lease(r: Record, i: Inputs) -> Changes:
    """Count a failure (lease_expired), drop the lease, make the item due now."""
    return {
        **LEASE_CLEARED,
        "failures": r.failures + 1,
        "next_poll_at": i.now,
        "last_error_code": CODE + "lease_expired",
        "updated_at": i.now,
    }


RECEIVER_FIELDS = (
    "receiver_status", "receiver_attempts", "receiver_max_attempts",
    "receiver_next_attempt_at", "receiver_lease_expires_at", "receiver_lease_expired",
    "receiver_error_code", "receiver_processed_at",
)
ANSWER_WRITES = (
    "failures", "next_poll_at", "lease_owner", "lease_token", "lease_expires_at",
    "last_error_code", *RECEIVER_FIELDS, "updated_at",
)


def _answer_changes(i: Inputs, next_poll_at: float, local_error: str | None) -> dict[str, Any]:
    answer = i.answer
    if answer is None:
        raise ValueError("an observe_* trigger needs the receiver's answer")
    return {
        **LEASE_CLEARED,
        "failures": 0,
        "next_poll_at": next_poll_at,
        "last_error_code": local_error,
        "receiver_status": answer.processing_status.value,
        "receiver_attempts": answer.attempts,
        "receiver_max_attempts": answer.max_attempts,
        "receiver_next_attempt_at": answer.next_attempt_at,
        "receiver_lease_expires_at": answer.lease_expires_at,
        "receiver_lease_expired": int(answer.lease_expired),
        "receiver_error_code": answer.last_error_code,
        "receiver_processed_at": answer.processed_at,
        "updated_at": i.now,
    }


@effect(*ANSWER_WRITES)
def record_progress(r: Record, i: Inputs) -> Changes:
    """Store the receiver's answer, reset failures, poll again after poll_interval."""
    return _answer_changes(i, i.now + i.policy.poll_interval_seconds, None)


@effect(*ANSWER_WRITES)
def record_success(r: Record, i: Inputs) -> Changes:
    """Store the receiver's answer and reset failures; nothing is left to poll."""
    return _answer_changes(i, i.now, None)


@effect(*ANSWER_WRITES)
def record_remote_failure(r: Record, i: Inputs) -> Changes:
    """Store the receiver's answer with local error remote_failed; nothing is left to poll."""
    return _answer_changes(i, i.now, CODE + "remote_failed")


FAILURE_WRITES = (
    "failures", "next_poll_at", "lease_owner", "lease_token", "lease_expires_at",
    "last_error_code", "updated_at",
)


@effect(*FAILURE_WRITES)
def schedule_retry(r: Record, i: Inputs) -> Changes:
    """Count a failure with its error code; retry after retry_delay(failures)."""
    failures = r.failures + 1
    return {
        **LEASE_CLEARED,
        "failures": failures,
        "next_poll_at": i.now + retry_delay(i.policy, failures),
        "last_error_code": i.error_code,
        "updated_at": i.now,
    }


@effect(*FAILURE_WRITES)
def record_final_failure(r: Record, i: Inputs) -> Changes:
    """Count a failure with its error code; the item is finished."""
    return {
        **LEASE_CLEARED,
        "failures": r.failures + 1,
        "next_poll_at": i.now,
        "last_error_code": i.error_code,
        "updated_at": i.now,
    }


MONITOR: Lifecycle[MonitorRecord, MonitorInputs] = Lifecycle(
    module=__name__,
    # Named, not imported: each of these imports this table. Its exploration, its auditor
    # page notes, its public errors (the app's), what the generic tools ask of the app.
    declared_in=["lifecycles.machines.monitor.inputs", "lifecycles.machines.monitor.audit",
                 "lifecycles.monitor.errors", "lifecycles.monitor.hooks"],
    name="monitor",
    description=(
        "Observe a CMS receiver's processing of one terminal notification, with leases, "
        "bounded failures and exponential backoff."
    ),
    statuses=MonitorStatus,
    table=TABLE,
    initial=MonitorStatus.PENDING,
    final=[MonitorStatus.SUCCEEDED, MonitorStatus.FAILED],
    creation="register",
    guards=[
        same_registration, poll_is_due, failures_remain, lease_has_expired, another_failure_allowed,
        lease_is_held, lease_is_live, retry_is_allowed,
    ],
    effects=[
        grant_lease, count_expired_lease, record_progress, record_success,
        record_remote_failure, schedule_retry, record_final_failure,
    ],
    invariants=MONITOR_INVARIANTS,
    record_type=MonitorRecord,
    key_field="event_id",
    not_allowed_code=CODE + "claim_lost",
    lease=Lease(
        trigger="claim",
        token_field="lease_token",
        expires_field="lease_expires_at",
        due_field="next_poll_at",
        order_by=("created_at", "event_id"),
        expiry_trigger="expire_lease",
    ),
    handling=monitor_handling(RetryPolicy()),
    status_meanings={
        "pending": "Registered; due for its first poll.",
        "leased": "A worker holds the lease and is reading the receiver's status.",
        "watching": "The receiver has not finished; polled again after the poll interval.",
        "retry_wait": "The last attempt failed; retried after the backoff delay.",
        "succeeded": "The receiver reported success. Final.",
        "failed": "The receiver reported failure, or failures ran out. Final.",
    },
    beside_the_table=[
        poll_step, finish_poll, complete_with_answer, read_answer, parse_answer, trigger_for_answer,
        reader_error_code, retry_delay, lease_expired, plain_value, new_record,
        *(rule.holds for rule in (*ANSWER_SHAPE, *ANSWER_RULES)),
    ],
)

__all__ = [
    "MONITOR",
    "STATE_INVALID",
    "TABLE",
    "AnswerRefused",
    "FireMonitor",
    "MonitorInputs",
    "MonitorStatus",
    "ReceiverAnswer",
    "RetryPolicy",
    "complete_with_answer",
    "finish_poll",
    "lease_expired",
    "monitor_handling",
    "new_record",
    "parse_answer",
    "poll_step",
    "read_answer",
    "reader_error_code",
    "retry_delay",
    "token",
    "trigger_for_answer",
]
