"""The monitor's cross-field invariants against the reference's ``_validated_row``.

For each cross-field clause of the reference, a record valid in some status (made by
firing real transitions) is changed in that one respect: the invariant set names
exactly that rule with the public code ``terminal_processing_monitor.state_invalid``,
and the reference refuses the very same row. Then a differential property test: on
generated rows, lifecycles (field rules + invariants) accepts exactly what the
reference accepts, except for the divergences documented in ``DIVERGENCES``.

The single-field clauses (syntax, types, bounds, times) are in ``test_field_rules.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from support.monitor import (
    LEASED,
    PENDING,
    RETRY_WAIT,
    T0,
    TOKEN,
    WORKER,
    held,
    plain_row,
    reference_accepts,
    reference_monitor,
)

from lifecycles.invariants import InvariantViolation, build_record, field_rules
from lifecycles.invariants.monitor import (
    COLUMNS,
    MONITOR_INVARIANTS,
    STATE_INVALID,
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
)
from lifecycles.machines.monitor import MONITOR, MonitorInputs, ReceiverAnswer


def lifecycles_verdict(row: Mapping[str, Any]) -> tuple[bool, tuple[str, ...]]:
    """(accepted, rules named) by the field rules and then every invariant."""
    try:
        record = build_record(MonitorRecord, row, STATE_INVALID)
    except InvariantViolation as refused:
        assert refused.code == STATE_INVALID
        return False, refused.rules
    broken = tuple(MONITOR_INVARIANTS.broken(record))
    return not broken, broken


# --- valid records in every status, by real transitions --------------------------


def answer(status: ReceiverStatus) -> ReceiverAnswer:
    waiting = status in (ReceiverStatus.RETRY_WAIT, ReceiverStatus.FAILED)
    return ReceiverAnswer(
        processing_status=status, attempts=2, max_attempts=5, next_attempt_at=T0 + 30,
        lease_expires_at=T0 + 60 if status == ReceiverStatus.LEASED else None,
        lease_expired=status == ReceiverStatus.LEASED,
        last_error_code="receiver.busy" if waiting else None,
        processed_at=T0 if status == ReceiverStatus.SUCCEEDED else None,
    )


def observed(status: ReceiverStatus) -> MonitorRecord:
    trigger = {ReceiverStatus.SUCCEEDED: "observe_success",
               ReceiverStatus.FAILED: "observe_failure"}.get(status, "observe_progress")
    return MONITOR.fire(trigger, LEASED, held(T0 + 1, answer=answer(status)))


WATCHING_PENDING = observed(ReceiverStatus.PENDING)
WATCHING_LEASED = observed(ReceiverStatus.LEASED)
WATCHING_RETRY = observed(ReceiverStatus.RETRY_WAIT)
SUCCEEDED = observed(ReceiverStatus.SUCCEEDED)
FAILED_REMOTE = observed(ReceiverStatus.FAILED)
FAILED_LOCAL = MONITOR.fire("fail_attempt", LEASED, held(T0 + 1, error_code="reader.broken"))
EXPIRED = MONITOR.fire("expire_lease", LEASED, MonitorInputs(now=T0 + 600))
LEASED_AGAIN = MONITOR.fire("claim", WATCHING_RETRY, held(T0 + 31))
# An item that spends its failures: retried once, then failed at max_failures = 2.
_TWICE = attrs.evolve(PENDING, max_failures=2)
_RETRIED = MONITOR.fire(
    "fail_attempt", MONITOR.fire("claim", _TWICE, held(T0)),
    held(T0 + 1, error_code="reader.timeout", retryable=True),
)
RETRIED_LEASED = MONITOR.fire("claim", _RETRIED, held(T0 + 10))
EXHAUSTED = MONITOR.fire(
    "fail_attempt", RETRIED_LEASED, held(T0 + 11, error_code="reader.timeout", retryable=True)
)

VALID = {
    "pending": PENDING,
    "leased": LEASED,
    "leased_after_watching": LEASED_AGAIN,
    "watching_receiver_pending": WATCHING_PENDING,
    "watching_receiver_leased": WATCHING_LEASED,
    "watching_receiver_retry_wait": WATCHING_RETRY,
    "retry_wait": RETRY_WAIT,
    "retry_wait_lease_expired": EXPIRED,
    "succeeded": SUCCEEDED,
    "failed_remote": FAILED_REMOTE,
    "failed_local": FAILED_LOCAL,
    "retry_wait_then_leased": RETRIED_LEASED,
    "failed_exhausted": EXHAUSTED,
}


@pytest.mark.parametrize("name", VALID)
def test_records_made_by_real_transitions_are_valid_for_both(name: str) -> None:
    record = VALID[name]
    assert MONITOR_INVARIANTS.broken(record) == []
    assert lifecycles_verdict(plain_row(record)) == (True, ())
    assert reference_accepts(plain_row(record))


def test_the_valid_records_cover_every_status() -> None:
    assert {record.status for record in VALID.values()} == set(MonitorStatus)


# --- every cross-field clause, broken alone ----------------------------------------


@attrs.frozen
class Break:
    """A valid record, changed in one respect, and the rule that must say so."""

    rule: str
    base: MonitorRecord
    changes: Mapping[str, Any]


BREAKS: dict[str, Break] = {
    # 0 <= failures <= max_failures
    "failures_over_max": Break(
        "failures_within_max", FAILED_LOCAL, {"failures": 6, "poll_attempts": 6}),
    "failures_over_max_one": Break(
        "failures_within_max", RETRY_WAIT, {"max_failures": 1, "failures": 2,
                                            "poll_attempts": 2}),
    # poll_attempts >= failures
    "fewer_polls_than_failures": Break("polls_cover_failures", RETRY_WAIT, {"poll_attempts": 0}),
    "fewer_polls_when_watching": Break(
        "polls_cover_failures", WATCHING_PENDING, {"failures": 2}),
    # leased == all lease fields set; not leased => none set
    "leased_without_token": Break("lease_fields_iff_leased", LEASED, {"lease_token": None}),
    "leased_without_owner": Break("lease_fields_iff_leased", LEASED, {"lease_owner": None}),
    "leased_without_expiry": Break(
        "lease_fields_iff_leased", LEASED, {"lease_expires_at": None}),
    "pending_with_owner": Break("lease_fields_iff_leased", PENDING, {"lease_owner": WORKER}),
    "watching_with_token": Break(
        "lease_fields_iff_leased", WATCHING_PENDING, {"lease_token": TOKEN}),
    "succeeded_with_expiry": Break(
        "lease_fields_iff_leased", SUCCEEDED, {"lease_expires_at": T0}),
    # last_error_code present exactly in retry_wait and failed
    "retry_wait_without_error": Break(
        "error_code_iff_waiting_or_failed", RETRY_WAIT, {"last_error_code": None}),
    "pending_with_error": Break(
        "error_code_iff_waiting_or_failed", PENDING, {"last_error_code": "reader.timeout"}),
    "leased_with_error": Break(
        "error_code_iff_waiting_or_failed", LEASED, {"last_error_code": "reader.timeout"}),
    "watching_with_error": Break(
        "error_code_iff_waiting_or_failed", WATCHING_PENDING, {"last_error_code": "x"}),
    "succeeded_with_error": Break(
        "error_code_iff_waiting_or_failed", SUCCEEDED, {"last_error_code": "x"}),
    # a receiver status comes with its whole, bounded bundle
    "receiver_without_attempts": Break(
        "receiver_status_has_bundle", WATCHING_PENDING, {"receiver_attempts": None}),
    "receiver_without_max_attempts": Break(
        "receiver_status_has_bundle", WATCHING_PENDING,
        {"receiver_max_attempts": None}),
    "receiver_without_next_attempt": Break(
        "receiver_status_has_bundle", WATCHING_RETRY,
        {"receiver_next_attempt_at": None}),
    "receiver_without_lease_flag": Break(
        "receiver_status_has_bundle", SUCCEEDED, {"receiver_lease_expired": None}),
    "receiver_attempts_over_max": Break(
        "receiver_status_has_bundle", WATCHING_PENDING, {"receiver_attempts": 6}),
    "receiver_attempts_negative": Break(
        "receiver_status_has_bundle", WATCHING_PENDING, {"receiver_attempts": -1}),
    "receiver_max_attempts_over_20": Break(
        "receiver_status_has_bundle", FAILED_REMOTE, {"receiver_max_attempts": 21}),
    "receiver_max_attempts_zero": Break(
        "receiver_status_has_bundle", WATCHING_PENDING,
        {"receiver_attempts": 0, "receiver_max_attempts": 0}),
    # receiver lease expiry exactly when the receiver reports leased
    "receiver_leased_without_expiry": Break(
        "receiver_lease_iff_receiver_leased", WATCHING_LEASED,
        {"receiver_lease_expires_at": None, "receiver_lease_expired": 0}),
    "receiver_pending_with_expiry": Break(
        "receiver_lease_iff_receiver_leased", WATCHING_PENDING,
        {"receiver_lease_expires_at": T0}),
    # receiver error code exactly when the receiver reports retry_wait or failed
    "receiver_retry_wait_without_error": Break(  # the reference's known defect writes this
        "receiver_error_iff_receiver_waiting_or_failed", WATCHING_RETRY,
        {"receiver_error_code": None}),
    "receiver_failed_without_error": Break(
        "receiver_error_iff_receiver_waiting_or_failed", FAILED_REMOTE,
        {"receiver_error_code": None}),
    "receiver_pending_with_error": Break(
        "receiver_error_iff_receiver_waiting_or_failed", WATCHING_PENDING,
        {"receiver_error_code": "receiver.busy"}),
    # receiver processed_at exactly when the receiver reports succeeded
    "receiver_succeeded_without_processed_at": Break(
        "receiver_processed_iff_receiver_succeeded", SUCCEEDED,
        {"receiver_processed_at": None}),
    "receiver_pending_with_processed_at": Break(
        "receiver_processed_iff_receiver_succeeded", WATCHING_PENDING,
        {"receiver_processed_at": T0}),
    # receiver lease_expired = 1 only when the receiver reports leased
    "receiver_lease_expired_while_pending": Break(
        "receiver_lease_expired_only_when_leased", WATCHING_PENDING,
        {"receiver_lease_expired": 1}),
    "receiver_lease_expired_while_failed": Break(
        "receiver_lease_expired_only_when_leased", FAILED_REMOTE, {"receiver_lease_expired": 1}),
    # status succeeded exactly when the receiver reports succeeded
    "succeeded_without_receiver_success": Break(
        "succeeded_iff_receiver_succeeded", SUCCEEDED,
        {"receiver_status": "pending", "receiver_processed_at": None}),
    "failed_with_receiver_success": Break(
        "succeeded_iff_receiver_succeeded", FAILED_REMOTE,
        {"receiver_status": "succeeded", "receiver_error_code": None,
         "receiver_processed_at": T0}),
    "retry_wait_with_receiver_success": Break(
        "succeeded_iff_receiver_succeeded", EXPIRED,
        {"receiver_status": "succeeded", "receiver_attempts": 1, "receiver_max_attempts": 1,
         "receiver_next_attempt_at": T0, "receiver_lease_expired": 0,
         "receiver_processed_at": T0}),
    # watching only while the receiver is unfinished
    "watching_receiver_failed": Break(
        "watching_means_receiver_unfinished", WATCHING_RETRY, {"receiver_status": "failed"}),
    "watching_without_receiver": Break(
        "watching_means_receiver_unfinished", WATCHING_PENDING,
        {name: None for name in COLUMNS if name.startswith("receiver_")}),
    # updated_at >= created_at
    "updated_before_created": Break(
        "updated_not_before_created", SUCCEEDED, {"updated_at": T0 - 0.001}),
    "updated_before_created_pending": Break(
        "updated_not_before_created", PENDING, {"created_at": T0 + 1}),
}


@pytest.mark.parametrize("case", BREAKS)
def test_each_clause_broken_alone_is_refused_naming_its_rule(case: str) -> None:
    spec = BREAKS[case]
    assert MONITOR_INVARIANTS.broken(spec.base) == []
    assert reference_accepts(plain_row(spec.base))
    # Field rules pass: only the cross-field rule is broken.
    broken = attrs.evolve(spec.base, **spec.changes)
    before = plain_row(broken)
    with pytest.raises(InvariantViolation) as refused:
        MONITOR.check(broken)
    assert refused.value.rules == (spec.rule,)
    assert refused.value.code == STATE_INVALID
    assert lifecycles_verdict(before) == (False, (spec.rule,))
    assert not reference_accepts(before)
    assert plain_row(broken) == before


def test_failed_without_error_code_breaks_two_rules_that_cannot_be_separated() -> None:
    # The reference states this clause twice: (status in retry_wait/failed) == error
    # present, and status failed => error present. The second is implied by the first,
    # so no record breaks it alone; lifecycles keeps both names, as the reference does.
    for base in (FAILED_LOCAL, FAILED_REMOTE, EXPIRED):
        broken = attrs.evolve(base, status=MonitorStatus.FAILED, last_error_code=None)
        with pytest.raises(InvariantViolation) as refused:
            MONITOR.check(broken)
        assert refused.value.rules == (
            "error_code_iff_waiting_or_failed", "failed_has_error_code"
        )
        assert not reference_accepts(plain_row(broken))


def test_every_invariant_is_named_documented_and_broken_by_some_case() -> None:
    names = [rule.name for rule in MONITOR_INVARIANTS]
    covered = {spec.rule for spec in BREAKS.values()} | {"failed_has_error_code"}
    assert set(names) == covered
    assert len(names) == len(set(names))
    for rule in MONITOR_INVARIANTS:
        assert rule.meaning and "\n" not in rule.meaning
        assert rule.meaning == (rule.holds.__doc__ or "").strip().splitlines()[0]


def test_every_broken_rule_is_named_not_only_the_first() -> None:
    broken = attrs.evolve(
        WATCHING_PENDING, lease_token=TOKEN, updated_at=T0 - 1, receiver_processed_at=T0
    )
    with pytest.raises(InvariantViolation) as refused:
        MONITOR.check(broken)
    assert set(refused.value.rules) == {
        "lease_fields_iff_leased",
        "receiver_processed_iff_receiver_succeeded",
        "updated_not_before_created",
    }
    assert all(rule in str(refused.value) for rule in refused.value.rules)


# --- the differential property test --------------------------------------------------

VALID_TOKENS = ["a", "evt-1", "A" * 256, "Z9_.:-"]
VALID_SHAS = ["0" * 64, "a" * 64, "0123456789abcdef" * 4]
VALID_ERRORS = ["a", "a" * 128, "terminal_processing_monitor.lease_expired", "x.y-z_0"]
VALID_TIMES: list[Any] = [0, 0.0, -0.0, 1, 1.5, T0, 2**53]
TERMINAL = sorted(
    ["cancelled", "deleted", "deletion_failed", "localization_failed",
     "publication_blocked", "publication_failed", "published", "superseded"]
)
# Anything, in any column: boundaries and wrong types as SQLite (or a caller) could hold.
WILD: list[Any] = [
    None, 0, 1, -1, 20, 21, 2**63 - 1, -(2**63), True, False, 0.0, 1.0, 0.5, -0.5, -1e-9,
    math.nan, math.inf, -math.inf, "", " ", "a", "A" * 257, "bad token", "é", "a\n",
    "pending", "leased", "watching", "retry_wait", "succeeded", "failed", "published",
    "Published", "0" * 64, "A" * 64, "0" * 63, "x.y", "Bad.Code", "1a", b"bytes", "1",
]


@st.composite
def valid_rows(draw: st.DrawFn) -> dict[str, Any]:
    """A row both sides should accept, written from the reference's rules."""

    def pick(values: list[Any]) -> Any:
        return draw(st.sampled_from(values))

    status = pick([s.value for s in MonitorStatus])
    max_failures = draw(st.integers(1, 20))
    failures = draw(st.integers(0, max_failures))
    created = pick(VALID_TIMES)
    leased = status == "leased"
    if status == "succeeded":
        receiver = "succeeded"
    elif status == "watching":
        receiver = pick(["pending", "leased", "retry_wait"])
    else:
        receiver = pick([None, "pending", "leased", "retry_wait", "failed"])
    row: dict[str, Any] = {
        "event_id": pick(VALID_TOKENS), "notification_id": pick(VALID_TOKENS),
        "site_id": pick(VALID_TOKENS), "terminal_status": pick(TERMINAL),
        "notification_sha256": pick(VALID_SHAS), "status": status,
        "poll_attempts": failures + draw(st.integers(0, 3)), "failures": failures,
        "max_failures": max_failures, "next_poll_at": pick(VALID_TIMES),
        "lease_owner": pick(VALID_TOKENS) if leased else None,
        "lease_token": pick(VALID_TOKENS) if leased else None,
        "lease_expires_at": pick(VALID_TIMES) if leased else None,
        "last_error_code": pick(VALID_ERRORS) if status in ("retry_wait", "failed") else None,
        "receiver_status": receiver,
        "created_at": created,
        "updated_at": created + pick([0, 0.5, 1, 1_000]),
    }
    if receiver is None:
        row.update({name: None for name in COLUMNS if name.startswith("receiver_")})
    else:
        maximum = draw(st.integers(1, 20))
        row.update({
            "receiver_attempts": draw(st.integers(0, maximum)),
            "receiver_max_attempts": maximum,
            "receiver_next_attempt_at": pick(VALID_TIMES),
            "receiver_lease_expires_at": pick(VALID_TIMES) if receiver == "leased" else None,
            "receiver_lease_expired": pick([0, 1]) if receiver == "leased" else 0,
            "receiver_error_code":
                pick(VALID_ERRORS) if receiver in ("retry_wait", "failed") else None,
            "receiver_processed_at": pick(VALID_TIMES) if receiver == "succeeded" else None,
        })
    assert set(row) == set(COLUMNS)
    return {name: row[name] for name in COLUMNS}


