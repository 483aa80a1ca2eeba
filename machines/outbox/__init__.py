"""The close outbox: deliver each close intent at least once, or set it aside with a reason.

Rules, in prose (the table below is the spec):

* ``enqueue`` of a new identity creates the record in ``pending`` (``Lifecycle.create``).
* ``enqueue`` of an identity already pending or delivered with the very same intent is
  a row that changes nothing; a different intent is refused by ``same_intent`` with
  ``close_outbox.conflict``.
* ``attempt`` durably counts a delivery attempt before the deliver callback runs
  (attempts + 1, last_attempt_at = now, last_error cleared), so delivery is
  at-least-once: a crash after it only causes another attempt.
* Then ``deliver`` moves the record to ``delivered``, or ``fail_delivery`` keeps it
  ``pending`` with a bounded error; both need the attempt recorded first.
* ``quarantine`` sets a pending record that cannot be trusted aside, with its reason.
  Material that is not a record at all (truncated, not JSON, ...) cannot fire a row;
  the store moves it to the same quarantine directory with a reason file.

What the facade cannot ask the table, it asks the named functions beside it (the
auditor page lists them): which row a delivery attempt's outcome fires
(:func:`delivery_outcome`), what becomes of a pending copy whose identity was
delivered (:func:`pending_copy_fate`), whether an identity is refused for its
quarantined material (:func:`identity_quarantined`), and whether a replay was
interrupted (:func:`replay_was_interrupted`). The facade sequences I/O around them.

Time enters as an input (an ISO timestamp with a timezone, or an aware ``datetime``);
nothing here reads a clock.

This package is the outbox's table; its submodule ``inputs`` is the exploration the
checker runs. The app that runs it is :mod:`lifecycles.outbox`; the record is
:mod:`lifecycles.invariants.outbox`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants.outbox import (
    MAX_LAST_ERROR_LENGTH,
    MAX_REASON_LENGTH,
    OUTBOX_INVARIANTS,
    RECORD_INVALID,
    OutboxRecord,
    OutboxStatus,
    attempt_unanswered,
    intent_digest,
    normalise_text,
    timestamp_problem,
)
from lifecycles.machines._audit import FiredBy
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect, guard
from lifecycles.machines._work import Raised, Result, Step

CODE = "close_outbox."
CONFLICT = CODE + "conflict"
NOT_ALLOWED = CODE + "transition_refused"

TABLE: list[dict[str, Any]] = [
    {"trigger": "enqueue", "source": "pending", "dest": "pending",
     "conditions": ["same_intent"]},
    {"trigger": "enqueue", "source": "delivered", "dest": "delivered",
     "conditions": ["same_intent"]},
    {"trigger": "attempt", "source": "pending", "dest": "pending",
     "after": "record_attempt"},
    {"trigger": "deliver", "source": "pending", "dest": "delivered",
     "conditions": ["attempt_recorded"]},
    {"trigger": "fail_delivery", "source": "pending", "dest": "pending",
     "conditions": ["attempt_recorded", "error_described"], "after": "record_delivery_error"},
    {"trigger": "quarantine", "source": "pending", "dest": "quarantined",
     "conditions": ["reason_given"], "after": "record_quarantine_reason"},
]


# --- inputs ---------------------------------------------------------------------


def iso_timestamp(value: object) -> str:
    """An aware ``datetime`` becomes its ISO form; a string must already be one."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        return value.isoformat()
    problem = timestamp_problem(value, "now")
    if problem is not None:
        raise ValueError(problem)
    return str(value)


@attrs.frozen
class OutboxInputs:
    """What one outbox transition reads besides the record: time, and the why."""

    now: str = attrs.field(converter=iso_timestamp)
    intent_digest: str | None = None
    error: str | None = None
    reason: str | None = None


# --- guards ---------------------------------------------------------------------

Record = OutboxRecord
Inputs = OutboxInputs


@guard(refusal_code=CONFLICT)
def same_intent(r: Record, i: Inputs) -> bool:
    """The enqueued intent is byte-for-byte the stored one (equal intent digests)."""
    return i.intent_digest is not None and intent_digest(r.intent()) == i.intent_digest


@guard(refusal_code=CODE + "not_attempted")
def attempt_recorded(r: Record, i: Inputs) -> bool:
    """An attempt was durably counted and not yet answered: attempts >= 1, no last_error."""
    return attempt_unanswered(r)


