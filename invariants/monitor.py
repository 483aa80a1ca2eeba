"""The monitor's record and every rule it obeys.

The reference validated a row with one forty-clause boolean that could only say
"invalid". Here each clause is a field rule (attrs validator, checked whenever a
record is built) or a named invariant (cross-field, checked before every write and
on every read). A violation names the rule; the public code stays
``terminal_processing_monitor.state_invalid``. What the monitor reads from outside (a
receiver's answer, a caller's notification) obeys the rules of
:mod:`lifecycles.invariants.monitor_messages`.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import (
    FieldRule,
    InvariantSet,
    expressed,
    finite_time,
    integer_between,
    is_integer,
    is_time,
    matches,
    non_negative_integer,
    one_of,
    step_invariant,
)
from lifecycles.invariants._expressions import (
    Expr,
    Fields,
    Length,
    all_of,
    any_of,
    compiled,
    if_else,
    int_not_bool,
    str_exactly,
)

__all__ = [
    "COLUMNS",
    "DAY_SECONDS",
    "LEASE_FIELDS",
    "MAX_BATCH",
    "MONITOR_INVARIANTS",
    "RECEIVER_BUNDLE",
    "REGISTRATION_IDENTITY",
    "RESPONSE_INVALID",
    "STATE_INVALID",
    "TERMINAL_STATUSES",
    "MonitorRecord",
    "MonitorStatus",
    "ReceiverStatus",
    "batch_limit",
    "capabilities_rule",
    "claim_mints_a_new_lease_token",
    "claimed_only_when_due",
    "count",
    "delay",
    "duration",
    "error_code",
    "error_code_iff_waiting_or_failed",
    "event_id_rule",
    "exact_str",
    "failed_has_error_code",
    "failure_bound",
    "failures_reset_only_by_an_answer",
    "failures_within_max",
    "final_records_never_change",
    "lease_duration",
    "lease_ends_by_its_holder_or_by_expiry",
    "lease_expired_flag",
    "lease_fields_iff_leased",
    "lost_lease_fails_only_the_last_failure",
    "monitor_status",
    "optional_integer",
    "poll_attempts_never_decrease",
    "poll_interval",
    "polls_cover_failures",
    "reader_rule",
    "receiver_attempts_consistent",
    "receiver_error_iff_receiver_waiting_or_failed",
    "receiver_lease_expired_only_when_leased",
    "receiver_lease_iff_receiver_leased",
    "receiver_processed_iff_receiver_succeeded",
    "receiver_status",
    "receiver_status_has_bundle",
    "registering_again_changes_nothing",
    "retryable_failure_retried",
    "same_notification",
    "sha256_hex",
    "succeeded_iff_receiver_succeeded",
    "terminal_status",
    "time",
    "token",
    "updated_not_before_created",
    "watching_means_receiver_unfinished",
    "worker_id_rule",
]

STATE_INVALID = "terminal_processing_monitor.state_invalid"
RESPONSE_INVALID = "terminal_processing_monitor.response_invalid"

TERMINAL_STATUSES = frozenset(
    {
        "cancelled",
        "deleted",
        "deletion_failed",
        "localization_failed",
        "publication_blocked",
        "publication_failed",
        "published",
        "superseded",
    }
)


class MonitorStatus(StrEnum):
    """Where a notification's processing observation stands."""

    PENDING = "pending"
    LEASED = "leased"
    WATCHING = "watching"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ReceiverStatus(StrEnum):
    """The receiver's own processing status, as its status answer reports it."""

    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


def exact_str(rule: FieldRule) -> FieldRule:
    """``rule`` for values of type exactly ``str``.

    A ``str`` subclass can compare equal to (and hash like) an allowed value while
    holding another, which is what a database would then store; its own methods are
    never trusted, so every identifier, code and known value is an exact ``str``.
    """
    return rule.also(str_exactly)


# Field rules: one field each, named for what they demand.
token = exact_str(matches("token_syntax", r"[A-Za-z0-9_.:-]{1,256}"))
sha256_hex = exact_str(matches("sha256_syntax", r"[0-9a-f]{64}"))
error_code = exact_str(matches("error_code_syntax", r"[a-z][a-z0-9_.-]{0,127}"))
terminal_status = exact_str(one_of("terminal_status_known", TERMINAL_STATUSES))
monitor_status = one_of("status_declared", set(MonitorStatus))
receiver_status = one_of("receiver_status_declared", set(ReceiverStatus))
count = non_negative_integer("count_non_negative")
failure_bound = integer_between("max_failures_bounds", 1, 20)
time = finite_time("time_finite_non_negative")
optional_integer = FieldRule.expressed(
    "integer_type", is_integer.expression, optional=True,
    meaning="an integer (not a boolean: True is an int in Python, never in a record)")