COUNTS = ("poll_attempts", "failures", "max_failures", "receiver_attempts",
          "receiver_max_attempts")


def domain(column: str) -> list[Any]:
    """Well-typed values for ``column``: they pass its field rule, not the cross-field ones."""
    if column in ("event_id", "notification_id", "site_id", "lease_owner", "lease_token"):
        return VALID_TOKENS
    if column in COUNTS:
        return [-1, 0, 1, 2, 5, 19, 20, 21]
    if column.endswith("_at"):
        return [*VALID_TIMES, T0 - 1, T0 + 1]
    by_column: dict[str, list[Any]] = {
        "terminal_status": TERMINAL,
        "notification_sha256": VALID_SHAS,
        "status": [s.value for s in MonitorStatus],
        "receiver_status": [s.value for s in ReceiverStatus],
        "last_error_code": VALID_ERRORS,
        "receiver_error_code": VALID_ERRORS,
        "receiver_lease_expired": [0, 1],
    }
    return by_column[column]


@st.composite
def mutated_rows(draw: st.DrawFn) -> dict[str, Any]:
    """A valid row with up to four columns replaced: emptied, well-typed but inconsistent
    with the others, or a boundary / wrong-typed value."""
    row = draw(valid_rows())
    for _ in range(draw(st.integers(0, 4))):
        column = draw(st.sampled_from(COLUMNS))
        row[column] = draw(st.one_of(
            st.none(),
            st.sampled_from(domain(column)),
            st.floats(0, 1e6) if column.endswith("_at") else st.integers(-1, 22),
            st.sampled_from(WILD),
            st.floats(allow_nan=True, allow_infinity=True),
        ))
    return row


