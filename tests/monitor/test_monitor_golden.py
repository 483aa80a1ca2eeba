"""Golden values and exact boundaries of the monitor, pinned as literals.

Each assertion here is one that a small change of the code would break: a default
that moves (30 / 5 / 300 seconds, a 600-second lease, five failures), a ``<=`` that
becomes ``<`` (a lease expires at exactly ``now == lease_expires_at``; an item is due
at exactly ``now == next_poll_at``), a backoff exponent off by one, a receiver bound
that slips (``attempts`` 0, ``max_attempts`` 1 and 20), an error-code pattern that
widens. The values are the reference's (``terminal_processing_monitor.py``); the tests
parametrized over ``module`` make the very same calls on the reference too when the
seeds are at hand (``LIFECYCLES_SEEDS``), and skip that half without them.
"""

from __future__ import annotations

import inspect
import math
import sqlite3
from collections.abc import Callable
from types import ModuleType
from typing import Any

import attrs
import pytest
from support.monitor import CAPABILITIES, ReaderError, answer, notification, table_dump

import lifecycles.monitor as ours
from lifecycles.invariants.monitor import MonitorStatus
from lifecycles.machines.monitor import (
    AnswerRefused,
    MonitorInputs,
    ReceiverAnswer,
    RetryPolicy,
    read_answer,
    reader_error_code,
    retry_delay,
)
from lifecycles.monitor.values import status_of

CODE = "terminal_processing_monitor."
BOTH = pytest.mark.parametrize("module", ["reference", "lifecycles"])


def implementation(module: str) -> ModuleType:
    if module == "lifecycles":
        return ours
    from support.reference import require_reference

    return require_reference("terminal_processing_monitor")


def open_monitor(module: str = "lifecycles", **settings: Any) -> Any:
    return implementation(module).DurableTerminalProcessingMonitor(
        sqlite3.connect(":memory:"), CAPABILITIES, **settings
    )


def replying(kind: str, **overrides: Any) -> Callable[[str, str], Any]:
    return lambda event_id, site_id: answer(event_id, site_id, kind, **overrides)


def failing(code: str, retryable: bool) -> Callable[[str, str], Any]:
    def reader(event_id: str, site_id: str) -> Any:
        raise ReaderError(code, retryable)

    return reader


# --- golden defaults ----------------------------------------------------------------


def test_the_retry_policy_defaults_are_the_references_30_5_300_seconds() -> None:
    assert attrs.astuple(RetryPolicy()) == (30.0, 5.0, 300.0)


def test_the_inputs_default_to_a_600_second_lease_and_the_default_policy() -> None:
    inputs = MonitorInputs(now=0.0)
    assert inputs.lease_seconds == 600.0
    assert attrs.astuple(inputs.policy) == (30.0, 5.0, 300.0)


def test_the_facade_defaults_are_literally_the_references() -> None:
    """The public signatures' defaults, as literals. test_monitor_compat.py compares them
    with the reference's when the seeds are at hand; these hold without them."""

    def defaults(method: str) -> dict[str, Any]:
        function = getattr(ours.DurableTerminalProcessingMonitor, method)
        parameters = inspect.signature(function).parameters.values()
        return {p.name: p.default for p in parameters if p.default is not p.empty}

    assert defaults("__init__") == {
        "poll_interval_seconds": 30, "base_delay_seconds": 5, "max_delay_seconds": 300}
    assert defaults("register") == {"max_failures": 5}
    assert defaults("register_many") == {"max_failures": 5}
    assert defaults("claim") == {"lease_seconds": 600}
    assert defaults("run_once") == {"lease_seconds": 600}
    assert defaults("run_many") == {"lease_seconds": 600, "limit": 50}


def test_a_monitor_built_with_the_defaults_holds_them() -> None:
    monitor = open_monitor()
    assert attrs.astuple(monitor.policy) == (30.0, 5.0, 300.0)
    assert (monitor.poll_interval_seconds, monitor.base_delay_seconds,
            monitor.max_delay_seconds) == (30.0, 5.0, 300.0)


