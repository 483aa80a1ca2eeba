"""Generated code that stands for code written rule by rule must decide as it does.

An invariant set asks every rule at once first: one compiled conjunction
(``InvariantSet._all_hold``), the expressed rules inline and the Python ones called in
turn; only a record breaking some rule is asked rule by rule, for the names.

So the conjunction must say "valid" exactly when every rule, asked alone, holds: on
generated records of the tests' tickets (tests/support/rules_lifecycle.py: valid ones in
every status with columns swapped for other records' values, so that many break some
invariant), on a set mixing both kinds of rule, and on rules answering with values that
are merely true or false, or raising.

A store builds the records it reads with generated code too (``Lifecycle.build``): every
field converted, then every field rule checked, in field order, as the class's own
``__init__`` does. On the same generated rows, including hostile values, it builds the
record the class builds, or refuses with the same rule.

The same two checks on the monitor's own rules and rows are in
tests/monitor/test_monitor_invariant_conjunction.py.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.rules_lifecycle import COLUMNS, INVARIANTS, STATE_INVALID, TICKETS, Ticket
from test_rules_in_sql import SQLITE_VALUES, TEMPLATES, mutated, rows_of

from lifecycles.invariants._core import (
    InvariantSet,
    InvariantViolation,
    StepViolation,
    build_record,
    expressed,
    invariant,
    step_invariant,
)
from lifecycles.invariants._expressions import Fields

# Valid records with up to three columns taken from other valid records: every field holds
# its rule, and many such records break an invariant.
SWAPPED = st.lists(
    st.tuples(st.sampled_from(TEMPLATES), st.lists(
        st.tuples(st.sampled_from(COLUMNS), st.sampled_from(TEMPLATES)), max_size=3)),
    min_size=1, max_size=8,
).map(lambda drawn: [
    mutated(base, {column: other[column] for column, other in swaps}, index)
    for index, (base, swaps) in enumerate(drawn)
])


@given(st.one_of(SWAPPED, rows_of(SQLITE_VALUES)))
def test_every_invariant_at_once_is_each_invariant_in_turn(
    rows: list[dict[str, Any]],
) -> None:
    for values in rows:
        try:
            record = build_record(Ticket, values, STATE_INVALID)
        except InvariantViolation:
            continue  # a field breaks its rule: no record to ask
        one_by_one = [rule.name for rule in INVARIANTS if not rule.holds(record)]
        assert bool(INVARIANTS._all_hold(record)) == (not one_by_one)
        assert INVARIANTS.broken(record) == one_by_one


def built(make: Any, values: dict[str, Any]) -> Any:
    try:
        return build_record(make, values, STATE_INVALID)
    except InvariantViolation as error:
        return error.rules


@given(st.one_of(SWAPPED, rows_of(SQLITE_VALUES)))
def test_a_record_read_is_built_as_its_class_builds_it(rows: list[dict[str, Any]]) -> None:
    assert TICKETS.build is not Ticket  # the generated builder, not the class
    for values in rows:
        assert built(TICKETS.build, values) == built(Ticket, values)
        fewer = {name: value for name, value in values.items() if name != "status"}
        assert built(TICKETS.build, fewer) == built(Ticket, fewer) == ("record_shape",)
        more = {**values, "extra": 1}
        assert built(TICKETS.build, more) == built(Ticket, more) == ("record_shape",)


@attrs.frozen
class Tally:
    count: int
    limit: int
    note: Any = None


@expressed
def count_within_limit(r: Fields[Tally]) -> Any:
    """count is at most limit."""
    return r.count <= r.limit


@invariant
def note_is_truthy_or_absent(t: Tally) -> Any:
    """note, when there is one, is truthy (the rule answers with the note itself)."""
    return t.note if t.note is not None else 1


@invariant
def limit_is_not_thirteen(t: Tally) -> bool:
    """limit is not 13; for limit 99 the rule itself raises."""
    if t.limit == 99:
        raise RuntimeError("the rule broke")
    return t.limit != 13


MIXED = InvariantSet("tally.invalid", [count_within_limit, note_is_truthy_or_absent,
                                       limit_is_not_thirteen])


@pytest.mark.parametrize(("tally", "broken"), [
    (Tally(1, 2), []),
    (Tally(1, 2, note="yes"), []),
    (Tally(3, 2), ["count_within_limit"]),
    (Tally(1, 2, note=""), ["note_is_truthy_or_absent"]),
    (Tally(14, 13, note=0), ["count_within_limit", "note_is_truthy_or_absent",
                             "limit_is_not_thirteen"]),
])
def test_a_set_of_expressed_and_python_rules_names_what_each_rule_alone_says(
    tally: Tally, broken: list[str],
) -> None:
    assert MIXED.broken(tally) == broken
    assert bool(MIXED._all_hold(tally)) == (not broken)
    if broken:
        with pytest.raises(InvariantViolation) as raised:
            MIXED.check(tally)
        assert raised.value.rules == tuple(broken) and raised.value.code == "tally.invalid"
    else:
        assert MIXED.check(tally) is tally


@pytest.mark.parametrize("tally", [Tally(1, 99), Tally(100, 99)])
def test_a_rule_that_raises_raises_whether_or_not_another_rule_fails(tally: Tally) -> None:
    with pytest.raises(RuntimeError, match="the rule broke"):
        MIXED.broken(tally)


@step_invariant
def count_never_drops(before: Tally, after: Tally) -> bool:
    """count never decreases."""
    return after.count >= before.count


@step_invariant
def limit_moves_only_when_asked(before: Tally, after: Tally, inputs: Any) -> bool:
    """limit changes only when the inputs allow it."""
    return after.limit == before.limit or bool(inputs)


STEPS = InvariantSet("tally.invalid", [], steps=[count_never_drops, limit_moves_only_when_asked])


@pytest.mark.parametrize(("after", "inputs", "broken"), [
    (Tally(2, 5), False, []),
    (Tally(0, 5), False, ["count_never_drops"]),
    (Tally(2, 6), False, ["limit_moves_only_when_asked"]),
    (Tally(2, 6), True, []),
    (Tally(2, 6), None, []),  # without inputs, the rules reading them are not asked
    (Tally(0, 6), None, ["count_never_drops"]),
    (Tally(0, 6), False, ["count_never_drops", "limit_moves_only_when_asked"]),
])
def test_step_rules_at_once_are_each_step_rule_in_turn(
    after: Tally, inputs: Any, broken: list[str],
) -> None:
    before = Tally(1, 5)
    assert STEPS.broken_steps(before, after, inputs) == broken
    if broken:
        with pytest.raises(StepViolation):
            STEPS.check_step(before, after, inputs)
    else:
        assert STEPS.check_step(before, after, inputs) is after