# The documented divergences: fields the reference never looks at in some context,
# where lifecycles' field rules still demand a well-formed value (a record with a
# malformed field cannot exist at all). Each maps a context to the fields concerned
# and a value the reference is indifferent to there.
LEASE_REPAIR: dict[str, Any] = {"lease_owner": WORKER, "lease_token": TOKEN,
                                "lease_expires_at": T0}
RECEIVER_BUNDLE = ("receiver_attempts", "receiver_max_attempts", "receiver_next_attempt_at",
                   "receiver_lease_expired")


def _field_rule_holds(name: str, value: Any) -> bool:
    rules = [rule for field, rule in field_rules(MonitorRecord) if field == name]
    assert rules, name
    for rule in rules:
        if value is None and rule.optional:
            continue
        try:
            if not rule.check(value):
                return False
        except (TypeError, ValueError, OverflowError):
            return False
    return True


def without_documented_divergences(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with the fields only lifecycles checks, in their contexts, made well-formed.

    1. While ``status`` is ``leased`` the reference checks only that lease_owner,
       lease_token and lease_expires_at are present; lifecycles also demands token
       syntax for the owner and token and a finite non-negative expiry.
    2. While ``receiver_status`` is None the reference ignores receiver_attempts,
       receiver_max_attempts, receiver_next_attempt_at and (unless it equals 1)
       receiver_lease_expired; lifecycles demands their types (integer, time, 0/1).
    """
    repaired = dict(row)
    if row["status"] == "leased":
        for name, good in LEASE_REPAIR.items():
            if row[name] is not None and not _field_rule_holds(name, row[name]):
                repaired[name] = good
    if row["receiver_status"] is None:
        for name in RECEIVER_BUNDLE:
            if not _field_rule_holds(name, row[name]):
                repaired[name] = None
    return repaired


@settings(max_examples=max(100, settings().max_examples))
@given(valid_rows())
def test_generated_valid_rows_are_accepted_by_both(row: dict[str, Any]) -> None:
    assert reference_accepts(row)
    assert lifecycles_verdict(row) == (True, ())


@settings(max_examples=max(400, settings().max_examples))
@given(mutated_rows())
def test_lifecycles_accepts_exactly_the_rows_the_reference_accepts(row: dict[str, Any]) -> None:
    accepted_by_reference = reference_accepts(row)
    accepted, rules = lifecycles_verdict(row)
    repaired = without_documented_divergences(row)
    event(f"reference {'accepts' if accepted_by_reference else 'refuses'}, "
          f"lifecycles {'accepts' if accepted else 'refuses'}")
    # The repair touches only what the reference ignores ...
    assert reference_accepts(repaired) == accepted_by_reference
    # ... and, with it, both sides agree exactly.
    assert lifecycles_verdict(repaired)[0] == accepted_by_reference
    # Lifecycles is never more lenient; where it is stricter, it is for a documented reason.
    if accepted:
        assert accepted_by_reference
    if accepted_by_reference and not accepted:
        assert repaired != row
        assert len(rules) == 1
        assert rules[0] in {"token_syntax", "time_finite_non_negative", "integer_type",
                            "lease_expired_flag"}


def test_every_single_column_change_agrees_with_the_reference() -> None:
    """Exhaustively: every valid record above, every column, every listed value."""
    sole_reasons: set[str] = set()
    compared = 0
    for base in VALID.values():
        original = plain_row(base)
        for column in COLUMNS:
            for value in [None, *domain(column), *WILD]:
                row = {**original, column: value}
                accepted_by_reference = reference_accepts(row)
                accepted, rules = lifecycles_verdict(row)
                repaired = without_documented_divergences(row)
                assert reference_accepts(repaired) == accepted_by_reference, row
                assert lifecycles_verdict(repaired)[0] == accepted_by_reference, row
                if accepted:
                    assert accepted_by_reference, row
                if not accepted and len(rules) == 1:
                    sole_reasons.add(rules[0])
                compared += 1
    assert compared > 10_000
    # Each rule was, at least once, the one and only reason a row was refused.
    every_rule = {rule.name for rule in MONITOR_INVARIANTS} | {
        rule.name for _, rule in field_rules(MonitorRecord)
    }
    assert sole_reasons == every_rule - {"failed_has_error_code"}


DIVERGENCES: dict[str, tuple[MonitorRecord, dict[str, Any], str]] = {
    "lease_owner_not_a_token": (LEASED, {"lease_owner": "no spaces allowed"}, "token_syntax"),
    "lease_owner_not_a_string": (LEASED, {"lease_owner": 7}, "token_syntax"),
    "lease_token_too_long": (LEASED, {"lease_token": "t" * 257}, "token_syntax"),
    "lease_expiry_nan": (LEASED, {"lease_expires_at": math.nan}, "time_finite_non_negative"),
    "lease_expiry_negative": (LEASED, {"lease_expires_at": -1}, "time_finite_non_negative"),
    "lease_expiry_text": (LEASED, {"lease_expires_at": "soon"}, "time_finite_non_negative"),
    "receiver_attempts_text_without_receiver": (
        PENDING, {"receiver_attempts": "3"}, "integer_type"),
    "receiver_attempts_bool_without_receiver": (
        RETRY_WAIT, {"receiver_attempts": True}, "integer_type"),
    "receiver_max_attempts_float_without_receiver": (
        FAILED_LOCAL, {"receiver_max_attempts": 5.0}, "integer_type"),
    "receiver_next_attempt_negative_without_receiver": (
        PENDING, {"receiver_next_attempt_at": -5}, "time_finite_non_negative"),
    "receiver_next_attempt_infinite_without_receiver": (
        LEASED, {"receiver_next_attempt_at": math.inf}, "time_finite_non_negative"),
    "receiver_lease_flag_two_without_receiver": (
        PENDING, {"receiver_lease_expired": 2}, "lease_expired_flag"),
}


@pytest.mark.parametrize("case", DIVERGENCES)
def test_documented_divergence_reference_accepts_lifecycles_refuses(case: str) -> None:
    base, changes, rule = DIVERGENCES[case]
    row = {**plain_row(base), **changes}
    assert reference_accepts(row), "the reference accepts this row"
    assert lifecycles_verdict(row) == (False, (rule,))
    with pytest.raises(InvariantViolation) as refused:
        build_record(MonitorRecord, row, STATE_INVALID)
    assert refused.value.code == STATE_INVALID
    assert refused.value.rules == (rule,)
    assert without_documented_divergences(row) != row
    assert lifecycles_verdict(without_documented_divergences(row)) == (True, ())


def test_both_accept_an_integer_receiver_bundle_without_a_receiver_status() -> None:
    # Well-typed leftovers are accepted by both: only the types are stricter.
    row = {**plain_row(PENDING), "receiver_attempts": 30, "receiver_max_attempts": -4,
           "receiver_next_attempt_at": 5, "receiver_lease_expired": 0}
    assert reference_accepts(row)
    assert lifecycles_verdict(row) == (True, ())


def test_unhashable_terminal_status_crashes_the_reference_but_is_refused_here() -> None:
    # Not a value SQLite can hold, so out of the differential test: the reference's
    # set membership test raises TypeError, lifecycles names the rule.
    row = {**plain_row(PENDING), "terminal_status": ["published"]}
    ref = reference_monitor()
    with pytest.raises(TypeError):
        ref.DurableTerminalProcessingMonitor._validated_row(row)
    assert lifecycles_verdict(row) == (False, ("terminal_status_known",))