def replay_was_interrupted(r: Record) -> bool:
    """A pending record read at the start of a replay whose attempt is unanswered: the
    replay that counted it stopped before writing its outcomes (a crash or an
    interrupt), maybe in the middle of writing them, so writers' temporary files may
    be left in the directories it writes (delivered/, quarantine/)."""
    return r.state == OutboxStatus.PENDING and attempt_unanswered(r)


@guard(refusal_code=CODE + "error_missing")
def error_described(r: Record, i: Inputs) -> bool:
    """The failed delivery comes with a non-empty description."""
    return bool(i.error and normalise_text(i.error, MAX_LAST_ERROR_LENGTH))


@guard(refusal_code=CODE + "reason_missing")
def reason_given(r: Record, i: Inputs) -> bool:
    """Quarantine comes with a non-empty reason."""
    return bool(i.reason and normalise_text(i.reason, MAX_REASON_LENGTH))


# --- effects --------------------------------------------------------------------


@effect("attempts", "last_attempt_at", "last_error")
def record_attempt(r: Record, i: Inputs) -> Changes:
    """Count one more attempt at now and clear the previous error."""
    return {"attempts": r.attempts + 1, "last_attempt_at": i.now, "last_error": None}


@effect("last_error")
def record_delivery_error(r: Record, i: Inputs) -> Changes:
    """Keep the failure's description, whitespace-normalised and cut to 1000 characters."""
    return {"last_error": normalise_text(i.error or "", MAX_LAST_ERROR_LENGTH)}


@effect("last_error")
def record_quarantine_reason(r: Record, i: Inputs) -> Changes:
    """Keep the quarantine reason in last_error, normalised and cut to 1000 characters."""
    return {"last_error": normalise_text(i.reason or "", MAX_REASON_LENGTH)}


# --- logic beside the table ---------------------------------------------------------

CONFLICT_REASON = "pending entry conflicts with existing delivered material"


def delivery_outcome(failure: Exception | None, now: str) -> tuple[str, OutboxInputs]:
    """The row a delivery attempt's outcome fires, and its inputs.

    The deliver callback returned (``failure`` is ``None``): ``deliver``. It raised an
    ``Exception``: ``fail_delivery`` with the error ``"<exception class name>: close
    delivery failed"``, never the exception's message, which may hold secrets (the
    reference's text; the effect bounds its length).
    """
    if failure is None:
        return "deliver", OutboxInputs(now)
    error = f"{type(failure).__name__}: close delivery failed"
    return "fail_delivery", OutboxInputs(now, error=error)


def finish_delivery(
    held: OutboxRecord, inputs: OutboxInputs, result: Result
) -> Step[OutboxInputs]:
    """What a replay's delivery attempt fires, once ``deliver`` returned or raised:
    :func:`delivery_outcome` at the attempt's time."""
    failure = result.error if isinstance(result, Raised) else None
    trigger, outcome = delivery_outcome(
        failure if isinstance(failure, Exception) else None, inputs.now)
    return Step(trigger, outcome)


def is_tail_of_a_move(before: OutboxRecord, after: OutboxRecord) -> bool:
    """``after`` is what some row of the table makes of ``before``: another status,
    reached by a row from ``before``'s, and no field changed that the row does not
    write. A copy of ``before`` found beside ``after`` is then the source of a move
    that wrote its destination and was interrupted before it removed its source."""
    changed = {
        field.name for field in attrs.fields(OutboxRecord)
        if getattr(before, field.name) != getattr(after, field.name)
    }
    return before.state != after.state and any(
        row.source == before.state and row.dest == after.state
        and changed <= set(OUTBOX.writes(row))
        for row in OUTBOX.rows
    )


class CopyFate(StrEnum):
    """What replay does with a pending record it listed."""

    REPLAY = "replay"  # attempt its delivery
    DISCARD = "discard"  # drop the copy: it is the tail of an interrupted move
    QUARANTINE = "quarantine"  # fire quarantine with CONFLICT_REASON


def pending_copy_fate(pending: OutboxRecord, found: OutboxRecord | None) -> CopyFate:
    """What becomes of ``pending``, given what a lookup of its identity answers
    (``delivered/`` is searched first; ``None``: what sits there is no record).

    The lookup answers ``pending`` itself: nothing was delivered, replay it. It
    answers a delivered record that :func:`is_tail_of_a_move` of ``pending``: an
    earlier replay delivered it and stopped before removing this copy, discard it.
    Anything else (untrusted material in ``delivered/``, a delivered record that no
    row makes of this one) conflicts: quarantine it with :data:`CONFLICT_REASON`.
    """
    if found is not None and found.state == OutboxStatus.PENDING:
        return CopyFate.REPLAY
    if found is not None and is_tail_of_a_move(pending, found):
        return CopyFate.DISCARD
    return CopyFate.QUARANTINE