lease_expired_flag = one_of("lease_expired_flag", {0, 1})

# Rules of the facade's arguments, declared once, each named for the argument it checks
# (the facade maps a broken rule's name to that argument's public code, in one table).
DAY_SECONDS = 86_400


def duration(name: str) -> FieldRule:
    """A duration in seconds within (0, 86400], under the rule name ``name``."""
    return FieldRule.expressed(
        name, lambda v: is_time.expression(v) & (v > 0) & (v <= DAY_SECONDS),
        meaning="seconds in (0, 86400]",
    )


poll_interval = duration("poll_interval_bounds")
delay = duration("delay_bounds")
lease_duration = duration("lease_bounds")
MAX_BATCH = 1000
batch_limit = integer_between("batch_limit_bounds", 1, MAX_BATCH)
capabilities_rule = attrs.evolve(sha256_hex, name="capabilities_sha256_syntax")
event_id_rule = attrs.evolve(token, name="event_id_syntax")

def _token_of_at_most(characters: int) -> Callable[[Expr], Expr]:
    token_syntax = token.expression
    assert token_syntax is not None
    return lambda v: token_syntax & (Length(v) <= characters)


worker_id_rule = FieldRule.expressed(
    "worker_id_syntax", _token_of_at_most(128), meaning="a token of at most 128 characters"
)
# Python only: no column holds a callable.
reader_rule = FieldRule("reader_callable", callable, meaning="a callable (event_id, site_id)")


_STATUS_OF: dict[str, MonitorStatus] = {member.value: member for member in MonitorStatus}


def _status(value: object) -> object:
    """Stored statuses are strings; a known one becomes the enum, anything else stays to fail."""
    return _STATUS_OF.get(value, value) if isinstance(value, str) else value


@attrs.frozen(slots=True)
class MonitorRecord:
    """One row of ``cms_source_terminal_processing``, field for field, in column order."""

    event_id: str = attrs.field(validator=token)
    notification_id: str = attrs.field(validator=token)
    site_id: str = attrs.field(validator=token)
    terminal_status: str = attrs.field(validator=terminal_status)
    notification_sha256: str = attrs.field(validator=sha256_hex)
    status: MonitorStatus = attrs.field(converter=_status, validator=monitor_status)
    poll_attempts: int = attrs.field(validator=count)
    failures: int = attrs.field(validator=count)
    max_failures: int = attrs.field(validator=failure_bound)
    next_poll_at: float = attrs.field(validator=time)
    lease_owner: str | None = attrs.field(validator=token.allow_none())
    lease_token: str | None = attrs.field(validator=token.allow_none())
    lease_expires_at: float | None = attrs.field(validator=time.allow_none())
    last_error_code: str | None = attrs.field(validator=error_code.allow_none())
    receiver_status: str | None = attrs.field(validator=receiver_status.allow_none())
    receiver_attempts: int | None = attrs.field(validator=optional_integer)
    receiver_max_attempts: int | None = attrs.field(validator=optional_integer)
    receiver_next_attempt_at: float | None = attrs.field(validator=time.allow_none())
    receiver_lease_expires_at: float | None = attrs.field(validator=time.allow_none())
    receiver_lease_expired: int | None = attrs.field(validator=lease_expired_flag.allow_none())
    receiver_error_code: str | None = attrs.field(validator=error_code.allow_none())
    receiver_processed_at: float | None = attrs.field(validator=time.allow_none())
    created_at: float = attrs.field(validator=time)
    updated_at: float = attrs.field(validator=time)


COLUMNS: tuple[str, ...] = tuple(field.name for field in attrs.fields(MonitorRecord))
LEASE_FIELDS = ("lease_owner", "lease_token", "lease_expires_at")
RECEIVER_BUNDLE = (
    "receiver_attempts",
    "receiver_max_attempts",
    "receiver_next_attempt_at",
    "receiver_lease_expired",
)


# Each invariant is an expression over the record's fields (`r.name`): one declaration,
# its Python predicate compiled from it and the SQL form a store checks in bulk
# (lifecycles.invariants._expressions). `&`, `|`, `~` are and, or, not.


@expressed
def failures_within_max(r: Fields[MonitorRecord]) -> Expr:
    """Failures never exceed the item's max_failures."""
    return r.failures <= r.max_failures


