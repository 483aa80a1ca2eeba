"""The monitor's invariants at once are each of them in turn, and its generated builder
builds what its record class builds, on generated monitor rows.

The conjunction and the builder are tested on the tests' tickets, whose record carries
every kind of rule (tests/stores/test_invariant_conjunction.py); here they are held on the
rules the monitor declares, on rows like those the reference writes
(tests/stores/test_rules_in_sql_on_the_monitor_schema.py generates them).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_rules_in_sql_on_the_monitor_schema import (
    COLUMNS,
    SQLITE_VALUES,
    TEMPLATES,
    mutated,
    rows_of,
)

from lifecycles.invariants import InvariantViolation, build_record
from lifecycles.invariants.monitor import MONITOR_INVARIANTS, STATE_INVALID, MonitorRecord
from lifecycles.machines.monitor import MONITOR

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
def test_every_monitor_invariant_at_once_is_each_invariant_in_turn(
    rows: list[dict[str, Any]],
) -> None:
    for values in rows:
        try:
            record = build_record(MonitorRecord, values, STATE_INVALID)
        except InvariantViolation:
            continue  # a field breaks its rule: no record to ask
        one_by_one = [rule.name for rule in MONITOR_INVARIANTS if not rule.holds(record)]
        assert bool(MONITOR_INVARIANTS._all_hold(record)) == (not one_by_one)
        assert MONITOR_INVARIANTS.broken(record) == one_by_one


def built(make: Any, values: dict[str, Any]) -> Any:
    try:
        return build_record(make, values, STATE_INVALID)
    except InvariantViolation as error:
        return error.rules


@given(st.one_of(SWAPPED, rows_of(SQLITE_VALUES)))
def test_a_record_read_is_built_as_its_class_builds_it(rows: list[dict[str, Any]]) -> None:
    assert MONITOR.build is not MonitorRecord  # the generated builder, not the class
    for values in rows:
        assert built(MONITOR.build, values) == built(MonitorRecord, values)
        fewer = {name: value for name, value in values.items() if name != "status"}
        assert built(MONITOR.build, fewer) == built(MonitorRecord, fewer) == ("record_shape",)
        more = {**values, "extra": 1}
        assert built(MONITOR.build, more) == built(MonitorRecord, more) == ("record_shape",)
