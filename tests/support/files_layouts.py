"""Lifecycles and layouts made for the framework's tests of the files store.

- :data:`PARCELS`, with :data:`PARCELS_LAYOUT`: a lifecycle without a lease stored in a
  layout of its own, not one directory per status: ``pending/`` and ``delivered/``
  (searched first), and a quarantine status that lives in ``quarantine/`` with its
  reason written to the reason file. Its status field is ``state``, not ``status``. A
  parcel is attempted (counted before the delivery is made), then delivered, or keeps
  the attempt's error and waits; a pending parcel may be set aside with a reason. It has
  the shape of a layout a facade declares (the outbox's is one), so the store's layout,
  quarantine, shadowed copies and interrupted moves are tested without an app.
- :data:`TASKS_RUNNING_FIRST`: the leased tasks of :mod:`support.tasks` in one
  directory per status, with ``running/`` searched before ``queued/``: a copy of a task
  left in ``queued/`` by an interrupted claim is the shadowed one, as the default
  layout's later directories are.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import (
    FieldRule,
    InvariantSet,
    finite_time,
    invariant,
    matches,
    non_negative_integer,
    one_of,
)
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect, guard
from lifecycles.stores._files import FilesLayout
from support.tasks import TASKS

CODE = "parcels."
MAX_TEXT = 1000


class ParcelState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    QUARANTINED = "quarantined"


def normalise(text: str) -> str:
    """Every run of whitespace one space, no space at either end, cut to MAX_TEXT."""
    return " ".join(text.split())[:MAX_TEXT]


def _state(value: object) -> object:
    return ParcelState(value) if isinstance(value, str) and value in set(ParcelState) else value


text = FieldRule("text_normalised",
                 lambda v: isinstance(v, str) and bool(v) and v == normalise(v),
                 meaning="non-empty, whitespace-normalised, at most 1000 characters")


@attrs.frozen
class Parcel:
    parcel_id: str = attrs.field(validator=matches("parcel_id_syntax", r"[A-Za-z0-9_.:-]{1,128}"))
    state: ParcelState = attrs.field(converter=_state,
                                     validator=one_of("state_declared", set(ParcelState)))
    attempts: int = attrs.field(validator=non_negative_integer("attempts_non_negative"))
    last_attempt_at: float | None = attrs.field(validator=finite_time("time_finite").allow_none())
    last_error: str | None = attrs.field(validator=text.allow_none())


@attrs.frozen
class ParcelInputs:
    now: float
    error: str | None = None
    reason: str | None = None


def new_parcel(parcel_id: str) -> Parcel:
    """A pending parcel, never attempted."""
    return Parcel(parcel_id, ParcelState.PENDING, 0, None, None)


R, I = Parcel, ParcelInputs  # noqa: E741 - short names keep the guards on one line


@guard(CODE + "not_attempted")
def attempt_recorded(r: R, i: I) -> bool:
    """An attempt was counted and not yet answered: attempts >= 1, no last_error."""
    return r.attempts >= 1 and r.last_error is None


@guard(CODE + "error_missing")
def error_described(r: R, i: I) -> bool:
    """The failed delivery comes with a description."""
    return bool(i.error and normalise(i.error))


@guard(CODE + "reason_missing")
def reason_given(r: R, i: I) -> bool:
    """Setting aside comes with a reason."""
    return bool(i.reason and normalise(i.reason))


@effect("attempts", "last_attempt_at", "last_error")
def record_attempt(r: R, i: I) -> Changes:
    """Count one more attempt at now and clear the previous error."""
    return {"attempts": r.attempts + 1, "last_attempt_at": i.now, "last_error": None}


@effect("last_error")
def record_error(r: R, i: I) -> Changes:
    """Keep the failure's description, normalised."""
    return {"last_error": normalise(i.error or "")}


@effect("last_error")
def record_reason(r: R, i: I) -> Changes:
    """Keep the reason for setting the parcel aside, normalised, in last_error."""
    return {"last_error": normalise(i.reason or "")}


@invariant
def delivered_after_an_attempt(r: Parcel) -> bool:
    """A delivered parcel was attempted and carries no error."""
    return r.state != ParcelState.DELIVERED or (r.attempts >= 1 and r.last_error is None)


@invariant
def quarantined_with_a_reason(r: Parcel) -> bool:
    """A quarantined parcel carries the reason it was set aside for."""
    return r.state != ParcelState.QUARANTINED or r.last_error is not None


@invariant
def attempt_time_iff_attempted(r: Parcel) -> bool:
    """last_attempt_at is set exactly when an attempt was counted."""
    return (r.attempts == 0) == (r.last_attempt_at is None)


TABLE: list[dict[str, Any]] = [
    {"trigger": "attempt", "source": "pending", "dest": "pending", "after": "record_attempt"},
    {"trigger": "deliver", "source": "pending", "dest": "delivered",
     "conditions": ["attempt_recorded"]},
    {"trigger": "fail_delivery", "source": "pending", "dest": "pending",
     "conditions": ["attempt_recorded", "error_described"], "after": "record_error"},
    {"trigger": "quarantine", "source": "pending", "dest": "quarantined",
     "conditions": ["reason_given"], "after": "record_reason"},
]

PARCELS: Lifecycle[Parcel, ParcelInputs] = Lifecycle(
    module=__name__,
    name="parcels",
    description="A parcel attempted, then delivered, or set aside with a reason.",
    statuses=ParcelState, table=TABLE, initial=ParcelState.PENDING,
    final=[ParcelState.DELIVERED, ParcelState.QUARANTINED], creation="send",
    guards=[attempt_recorded, error_described, reason_given],
    effects=[record_attempt, record_error, record_reason],
    invariants=InvariantSet(CODE + "state_invalid", [
        delivered_after_an_attempt, quarantined_with_a_reason, attempt_time_iff_attempted]),
    record_type=Parcel, key_field="parcel_id", status_field="state",
    not_allowed_code=CODE + "not_allowed",
)

PARCELS_LAYOUT = FilesLayout(
    directories={"pending": "pending", "delivered": "delivered", "quarantined": "quarantine"},
    search_order=("delivered", "pending"),
    quarantine_directory="quarantine",
    quarantine_status="quarantined",
    reason_field="last_error",
    lock_name=".lock",
    max_file_bytes=64 * 1024,
    noun="parcel",
)

TASKS_RUNNING_FIRST = FilesLayout.for_lifecycle(
    TASKS, search_order=("succeeded", "failed", "running", "queued"))
