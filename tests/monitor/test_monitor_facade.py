"""The drop-in monitor facade on SQLite: error codes, nothing changed on refusal, the
defect fixed, leases fenced, schema created, checked and migrated like the reference."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.monitor import (
    CAPABILITIES,
    ReaderError,
    answer,
    notification,
    table_dump,
)

from lifecycles.invariants import field_rules
from lifecycles.invariants.monitor import (
    capabilities_rule,
    event_id_rule,
    failure_bound,
    lease_duration,
    reader_rule,
    time,
    worker_id_rule,
)
from lifecycles.invariants.monitor_messages import NOTIFICATION_RULES
from lifecycles.machines.monitor import RetryPolicy
from lifecycles.monitor.facade import (
    RULE_CODES,
    DurableTerminalProcessingMonitor,
    InputInvalid,
    LeaseLost,
    StateInvalid,
    StorageBlocked,
    TerminalProcessingMonitorBlocked,
)
from lifecycles.stores.sqlite import connect

CODE = "terminal_processing_monitor."


@pytest.fixture
def connection(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "monitor.db")


@pytest.fixture
def monitor(connection: sqlite3.Connection) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    for index in range(3):
        value, sha = notification(index)
        monitor.register(value, sha, max_failures=3, now=10)
    return monitor


def refused(code: str, action: Callable[[], Any]) -> TerminalProcessingMonitorBlocked:
    with pytest.raises(TerminalProcessingMonitorBlocked) as caught:
        action()
    assert caught.value.code == CODE + code
    return caught.value


# --- construction ----------------------------------------------------------------


def test_constructor_refuses_what_is_not_a_sqlite_connection() -> None:
    with pytest.raises(TypeError, match=r"connection must be sqlite3\.Connection"):
        DurableTerminalProcessingMonitor(object(), CAPABILITIES)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"expected_capabilities_sha256": "C" * 64}, "capabilities_invalid"),
        ({"expected_capabilities_sha256": "c" * 63}, "capabilities_invalid"),
        ({"expected_capabilities_sha256": None}, "capabilities_invalid"),
        ({"poll_interval_seconds": 0}, "poll_interval_invalid"),
        ({"poll_interval_seconds": 86_401}, "poll_interval_invalid"),
        ({"poll_interval_seconds": math.nan}, "time_invalid"),
        ({"poll_interval_seconds": True}, "time_invalid"),
        ({"base_delay_seconds": 0}, "delay_invalid"),
        ({"max_delay_seconds": 86_400.5}, "delay_invalid"),
        ({"base_delay_seconds": 10, "max_delay_seconds": 5}, "delay_invalid"),
    ],
)
def test_constructor_refuses_bad_settings_and_creates_nothing(
    connection: sqlite3.Connection, kwargs: dict[str, Any], code: str
) -> None:
    arguments = {"expected_capabilities_sha256": CAPABILITIES, **kwargs}
    refused(code, lambda: DurableTerminalProcessingMonitor(connection, **arguments))
    tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == []


# --- every refusal has its code and changes nothing -----------------------------------


def test_one_table_maps_every_argument_rule_to_an_input_code() -> None:
    declared = {
        rule.name for rule in (time, capabilities_rule, failure_bound, lease_duration,
                               worker_id_rule, event_id_rule, reader_rule)
    }
    declared |= {rule.name for _, rule in field_rules(RetryPolicy)}
    declared |= {"base_delay_within_max_delay"}  # RetryPolicy's cross-field validator
    declared |= {rule.name for rule in NOTIFICATION_RULES}
    assert declared <= set(RULE_CODES)
    assert {CODE + code for code in RULE_CODES.values()} <= InputInvalid.family_codes


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [({"poll_interval_seconds": "30"}, "time_invalid"),
     ({"poll_interval_seconds": 0}, "poll_interval_invalid"),
     ({"base_delay_seconds": 86_401}, "delay_invalid"),
     ({"base_delay_seconds": 10, "max_delay_seconds": 5}, "delay_invalid"),
     ({"expected_capabilities_sha256": "C" * 64}, "capabilities_invalid")],
)
def test_a_broken_setting_rule_is_its_code(
    connection: sqlite3.Connection, kwargs: dict[str, Any], code: str
) -> None:
    arguments = {"expected_capabilities_sha256": CAPABILITIES, **kwargs}
    refused(code, lambda: DurableTerminalProcessingMonitor(connection, **arguments))


def bad_notification(**overrides: Any) -> tuple[Any, str]:
    value, sha = notification(7)
    value.update(overrides)
    return value, sha


NOTIFICATION_CASES: list[tuple[str, Callable[[], tuple[Any, Any]]]] = [
    ("missing key", lambda: ({k: v for k, v in notification(7)[0].items() if k != "plan_id"},
                             notification(7)[1])),
    ("extra key", lambda: ({**notification(7)[0], "extra": 1}, notification(7)[1])),
    ("wrong schema", lambda: bad_notification(schema="other.v1")),
    ("event id with a space", lambda: bad_notification(event_id="e 7")),
    ("unknown terminal status", lambda: bad_notification(terminal_status="done")),
    ("sha of something else", lambda: (notification(7)[0], notification(8)[1])),
    ("sha in upper case", lambda: (notification(7)[0], notification(7)[1].upper())),
    ("not a mapping", lambda: (["event_id"], notification(7)[1])),
    ("unserialisable value", lambda: bad_notification(plan_id=object())),
]


@pytest.mark.parametrize(
    ("case", "build"), NOTIFICATION_CASES, ids=[c for c, _ in NOTIFICATION_CASES]
)
def test_register_refuses_invalid_notifications(
    monitor: DurableTerminalProcessingMonitor,
    connection: sqlite3.Connection,
    case: str,
    build: Callable[[], tuple[Any, Any]],
) -> None:
    before = table_dump(connection)
    value, sha = build()
    error = refused("notification_invalid", lambda: monitor.register(value, sha, now=20))
    assert isinstance(error, InputInvalid)
    assert table_dump(connection) == before


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda m: m.register(*notification(9), now=-1), "time_invalid"),
        (lambda m: m.register(*notification(9), now=math.inf), "time_invalid"),
        (lambda m: m.register(*notification(9), now="10"), "time_invalid"),
        (lambda m: m.register(*notification(9), max_failures=0, now=10), "max_failures_invalid"),
        (lambda m: m.register(*notification(9), max_failures=21, now=10), "max_failures_invalid"),
        (lambda m: m.register(*notification(9), max_failures=True, now=10), "max_failures_invalid"),
        (lambda m: m.register(*notification(0), max_failures=4, now=10), "idempotency_collision"),
        (lambda m: m.register(*notification(9, notification_id="n0"), now=10),
         "idempotency_collision"),
        (lambda m: m.claim("", now=10), "worker_invalid"),
        (lambda m: m.claim("w 1", now=10), "worker_invalid"),
        (lambda m: m.claim("w" * 129, now=10), "worker_invalid"),
        (lambda m: m.claim("w1", now=math.nan), "time_invalid"),
        (lambda m: m.claim("w1", now=10, lease_seconds=0), "lease_invalid"),
        (lambda m: m.claim("w1", now=10, lease_seconds=86_401), "lease_invalid"),
        (lambda m: m.run_once("not callable", "w1", now=10), "reader_invalid"),
        (lambda m: m.run_once(lambda e, s: None, "w1", now=-5), "time_invalid"),
        (lambda m: m.status("e/0", now=10), "event_invalid"),
        (lambda m: m.status("e0", now=None), "time_invalid"),
        (lambda m: m.status("e404", now=10), "missing"),
        (lambda m: m.health(now=-0.5), "time_invalid"),
    ],
)
def test_bad_input_is_refused_with_its_code_and_changes_nothing(
    monitor: DurableTerminalProcessingMonitor,
    connection: sqlite3.Connection,
    call: Callable[[DurableTerminalProcessingMonitor], Any],
    code: str,
) -> None:
    before = table_dump(connection)
    refused(code, lambda: call(monitor))
    assert table_dump(connection) == before
    assert not connection.in_transaction


def test_register_is_idempotent(monitor: DurableTerminalProcessingMonitor,
                                connection: sqlite3.Connection) -> None:
    before = table_dump(connection)
    status = monitor.register(*notification(1), max_failures=3, now=99)
    assert (status.status, status.next_poll_at) == ("pending", 10.0)
    assert table_dump(connection) == before


# --- the reference's defect, fixed ---------------------------------------------------


@pytest.mark.parametrize("remote", ["retry_wait", "failed"])
def test_an_answer_that_would_break_an_invariant_fails_the_item_not_the_queue(
    monitor: DurableTerminalProcessingMonitor, remote: str
) -> None:
    outcome = monitor.run_once(
        lambda e, s: answer(e, s, remote, last_error_code=None), "w1", now=20
    )
    assert outcome is not None
    assert (outcome.event_id, outcome.status, outcome.error_code) == (
        "e0", "failed", CODE + "response_invalid"
    )
    status = monitor.status("e0", now=21)
    assert status.receiver_status is None  # nothing of the bad answer was written
    assert status.failures == 1
    # The queue keeps moving: the next item is claimed and completed normally.
    following = monitor.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=22)
    assert following is not None and following.status == "succeeded"
    assert monitor.health(now=23).counts["failed"] == 1


INVALID_ANSWERS: list[Callable[[str, str], Any]] = [
    lambda e, s: answer(e, s, "pending", schema="other"),
    lambda e, s: {**answer(e, s, "pending"), "event_id": "e2"},
    lambda e, s: answer(e, s, "pending", capabilities_sha256="f" * 64),
    lambda e, s: answer(e, s, "leased", lease_expires_at=None),
    lambda e, s: answer(e, s, "pending", attempts=4),
    lambda e, s: answer(e, s, "pending", attempts=True),
    lambda e, s: answer(e, s, "pending", processing_status=["pending"]),
    lambda e, s: {**answer(e, s, "pending"), "extra": 1},
    lambda e, s: "not a mapping",
]


@pytest.mark.parametrize("make", INVALID_ANSWERS)
def test_invalid_answers_fail_the_item_with_response_invalid(
    monitor: DurableTerminalProcessingMonitor, make: Callable[[str, str], Any]
) -> None:
    outcome = monitor.run_once(make, "w1", now=20)
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == ("failed", CODE + "response_invalid")
    assert monitor.status("e0", now=20).receiver_status is None


def test_reader_errors_follow_the_retry_rules(monitor: DurableTerminalProcessingMonitor) -> None:
    def raising(error: Exception) -> Callable[[str, str], Any]:
        def read(event_id: str, site_id: str) -> Any:
            raise error
        return read

    retry = monitor.run_once(raising(ReaderError("cms.timeout", True)), "w1", now=20)
    assert retry is not None and (retry.status, retry.error_code) == ("retry_wait", "cms.timeout")
    assert monitor.status("e0", now=20).next_poll_at == 25.0  # base delay 5 * 2^0
    final = monitor.run_once(raising(ReaderError("cms.denied", False)), "w1", now=20)
    assert final is not None and (final.status, final.error_code) == ("failed", "cms.denied")
    opaque = monitor.run_once(raising(ReaderError("Not A Code", True)), "w1", now=20)
    assert opaque is not None
    assert (opaque.status, opaque.error_code) == ("failed", CODE + "reader_failure")


# --- leases are fenced ----------------------------------------------------------------


def test_a_worker_whose_lease_was_taken_over_cannot_complete(
    monitor: DurableTerminalProcessingMonitor,
) -> None:
    taken_over: dict[str, Any] = {}

    def slow_reader(event_id: str, site_id: str) -> Any:
        # While w1 reads, its lease expires and w2 claims the item.
        taken_over["row"] = monitor.claim("w2", now=700, lease_seconds=60)
        return answer(event_id, site_id, "succeeded")

    error = refused("claim_lost", lambda: monitor.run_once(slow_reader, "w1", now=20,
                                                           lease_seconds=600))
    assert isinstance(error, LeaseLost)
    status = monitor.status("e0", now=701)
    assert status.status == "leased"
    assert taken_over["row"]["lease_owner"] == "w2"
    assert status.failures == 1 and status.last_error_code is None


def test_expired_leases_are_recovered_by_the_next_claim(
    monitor: DurableTerminalProcessingMonitor,
) -> None:
    first = monitor.claim("w1", now=20, lease_seconds=10)
    assert first is not None and first["event_id"] == "e0"
    assert monitor.health(now=30).expired_leases == 1
    second = monitor.claim("w2", now=30, lease_seconds=10)
    assert second is not None and second["event_id"] == "e0"  # recovered, due now, first again
    assert (second["failures"], second["poll_attempts"]) == (1, 2)


# --- invalid stored rows are named and never written over ------------------------------


def test_a_corrupted_row_is_reported_with_the_rule_it_breaks(
    monitor: DurableTerminalProcessingMonitor, connection: sqlite3.Connection
) -> None:
    connection.execute(
        "UPDATE cms_source_terminal_processing SET last_error_code = 'x.y' WHERE event_id = 'e1'"
    )
    connection.commit()
    before = table_dump(connection)
    error = refused("state_invalid", lambda: monitor.status("e1", now=20))
    assert isinstance(error, StateInvalid)
    assert error.rules == ("error_code_iff_waiting_or_failed",)
    refused("state_invalid", lambda: monitor.health(now=20))
    assert monitor.status("e0", now=20).status == "pending"
    assert table_dump(connection) == before


# --- schema ------------------------------------------------------------------------------


def test_the_schema_is_bound_to_the_capabilities(tmp_path: Path) -> None:
    path = tmp_path / "bound.db"
    DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    error = refused(
        "schema_altered", lambda: DurableTerminalProcessingMonitor(sqlite3.connect(path), "e" * 64)
    )
    assert isinstance(error, StorageBlocked)


def _version_1(path: Path, with_row: bool) -> None:
    DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    connection = sqlite3.connect(path)
    connection.execute("DROP TABLE cms_source_terminal_processing_meta")
    connection.execute(
        "CREATE TABLE cms_source_terminal_processing_meta "
        "(singleton INTEGER PRIMARY KEY, schema_version INTEGER NOT NULL)"
    )
    connection.execute("INSERT INTO cms_source_terminal_processing_meta VALUES (1, 1)")
    if with_row:
        connection.execute(
            "INSERT INTO cms_source_terminal_processing (event_id, notification_id, site_id, "
            "terminal_status, notification_sha256, status, poll_attempts, failures, "
            "max_failures, next_poll_at, created_at, updated_at) VALUES "
            "('e1','n1','s','published',?,'pending',0,0,5,1,1,1)",
            ("a" * 64,),
        )
    connection.commit()


def test_an_empty_version_1_database_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _version_1(path, with_row=False)
    connection = sqlite3.connect(path)
    DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    meta = connection.execute("SELECT * FROM cms_source_terminal_processing_meta").fetchall()
    assert [tuple(row) for row in meta] == [(1, 2, CAPABILITIES)]


def test_a_version_1_database_with_rows_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "v1rows.db"
    _version_1(path, with_row=True)
    connection = sqlite3.connect(path)
    before = [tuple(row) for row in connection.execute(
        "SELECT * FROM cms_source_terminal_processing_meta"
    )]
    refused("legacy_unbound", lambda: DurableTerminalProcessingMonitor(connection, CAPABILITIES))
    after = [tuple(row) for row in connection.execute(
        "SELECT * FROM cms_source_terminal_processing_meta"
    )]
    assert before == after == [(1, 1)]


@pytest.mark.parametrize(
    "alteration",
    [
        "DROP TABLE cms_source_terminal_processing_meta",
        "ALTER TABLE cms_source_terminal_processing ADD COLUMN extra TEXT",
        "UPDATE cms_source_terminal_processing_meta SET schema_version = 2, "
        "expected_capabilities_sha256 = 'x'",
    ],
)
def test_an_altered_schema_is_refused(tmp_path: Path, alteration: str) -> None:
    path = tmp_path / "altered.db"
    DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    connection = sqlite3.connect(path)
    connection.execute(alteration)
    connection.commit()
    refused("schema_altered", lambda: DurableTerminalProcessingMonitor(connection, CAPABILITIES))


def test_a_connection_inside_a_foreign_transaction_is_refused(
    monitor: DurableTerminalProcessingMonitor, connection: sqlite3.Connection
) -> None:
    connection.execute("BEGIN")
    refused("transaction_nested", lambda: monitor.claim("w1", now=20))
    connection.rollback()
    assert monitor.claim("w1", now=20) is not None


def test_a_monitor_refusal_raised_inside_the_reader_propagates_and_records_nothing(
    monitor: DurableTerminalProcessingMonitor, connection: sqlite3.Connection
) -> None:
    def nested(event_id: str, site_id: str) -> Any:
        monitor.status("e404", now=20)  # raises terminal_processing_monitor.missing

    refused("missing", lambda: monitor.run_once(nested, "w1", now=20))
    status = monitor.status("e0", now=20)
    assert (status.status, status.failures, status.last_error_code) == ("leased", 0, None)


def test_a_monitor_on_a_worker_connection_writes_what_another_reads(tmp_path: Path) -> None:
    path = tmp_path / "monitor.sqlite3"
    writer = connect(path, synchronous="normal")
    monitor = DurableTerminalProcessingMonitor(writer, CAPABILITIES)
    monitor.register(*notification(0), now=10)
    assert monitor.run_once(lambda e, s: {}, "w1", now=20) is not None  # a refused answer
    reader = connect(path)
    assert DurableTerminalProcessingMonitor(reader, CAPABILITIES).status(
        "e0", now=20).status == "failed"
    writer.close()
    reader.close()
