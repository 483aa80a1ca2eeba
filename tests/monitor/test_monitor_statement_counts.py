"""What the batch paths cost on SQLite, statement by statement (issue 26).

``test_monitor_run_once.py`` counts ``run_once``'s own statements; here the same count
for ``run_many`` (its two batches: the leases, then the completions) and for the
claim's walk of the claim order once the first records in that order are not due.
Measured with ``connection.set_trace_callback``; a line starting with ``--`` is a
statement SQLite runs inside another (``PRAGMA schema_version`` behind the probe's
``pragma_schema_version``) and is not one of ours. Each statement is named by what it
does, so a difference shows which one was added, lost or changed::

    run_many(limit=N), N records due, first in claim order:
      BEGIN IMMEDIATE, the schema probe, the expired leases, the bounded walk (LIMIT N),
      N UPDATEs by key (read under this transaction's write lock), COMMIT;
      the readers run here;
      BEGIN IMMEDIATE, the schema probe, one re-read of the N records (IN (...)),
      N UPDATEs by key (each found as it was read), COMMIT.

When the bounded walk (the first ``walk_bound`` = 64 claimable records) holds fewer due
records than wanted, two statements follow it: the due records counted (capped), then
the due-time range, sorted; never one query per record.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, answer, notification

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor
from lifecycles.stores.sqlite import SQLiteDialect

TABLE = "cms_source_terminal_processing"
WALK_BOUND = 64


def named(sql: str) -> str:
    """What one statement does, by its text (``other: ...`` for anything unexpected)."""
    if sql in ("BEGIN IMMEDIATE", "COMMIT"):
        return sql
    if sql.startswith("SELECT v.schema_version"):
        return "probe"
    if sql.startswith("SELECT EXISTS"):
        return "glance"
    if sql.startswith("SELECT count(*) FROM (SELECT 1 FROM"):
        return "due count"
    if sql.startswith("SELECT") and sql.endswith("WHERE status = 'leased' AND "
                                                 "lease_expires_at <= 40.0"):
        return "expired leases"
    if sql.startswith("SELECT") and f"LIMIT 1 OFFSET {WALK_BOUND - 1}" in sql:
        return "bounded walk"
    if sql.startswith("SELECT") and f"INDEXED BY {TABLE}_due" in sql:
        return "due range"
    if sql.startswith("SELECT") and " WHERE event_id IN (" in sql:
        return "re-read"
    if sql.startswith(f"UPDATE {TABLE} SET"):
        where = sql.split(" WHERE ", 1)[1]
        return "update by key" if " AND " not in where else "update compared"
    return f"other: {sql[:80]}"


def traced(connection: sqlite3.Connection, call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """What ``call()`` returns, and our statements meanwhile, each as it ran."""
    seen: list[str] = []
    connection.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    try:
        result = call()
    finally:
        connection.set_trace_callback(None)
    return result, [sql for sql in seen if not sql.startswith("--")]


def progress(event_id: str, site_id: str) -> Any:
    return answer(event_id, site_id, "pending")


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[DurableTerminalProcessingMonitor]:
    connection = sqlite3.connect(tmp_path / "monitor.sqlite3")
    yield DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    connection.close()


def test_the_walk_bound_is_the_one_counted_here() -> None:
    assert SQLiteDialect.walk_bound == WALK_BOUND


def test_run_many_leases_and_completes_a_batch_in_two_transactions_of_fixed_statements(
    monitor: DurableTerminalProcessingMonitor,
) -> None:
    monitor.register_many([notification(i) for i in range(5)], now=10)
    outcomes, ran = traced(monitor.connection, lambda: monitor.run_many(
        progress, "w1", now=40, limit=5))
    assert [named(sql) for sql in ran] == [
        "BEGIN IMMEDIATE", "probe", "expired leases", "bounded walk",
        *["update by key"] * 5, "COMMIT",
        "BEGIN IMMEDIATE", "probe", "re-read", *["update by key"] * 5, "COMMIT",
    ], "\n".join(ran)
    walk = next(sql for sql in ran if named(sql) == "bounded walk")
    assert walk.endswith("LIMIT 5")  # one walk for the whole batch
    assert [outcome.status for outcome in outcomes] == ["watching"] * 5


def waiting_ahead_of_due(monitor: DurableTerminalProcessingMonitor, due: int) -> None:
    """``WALK_BOUND`` records first in claim order, watched and not due at 40; behind
    them ``due`` records registered later, due at 40."""
    monitor.register_many([notification(i) for i in range(WALK_BOUND)], now=10)
    watched = monitor.run_many(progress, "w0", now=20, limit=WALK_BOUND)
    assert {getattr(outcome, "status", outcome) for outcome in watched} == {"watching"}
    assert monitor.status("e0", now=20).next_poll_at > 40
    monitor.register_many([notification(i) for i in range(WALK_BOUND, WALK_BOUND + due)],
                          now=30)


def test_run_many_past_waiting_records_counts_then_reads_the_due_range_once(
    monitor: DurableTerminalProcessingMonitor,
) -> None:
    waiting_ahead_of_due(monitor, due=6)
    outcomes, ran = traced(monitor.connection, lambda: monitor.run_many(
        progress, "w1", now=40, limit=10))
    assert [named(sql) for sql in ran] == [
        "BEGIN IMMEDIATE", "probe", "expired leases", "bounded walk", "due count",
        "due range", *["update by key"] * 6, "COMMIT",
        "BEGIN IMMEDIATE", "probe", "re-read", *["update by key"] * 6, "COMMIT",
    ], "\n".join(ran)
    assert [outcome.event_id for outcome in outcomes] == [
        f"e{i}" for i in range(WALK_BOUND, WALK_BOUND + 6)]


def test_a_claim_past_waiting_records_glances_reads_the_range_and_writes(
    monitor: DurableTerminalProcessingMonitor,
) -> None:
    """The glance counts the due records in its own statement, so the claim reads the
    range without counting again, then writes its compare-and-set."""
    waiting_ahead_of_due(monitor, due=2)
    claimed, ran = traced(monitor.connection, lambda: monitor.claim("w1", now=40))
    assert [named(sql) for sql in ran] == ["glance", "due range", "update compared"], (
        "\n".join(ran))
    assert claimed is not None and claimed["event_id"] == f"e{WALK_BOUND}"
