"""``run_many`` and ``register_many``: many items per commit, each item as ``run_once`` and
``register`` would treat it, on SQLite and on PostgreSQL.

The yardstick is the one-item call: a batch must give every item the outcome (or the
refusal) that the one-item calls give it on an identical database, write exactly what
they write, and never let one item's refusal block another. The commits are counted
on SQLite with ``set_trace_callback``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, ReaderError, answer, notification
from support.postgres import DSN, connect_in, require_postgres, temporary_schema

from lifecycles.monitor.facade import (
    DurableTerminalProcessingMonitor,
    InputInvalid,
    LeaseLost,
    StateInvalid,
    TerminalProcessingMonitorBlocked,
    TerminalProcessingOutcome,
    TerminalProcessingStatus,
    blocked,
)

CODE = "terminal_processing_monitor."
TABLE = "cms_source_terminal_processing"
Opener = Callable[[], Any]


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens connections to one fresh database: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        opened: list[sqlite3.Connection] = []

        def connect() -> sqlite3.Connection:
            opened.append(sqlite3.connect(tmp_path / "monitor.sqlite3", timeout=30,
                                         check_same_thread=False))
            return opened[-1]

        yield connect
        for connection in opened:
            connection.close()
    elif DSN is None:
        # Without a server, the first connection a test opens skips it, from the one line
        # in support/postgres.py (a skip in a fixture would be reported test by test).
        def unavailable() -> Any:
            require_postgres()

        yield unavailable
    else:
        with temporary_schema() as schema:
            connections: list[Any] = []

            def connect_pg() -> Any:
                connections.append(connect_in(schema))
                return connections[-1]

            yield connect_pg
            for connection in connections:
                connection.close()


def dump(connection: Any) -> list[tuple[Any, ...]]:
    cursor = connection.cursor()
    cursor.execute(f"SELECT * FROM {TABLE} ORDER BY event_id")
    return [tuple(row) for row in cursor.fetchall()]


def without_tokens(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows with lease tokens blanked: fresh random tokens are the only expected difference."""
    return [tuple("<token>" if i == 11 and v is not None else v for i, v in enumerate(row))
            for row in rows]


def registered(opener: Opener, count: int) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(opener(), CAPABILITIES)
    for index in range(count):
        monitor.register(*notification(index), max_failures=2, now=10)
    return monitor


def mixed_reader(event_id: str, site_id: str) -> Any:
    """A different fate per item: progress, success, failure, a refused answer, errors."""
    index = int(event_id[1:])
    fate = index % 6
    if fate == 3:
        return answer(event_id, site_id, "pending", schema="other")  # refused: response_invalid
    if fate == 4:
        raise ReaderError("cms.timeout", retryable=True)
    if fate == 5:
        raise RuntimeError("the reader itself broke")  # reader_failure, not retryable
    return answer(event_id, site_id, ("pending", "succeeded", "failed")[fate])


# --- run_many ----------------------------------------------------------------------


def test_run_many_gives_each_item_the_outcome_run_once_gives_it(opener: Opener) -> None:
    one = registered(opener, 9)
    expected = [one.run_once(mixed_reader, "w1", now=20) for _ in range(7)]
    expected_rows = without_tokens(dump(one.connection))
    one.connection.execute(f"DELETE FROM {TABLE}")
    if isinstance(one.connection, sqlite3.Connection):
        one.connection.commit()
    many = registered(opener, 9)
    outcomes = many.run_many(mixed_reader, "w1", now=20, limit=7)
    assert outcomes == expected  # e0..e6 in claim order; e7, e8 left pending
    assert without_tokens(dump(many.connection)) == expected_rows


def test_run_many_takes_due_items_in_claim_order_up_to_limit_and_then_the_rest(
    opener: Opener,
) -> None:
    monitor = registered(opener, 5)
    first = monitor.run_many(mixed_reader, "w1", now=20, limit=3)
    second = monitor.run_many(mixed_reader, "w1", now=20, limit=3)
    assert [o.event_id for o in first] == ["e0", "e1", "e2"]  # type: ignore[union-attr]
    assert [o.event_id for o in second] == ["e3", "e4"]  # type: ignore[union-attr]
    assert monitor.run_many(mixed_reader, "w1", now=20, limit=3) == []  # nothing due


