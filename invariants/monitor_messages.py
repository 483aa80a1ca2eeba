"""What the monitor reads from outside, and the rules it holds it to: a receiver's answer
(:data:`ANSWER_RULES`) and a caller's notification (:data:`NOTIFICATION_RULES`).

The reference checked an answer with one fourteen-clause boolean; here each clause is a
named rule, so a refused answer (``response_invalid``) says which. The record these
inputs become obeys :mod:`lifecycles.invariants.monitor`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from lifecycles.invariants._core import InvariantSet, invariant, is_time
from lifecycles.invariants.monitor import (
    RESPONSE_INVALID,
    MonitorRecord,
    ReceiverStatus,
    error_code,
    receiver_attempts_consistent,
)

__all__ = [
    "ANSWER_FIELDS",
    "ANSWER_IDENTITY",
    "ANSWER_RULES",
    "ANSWER_SHAPE",
    "NOTIFICATION_FIELDS",
    "NOTIFICATION_RULES",
    "NOTIFICATION_SCHEMA",
    "STATUS_SCHEMA",
    "AnswerRead",
    "answer_about_this_notification",
    "answer_attempts_consistent",
    "answer_error_code_syntax",
    "answer_error_only_when_waiting_or_failed",
    "answer_fields_exact",
    "answer_is_mapping",
    "answer_lease_expired_is_bool",
    "answer_lease_expired_only_when_leased",
    "answer_lease_iff_leased",
    "answer_processed_iff_succeeded",
    "answer_rules_broken",
    "answer_schema_is_status_schema",
    "answer_status_known",
    "answer_times_are_times",
    "answer_under_expected_capabilities",
    "notification_fields_exact",
    "notification_rules_broken",
    "notification_schema_is_notification_schema",
]

# --- the receiver's answer ------------------------------------------------------------

STATUS_SCHEMA = "blun.cms-terminal-receiver-status-response.v1"
ANSWER_FIELDS = frozenset(
    {
        "schema", "notification_id", "event_id", "site_id", "terminal_status",
        "notification_sha256", "processing_status", "attempts", "max_attempts",
        "next_attempt_at", "lease_expires_at", "lease_expired", "last_error_code",
        "processed_at", "capabilities_sha256",
    }
)
# Fields of the answer that must equal the record's own (exact str).
ANSWER_IDENTITY = (
    "notification_id", "event_id", "site_id", "terminal_status", "notification_sha256",
)
_RECEIVER_STATUSES = frozenset(status.value for status in ReceiverStatus)


@attrs.frozen
class AnswerRead:
    """A receiver's response as read, beside what it must match.

    ``value`` holds its plain keys and values (``None``: the response was no mapping).
    No method of a caller's object runs in a rule: every comparison is between exact
    ``str`` (or ``int``/``float``) values, tested for their type first.
    """

    value: Mapping[Any, Any] | None
    record: MonitorRecord
    capabilities_sha256: str

    def __getitem__(self, name: str) -> Any:
        return None if self.value is None else self.value.get(name)

    @property
    def remote(self) -> str | None:
        """The reported processing_status when it is an exact str, else ``None``."""
        status = self["processing_status"]
        return status if type(status) is str else None


@invariant
def answer_is_mapping(a: AnswerRead) -> bool:
    """The response is a mapping."""
    return a.value is not None


@invariant
def answer_fields_exact(a: AnswerRead) -> bool:
    """The response has exactly the status answer's fields, each named by a plain string."""
    value = a.value or {}
    return all(type(key) is str for key in value) and set(value) == ANSWER_FIELDS


@invariant
def answer_schema_is_status_schema(a: AnswerRead) -> bool:
    """schema is exactly the receiver status schema."""
    return type(a["schema"]) is str and a["schema"] == STATUS_SCHEMA


@invariant
def answer_about_this_notification(a: AnswerRead) -> bool:
    """notification_id, event_id, site_id, terminal_status, notification_sha256 are the record's."""
    return all(
        type(a[name]) is str and a[name] == getattr(a.record, name) for name in ANSWER_IDENTITY
    )


@invariant
def answer_under_expected_capabilities(a: AnswerRead) -> bool:
    """capabilities_sha256 is exactly the capabilities hash the monitor expects."""
    found = a["capabilities_sha256"]
    return type(found) is str and found == a.capabilities_sha256


@invariant
def answer_status_known(a: AnswerRead) -> bool:
    """processing_status is one of the receiver's statuses."""
    return a.remote in _RECEIVER_STATUSES


@invariant
def answer_attempts_consistent(a: AnswerRead) -> bool:
    """attempts and max_attempts are integers with 0 <= attempts <= max_attempts, max in 1..20."""
    return receiver_attempts_consistent(a["attempts"], a["max_attempts"])