@expressed
def polls_cover_failures(r: Fields[MonitorRecord]) -> Expr:
    """Every failure follows a poll attempt: poll_attempts >= failures."""
    return r.poll_attempts >= r.failures


@expressed
def lease_fields_iff_leased(r: Fields[MonitorRecord]) -> Expr:
    """Lease owner, token and expiry are all set when leased, and all empty otherwise."""
    present = [getattr(r, name).is_not_none() for name in LEASE_FIELDS]
    return if_else(r.status == MonitorStatus.LEASED, all_of(*present), ~any_of(*present))


@expressed
def error_code_iff_waiting_or_failed(r: Fields[MonitorRecord]) -> Expr:
    """A local error code exists exactly when the status is retry_wait or failed."""
    waiting = r.status.is_in((MonitorStatus.RETRY_WAIT, MonitorStatus.FAILED))
    return waiting == r.last_error_code.is_not_none()


@expressed
def failed_has_error_code(r: Fields[MonitorRecord]) -> Expr:
    """A failed item always says why."""
    return (r.status != MonitorStatus.FAILED) | r.last_error_code.is_not_none()


@compiled
def receiver_attempts_consistent(attempts: Expr, maximum: Expr) -> Expr:
    """Receiver attempts are integers: 0 <= attempts <= max_attempts, 1 <= max_attempts <= 20."""
    # Declared once: the stored record's invariant and the answer's rule both read it.
    return (
        int_not_bool(attempts) & int_not_bool(maximum)
        & (attempts >= 0) & (attempts <= maximum) & (maximum <= 20) & (maximum >= 1)
    )


@expressed
def receiver_status_has_bundle(r: Fields[MonitorRecord]) -> Expr:
    """A receiver status comes with attempts <= max attempts <= 20, a next attempt and a flag."""
    bundle = all_of(*(getattr(r, name).is_not_none() for name in RECEIVER_BUNDLE))
    return r.receiver_status.is_none() | (
        bundle & receiver_attempts_consistent.expression(
            r.receiver_attempts, r.receiver_max_attempts
        )
    )


@expressed
def receiver_lease_iff_receiver_leased(r: Fields[MonitorRecord]) -> Expr:
    """The receiver's lease expiry is recorded exactly when the receiver reports leased."""
    return (r.receiver_status == ReceiverStatus.LEASED) == (
        r.receiver_lease_expires_at.is_not_none()
    )


@expressed
def receiver_error_iff_receiver_waiting_or_failed(r: Fields[MonitorRecord]) -> Expr:
    """A receiver error code exists exactly when the receiver reports retry_wait or failed."""
    waiting = r.receiver_status.is_in((ReceiverStatus.RETRY_WAIT, ReceiverStatus.FAILED))
    return waiting == r.receiver_error_code.is_not_none()


@expressed
def receiver_processed_iff_receiver_succeeded(r: Fields[MonitorRecord]) -> Expr:
    """The receiver's processed_at is set exactly when the receiver reports succeeded."""
    return (r.receiver_status == ReceiverStatus.SUCCEEDED) == (
        r.receiver_processed_at.is_not_none()
    )


@expressed
def receiver_lease_expired_only_when_leased(r: Fields[MonitorRecord]) -> Expr:
    """The receiver's lease_expired flag is raised only while the receiver reports leased."""
    return (r.receiver_lease_expired != 1) | (r.receiver_status == ReceiverStatus.LEASED)


@expressed
def succeeded_iff_receiver_succeeded(r: Fields[MonitorRecord]) -> Expr:
    """The item succeeded exactly when the receiver reported succeeded."""
    return (r.status == MonitorStatus.SUCCEEDED) == (
        r.receiver_status == ReceiverStatus.SUCCEEDED
    )


@expressed
def watching_means_receiver_unfinished(r: Fields[MonitorRecord]) -> Expr:
    """A watched item's receiver is still pending, leased or in retry_wait."""
    return (r.status != MonitorStatus.WATCHING) | r.receiver_status.is_in(
        (ReceiverStatus.PENDING, ReceiverStatus.LEASED, ReceiverStatus.RETRY_WAIT)
    )


@expressed
def updated_not_before_created(r: Fields[MonitorRecord]) -> Expr:
    """updated_at is never earlier than created_at."""
    return r.updated_at >= r.created_at


# --- step invariants: what one transition may change -------------------------------
# (updated_at never going back is not one: the reference writes a worker's clock as it
# is, and a clock behind the stored time must not turn a poll into a refusal.)


@step_invariant
def claim_mints_a_new_lease_token(before: MonitorRecord, after: MonitorRecord) -> bool:
    """A record entering the leased status holds a lease token it did not hold before."""
    return (
        after.status != MonitorStatus.LEASED or before.status == MonitorStatus.LEASED
        or after.lease_token != before.lease_token
    )