def test_what_run_many_returns_is_durable(opener: Opener) -> None:
    monitor = registered(opener, 3)
    outcomes = monitor.run_many(mixed_reader, "w1", now=20, limit=10)
    reopened = DurableTerminalProcessingMonitor(opener(), CAPABILITIES)
    for outcome in outcomes:
        assert isinstance(outcome, TerminalProcessingOutcome)
        status = reopened.status(outcome.event_id, now=20)
        assert (status.status, status.poll_attempts, status.last_error_code) == (
            outcome.status, outcome.attempt, outcome.error_code)


def test_a_refusal_inside_the_reader_is_that_items_alone(opener: Opener) -> None:
    monitor = registered(opener, 3)

    def reader(event_id: str, site_id: str) -> Any:
        if event_id == "e1":  # the monitor's own refusal, met inside the reader
            raise blocked(CODE + "missing")
        return answer(event_id, site_id, "succeeded")

    outcomes = monitor.run_many(reader, "w1", now=20, limit=3)
    assert isinstance(outcomes[1], InputInvalid) and outcomes[1].code == CODE + "missing"
    assert [o.status for o in (outcomes[0], outcomes[2])] == ["succeeded", "succeeded"]  # type: ignore[union-attr]
    assert monitor.status("e1", now=20).status == "leased"  # as run_once leaves it


def test_an_item_broken_or_taken_over_while_reading_is_refused_and_the_others_complete(
    opener: Opener,
) -> None:
    monitor = registered(opener, 4)
    other = opener()
    marker = "?" if isinstance(other, sqlite3.Connection) else "%s"
    snapshots: dict[str, tuple[Any, ...]] = {}

    def reader(event_id: str, site_id: str) -> Any:
        change = {"e1": "failures = 99", "e2": "lease_token = 'someone-else'"}.get(event_id)
        if change is not None:
            other.cursor().execute(f"UPDATE {TABLE} SET {change} WHERE event_id = {marker}",
                                   (event_id,))
            if isinstance(other, sqlite3.Connection):
                other.commit()
            snapshots[event_id] = next(r for r in dump(other) if r[0] == event_id)
        return answer(event_id, site_id, "pending")

    outcomes = monitor.run_many(reader, "w1", now=20, limit=4)
    assert isinstance(outcomes[1], StateInvalid) and outcomes[1].event_ids == ("e1",)
    assert outcomes[1].rules == ("failures_within_max", "polls_cover_failures")
    assert isinstance(outcomes[2], LeaseLost) and outcomes[2].code == CODE + "claim_lost"
    assert [o.status for o in (outcomes[0], outcomes[3])] == ["watching", "watching"]  # type: ignore[union-attr]
    rows = {row[0]: row for row in dump(other)}
    assert rows["e1"] == snapshots["e1"] and rows["e2"] == snapshots["e2"]  # left as found


@pytest.mark.parametrize("limit", [0, -1, 1001, True, 1.5, "5", None])
def test_a_bad_limit_is_refused_and_changes_nothing(opener: Opener, limit: Any) -> None:
    monitor = registered(opener, 2)
    before = dump(monitor.connection)
    with pytest.raises(InputInvalid) as raised:
        monitor.run_many(mixed_reader, "w1", now=20, limit=limit)
    assert raised.value.code == CODE + "limit_invalid"
    assert dump(monitor.connection) == before


@pytest.mark.parametrize(("argument", "value", "code"), [
    ("worker_id", "bad worker", "worker_invalid"),
    ("lease_seconds", 0, "lease_invalid"),
    ("now", -1, "time_invalid"),
    ("reader", "not callable", "reader_invalid"),
])
def test_run_many_refuses_what_run_once_refuses_and_changes_nothing(
    opener: Opener, argument: str, value: Any, code: str
) -> None:
    monitor = registered(opener, 2)
    before = dump(monitor.connection)
    call: dict[str, Any] = {"reader": mixed_reader, "worker_id": "w1", "now": 20,
                            "lease_seconds": 600, argument: value}
    for method in (monitor.run_once, monitor.run_many):
        with pytest.raises(TerminalProcessingMonitorBlocked) as raised:
            method(call["reader"], call["worker_id"], now=call["now"],
                   lease_seconds=call["lease_seconds"])
        assert raised.value.code == CODE + code
    assert dump(monitor.connection) == before