@BOTH
def test_by_default_five_failures_and_a_600_second_lease(module: str) -> None:
    monitor = open_monitor(module)
    assert monitor.register(*notification(1), now=100).max_failures == 5
    claimed = monitor.claim("w1", now=100)
    assert claimed is not None and claimed["lease_expires_at"] == 700.0
    monitor.register(*notification(2), now=100)
    seen: list[float] = []

    def reader(event_id: str, site_id: str) -> Any:  # looks at its own lease, then fails
        seen.append(monitor.status(event_id, now=101).lease_expires_at)
        raise ReaderError("cms.timeout", True)

    outcome = monitor.run_once(reader, "w1", now=101)
    assert outcome is not None and outcome.event_id == "e2"
    assert seen == [701.0]


@BOTH
def test_by_default_a_watched_item_is_polled_again_30_seconds_later(module: str) -> None:
    monitor = open_monitor(module)
    monitor.register(*notification(1), now=100)
    outcome = monitor.run_once(replying("pending"), "w1", now=100)
    assert outcome is not None and outcome.status == "watching"
    assert monitor.status("e1", now=100).next_poll_at == 130.0
    assert monitor.health(now=math.nextafter(130.0, 0)).due == 0
    assert monitor.health(now=130.0).due == 1  # due at exactly next_poll_at
    assert monitor.claim("w1", now=math.nextafter(130.0, 0)) is None
    claimed = monitor.claim("w1", now=130.0)  # due at exactly next_poll_at
    assert claimed is not None and claimed["event_id"] == "e1"


def test_a_batch_claims_an_item_at_exactly_its_next_poll_at() -> None:
    """run_many leases through the store's claim-order walk, not the single claim's
    statement: the same boundary holds there."""
    monitor = open_monitor()
    monitor.register(*notification(1), now=100)
    monitor.run_once(replying("pending"), "w1", now=100)
    assert monitor.run_many(replying("pending"), "w1", now=math.nextafter(130.0, 0)) == []
    (outcome,) = monitor.run_many(replying("pending"), "w1", now=130.0)
    assert not isinstance(outcome, Exception) and outcome.event_id == "e1"


@BOTH
def test_by_default_retries_back_off_from_5_seconds_capped_at_300(module: str) -> None:
    """next_poll_at == now + retry_delay(policy, failures), to the exact second, each
    retry made at exactly the time it is due (and not a moment before)."""
    monitor = open_monitor(module)
    monitor.register(*notification(1), max_failures=20, now=100)
    now, waits = 100.0, []
    for _ in range(9):
        outcome = monitor.run_once(failing("cms.timeout", True), "w1", now=now)
        assert outcome is not None and outcome.status == "retry_wait"
        due = monitor.status("e1", now=now).next_poll_at
        waits.append(due - now)
        assert monitor.run_once(failing("cms.timeout", True), "w1",
                                now=math.nextafter(due, 0)) is None
        now = due
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    assert waits == [retry_delay(RetryPolicy(), failures) for failures in range(1, 10)]


def test_retry_delay_is_exact_for_any_policy() -> None:
    policy = RetryPolicy(poll_interval_seconds=1, base_delay_seconds=0.75, max_delay_seconds=5)
    assert [retry_delay(policy, n) for n in range(0, 7)] == [
        0.75, 0.75, 1.5, 3.0, 5.0, 5.0, 5.0]
    assert retry_delay(RetryPolicy(base_delay_seconds=7, max_delay_seconds=7), 1) == 7.0


# --- exact-time boundaries: a lease expires at now == lease_expires_at ----------------