def identity_quarantined(found: OutboxRecord | None, material_in_quarantine: bool) -> bool:
    """``enqueue`` refuses an identity with quarantined material, whatever its intent:
    its record was quarantined (no ``enqueue`` row leaves ``quarantined``), or, with no
    record found, the quarantine holds material under its name (which may have been
    its record: enqueueing it afresh could deliver an intent twice)."""
    if found is None:
        return material_in_quarantine
    return found.state == OutboxStatus.QUARANTINED


OUTBOX: Lifecycle[OutboxRecord, OutboxInputs] = Lifecycle(
    module=__name__,
    # Named, not imported: each of these imports this table. Its exploration, its public
    # errors (the app's facade), what the generic tools ask of the app.
    declared_in=["lifecycles.machines.outbox.inputs", "lifecycles.outbox.facade",
                 "lifecycles.outbox.hooks"],
    name="outbox",
    description=(
        "Deliver each close intent at least once through a callback, keep failures "
        "pending with a bounded error, and quarantine what cannot be trusted."
    ),
    statuses=OutboxStatus,
    table=TABLE,
    initial=OutboxStatus.PENDING,
    final=[OutboxStatus.DELIVERED, OutboxStatus.QUARANTINED],
    creation="enqueue",
    guards=[same_intent, attempt_recorded, error_described, reason_given],
    effects=[record_attempt, record_delivery_error, record_quarantine_reason],
    invariants=OUTBOX_INVARIANTS,
    record_type=OutboxRecord,
    key_field="entry_id",
    status_field="state",
    not_allowed_code=NOT_ALLOWED,
    status_meanings={
        "pending": "Enqueued; replay attempts delivery (again after a failure).",
        "delivered": "The deliver callback returned. Final.",
        "quarantined": "Set aside with a reason; never delivered automatically. Final.",
    },
    beside_the_table=[
        delivery_outcome, finish_delivery, pending_copy_fate, is_tail_of_a_move,
        identity_quarantined, replay_was_interrupted,
    ],
)

# Who fires each trigger: the facade is CloseOutbox (lifecycles.outbox); nothing fires
# on a timer, so a pending intent waits for the next replay.
FIRED_BY = FiredBy(OUTBOX, {
    "enqueue": (
        "`CloseOutbox.enqueue(request)`. A new identity creates the record (`pending`); "
        "an identity already `pending` or `delivered` fires the row from its status, "
        "which changes nothing for the same intent and refuses a different one. An identity "
        "with quarantined material is refused before the table is asked "
        "(`identity_quarantined`)."
    ),
    "attempt": (
        "`CloseOutbox.replay(deliver, limit=...)`, for each trusted pending record among "
        "the first `limit` in entry-id order: all written in one batch before the first "
        "`deliver` call."
    ),
    "deliver": "`replay`, when `deliver(request)` returned (`delivery_outcome`).",
    "fail_delivery": (
        "`replay`, when `deliver(request)` raised an `Exception`: the error kept is "
        "the exception's class name, then `: close delivery failed` "
        "(`delivery_outcome`). Any other exception propagates once the outcomes so "
        "far are written; the records not yet answered stay `pending` with their "
        "attempt counted."
    ),
    "quarantine": (
        "`replay`, for a pending record whose identity conflicts with what `delivered/` "
        "holds (`pending_copy_fate`), with the reason `" + CONFLICT_REASON + "`. A "
        "pending file the outbox cannot trust (no record, or one that breaks a rule) "
        "fires no row: the store moves it to `quarantine/` beside a `.error.json` "
        "reason file."
    ),
})

__all__ = [
    "CONFLICT",
    "CONFLICT_REASON",
    "FIRED_BY",
    "NOT_ALLOWED",
    "OUTBOX",
    "RECORD_INVALID",
    "TABLE",
    "CopyFate",
    "OutboxInputs",
    "OutboxRecord",
    "OutboxStatus",
    "delivery_outcome",
    "identity_quarantined",
    "is_tail_of_a_move",
    "iso_timestamp",
    "pending_copy_fate",
    "replay_was_interrupted",
]
