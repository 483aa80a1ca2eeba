"""The close outbox's record and every rule the reference enforces on it.

A close intent (``run_id``, ``transaction_id``, ``action``, ``result``, ``error``,
``reopen``) is stored as one canonical-JSON object of exactly thirteen keys, byte
for byte what the reference writes. Each check the reference makes, on a request or
on a stored record, is here once, as a named field rule (one field, checked when a
record is built) or a named invariant (several fields, checked before every write
and on every read). The request validation of :mod:`lifecycles.outbox` runs the
very same rules, in the reference's order, and raises the reference's messages
(:data:`RULE_MESSAGES` / :func:`describe`), which callers may match on.
"""

from __future__ import annotations

import hashlib
import math
import reprlib
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import (
    FieldRule,
    FieldRuleViolation,
    InvariantSet,
    canonical_json,
    invariant,
    matches,
    non_negative_integer,
    one_of,
    step_invariant,
)

RECORD_INVALID = "close_outbox.record_invalid"
OUTBOX_VERSION = "1"

MAX_PAYLOAD_BYTES = 65536
MAX_RECORD_FILE_BYTES = MAX_PAYLOAD_BYTES + 8192
MAX_STRING_LENGTH = 4000
MAX_COLLECTION_ITEMS = 200
MAX_JSON_DEPTH = 8
MAX_FIELD_NAME_LENGTH = 200
MAX_INTEGER = 2**63 - 1
MAX_ERROR_LENGTH = 2000
MAX_LAST_ERROR_LENGTH = 1000
MAX_REASON_LENGTH = 1000
IDENTIFIER_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}"
ENTRY_ID_PATTERN = r"[0-9a-f]{32}"


class OutboxStatus(StrEnum):
    """Where a close intent stands; each status is one directory of the store."""

    PENDING = "pending"
    DELIVERED = "delivered"
    QUARANTINED = "quarantined"


INTENT_KEYS = (
    "version", "entry_id", "run_id", "transaction_id", "action", "result", "error", "reopen",
)
RECORD_KEYS = frozenset(
    (*INTENT_KEYS, "state", "created_at", "attempts", "last_attempt_at", "last_error")
)


# --- canonical forms ---------------------------------------------------------


def entry_id_for(run_id: str, transaction_id: str) -> str:
    """The entry id of an identity: sha256(run_id NUL transaction_id), first 32 hex digits."""
    return hashlib.sha256(f"{run_id}\0{transaction_id}".encode()).hexdigest()[:32]


def normalise_text(value: str, limit: int) -> str:
    """Collapse every run of whitespace to one space, trim, and cut to ``limit`` characters."""
    return " ".join(value.split())[:limit]


def timestamp_problem(value: object, field: str) -> str | None:
    """Why ``value`` is not a timezone-aware ISO timestamp string (``None`` when it is)."""
    if not isinstance(value, str):
        return f"{field} must be a timestamp string"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return f"{field} is not an ISO timestamp"
    if parsed.tzinfo is None:
        return f"{field} must include a timezone"
    return None