@BOTH
def test_a_lease_expires_at_exactly_its_expiry_and_not_before(module: str) -> None:
    monitor = open_monitor(module)
    monitor.register(*notification(1), max_failures=1, now=100)
    assert monitor.claim("w1", now=100, lease_seconds=60) is not None
    before = math.nextafter(160.0, 0)
    assert monitor.status("e1", now=before).lease_expired is False
    assert monitor.status("e1", now=160.0).lease_expired is True
    health = monitor.health(now=before)
    assert (health.status, health.expired_leases) == ("ok", 0)
    health = monitor.health(now=160.0)
    assert (health.status, health.expired_leases) == ("blocked", 1)

    unswept = table_dump(monitor.connection)
    assert monitor.claim("w2", now=before) is None  # a live lease is not recovered
    assert table_dump(monitor.connection) == unswept
    assert monitor.claim("w2", now=160.0) is None  # recovered: its only failure is spent
    status = monitor.status("e1", now=160.0)
    assert (status.status, status.failures, status.last_error_code, status.next_poll_at,
            status.lease_expires_at, status.lease_expired) == (
        "failed", 1, CODE + "lease_expired", 160.0, None, False)


@BOTH
def test_a_lease_recovered_at_its_expiry_is_claimed_again_at_once(module: str) -> None:
    monitor = open_monitor(module)
    monitor.register(*notification(1), max_failures=2, now=100)
    assert monitor.claim("w1", now=100, lease_seconds=60) is not None
    claimed = monitor.claim("w2", now=160.0, lease_seconds=60)
    assert claimed is not None
    assert (claimed["status"], claimed["lease_owner"], claimed["failures"],
            claimed["poll_attempts"], claimed["next_poll_at"], claimed["lease_expires_at"],
            claimed["last_error_code"]) == ("leased", "w2", 1, 2, 160.0, 220.0, None)


def test_the_status_of_a_record_says_expired_from_exactly_its_expiry() -> None:
    monitor = open_monitor()
    monitor.register(*notification(1), now=100)
    monitor.claim("w1", now=100, lease_seconds=60)
    record = monitor.store.get("e1")
    assert record is not None and record.status is MonitorStatus.LEASED
    assert status_of(record, 160.0).lease_expired is True
    assert status_of(record, math.nextafter(160.0, 0)).lease_expired is False


# --- the receiver's answer at its bounds ------------------------------------------------

ACCEPTED_ANSWERS = {
    "attempts 0 of 1": ("pending", {"attempts": 0, "max_attempts": 1}),
    "attempts 1 of 1": ("pending", {"attempts": 1, "max_attempts": 1}),
    "attempts 0 of 20": ("leased", {"attempts": 0, "max_attempts": 20}),
    "attempts 20 of 20": ("retry_wait", {"attempts": 20, "max_attempts": 20}),
    "code of 128 characters": ("retry_wait", {"last_error_code": "c" * 128}),
    "code of every allowed kind of character": ("retry_wait", {"last_error_code": "a0_.-z"}),
    "code of one letter": ("failed", {"last_error_code": "x"}),
}
REFUSED_ANSWERS = {
    "attempts 0 of 0": ("pending", {"attempts": 0, "max_attempts": 0},
                        "answer_attempts_consistent"),
    "attempts 0 of 21": ("pending", {"attempts": 0, "max_attempts": 21},
                         "answer_attempts_consistent"),
    "attempts -1 of 3": ("pending", {"attempts": -1, "max_attempts": 3},
                         "answer_attempts_consistent"),
    "attempts 4 of 3": ("pending", {"attempts": 4, "max_attempts": 3},
                        "answer_attempts_consistent"),
    "attempts 21 of 20": ("pending", {"attempts": 21, "max_attempts": 20},
                          "answer_attempts_consistent"),
    "code of 129 characters": ("retry_wait", {"last_error_code": "c" * 129},
                               "answer_error_code_syntax"),
    "code with a capital": ("retry_wait", {"last_error_code": "Cms.busy"},
                            "answer_error_code_syntax"),
    "code starting with a digit": ("failed", {"last_error_code": "1cms"},
                                   "answer_error_code_syntax"),
    "code with a space": ("retry_wait", {"last_error_code": "cms busy"},
                          "answer_error_code_syntax"),
    "code with a slash": ("retry_wait", {"last_error_code": "cms/busy"},
                          "answer_error_code_syntax"),
    "empty code": ("failed", {"last_error_code": ""}, "answer_error_code_syntax"),
    "code not a string": ("failed", {"last_error_code": 7}, "answer_error_code_syntax"),
}
EXPECTED_STATUS = {"pending": "watching", "leased": "watching", "retry_wait": "watching",
                   "failed": "failed"}


