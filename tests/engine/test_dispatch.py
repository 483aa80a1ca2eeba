"""The engine's two fast paths, held to what they replace.

``Lifecycle.select_row`` dispatches over the ``transitions`` machine's compiled table
without going through ``Event.trigger``; it must decide exactly as ``Event.trigger`` does.

Every trigger of the table is tried, with the inputs each move of the lifecycle's
exploration really fires, on every record those moves reach within a few steps from
the exploration's initial records (the shipped lifecycles and the review example):
both dispatches must pick the same row, or refuse with the same code and guard.

``evolver`` builds a transition's new record validating only the changed fields, for
record classes whose validators each judge one value: it must give what
``attrs.evolve`` gives (on the tests' tasks here, on the monitor's record in
tests/engine/test_evolver_on_the_monitor_record.py), and leave any other class to ``attrs.evolve``.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.dispatch import decided, every_lifecycle, firings_asked
from support.tasks import Task, new_task

from lifecycles.invariants._core import FieldRule, FieldRuleViolation, field_rules
from lifecycles.machines._builders import evolver
from lifecycles.machines._core import Lifecycle

DEPTH = 3


@pytest.mark.parametrize("lifecycle", every_lifecycle(), ids=lambda lifecycle: lifecycle.name)
def test_select_row_decides_as_transitions_event_trigger(lifecycle: Lifecycle[Any, Any]) -> None:
    triggers = sorted({row.trigger for row in lifecycle.rows})
    compared = 0
    for current, inputs in firings_asked(lifecycle, DEPTH):
        for trigger in triggers:  # every trigger, with inputs really fired
            fast = decided(lifecycle.select_row, trigger, current, inputs)
            slow = decided(lifecycle.select_row_by_trigger, trigger, current, inputs)
            assert fast == slow, (trigger, current, inputs)
            compared += 1
    assert compared > 100  # the walk really compared something


# --- evolver: attrs.evolve for records whose validators judge one value each --------



FIELDS = [field.name for field in attrs.fields(Task)]
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 25), st.floats(allow_nan=True),
    st.sampled_from(["queued", "running", "failed", "boom", "a" * 64, "e-1", "x y", ""]),
    st.text(max_size=5),
)


def outcome(build: Any) -> Any:
    try:
        return build()
    except FieldRuleViolation as error:
        return ("refused", error.rule, error.field)


@given(changes=st.dictionaries(st.sampled_from(FIELDS), ANY_VALUE, max_size=4))
def test_the_task_evolver_gives_what_attrs_evolve_gives(changes: dict[str, Any]) -> None:
    record = new_task("t-1", now=5.0)
    fast = outcome(lambda: evolver(Task)(record, dict(changes)))
    slow = outcome(lambda: attrs.evolve(record, **changes))
    if isinstance(slow, tuple):  # both refuse; attrs reports the first field in class order
        assert isinstance(fast, tuple) and fast[0] == "refused"
        assert (fast[1], fast[2]) in {
            (rule.name, name) for name, rule in field_rules_of(changes)}
    else:
        assert fast == slow and type(fast) is Task


def field_rules_of(changes: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(name, rule) for name, rule in field_rules(Task) if name in changes]


def test_a_class_with_a_validator_that_reads_other_fields_gets_attrs_evolve() -> None:
    def low_below_high(instance: Any, attribute: Any, value: int) -> None:
        if value > instance.high:
            raise ValueError("low above high")

    @attrs.frozen
    class Range:
        low: int = attrs.field(validator=low_below_high)
        high: int = 0

    with pytest.raises(ValueError, match="low above high"):
        evolver(Range)(Range(1, 5), {"high": 0})


@pytest.mark.parametrize("slots", [True, False])
def test_the_evolver_validates_changed_fields_of_slotted_and_dict_classes(slots: bool) -> None:
    small = FieldRule("small", lambda value: value < 10)

    @attrs.frozen(slots=slots)
    class Pair:
        left: int = attrs.field(validator=small)
        right: int | None = attrs.field(default=None, validator=small.allow_none())

    evolve = evolver(Pair)
    assert evolve(Pair(1, 2), {"right": None}) == Pair(1, None)
    assert evolve(Pair(1), {"left": 3, "right": 4}) == Pair(3, 4)
    with pytest.raises(FieldRuleViolation, match="right breaks small"):
        evolve(Pair(1), {"right": 10})


def test_a_field_rule_with_its_own_call_gets_attrs_evolve() -> None:
    class Strict(FieldRule):
        def __call__(self, instance: object, attribute: Any, value: Any) -> None:
            raise FieldRuleViolation(self.name, attribute.name, value)

    @attrs.frozen
    class Boxed:
        value: int = attrs.field(validator=Strict("never", lambda value: True))

    built = object.__new__(Boxed)
    object.__setattr__(built, "value", 1)
    with pytest.raises(FieldRuleViolation, match="value breaks never"):
        evolver(Boxed)(built, {"value": 2})