@invariant
def answer_times_are_times(a: AnswerRead) -> bool:
    """next_attempt_at is a time; lease_expires_at and processed_at are times or null."""
    return is_time(a["next_attempt_at"]) and all(
        a[name] is None or is_time(a[name]) for name in ("lease_expires_at", "processed_at")
    )


@invariant
def answer_lease_expired_is_bool(a: AnswerRead) -> bool:
    """lease_expired is true or false."""
    return type(a["lease_expired"]) is bool


@invariant
def answer_error_code_syntax(a: AnswerRead) -> bool:
    """last_error_code is null or a valid error code."""
    return a["last_error_code"] is None or error_code.check(a["last_error_code"])


@invariant
def answer_lease_iff_leased(a: AnswerRead) -> bool:
    """lease_expires_at is set exactly when the receiver reports leased."""
    return (a.remote == ReceiverStatus.LEASED) == (a["lease_expires_at"] is not None)


@invariant
def answer_processed_iff_succeeded(a: AnswerRead) -> bool:
    """processed_at is set exactly when the receiver reports succeeded."""
    return (a.remote == ReceiverStatus.SUCCEEDED) == (a["processed_at"] is not None)


@invariant
def answer_error_only_when_waiting_or_failed(a: AnswerRead) -> bool:
    """An error code comes only with retry_wait or failed (the reverse is not demanded)."""
    return a["last_error_code"] is None or a.remote in (
        ReceiverStatus.RETRY_WAIT, ReceiverStatus.FAILED,
    )


@invariant
def answer_lease_expired_only_when_leased(a: AnswerRead) -> bool:
    """lease_expired is raised only when the receiver reports leased."""
    return a["lease_expired"] is not True or a.remote == ReceiverStatus.LEASED


ANSWER_SHAPE: InvariantSet[AnswerRead] = InvariantSet(
    RESPONSE_INVALID, [answer_is_mapping, answer_fields_exact]
)
"""Checked first: the other answer rules read fields, so they run only on the right shape."""

ANSWER_RULES: InvariantSet[AnswerRead] = InvariantSet(
    RESPONSE_INVALID,
    [
        answer_schema_is_status_schema,
        answer_about_this_notification,
        answer_under_expected_capabilities,
        answer_status_known,
        answer_attempts_consistent,
        answer_times_are_times,
        answer_lease_expired_is_bool,
        answer_error_code_syntax,
        answer_lease_iff_leased,
        answer_processed_iff_succeeded,
        answer_error_only_when_waiting_or_failed,
        answer_lease_expired_only_when_leased,
    ],
)
"""The reference's answer check, one named rule per clause. An answer that breaks one
is not trusted: the attempt fails with ``response_invalid``. Whether the record it
produces is valid is the invariants' decision, afterwards."""


def answer_rules_broken(a: AnswerRead) -> list[str]:
    """Names of the answer rules ``a`` breaks: the shape rules first, and alone if broken."""
    return ANSWER_SHAPE.broken(a) or ANSWER_RULES.broken(a)


# --- the notification a caller registers -------------------------------------------------

NOTIFICATION_SCHEMA = "blun.cms-source-terminal-notification.v1"
NOTIFICATION_FIELDS = frozenset(
    {
        "schema", "notification_id", "event_id", "site_id", "plan_id",
        "website_version", "source_sequence", "job_count", "change_sha256",
        "lifecycle_binding_sha256", "terminal_status", "lifecycle_sha256",
    }
)


@invariant
def notification_fields_exact(n: Mapping[Any, Any]) -> bool:
    """The notification has exactly the notification schema's fields, named by plain strings."""
    return all(type(key) is str for key in n) and set(n) == NOTIFICATION_FIELDS


@invariant
def notification_schema_is_notification_schema(n: Mapping[Any, Any]) -> bool:
    """schema is exactly the terminal notification schema."""
    return type(n["schema"]) is str and n["schema"] == NOTIFICATION_SCHEMA


NOTIFICATION_RULES: InvariantSet[Mapping[Any, Any]] = InvariantSet(
    "terminal_processing_monitor.notification_invalid",
    [notification_fields_exact, notification_schema_is_notification_schema],
)
"""The notification's own rules, read on its plain copy; its identity fields then obey the
record's field rules (``token_syntax``, ``terminal_status_known``, ``sha256_syntax``)."""


def notification_rules_broken(n: Mapping[Any, Any]) -> list[str]:
    """Names of the rules ``n`` breaks; on a wrong shape only that (no field is read)."""
    if not notification_fields_exact.holds(n):
        return [notification_fields_exact.name]
    return NOTIFICATION_RULES.broken(n)
