"""The engine's ``evolver`` on the monitor's record: validating only the changed fields, it
gives what ``attrs.evolve`` gives (the evolver itself is tested in
tests/engine/test_dispatch.py)."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st
from support.monitor import registered as monitor_record

from lifecycles.invariants import FieldRuleViolation, field_rules
from lifecycles.invariants.monitor import COLUMNS, MonitorRecord
from lifecycles.machines._builders import evolver

ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 25), st.floats(allow_nan=True),
    st.sampled_from(["pending", "leased", "failed", "published", "a" * 64, "e-1", "x y", ""]),
    st.text(max_size=5),
)


def outcome(build: Any) -> Any:
    try:
        return build()
    except FieldRuleViolation as error:
        return ("refused", error.rule, error.field)


@given(changes=st.dictionaries(st.sampled_from(COLUMNS), ANY_VALUE, max_size=4))
def test_the_monitor_evolver_gives_what_attrs_evolve_gives(changes: dict[str, Any]) -> None:
    record = monitor_record()
    fast = outcome(lambda: evolver(MonitorRecord)(record, dict(changes)))
    slow = outcome(lambda: attrs.evolve(record, **changes))
    if isinstance(slow, tuple):  # both refuse; attrs reports the first field in class order
        assert isinstance(fast, tuple) and fast[0] == "refused"
        assert (fast[1], fast[2]) in {
            (rule.name, name) for name, rule in field_rules_of(changes)}
    else:
        assert fast == slow and type(fast) is MonitorRecord


def field_rules_of(changes: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(name, rule) for name, rule in field_rules(MonitorRecord) if name in changes]
