"""A refusal says why in words an author can act on: an ``unless`` guard refuses by
holding, and is named so; when no row of several fires (a gap), every candidate row is
named with the value of each of its guards. The code and the guard named stay as they
were (callers match on them), and the candidates are read only when the message is."""

from __future__ import annotations

import pickle
from enum import StrEnum
from typing import Any

import attrs
import pytest

from lifecycles import InvariantSet, Lifecycle, TransitionRefused, guard


class Door(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    LOCKED = "locked"


@attrs.frozen
class Entry:
    key: str
    status: Door


@guard(refusal_code="doors.no_key")
def has_key(r: Entry, i: dict[str, Any]) -> bool:
    """The caller holds the key."""
    return bool(i.get("key"))


@guard(refusal_code="doors.alarm_on")
def alarm_on(r: Entry, i: dict[str, Any]) -> bool:
    """The alarm is set."""
    return bool(i.get("alarm"))


@guard(refusal_code="doors.night")
def at_night(r: Entry, i: dict[str, Any]) -> bool:
    """It is night."""
    return bool(i.get("night"))


DOORS: Lifecycle[Entry, dict[str, Any]] = Lifecycle(
    module=__name__, name="doors", statuses=Door,
    table=[
        {"trigger": "open", "source": "closed", "dest": "open", "conditions": ["has_key"],
         "unless": ["alarm_on"]},
        {"trigger": "open", "source": "closed", "dest": "locked", "conditions": ["at_night"]},
        {"trigger": "close", "source": "open", "dest": "closed", "unless": ["alarm_on"]},
    ],
    initial=Door.CLOSED, final=[Door.LOCKED], creation="create",
    guards=[has_key, alarm_on, at_night], effects=[], invariants=InvariantSet("doors.invalid", []),
    record_type=Entry, key_field="key", not_allowed_code="doors.not_allowed",
)


def refusal(trigger: str, status: Door, **inputs: Any) -> TransitionRefused:
    with pytest.raises(TransitionRefused) as refused:
        DOORS.fire(trigger, Entry("d", status), inputs)
    return refused.value


def test_an_unless_guard_that_holds_is_named_as_holding() -> None:
    refused = refusal("close", Door.OPEN, alarm=True)
    assert (refused.guard, refused.unless, refused.code) == ("alarm_on", True,
                                                             "doors.alarm_on")
    assert str(refused) == ("close from open: guard alarm_on holds, and the row fires "
                            "unless it does")


def test_a_false_condition_is_named_false() -> None:
    refused = refusal("open", Door.CLOSED, key=False, night=False)
    assert (refused.guard, refused.unless, refused.code) == ("has_key", False, "doors.no_key")
    assert str(refused).startswith("open from closed: guard has_key is false; ")


def test_a_gap_names_every_candidate_row_and_its_guards() -> None:
    refused = refusal("open", Door.CLOSED, key=True, alarm=True, night=False)
    assert refused.guard == "alarm_on" and refused.unless
    assert refused.candidates == (
        ("open [has_key, !alarm_on]", (("has_key", True, True), ("alarm_on", False, True))),
        ("open [at_night]", (("at_night", True, False),)),
    )
    assert str(refused) == (
        "open from closed: guard alarm_on holds, and the row fires unless it does; no row "
        "fires, of 2: open [has_key, !alarm_on]: has_key holds, !alarm_on holds; "
        "open [at_night]: at_night is false")


def test_the_reference_dispatch_refuses_alike() -> None:
    record = Entry("d", Door.CLOSED)
    inputs = {"key": True, "alarm": True}
    with pytest.raises(TransitionRefused) as slow:
        DOORS.select_row_by_trigger("open", record, inputs)
    with pytest.raises(TransitionRefused) as fast:
        DOORS.select_row("open", record, inputs)
    assert str(slow.value) == str(fast.value)
    assert (slow.value.guard, slow.value.unless) == (fast.value.guard, fast.value.unless)


def test_a_status_without_the_trigger_has_no_candidates() -> None:
    refused = refusal("close", Door.CLOSED)
    assert (refused.guard, refused.code, refused.candidates) == (None, "doors.not_allowed", ())
    assert str(refused) == "close from closed: not allowed from this status"


def test_a_refusal_crosses_processes_with_its_message() -> None:
    refused = refusal("open", Door.CLOSED, key=True, alarm=True)
    copy = pickle.loads(pickle.dumps(refused))
    assert (type(copy), copy.code, copy.guard, copy.unless) == (
        TransitionRefused, "doors.alarm_on", "alarm_on", True)
    assert str(copy) == str(refused)