@step_invariant
def poll_attempts_never_decrease(before: MonitorRecord, after: MonitorRecord) -> bool:
    """poll_attempts never decreases."""
    return after.poll_attempts >= before.poll_attempts


@step_invariant
def failures_reset_only_by_an_answer(before: MonitorRecord, after: MonitorRecord) -> bool:
    """failures decreases only to 0, when a leased poll gets the receiver's answer."""
    return after.failures >= before.failures or (
        after.failures == 0 and before.status == MonitorStatus.LEASED
        and after.receiver_status is not None
    )


@step_invariant
def final_records_never_change(before: MonitorRecord, after: MonitorRecord) -> bool:
    """A succeeded or failed record never changes."""
    return before.status not in (MonitorStatus.SUCCEEDED, MonitorStatus.FAILED) or (
        after == before
    )


# The lease rules read the step's inputs (who asks, when): a record alone cannot tell an
# expiry from its holder's late completion.


REGISTRATION_IDENTITY = (
    "notification_id", "site_id", "terminal_status", "notification_sha256", "max_failures",
)
"""What identifies a notification: registering it again must repeat these exactly."""


def same_notification(new: MonitorRecord, stored: MonitorRecord) -> bool:
    """``new`` registers the very notification ``stored`` holds (REGISTRATION_IDENTITY)."""
    return all(getattr(new, name) == getattr(stored, name) for name in REGISTRATION_IDENTITY)


def _holder(before: MonitorRecord, i: Any) -> bool:
    return bool(i.worker_id == before.lease_owner and i.lease_token == before.lease_token)


@step_invariant
def claimed_only_when_due(before: MonitorRecord, after: MonitorRecord) -> bool:
    """A record enters the leased status only at or after its next poll time."""
    return (
        after.status != MonitorStatus.LEASED or before.status == MonitorStatus.LEASED
        or after.updated_at >= before.next_poll_at
    )


@step_invariant
def lease_ends_by_its_holder_or_by_expiry(
    before: MonitorRecord, after: MonitorRecord, i: Any
) -> bool:
    """A lease ends by its holder while it is live, or by another once it has expired."""
    if before.status != MonitorStatus.LEASED or after.status == MonitorStatus.LEASED:
        return True
    expired = before.lease_expires_at is not None and i.now >= before.lease_expires_at
    return expired != _holder(before, i)


@step_invariant
def lost_lease_fails_only_the_last_failure(
    before: MonitorRecord, after: MonitorRecord, i: Any
) -> bool:
    """A lease lost to expiry fails the item only when it was its last allowed failure."""
    return (
        before.status != MonitorStatus.LEASED or after.status != MonitorStatus.FAILED
        or _holder(before, i) or after.failures >= after.max_failures
    )


@step_invariant
def retryable_failure_retried(before: MonitorRecord, after: MonitorRecord, i: Any) -> bool:
    """A retryable read failure with failures left sends the item to retry_wait."""
    return (
        before.status != MonitorStatus.LEASED or i.error_code is None or not i.retryable
        or before.failures + 1 >= before.max_failures
        or after.status == MonitorStatus.RETRY_WAIT
    )


@step_invariant
def registering_again_changes_nothing(
    before: MonitorRecord, after: MonitorRecord, i: Any
) -> bool:
    """Registering again changes nothing, and only the same notification may be."""
    new = i.registration
    return new is None or (after == before and same_notification(new, before))


MONITOR_INVARIANTS: InvariantSet[MonitorRecord] = InvariantSet(
    STATE_INVALID,
    [
        failures_within_max,
        polls_cover_failures,
        lease_fields_iff_leased,
        error_code_iff_waiting_or_failed,
        failed_has_error_code,
        receiver_status_has_bundle,
        receiver_lease_iff_receiver_leased,
        receiver_error_iff_receiver_waiting_or_failed,
        receiver_processed_iff_receiver_succeeded,
        receiver_lease_expired_only_when_leased,
        succeeded_iff_receiver_succeeded,
        watching_means_receiver_unfinished,
        updated_not_before_created,
    ],
    steps=[
        claim_mints_a_new_lease_token,
        poll_attempts_never_decrease,
        failures_reset_only_by_an_answer,
        final_records_never_change,
        claimed_only_when_due,
        lease_ends_by_its_holder_or_by_expiry,
        lost_lease_fails_only_the_last_failure,
        retryable_failure_retried,
        registering_again_changes_nothing,
    ],
)