def test_run_many_on_sqlite_commits_twice_whatever_the_batch(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "monitor.sqlite3")
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    for index in range(20):
        monitor.register(*notification(index), now=10)
    seen: list[str] = []
    connection.set_trace_callback(seen.append)
    outcomes = monitor.run_many(mixed_reader, "w1", now=20, limit=20)
    connection.set_trace_callback(None)
    assert len(outcomes) == 20
    assert [sql.split()[0] for sql in seen].count("COMMIT") == 2
    assert [sql.split()[0] for sql in seen].count("BEGIN") == 2


def test_workers_running_batches_at_once_process_every_item_exactly_once(
    opener: Opener,
) -> None:
    registered(opener, 40)
    seen: list[str] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def reader(event_id: str, site_id: str) -> Any:
        with lock:
            seen.append(event_id)
        return answer(event_id, site_id, "succeeded")

    def work(worker: str) -> None:
        try:
            monitor = DurableTerminalProcessingMonitor(opener(), CAPABILITIES)
            while monitor.run_many(reader, worker, now=20, limit=7):
                pass
        except BaseException as error:  # reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(seen) == sorted(f"e{i}" for i in range(40))  # once each
    check = DurableTerminalProcessingMonitor(opener(), CAPABILITIES)
    assert check.health(now=20).counts["succeeded"] == 40


# --- register_many -----------------------------------------------------------------


def test_register_many_gives_each_pair_what_register_gives_it(opener: Opener) -> None:
    collision = notification(9, notification_id="n0")  # another event, n0's id
    pairs: list[Any] = [
        notification(0), notification(1), ({"not": "a notification"}, "a" * 64),
        notification(0), collision, "not a pair", notification(2),
    ]
    one = DurableTerminalProcessingMonitor(opener(), CAPABILITIES)
    expected: list[Any] = []
    for pair in pairs:
        try:
            expected.append(one.register(*pair, now=10))
        except (TypeError, TerminalProcessingMonitorBlocked) as refusal:
            expected.append(refusal)
    expected_rows = dump(one.connection)
    one.connection.execute(f"DELETE FROM {TABLE}")
    if isinstance(one.connection, sqlite3.Connection):
        one.connection.commit()
    many = DurableTerminalProcessingMonitor(opener(), CAPABILITIES)
    results = many.register_many(pairs, now=10)
    assert len(results) == len(pairs)
    for got, want in zip(results, expected, strict=True):
        if isinstance(got, TerminalProcessingStatus):
            assert got == want
        else:
            assert isinstance(got, InputInvalid)
            assert got.code == getattr(want, "code", CODE + "notification_invalid")
    assert [getattr(r, "code", None) for r in results] == [
        None, None, CODE + "notification_invalid", None, CODE + "idempotency_collision",
        CODE + "notification_invalid", None]
    assert dump(many.connection) == expected_rows


def test_register_many_on_sqlite_commits_once(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "monitor.sqlite3")
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    seen: list[str] = []
    connection.set_trace_callback(seen.append)
    results = monitor.register_many([notification(i) for i in range(25)], now=10)
    connection.set_trace_callback(None)
    assert all(isinstance(r, TerminalProcessingStatus) for r in results)
    assert [sql.split()[0] for sql in seen].count("COMMIT") == 1


@pytest.mark.parametrize(("keyword", "value", "code"), [
    ("now", float("nan"), "time_invalid"),
    ("max_failures", 21, "max_failures_invalid"),
])
def test_register_many_refuses_a_bad_argument_whole_and_changes_nothing(
    opener: Opener, keyword: str, value: Any, code: str
) -> None:
    monitor = registered(opener, 1)
    before = dump(monitor.connection)
    call: dict[str, Any] = {"now": 10, "max_failures": 5, keyword: value}
    with pytest.raises(InputInvalid) as raised:
        monitor.register_many([notification(5)], **call)
    assert raised.value.code == CODE + code
    assert dump(monitor.connection) == before


def test_register_many_refuses_notifications_it_cannot_iterate(opener: Opener) -> None:
    monitor = registered(opener, 1)
    before = dump(monitor.connection)

    def broken() -> Iterator[Any]:
        yield notification(5)
        raise RuntimeError("the caller's generator broke")

    with pytest.raises(InputInvalid) as raised:
        monitor.register_many(broken(), now=10)
    assert raised.value.code == CODE + "notification_invalid"
    assert dump(monitor.connection) == before
