"""Flat claims (issue 12): a claim walks a partial index in claim order to the first due
record, on SQLite and on PostgreSQL, instead of sorting every due record.

The index is named from the table and generated from the lease declaration: its columns
are ``lease.order_by``, its ``WHERE`` the claimable statuses as literals (SQLite's
planner matches a partial index only against the same text in the statement).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from support.postgres import connect_in, temporary_schema

from lifecycles._registry import registered
from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.schema import MonitorSchema
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_lease import SORTED_AT_MOST
from lifecycles.stores._sql_schema import SQLSchema
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore

LEASED = [lifecycle for lifecycle in registered().values() if lifecycle.lease is not None]
TABLE = "cms_source_terminal_processing"


def claim_statement(store: SQLStore[Any], exclude: list[str]) -> tuple[str, list[Any]]:
    """The statement ``next_due`` runs, and its parameters."""
    assert store._leasing is not None
    where, order = store._leasing.due
    left_out, params = store.dialect.excluding(store._key, exclude)
    return where + left_out + order, [1e12, *params, 1]


def sqlite_plan(store: SQLStore[Any], exclude: list[str]) -> list[str]:
    statement, params = claim_statement(store, exclude)
    return [row[3] for row in store.run(f"EXPLAIN QUERY PLAN {statement}", params)]


def fill(
    connection: sqlite3.Connection, count: int, finished: bool = False, table: str = TABLE
) -> None:
    """``count`` pending monitor items, due one second apart in claim order; ``finished``:
    every third one marked finished (outside the partial index; such rows are for plans
    only, they are not valid records)."""
    statuses = ["pending", "pending", "succeeded" if finished else "pending"]
    with connection:
        connection.executemany(
            f"INSERT INTO {table} (event_id, notification_id, site_id, terminal_status,"
            " notification_sha256, status, poll_attempts, failures, max_failures,"
            " next_poll_at, created_at, updated_at)"
            " VALUES (?, ?, 's', 'published', ?, ?, 0, 0, 5, ?, ?, ?)",
            [
                (f"e{i:07d}", f"n{i}", "a" * 64, statuses[i % 3], float(i), float(i), float(i))
                for i in range(count)
            ],
        )


@pytest.mark.parametrize("lifecycle", LEASED, ids=lambda lifecycle: lifecycle.name)
def test_every_leased_lifecycle_gets_a_partial_index_in_claim_order(
    lifecycle: Lifecycle[Any, Any],
) -> None:
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(lifecycle, connection)
    table = store.schema.table
    assert lifecycle.lease is not None
    claimable = ", ".join(f"'{s}'" for s in lease.claimable_statuses(lifecycle))
    columns = (*lifecycle.lease.order_by, lifecycle.lease.due_field)
    ((sql,),) = connection.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?",
        (f"{table}_claim_order",),
    ).fetchall()
    assert sql == (
        f"CREATE INDEX {table}_claim_order ON {table} ({', '.join(columns)})"
        f" WHERE {lifecycle.status_field} IN ({claimable})"
    )


@pytest.mark.parametrize("exclude", [[], ["e1"], ["e1", "e2", "e3"]])
@pytest.mark.parametrize("schema", ["derived", "reference"])
@pytest.mark.parametrize("rows", [0, 3000])
def test_a_sqlite_claim_walks_the_claim_order_index_a_bounded_number_of_records(
    exclude: list[str], schema: str, rows: int
) -> None:
    """The walk reads the partial claim-order index in order, bounded by the claim-order
    key of the ``walk_bound``-th claimable record (found by skipping entries of the same
    index): no sort, no scan of the table itself. The fallback searches the due-time
    range of the lease-order index. Empty or filled and analysed, with and without keys
    passed over."""
    connection = sqlite3.connect(":memory:")
    bound: SQLSchema = MonitorSchema("c" * 64) if schema == "reference" else SQLSchema(MONITOR)
    store = SQLiteStore(MONITOR, connection, bound)
    if rows:
        fill(connection, rows, finished=True, table=bound.table)
        connection.execute("ANALYZE")
    table = bound.table
    statement, _ = claim_statement(store, exclude)
    assert f"LIMIT 1 OFFSET {store.dialect.walk_bound - 1}), 9e999)" in statement
    assert sqlite_plan(store, exclude) == [
        f"SEARCH {table} USING INDEX {table}_claim_order (created_at<?)",
        "SCALAR SUBQUERY 1", f"SCAN {table} USING INDEX {table}_claim_order"]
    assert store._leasing is not None
    where, order = store._leasing.due_range
    left_out, params = store.dialect.excluding(store._key, exclude)
    plan = [row[3] for row in store.run(
        f"EXPLAIN QUERY PLAN {where}{left_out}{order}", [1e12, *params, 1])]
    assert plan == [
        f"SEARCH {table} USING INDEX {table}_due (status=? AND next_poll_at<?)",
        "USE TEMP B-TREE FOR ORDER BY"], plan


def fill_waiting(connection: sqlite3.Connection, waiting: int, due: int,
                 due_at: Callable[[int], float]) -> None:
    """``waiting`` watched records first in claim order (next poll far off), then ``due``
    pending ones created in falling order, record i due from ``due_at(i)``."""
    with connection:
        connection.executemany(
            f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
            " notification_sha256, status, poll_attempts, failures, max_failures,"
            " next_poll_at, receiver_status, receiver_attempts, receiver_max_attempts,"
            " receiver_next_attempt_at, receiver_lease_expired, created_at, updated_at)"
            " VALUES (?, ?, 's', 'published', ?, ?, ?, 0, 5, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(f"w{i:04d}", f"nw{i}", "a" * 64, "watching", 1, 1e9, "pending", 0, 5, 10.0, 0,
              float(i), float(i)) for i in range(waiting)]
            + [(f"p{i:04d}", f"np{i}", "a" * 64, "pending", 0, due_at(i), None, None, None,
                None, None, 1e4 - i, 1e4 - i) for i in range(due)],
        )


@pytest.mark.parametrize("exclude", [0, 1, 5])
def test_due_records_beyond_the_walk_are_found_in_claim_order(exclude: int) -> None:
    """Many watched records first in claim order, none due: the walk finds nothing and
    the due-time range answers, in claim order, passing over excluded keys."""
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(MONITOR, connection, MonitorSchema("c" * 64))
    waiting = store.dialect.walk_bound * 3
    fill_waiting(connection, waiting, due=10, due_at=lambda i: 5e3 - i)
    due = sorted((r for r in store.scan() if lease.is_due(MONITOR, r, 1e4)),
                 key=lambda r: (r.created_at, r.event_id))
    left_out = frozenset(r.event_id for r in due[:exclude])
    assert store.due(1e4, 3, left_out) == due[exclude:exclude + 3]
    assert store.next_due(1e4, left_out) == due[exclude]
    seen = store.glance(1e4)
    assert seen is not None and seen.first_due == due[0] and not seen.expired
    assert store.due(100.0, 3) == []  # before any is due: nothing, from both queries


def test_without_the_index_the_claim_sorts_and_still_answers() -> None:
    """The before picture: without the claim-order index every due record is sorted."""
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(MONITOR, connection, MonitorSchema("c" * 64))
    fill(connection, 30)
    expected = store.next_due(1e12, frozenset({"e0000000"}))
    connection.execute(f"DROP INDEX {TABLE}_claim_order")
    plan = sqlite_plan(store, [])
    assert "USE TEMP B-TREE FOR ORDER BY" in plan, plan
    assert store.next_due(1e12, frozenset({"e0000000"})) == expected
    assert expected is not None and expected.event_id == "e0000001"


def test_a_claim_through_the_index_passes_over_excluded_keys_in_claim_order() -> None:
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(MONITOR, connection, MonitorSchema("c" * 64))
    fill(connection, 30)
    due = [r.event_id for r in store.scan() if lease.is_due(MONITOR, r, 20.0)]
    for skipped in range(len(due)):
        found = store.next_due(20.0, frozenset(due[:skipped]))
        assert found is not None and found.event_id == due[skipped]
    assert store.next_due(20.0, frozenset(due)) is None


def test_a_postgresql_claim_walks_the_claim_order_index() -> None:
    """On a table with rows and statistics: an index scan of the partial index, no Sort."""
    with temporary_schema() as name:
        connection = connect_in(name)
        try:
            store = PostgresStore(MONITOR, connection, MonitorSchema("c" * 64))
            connection.execute(
                f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
                " notification_sha256, status, poll_attempts, failures, max_failures,"
                " next_poll_at, created_at, updated_at)"
                " SELECT 'e' || lpad(g::text, 7, '0'), 'n' || g, 's', 'published',"
                " repeat('a', 64), (ARRAY['pending', 'pending', 'succeeded'])[g % 3 + 1],"
                " 0, 0, 5, g, g, g FROM generate_series(1, 30000) AS g"
            )
            connection.execute(f"ANALYZE {TABLE}")
            for exclude in ([], ["e0000001", "e0000002"]):
                statement, params = claim_statement(store, exclude)
                plan = "\n".join(
                    row[0] for row in connection.execute(f"EXPLAIN {statement}", params)
                )
                assert f"Index Scan using {TABLE}_claim_order" in plan, plan
                assert "Sort" not in plan and "Seq Scan" not in plan, plan
            found = store.next_due(1e12, frozenset({"e0000001"}))
            assert found is not None and found.event_id == "e0000003"  # e0000002 is finished
        finally:
            connection.close()


def test_a_backlog_behind_the_walk_is_claimed_by_the_whole_walk_in_claim_order() -> None:
    """More records due than the range would sort (``SORTED_AT_MOST``), all behind more
    than a walk's worth of waiting ones: the whole walk answers, in claim order."""
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(MONITOR, connection, MonitorSchema("c" * 64))
    bound = store.dialect.walk_bound
    fill_waiting(connection, 2 * bound, due=2 * SORTED_AT_MOST,
                 due_at=lambda i: 5e3)
    due = sorted((r for r in store.scan() if lease.is_due(MONITOR, r, 1e4)),
                 key=lambda r: (r.created_at, r.event_id))
    assert len(due) > SORTED_AT_MOST
    assert store.due(1e4, 2) == due[:2]
    assert store.due(1e4, 2, frozenset({due[0].event_id})) == due[1:3]
    seen = store.glance(1e4)
    assert seen is not None and seen.first_due == due[0]
