"""Field rules: every single-field clause of the reference's ``_validated_row``.

Each case takes a valid record, puts one bad value in one field, and shows that the
record cannot be built (``FieldRuleViolation`` naming the rule and field), that a
store reading the row through ``build_record`` gets ``InvariantViolation`` with code
``terminal_processing_monitor.state_invalid`` naming that rule, and that the
reference refuses the same row.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from support.monitor import LEASED, PENDING, RETRY_WAIT, T0, held, plain_row, reference_accepts

from lifecycles.invariants import (
    FieldRule,
    FieldRuleViolation,
    InvariantViolation,
    build_record,
    field_rules,
    finite_time,
    integer_between,
    is_integer,
    is_time,
    matches,
    non_negative_integer,
    one_of,
)
from lifecycles.invariants.monitor import (
    COLUMNS,
    STATE_INVALID,
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
)
from lifecycles.machines.monitor import MONITOR, ReceiverAnswer

WATCHING = MONITOR.fire("observe_progress", LEASED, held(T0 + 1, answer=ReceiverAnswer(
    processing_status=ReceiverStatus.LEASED, attempts=1, max_attempts=3,
    next_attempt_at=T0, lease_expires_at=T0 + 60, lease_expired=True,
    last_error_code=None, processed_at=None,
)))
SUCCEEDED = MONITOR.fire("observe_success", LEASED, held(T0 + 1, answer=ReceiverAnswer(
    processing_status=ReceiverStatus.SUCCEEDED, attempts=1, max_attempts=3,
    next_attempt_at=T0, lease_expires_at=None, lease_expired=False,
    last_error_code=None, processed_at=T0,
)))
FAILED = MONITOR.fire("observe_failure", LEASED, held(T0 + 1, answer=ReceiverAnswer(
    processing_status=ReceiverStatus.FAILED, attempts=3, max_attempts=3,
    next_attempt_at=T0, lease_expires_at=None, lease_expired=False,
    last_error_code="receiver.gave_up", processed_at=None,
)))

BAD_TOKENS: list[Any] = ["", "a b", "A" * 257, "é", "a\n", "a/b", 5, b"evt-1", None, True]
BAD_TIMES: list[Any] = [-1, -1e-9, math.nan, math.inf, -math.inf, True, False, "1", None]
BAD_OPTIONAL_TIMES = [value for value in BAD_TIMES if value is not None]
BAD_ERROR_CODES: list[Any] = ["A", "1a", "", "a" * 129, "a b", "a\n", "_a", 5, True]


def cases(
    base: MonitorRecord, field: str, values: list[Any], rule: str
) -> list[tuple[MonitorRecord, str, Any, str]]:
    return [(base, field, value, rule) for value in values]


FIELD_CLAUSES = [
    # event_id, notification_id, site_id are tokens
    *cases(PENDING, "event_id", BAD_TOKENS, "token_syntax"),
    *cases(WATCHING, "notification_id", BAD_TOKENS, "token_syntax"),
    *cases(FAILED, "site_id", BAD_TOKENS, "token_syntax"),
    # terminal_status is one of the reference's terminal statuses
    *cases(PENDING, "terminal_status", ["Published", "", "running", None, 1, b"published"],
           "terminal_status_known"),
    # notification_sha256 is lowercase hex SHA-256
    *cases(SUCCEEDED, "notification_sha256",
           ["A" * 64, "0" * 63, "0" * 65, "g" * 64, "", None, 5], "sha256_syntax"),
    # status is one of the six statuses
    *cases(PENDING, "status", ["Pending", "", "unknown", "watched", None, 0, b"pending"],
           "status_declared"),
    # poll_attempts, failures, max_failures are integers (not bools) within bounds
    *cases(PENDING, "poll_attempts", [-1, True, False, 1.0, "1", None], "count_non_negative"),
    *cases(PENDING, "failures", [-1, True, 0.0, "0", None], "count_non_negative"),
    *cases(RETRY_WAIT, "max_failures", [0, -1, 21, True, 5.0, "5", None],
           "max_failures_bounds"),
    # next_poll_at, created_at, updated_at are finite non-negative times
    *cases(PENDING, "next_poll_at", BAD_TIMES, "time_finite_non_negative"),
    *cases(WATCHING, "created_at", BAD_TIMES, "time_finite_non_negative"),
    *cases(SUCCEEDED, "updated_at", BAD_TIMES, "time_finite_non_negative"),
    # last_error_code has the error-code syntax
    *cases(RETRY_WAIT, "last_error_code", BAD_ERROR_CODES, "error_code_syntax"),
    # receiver_status is one of the receiver's five statuses
    *cases(WATCHING, "receiver_status", ["watching", "", "Leased", 1, b"leased"],
           "receiver_status_declared"),
    # with a receiver status: attempts are integers, next attempt a time, flag 0/1
    *cases(WATCHING, "receiver_attempts", [True, 1.0, "1"], "integer_type"),
    *cases(SUCCEEDED, "receiver_max_attempts", [True, 3.0, "3"], "integer_type"),
    *cases(WATCHING, "receiver_next_attempt_at", BAD_OPTIONAL_TIMES,
           "time_finite_non_negative"),
    *cases(WATCHING, "receiver_lease_expired", [2, -1, 0.5, "1", "yes"],
           "lease_expired_flag"),
    # receiver_lease_expires_at and receiver_processed_at: times, checked on every row
    *cases(WATCHING, "receiver_lease_expires_at", BAD_OPTIONAL_TIMES,
           "time_finite_non_negative"),
    *cases(SUCCEEDED, "receiver_processed_at", BAD_OPTIONAL_TIMES,
           "time_finite_non_negative"),
    *cases(PENDING, "receiver_processed_at", [-1, math.nan], "time_finite_non_negative"),
    # receiver_error_code has the error-code syntax
    *cases(FAILED, "receiver_error_code", BAD_ERROR_CODES, "error_code_syntax"),
    # lease fields outside a lease: the reference refuses them as present; lifecycles
    # refuses a malformed one first for its form
    *cases(PENDING, "lease_owner", ["", "a b", 5], "token_syntax"),
    *cases(RETRY_WAIT, "lease_token", ["", 7], "token_syntax"),
    *cases(SUCCEEDED, "lease_expires_at", [-1, math.nan, "soon"], "time_finite_non_negative"),
]


@pytest.mark.parametrize(
    ("base", "field", "value", "rule"),
    FIELD_CLAUSES,
    ids=[f"{c[1]}={c[2]!r:.20}" for c in FIELD_CLAUSES],
)
def test_a_bad_field_is_refused_naming_its_rule(
    base: MonitorRecord, field: str, value: Any, rule: str
) -> None:
    assert reference_accepts(plain_row(base))
    row = {**plain_row(base), field: value}
    with pytest.raises(FieldRuleViolation) as refused:
        attrs.evolve(base, **{field: value})
    assert (refused.value.rule, refused.value.field) == (rule, field)
    assert field in str(refused.value) and rule in str(refused.value)
    with pytest.raises(FieldRuleViolation) as refused:
        MonitorRecord(**row)
    assert (refused.value.rule, refused.value.field) == (rule, field)
    with pytest.raises(InvariantViolation) as invalid:
        build_record(MonitorRecord, row, STATE_INVALID)
    assert invalid.value.code == STATE_INVALID
    assert invalid.value.rules == (rule,)
    assert not reference_accepts(row)


def test_every_field_has_a_rule_and_every_rule_a_case() -> None:
    listed = field_rules(MonitorRecord)
    assert [field for field, _ in listed] == list(COLUMNS)
    assert len(COLUMNS) == 24
    assert {rule.name for _, rule in listed} == {case[3] for case in FIELD_CLAUSES}
    assert {case[1] for case in FIELD_CLAUSES} == set(COLUMNS)


BOUNDARIES = [
    (PENDING, "event_id", "A" * 256),
    (PENDING, "site_id", "a"),
    (PENDING, "notification_id", "Az09_.:-"),
    (RETRY_WAIT, "last_error_code", "a" * 128),
    (RETRY_WAIT, "last_error_code", "a"),
    (FAILED, "receiver_error_code", "z.-_9"),
    (PENDING, "max_failures", 1),
    (PENDING, "max_failures", 20),
    (PENDING, "next_poll_at", 0),
    (PENDING, "next_poll_at", -0.0),
    (PENDING, "next_poll_at", 2**63 - 1),
    (PENDING, "next_poll_at", 1e308),
    (SUCCEEDED, "updated_at", 2_000),
    (PENDING, "poll_attempts", 2**63 - 1),
    (WATCHING, "receiver_lease_expired", 0),
    (WATCHING, "receiver_lease_expired", 1),
    (WATCHING, "receiver_max_attempts", 20),
    (WATCHING, "receiver_attempts", 0),
    (SUCCEEDED, "receiver_processed_at", 0.0),
    (FAILED, "terminal_status", "superseded"),
]


@pytest.mark.parametrize(("base", "field", "value"), BOUNDARIES,
                         ids=[f"{c[1]}={c[2]!r:.20}" for c in BOUNDARIES])
def test_boundary_values_are_accepted_by_both(
    base: MonitorRecord, field: str, value: Any
) -> None:
    record = attrs.evolve(base, **{field: value})
    assert MONITOR.check(record) is record
    assert getattr(record, field) == value
    assert reference_accepts(plain_row(record))


def test_a_stored_status_string_becomes_the_enum() -> None:
    record = MonitorRecord(**{**plain_row(PENDING), "status": "pending"})
    assert record.status is MonitorStatus.PENDING
    assert record == PENDING


def test_bad_time_that_does_not_fit_a_float_is_refused_not_crashed() -> None:
    # 10**400 is an int no float (and no SQLite column) can hold; math.isfinite raises
    # OverflowError on it. A field rule must refuse it with its name, not crash.
    huge = 10**400
    assert is_time(huge) is False
    with pytest.raises(FieldRuleViolation) as refused:
        attrs.evolve(PENDING, next_poll_at=huge)
    assert refused.value.rule == "time_finite_non_negative"
    with pytest.raises(InvariantViolation) as invalid:
        build_record(MonitorRecord, {**plain_row(PENDING), "created_at": huge}, STATE_INVALID)
    assert invalid.value.rules == ("time_finite_non_negative",)


@pytest.mark.parametrize(
    "values",
    [
        {name: value for name, value in plain_row(PENDING).items() if name != "site_id"},
        {**plain_row(PENDING), "colour": "blue"},
        {},
    ],
    ids=["missing column", "extra column", "empty"],
)
def test_a_row_of_the_wrong_shape_is_refused_as_record_shape(values: dict[str, Any]) -> None:
    with pytest.raises(InvariantViolation) as invalid:
        build_record(MonitorRecord, values, STATE_INVALID)
    assert invalid.value.code == STATE_INVALID
    assert invalid.value.rules == ("record_shape",)


# --- the FieldRule building blocks ----------------------------------------------------


def test_field_rules_are_named_objects_with_a_readable_repr() -> None:
    token = matches("token_syntax", r"[a-z]+")
    assert repr(token) == "<field rule token_syntax>"
    assert repr(token.allow_none()) == "<field rule token_syntax (optional)>"
    assert token.allow_none().name == token.name
    assert not token.optional and token.allow_none().optional


def test_matches_is_a_full_match_on_strings_only() -> None:
    rule = matches("word", r"[a-z]{1,3}")
    assert rule.check("abc")
    assert not rule.check("abcd")
    assert not rule.check("abc\n")
    assert not rule.check(" abc")
    assert not rule.check(b"abc")
    assert not rule.check(None)


def test_one_of_refuses_unhashable_values_without_crashing() -> None:
    rule = one_of("colour_known", {"red", "blue"})
    assert rule.check("red")
    assert not rule.check(["red"])
    assert not rule.check({"red": 1})
    assert not rule.check(None)


def test_integer_rules_refuse_bools_and_floats() -> None:
    bounded = integer_between("bounded", 1, 20)
    assert [bounded.check(v) for v in (0, 1, 20, 21)] == [False, True, True, False]
    assert not bounded.check(True)
    assert not bounded.check(1.0)
    counting = non_negative_integer("counting")
    assert counting.check(0) and counting.check(2**70)
    assert not counting.check(-1) and not counting.check(False)
    assert is_integer(3) and not is_integer(True) and not is_integer(3.0)


def test_finite_time_refuses_what_the_reference_refuses() -> None:
    rule = finite_time("time")
    for good in (0, 0.0, -0.0, 1, 1.5, 1e308, 2**63):
        assert rule.check(good), good
    for bad in (-1, -1e-300, math.nan, math.inf, -math.inf, True, False, "1", None, b"1"):
        assert not rule.check(bad), bad


def test_a_validator_raises_a_structured_error() -> None:
    @attrs.frozen
    class Item:
        name: str = attrs.field(validator=matches("name_syntax", r"[a-z]+"))
        size: int | None = attrs.field(
            default=None, validator=integer_between("size_bounds", 1, 9).allow_none()
        )

    assert Item("ok").size is None
    assert Item("ok", 3).size == 3
    with pytest.raises(FieldRuleViolation) as refused:
        Item("Not OK")
    assert (refused.value.rule, refused.value.field) == ("name_syntax", "name")
    assert isinstance(refused.value, ValueError)
    with pytest.raises(FieldRuleViolation) as refused:
        Item("ok", 10)
    assert (refused.value.rule, refused.value.field) == ("size_bounds", "size")
    assert [(field, rule.name) for field, rule in field_rules(Item)] == [
        ("name", "name_syntax"), ("size", "size_bounds")
    ]
    assert isinstance(field_rules(Item)[1][1], FieldRule)
