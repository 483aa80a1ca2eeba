"""A record type with converters or ``__attrs_post_init__``: a row builds the new record
as ``attrs.evolve`` would.

``Lifecycle.apply_row`` builds the new record through ``evolver`` (machines/_builders.py), a
generated copy that converts and validates only the changed fields. A plain converter
runs there on each written value; a record class whose construction can do more (an
``attrs.Converter`` that reads the instance or the field, an ``__attrs_post_init__``)
is built by ``attrs.evolve`` itself, so its converter and its post-init run exactly as
when the record is built by hand. Each test fires a real row and compares the result
with ``attrs.evolve`` of the same changes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs
import pytest

from lifecycles.invariants._core import FieldRule, InvariantSet, InvariantViolation, invariant
from lifecycles.machines._builders import evolver
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect


class Phase(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


below_ten = FieldRule("below_ten", lambda value: isinstance(value, int) and value < 10)


def to_int(value: Any) -> int:
    return int(value)


def tagged(value: Any, instance: Any, field: attrs.Attribute[Any]) -> str:
    """A converter reading the instance under construction and the field."""
    return f"{field.name}:{str(value).strip()}"


@attrs.frozen
class Converted:
    """A plain converter and one that takes the instance and the field."""

    key: str
    phase: Phase = attrs.field(converter=Phase)
    count: int = attrs.field(default=0, converter=to_int, validator=below_ten)
    label: str = attrs.field(
        default="", converter=attrs.Converter(tagged, takes_self=True, takes_field=True))


POST_INITS: list[tuple[str, int]] = []


@attrs.frozen
class Derived:
    """A post-init that derives a field and checks the record as a whole."""

    key: str
    phase: Phase = attrs.field(converter=Phase)
    count: int = 0
    limit: int = 5
    doubled: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        POST_INITS.append((self.key, self.count))
        if self.count > self.limit:
            raise ValueError(f"count {self.count} over limit {self.limit}")
        object.__setattr__(self, "doubled", self.count * 2)


@attrs.frozen(slots=True)
class OnlyPostInit:
    """Every validator a named field rule (the generated path would take it), but with
    a post-init: it must still be built by attrs.evolve."""

    key: str
    phase: Phase = attrs.field(converter=Phase)
    count: int = attrs.field(default=0, validator=below_ten)

    def __attrs_post_init__(self) -> None:
        POST_INITS.append((self.key, -self.count))


@effect("count", "label")
def close_with(r: Any, i: dict[str, Any]) -> Changes:
    """Write the given count and label as given (text, for the converters to convert)."""
    return {"count": i["count"], "label": i.get("label", "")}


@effect("count")
def close_counting(r: Any, i: dict[str, Any]) -> Changes:
    """Write the given count."""
    return {"count": i["count"]}


@invariant
def anything(r: Any) -> bool:
    """Every record is valid (the record class decides)."""
    return True


def lifecycle(record_type: type, after: str) -> Lifecycle[Any, dict[str, Any]]:
    return Lifecycle(
        module=__name__,
        name=f"hooks_{record_type.__name__.lower()}",
        statuses=Phase,
        table=[{"trigger": "close", "source": "open", "dest": "closed", "after": after}],
        initial=Phase.OPEN,
        final=[Phase.CLOSED],
        creation="create",
        guards=[],
        effects=[close_with if after == "close_with" else close_counting],
        invariants=InvariantSet("hooks.invalid", [anything]),
        record_type=record_type,
        key_field="key",
        status_field="phase",
        not_allowed_code="hooks.not_allowed",
    )


CONVERTED = lifecycle(Converted, "close_with")
DERIVED = lifecycle(Derived, "close_counting")
ONLY_POST_INIT = lifecycle(OnlyPostInit, "close_counting")


def test_a_row_runs_every_converter_of_the_fields_it_writes() -> None:
    record = Converted("k", "open", "1", " a ")
    assert (record.count, record.label) == (1, "label:a")
    closed = CONVERTED.fire("close", record, {"count": "7", "label": "  b "})
    assert closed == attrs.evolve(record, phase="closed", count="7", label="  b ")
    assert (closed.phase, closed.count, closed.label) == (Phase.CLOSED, 7, "label:b")
    assert type(closed.count) is int and type(closed.phase) is Phase
    assert record == Converted("k", "open", 1, "a")  # untouched (its label is re-tagged)


def test_a_converted_value_that_breaks_a_field_rule_is_refused_naming_it() -> None:
    record = Converted("k", "open")
    with pytest.raises(InvariantViolation) as broken:
        CONVERTED.fire("close", record, {"count": "12"})
    assert (broken.value.code, broken.value.rules) == ("hooks.invalid", ("below_ten",))


def test_a_plain_converter_runs_on_the_generated_path_too() -> None:
    @attrs.frozen(slots=True)
    class Plain:
        key: str
        phase: Phase = attrs.field(converter=Phase)
        count: int = attrs.field(default=0, converter=to_int, validator=below_ten)

    evolve = evolver(Plain)
    made = evolve(Plain("k", "open"), {"count": "3", "phase": "closed"})
    assert made == Plain("k", Phase.CLOSED, 3)
    assert type(made.count) is int and made.phase is Phase.CLOSED


def test_a_row_runs_the_post_init_which_derives_its_fields() -> None:
    record = Derived("k", "open", count=1)
    assert record.doubled == 2
    POST_INITS.clear()
    closed = DERIVED.fire("close", record, {"count": 4})
    assert POST_INITS == [("k", 4)]
    assert closed == attrs.evolve(record, phase="closed", count=4)
    assert (closed.phase, closed.count, closed.doubled) == (Phase.CLOSED, 4, 8)


def test_a_post_init_refusing_the_new_record_refuses_the_row() -> None:
    record = Derived("k", "open", count=1)
    with pytest.raises(ValueError, match="count 6 over limit 5"):
        DERIVED.fire("close", record, {"count": 6})
    assert (record.phase, record.count, record.doubled) == (Phase.OPEN, 1, 2)


def test_a_post_init_runs_even_when_every_validator_is_a_field_rule() -> None:
    record = OnlyPostInit("k", "open")
    POST_INITS.clear()
    closed = ONLY_POST_INIT.fire("close", record, {"count": 3})
    assert POST_INITS == [("k", -3)]
    assert closed == OnlyPostInit("k", Phase.CLOSED, 3)
    with pytest.raises(InvariantViolation) as broken:
        ONLY_POST_INIT.fire("close", record, {"count": 10})
    assert broken.value.rules == ("below_ten",)