@BOTH
@pytest.mark.parametrize("case", ACCEPTED_ANSWERS)
def test_an_answer_at_its_bounds_is_accepted_and_stored_as_given(module: str, case: str) -> None:
    kind, overrides = ACCEPTED_ANSWERS[case]
    monitor = open_monitor(module)
    monitor.register(*notification(1), now=100)
    outcome = monitor.run_once(replying(kind, **overrides), "w1", now=100)
    remote_failed = CODE + "remote_failed" if kind == "failed" else None
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == (EXPECTED_STATUS[kind], remote_failed)
    status = monitor.status("e1", now=100)
    sent = answer("e1", "site-1", kind, **overrides)
    assert (status.receiver_status, status.receiver_attempts, status.receiver_max_attempts,
            status.receiver_error_code) == (
        kind, sent["attempts"], sent["max_attempts"], sent["last_error_code"])
    assert status.failures == 0


@BOTH
@pytest.mark.parametrize("case", REFUSED_ANSWERS)
def test_an_answer_past_its_bounds_fails_the_item_with_response_invalid(
    module: str, case: str
) -> None:
    kind, overrides, _ = REFUSED_ANSWERS[case]
    monitor = open_monitor(module)
    monitor.register(*notification(1), now=100)
    outcome = monitor.run_once(replying(kind, **overrides), "w1", now=100)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", CODE + "response_invalid")
    status = monitor.status("e1", now=100)
    assert (status.receiver_status, status.receiver_attempts, status.receiver_error_code,
            status.failures) == (None, None, None, 1)


@pytest.mark.parametrize("case", REFUSED_ANSWERS)
def test_an_answer_past_its_bounds_breaks_exactly_its_rule(case: str) -> None:
    kind, overrides, rule = REFUSED_ANSWERS[case]
    monitor = open_monitor()
    monitor.register(*notification(1), now=100)
    record = monitor.store.get("e1")
    assert record is not None
    read = read_answer(answer("e1", "site-1", kind, **overrides), record, CAPABILITIES)
    assert read == AnswerRefused((rule,))


@pytest.mark.parametrize("case", ACCEPTED_ANSWERS)
def test_an_answer_at_its_bounds_is_read_as_given(case: str) -> None:
    kind, overrides = ACCEPTED_ANSWERS[case]
    monitor = open_monitor()
    monitor.register(*notification(1), now=100)
    record = monitor.store.get("e1")
    assert record is not None
    sent = answer("e1", "site-1", kind, **overrides)
    read = read_answer(sent, record, CAPABILITIES)
    assert isinstance(read, ReceiverAnswer)
    assert (read.processing_status, read.attempts, read.max_attempts, read.last_error_code) == (
        kind, sent["attempts"], sent["max_attempts"], sent["last_error_code"])


# --- the reader's error code at its bounds ----------------------------------------------

READER_CODES = {
    "c" * 128: ("c" * 128, True),
    "a0_.-z": ("a0_.-z", True),
    "c" * 129: (CODE + "reader_failure", False),
    "Cms.timeout": (CODE + "reader_failure", False),
    "1cms": (CODE + "reader_failure", False),
    "cms timeout": (CODE + "reader_failure", False),
    "": (CODE + "reader_failure", False),
}


@pytest.mark.parametrize("code", READER_CODES)
def test_a_reader_error_keeps_its_code_only_when_well_formed(code: str) -> None:
    assert reader_error_code(ReaderError(code, True)) == READER_CODES[code]


@BOTH
@pytest.mark.parametrize("code", READER_CODES)
def test_a_malformed_reader_error_code_is_a_final_reader_failure(module: str, code: str) -> None:
    monitor = open_monitor(module)
    monitor.register(*notification(1), now=100)
    outcome = monitor.run_once(failing(code, True), "w1", now=100)
    kept, retryable = READER_CODES[code]
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == (
        "retry_wait" if retryable else "failed", kept)