class JsonRuleViolation(ValueError):
    """A result value breaks one of the JSON bounds; ``rule`` names which."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def bounded_json(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` within every JSON bound, or :class:`JsonRuleViolation`.

    The checks run in the reference's order, so the first broken bound is the one
    the reference would report.
    """
    if depth > MAX_JSON_DEPTH:
        raise JsonRuleViolation("json_depth_bound", "result exceeds the JSON depth bound")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH:
            raise JsonRuleViolation(
                "json_string_length_bound",
                f"result string exceeds {MAX_STRING_LENGTH} characters",
            )
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INTEGER:
            raise JsonRuleViolation(
                "json_integer_range", "result integer exceeds signed 64-bit range"
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JsonRuleViolation("json_floats_finite", "result floats must be finite")
        return value
    if isinstance(value, list):
        if len(value) > MAX_COLLECTION_ITEMS:
            raise JsonRuleViolation(
                "json_array_size_bound", "result array exceeds the item bound"
            )
        return [bounded_json(item, depth + 1) for item in value]
    if isinstance(value, dict):
        if len(value) > MAX_COLLECTION_ITEMS:
            raise JsonRuleViolation(
                "json_object_size_bound", "result object exceeds the field bound"
            )
        copied: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key or len(key) > MAX_FIELD_NAME_LENGTH:
                raise JsonRuleViolation(
                    "json_field_name_bound",
                    "result field names must be non-empty strings of at most "
                    f"{MAX_FIELD_NAME_LENGTH} characters",
                )
            copied[key] = bounded_json(item, depth + 1)
        return copied
    raise JsonRuleViolation(
        "json_type_supported", f"result contains unsupported JSON type: {type(value).__name__}"
    )


# --- field rules ---------------------------------------------------------------

version_supported = one_of("version_supported", {OUTBOX_VERSION})
run_id_syntax = matches("run_id_syntax", IDENTIFIER_PATTERN)
transaction_id_syntax = matches("transaction_id_syntax", IDENTIFIER_PATTERN)
action_known = one_of("action_known", {"complete", "fail"})
result_is_object = FieldRule("result_is_object", lambda v: isinstance(v, dict),
                             meaning="a JSON object (a mapping of text keys)")
error_is_text = FieldRule("error_is_text", lambda v: isinstance(v, str), meaning="a string")
error_length_bound = FieldRule(
    "error_length_bound", lambda v: isinstance(v, str) and len(v) <= MAX_ERROR_LENGTH,
    meaning=f"at most {MAX_ERROR_LENGTH} characters",
)
error_text_normalised = FieldRule(
    "error_text_normalised",
    lambda v: isinstance(v, str) and v == normalise_text(v, MAX_ERROR_LENGTH),
    meaning="normalised: every run of whitespace one space, no space at either end",
)
reopen_is_boolean = FieldRule("reopen_is_boolean", lambda v: isinstance(v, bool),
                              meaning="true or false")
entry_id_syntax = matches("entry_id_syntax", ENTRY_ID_PATTERN)
status_declared = one_of("status_declared", set(OutboxStatus))
attempts_non_negative = non_negative_integer("attempts_non_negative")
timestamp_timezone_aware = FieldRule(
    "timestamp_timezone_aware", lambda v: timestamp_problem(v, "timestamp") is None,
    meaning="an ISO 8601 timestamp string with a time zone",
)
last_error_is_text = FieldRule("last_error_is_text", lambda v: isinstance(v, str),
                               meaning="a string")
last_error_bound = FieldRule(
    "last_error_bound", lambda v: isinstance(v, str) and len(v) <= MAX_LAST_ERROR_LENGTH,
    meaning=f"at most {MAX_LAST_ERROR_LENGTH} characters",
)

@attrs.frozen(repr=False)
class JsonBounds:
    """The result's JSON bounds as one validator that names the bound it finds broken."""

    def __call__(self, instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        try:
            bounded_json(value)
        except JsonRuleViolation as error:
            raise FieldRuleViolation(error.rule, attribute.name, value) from error

    def __repr__(self) -> str:
        return "<field rule json_bounds>"


json_bounds = JsonBounds()


def _status(value: object) -> object:
    """Stored statuses are strings; a declared one becomes the enum, anything else fails."""
    if isinstance(value, str) and value in OutboxStatus.__members__.values():
        return OutboxStatus(value)
    return value


@attrs.frozen(slots=True)
class OutboxRecord:
    """One stored close intent: the reference's thirteen keys, nothing more.

    Fields are declared in the order the reference checks them, so the first rule a
    damaged record breaks is the one the reference would report.
    """

    version: str = attrs.field(validator=version_supported)
    run_id: str = attrs.field(validator=run_id_syntax)
    transaction_id: str = attrs.field(validator=transaction_id_syntax)
    action: str = attrs.field(validator=action_known)
    result: dict[str, Any] = attrs.field(validator=[result_is_object, json_bounds])
    error: str = attrs.field(validator=[error_is_text, error_length_bound, error_text_normalised])
    reopen: bool = attrs.field(validator=reopen_is_boolean)
    entry_id: str = attrs.field(validator=entry_id_syntax)
    state: OutboxStatus = attrs.field(converter=_status, validator=status_declared)
    attempts: int = attrs.field(validator=attempts_non_negative)
    created_at: str = attrs.field(validator=timestamp_timezone_aware)
    last_attempt_at: str | None = attrs.field(validator=timestamp_timezone_aware.allow_none())
    last_error: str | None = attrs.field(
        validator=[last_error_is_text.allow_none(), last_error_bound.allow_none()]
    )

    def intent(self) -> dict[str, Any]:
        """The eight intent keys, as the reference's ``CloseRequest.intent()``."""
        return {name: getattr(self, name) for name in INTENT_KEYS}

    def values(self) -> dict[str, Any]:
        """All thirteen keys with the status as a plain string, ready for JSON."""
        values = {field.name: getattr(self, field.name) for field in attrs.fields(OutboxRecord)}
        values["state"] = str(self.state)
        return values


def intent_digest(intent: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an intent: equal digests mean identical intents."""
    return hashlib.sha256(canonical_json(dict(intent))).hexdigest()


def record_bytes(record: OutboxRecord) -> bytes:
    """The exact bytes of the record's file: canonical JSON and a trailing newline."""
    return canonical_json(record.values()) + b"\n"


# --- invariants ----------------------------------------------------------------


@invariant
def entry_id_matches_identity(r: OutboxRecord) -> bool:
    """entry_id is sha256(run_id NUL transaction_id)[:32]."""
    return r.entry_id == entry_id_for(r.run_id, r.transaction_id)


@invariant
def complete_carries_no_error_or_reopen(r: OutboxRecord) -> bool:
    """A complete intent has an empty error and reopen false."""
    return r.action != "complete" or (r.error == "" and r.reopen is False)


@invariant
def fail_carries_error(r: OutboxRecord) -> bool:
    """A fail intent carries a non-empty error."""
    return r.action != "fail" or r.error != ""


@invariant
def intent_within_payload_bound(r: OutboxRecord) -> bool:
    """The canonical JSON of the intent is at most 65536 bytes."""
    try:
        return len(canonical_json(r.intent())) <= MAX_PAYLOAD_BYTES
    except (TypeError, ValueError):
        return False


@invariant
def quarantined_has_reason(r: OutboxRecord) -> bool:
    """A quarantined record says why in last_error; a file that is no record, in .error.json.

    A quarantined file that could not be decoded into a record holds no last_error: its
    reason is only in the ``<name>.error.json`` file written beside it.
    """
    return r.state != OutboxStatus.QUARANTINED or bool(r.last_error)


def attempt_unanswered(r: OutboxRecord) -> bool:
    """An attempt was durably counted and not yet answered: attempts >= 1, no last_error."""
    return r.attempts >= 1 and r.last_attempt_at is not None and r.last_error is None


@step_invariant
def enqueue_again_changes_nothing(before: OutboxRecord, after: OutboxRecord, i: Any) -> bool:
    """Enqueuing again changes nothing, and only the very same intent may be enqueued again."""
    digest = i.intent_digest
    return digest is None or (after == before and intent_digest(before.intent()) == digest)


@step_invariant
def delivered_only_after_an_attempt(before: OutboxRecord, after: OutboxRecord) -> bool:
    """A record is delivered only after an attempt was counted and not yet answered."""
    return (after.state != OutboxStatus.DELIVERED or before.state == OutboxStatus.DELIVERED
            or attempt_unanswered(before))


@step_invariant
def failure_answers_an_attempt(before: OutboxRecord, after: OutboxRecord, i: Any) -> bool:
    """A failed delivery answers a counted attempt, keeps the intent pending, says why."""
    return i.error is None or (attempt_unanswered(before)
                               and after.state == OutboxStatus.PENDING and bool(after.last_error))


@step_invariant
def attempts_never_decrease(before: OutboxRecord, after: OutboxRecord) -> bool:
    """attempts never decreases."""
    return after.attempts >= before.attempts


@step_invariant
def intent_never_changes(before: OutboxRecord, after: OutboxRecord) -> bool:
    """A record's intent (and so a delivered record's) never changes once stored."""
    return after.intent() == before.intent()


OUTBOX_INVARIANTS: InvariantSet[OutboxRecord] = InvariantSet(
    RECORD_INVALID,
    [
        complete_carries_no_error_or_reopen,
        fail_carries_error,
        intent_within_payload_bound,
        entry_id_matches_identity,
        quarantined_has_reason,
    ],
    steps=[attempts_never_decrease, intent_never_changes, enqueue_again_changes_nothing,
           delivered_only_after_an_attempt, failure_answers_an_attempt],
)


@attrs.frozen
class PlacedRecord:
    """A record together with the status of the directory its file sits in."""

    directory_status: str
    record: OutboxRecord


@invariant
def status_matches_directory(placed: PlacedRecord) -> bool:
    """A record's state is the status of the directory its file sits in."""
    return str(placed.record.state) == placed.directory_status


PLACEMENT_INVARIANTS: InvariantSet[PlacedRecord] = InvariantSet(
    RECORD_INVALID, [status_matches_directory]
)

# Stored-file rules the files store checks before a record can even be built; named
# here so that every rule of the outbox has one place and one message.
STORED_FILE_RULES = (
    "record_size_bound",
    "record_is_regular_file",
    "record_single_link",
    "record_decodes",
    "record_is_object",
    "record_keys_exact",
    "file_name_matches_key",
)


# --- the reference's messages, by rule -----------------------------------------

RULE_MESSAGES: Mapping[str, str] = {
    "version_supported": "unsupported close request version {value}",  # value: shown()
    "run_id_syntax": "run_id must be a bounded, path-safe identifier",
    "transaction_id_syntax": "transaction_id must be a bounded, path-safe identifier",
    "action_known": "action must be 'complete' or 'fail'",
    "result_is_object": "result must be an object",
    "error_is_text": "error must be a string",
    "error_length_bound": f"error exceeds {MAX_ERROR_LENGTH} characters",
    "error_text_normalised": "error text is not whitespace-normalised",
    "reopen_is_boolean": "reopen must be a boolean",
    "complete_carries_no_error_or_reopen": "complete requests cannot carry error or reopen",
    "fail_carries_error": "fail requests require a bounded error",
    "intent_within_payload_bound": f"close request exceeds {MAX_PAYLOAD_BYTES} encoded bytes",
    "entry_id_syntax": "entry_id does not match run/transaction identity",
    "entry_id_matches_identity": "entry_id does not match run/transaction identity",
    "status_declared": "invalid outbox state",
    "attempts_non_negative": "attempts must be a non-negative integer",
    "last_error_is_text": "last_error must be a string or null",
    "last_error_bound": "last_error exceeds the durable size bound",
    "quarantined_has_reason": "quarantined record has no reason",
    "record_size_bound": "outbox record exceeds the durable size bound",
    "record_is_regular_file": "outbox record is not a regular file",
    "record_single_link": "outbox record has another hard link (another name shares its file)",
    "record_is_object": "outbox record must be an object",
    "file_name_matches_key": "outbox record file name does not match its entry_id",
    # lifecycles' own: a request changed (object.__setattr__) after it was built
    "request_as_given": "close request field {value} differs from what its constructor "
                        "keeps (changed after the request was built)",
}

_CONTAINERS = (list, tuple, dict, set, frozenset)


def _nested_deeper_than(value: object, levels: int, path: frozenset[int] = frozenset()) -> bool:
    """Whether ``repr(value)`` would descend more than ``levels`` containers deep (a
    container already on the way down is printed as ``[...]``, as ``repr`` does)."""
    if not isinstance(value, _CONTAINERS) or id(value) in path:
        return False
    if levels == 0:
        return True
    items: Any = (*value.keys(), *value.values()) if isinstance(value, dict) else value
    below = path | {id(value)}
    return any(_nested_deeper_than(item, levels - 1, below) for item in items)


_DEPTH_BOUNDED = reprlib.Repr()
_DEPTH_BOUNDED.maxlevel = MAX_JSON_DEPTH
for _limit in ("maxdict", "maxlist", "maxtuple", "maxset", "maxfrozenset", "maxdeque",
               "maxarray", "maxstring", "maxlong", "maxother"):
    setattr(_DEPTH_BOUNDED, _limit, 1 << 62)  # only the depth is bounded


def shown(value: object) -> str:
    """``value`` as a message shows it: its ``repr``, as the reference writes it, except
    that a value nested deeper than the JSON depth bound is shown down to that bound
    (``[[...]]``), since ``repr`` recurses once per level and a few thousand levels raise
    ``RecursionError``; and a value whose ``repr`` raises is shown by its type."""
    try:
        if _nested_deeper_than(value, MAX_JSON_DEPTH):
            return _DEPTH_BOUNDED.repr(value)
        return repr(value)
    except Exception:  # a repr of the caller's that raises: the message must not
        return f"<{type(value).__name__} object>"


def describe(rule: str, field: str | None = None, value: object = None) -> str:
    """The reference's message for a broken rule (the message callers may match on)."""
    if rule in ("timestamp_timezone_aware",):
        return timestamp_problem(value, field or "timestamp") or f"{field} is invalid"
    if rule.startswith("json_"):
        try:
            bounded_json(value)
        except JsonRuleViolation as error:
            return error.message
    template = RULE_MESSAGES.get(rule)
    if template is None:
        return f"outbox record breaks {rule}"
    return template.format(value=shown(value))


__all__ = [
    "ENTRY_ID_PATTERN",
    "IDENTIFIER_PATTERN",
    "MAX_JSON_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_RECORD_FILE_BYTES",
    "OUTBOX_INVARIANTS",
    "OUTBOX_VERSION",
    "PLACEMENT_INVARIANTS",
    "RECORD_INVALID",
    "RECORD_KEYS",
    "RULE_MESSAGES",
    "STORED_FILE_RULES",
    "OutboxRecord",
    "OutboxStatus",
    "PlacedRecord",
    "attempt_unanswered",
    "bounded_json",
    "describe",
    "entry_id_for",
    "intent_digest",
    "normalise_text",
    "record_bytes",
    "shown",
    "timestamp_problem",
]
