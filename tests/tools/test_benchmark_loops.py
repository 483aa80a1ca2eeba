"""The benchmarks' hand-written loops do lifecycles' work: each writes, row for row, what
lifecycles' ``run_once`` writes, so their rates measure the same cycle.

``benchmarks/loops.py`` holds the raw loops (the floor the throughput targets are stated
against) and the checked loops (the raw loop plus lifecycles' checks: the ceiling of those
targets). A loop that skipped part of the work (a column left unwritten, a claim in
another order) would make either figure a comparison of different things.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, answer, notification
from support.postgres import connect_in, temporary_schema

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor
from lifecycles.stores._sql_claim import RULE_BROKEN

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from loops import (  # the benchmarks are scripts, not a package on the path
    LEASE_SECONDS,
    TABLE,
    WORKER,
    CheckedBatchSQLite,
    CheckedPostgres,
    CheckedSQLite,
    Checks,
    RawBatchSQLite,
    RawPostgres,
    RawSQLite,
    VerifiedPostgres,
)

ITEMS = 12
NOW = 20.0


def receiver(event_id: str, site_id: str) -> dict[str, Any]:
    return answer(event_id, site_id, "pending")


def rows(connection: Any) -> list[tuple[Any, ...]]:
    """Every stored row, in key order."""
    found = connection.execute(f"SELECT * FROM {TABLE} ORDER BY event_id").fetchall()
    return [tuple(row) for row in found]


def drain(cycle: Callable[[], bool]) -> int:
    done = 0
    while cycle():
        done += 1
    return done


def registered(connection: Any) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    monitor.register_many([notification(i) for i in range(ITEMS)], now=10)
    return monitor


def lifecycles_cycle(monitor: DurableTerminalProcessingMonitor) -> Callable[[], bool]:
    return lambda: monitor.run_once(receiver, WORKER, now=NOW) is not None


def sqlite_loop(kind: str, connection: sqlite3.Connection,
                monitor: DurableTerminalProcessingMonitor) -> Callable[[], bool]:
    if kind == "lifecycles":
        return lifecycles_cycle(monitor)
    connection.isolation_level = None  # the loops write their own BEGIN and COMMIT
    if kind == "raw":
        return RawSQLite(connection, receiver, NOW).cycle
    return CheckedSQLite(connection, Checks(monitor, receiver, NOW, WORKER, LEASE_SECONDS)).cycle


def test_each_sqlite_loop_writes_what_run_once_writes(tmp_path: Path) -> None:
    drained: dict[str, list[tuple[Any, ...]]] = {}
    for kind in ("lifecycles", "raw", "checked"):
        connection = sqlite3.connect(tmp_path / f"{kind}.db")
        loop = sqlite_loop(kind, connection, registered(connection))
        assert drain(loop) == ITEMS, kind
        assert loop() is False  # nothing due: the loop says so and writes nothing
        drained[kind] = rows(connection)
        connection.close()
    assert {row[5] for row in drained["lifecycles"]} == {"watching"}
    assert drained["raw"] == drained["lifecycles"]
    assert drained["checked"] == drained["lifecycles"]


def test_each_batch_loop_writes_what_run_many_writes(tmp_path: Path) -> None:
    """The batch loops (run_many's floor and ceiling) lease in claim order, at most
    ``limit`` items a batch, and write what ``run_many`` writes."""
    drained: dict[str, list[tuple[Any, ...]]] = {}
    batches: dict[str, list[int]] = {}
    for kind in ("lifecycles", "raw", "checked"):
        connection = sqlite3.connect(tmp_path / f"batch-{kind}.db")
        monitor = registered(connection)
        batch: Callable[[int], int]
        if kind == "lifecycles":
            def batch(limit: int, monitor: DurableTerminalProcessingMonitor = monitor) -> int:
                return len(monitor.run_many(receiver, WORKER, now=NOW, limit=limit))
        else:
            connection.isolation_level = None  # the loops write their own BEGIN and COMMIT
            batch = (RawBatchSQLite(connection, receiver, NOW).batch if kind == "raw" else
                     CheckedBatchSQLite(connection, Checks(
                         monitor, receiver, NOW, WORKER, LEASE_SECONDS)).batch)
        sizes = []
        while done := batch(5):
            sizes.append(done)
        batches[kind] = sizes
        drained[kind] = rows(connection)
        connection.close()
    assert batches["lifecycles"] == [5, 5, 2]
    assert batches["raw"] == batches["checked"] == batches["lifecycles"]
    assert {row[5] for row in drained["lifecycles"]} == {"watching"}
    assert drained["raw"] == drained["lifecycles"]
    assert drained["checked"] == drained["lifecycles"]


def test_each_postgres_loop_writes_what_run_once_writes() -> None:
    drained: dict[str, list[tuple[Any, ...]]] = {}
    for kind in ("lifecycles", "raw", "checked", "verified"):
        with temporary_schema() as schema, connect_in(schema) as connection:
            monitor = registered(connection)
            checks = Checks(monitor, receiver, NOW, WORKER, LEASE_SECONDS)
            loop = (lifecycles_cycle(monitor) if kind == "lifecycles"
                    else RawPostgres(connection, receiver, NOW, WORKER).cycle if kind == "raw"
                    else CheckedPostgres(connection, checks).cycle if kind == "checked"
                    else VerifiedPostgres(connection, checks).cycle)
            assert drain(loop) == ITEMS, kind
            assert loop() is False
            drained[kind] = rows(connection)
    assert {row[5] for row in drained["lifecycles"]} == {"watching"}
    assert drained["raw"] == drained["lifecycles"]
    assert drained["checked"] == drained["lifecycles"]
    assert drained["verified"] == drained["lifecycles"]


@pytest.mark.parametrize(("damage", "refusal"), [
    # the first due record breaks a field rule: its verdict fails the claim statement
    ("UPDATE {table} SET notification_sha256 = upper(notification_sha256)"
     " WHERE event_id = 'e0'", RULE_BROKEN),
    # a lease expired: the reference's claim recovers it first, so nothing is leased
    ("UPDATE {table} SET status = 'leased', lease_owner = 'w9', lease_token = 't9',"
     " lease_expires_at = 1 WHERE event_id = 'e5'", None),
    # the schema is not the one verified: the guards hold the claim back
    ("ALTER TABLE {table} ADD COLUMN extra integer", None),
    ("UPDATE {table}_meta SET expected_capabilities_sha256 = repeat('d', 64)", None),
], ids=["broken-record", "expired-lease", "added-column", "other-meta-row"])
def test_the_verified_loop_leases_nothing_the_reference_would_refuse(
    damage: str, refusal: str | None,
) -> None:
    """``VerifiedPostgres`` refuses before it commits: a broken record fails its claim
    statement, and an expired lease (rescued first by the reference) or an altered schema
    leases nothing; the table is left as it was."""
    import psycopg

    with temporary_schema() as schema, connect_in(schema) as connection:
        monitor = registered(connection)
        loop = VerifiedPostgres(connection, Checks(
            monitor, receiver, NOW, WORKER, LEASE_SECONDS))
        connection.execute(damage.format(table=TABLE))
        before = rows(connection)
        if refusal is None:
            assert loop.cycle() is False
        else:
            with pytest.raises(psycopg.errors.InvalidTextRepresentation, match=refusal):
                loop.cycle()
        assert rows(connection) == before


@pytest.mark.parametrize("answer_kind", ["processed", "failed"])
def test_the_checked_loop_refuses_to_write_an_outcome_its_statements_do_not_hold(
    tmp_path: Path, answer_kind: str,
) -> None:
    """The loops' statements write a 'pending' answer's columns (the benchmarks give no
    other); the checks fire the row the answer selects, and another outcome stops the
    loop before its statement writes anything."""
    connection = sqlite3.connect(tmp_path / "other.db")
    monitor = registered(connection)
    before = rows(connection)
    checks = Checks(monitor, lambda e, s: answer(e, s, answer_kind), NOW, WORKER,
                    LEASE_SECONDS)
    (row,) = connection.execute(
        f"SELECT {checks.columns} FROM {TABLE} WHERE event_id = 'e0'").fetchall()
    with pytest.raises(RuntimeError, match="the loops write watching"):
        checks.completed(checks.claimed(row))
    assert rows(connection) == before
