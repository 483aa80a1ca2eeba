"""Claims flat in the number of leases held: "has a lease expired?", asked before every
claim, reads a partial index of the leased records by expiry, on SQLite and PostgreSQL,
instead of every leased record through the lease-order index.

The index is named from the table and generated from the lease declaration: its key the
expiry (led by the status on SQLite, whose planner has no statistics to prefer it
otherwise), its ``WHERE`` the leased status as a literal. Here on the monitor's
reference schema (``MonitorSchema``) and for every shipped leased lifecycle; the same
plans on a generic table, the tests' tasks, are tests/stores/test_lease_expiry_index.py.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest
from support.postgres import connect_in, temporary_schema

from lifecycles._registry import registered
from lifecycles.machines import Lifecycle, lease
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.schema import MonitorSchema
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_claim import ClaimInPlace, claim_in_place
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore

LEASED = [lifecycle for lifecycle in registered().values() if lifecycle.lease is not None]
TABLE = "cms_source_terminal_processing"


def expiry_queries(store: SQLStore[Any]) -> dict[str, str]:
    """Every lease query of ``store`` that asks about expired leases."""
    statements = store._leasing
    assert statements is not None
    return {"glance": statements.glance, "expired": statements.expired,
            "count_expired": statements.count_expired}


def params_of(store: SQLStore[Any], name: str) -> list[Any]:
    if name != "glance":
        return [1e3]
    marks = expiry_queries(store)["glance"].count(store.dialect.param)
    return [1e3] * (marks - 1) + [1]  # the times, then the walk's limit


@pytest.mark.parametrize("lifecycle", LEASED, ids=lambda lifecycle: lifecycle.name)
def test_every_leased_lifecycle_gets_a_partial_index_of_its_leases_by_expiry(
    lifecycle: Lifecycle[Any, Any],
) -> None:
    connection = sqlite3.connect(":memory:")
    table = SQLiteStore(lifecycle, connection).schema.table
    declared = lease.declared_lease(lifecycle)
    status = lifecycle.status_field
    ((sql,),) = connection.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?",
        (f"{table}_lease_expiry",),
    ).fetchall()
    assert sql == (
        f"CREATE INDEX {table}_lease_expiry ON {table} ({status}, {declared.expires_field})"
        f" WHERE {status} = '{lease.leased_status(lifecycle)}'"
    )


def fill_leased(connection: sqlite3.Connection, count: int) -> None:
    """``count`` leased monitor items, none expired at 1,000, and 10 pending ones."""
    with connection:
        connection.executemany(
            f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
            " notification_sha256, status, poll_attempts, failures, max_failures,"
            " next_poll_at, lease_owner, lease_token, lease_expires_at, created_at,"
            " updated_at) VALUES (?, ?, 's', 'published', ?, ?, 1, 0, 5, 1, ?, ?, ?, ?, ?)",
            [(f"e{i:07d}", f"n{i}", "a" * 64, "leased", "w", f"t{i}", 1e6 + i, float(i),
              float(i)) for i in range(count)]
            + [(f"p{i:07d}", f"np{i}", "a" * 64, "pending", None, None, None, 1e6 + i,
                1e6 + i) for i in range(10)],
        )


@pytest.mark.parametrize("analysed", [False, True])
@pytest.mark.parametrize("name", ["glance", "expired", "count_expired"])
def test_sqlite_asks_for_expired_leases_through_the_expiry_index(
    name: str, analysed: bool,
) -> None:
    """With many leases held, with and without statistics: the expiry is searched as a
    range of the expiry index, never by reading every leased record."""
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(MONITOR, connection, MonitorSchema("c" * 64))
    fill_leased(connection, 3000)
    if analysed:
        connection.execute("ANALYZE")
    statement = expiry_queries(store)[name]
    plan = [row[3] for row in connection.execute(
        f"EXPLAIN QUERY PLAN {statement}", params_of(store, name))]
    assert any(f"INDEX {TABLE}_lease_expiry (status=? AND lease_expires_at<?)" in line
               for line in plan), plan
    assert not any(f"{TABLE}_due (status=?)" in line for line in plan), plan
    assert not any(line.startswith(f"SCAN {TABLE}") and "INDEX" not in line
                   for line in plan), plan
    # and the answers are those of the rows themselves
    assert store.count_expired(1e3) == 0
    assert store.count_expired(1e6 + 2.5) == 3
    assert [r.event_id for r in store.expired_leases(1e6 + 2.5)] == [
        "e0000000", "e0000001", "e0000002"]


def test_a_postgresql_claim_asks_for_expired_leases_through_the_expiry_index() -> None:
    """On a table with 30,000 leases held and statistics: the one-statement claim's "no
    lease expired" and the expiry queries are index scans of the expiry index whose
    condition is the expiry's range, not a scan of every lease."""
    with temporary_schema() as name:
        connection = connect_in(name)
        try:
            store = PostgresStore(MONITOR, connection, MonitorSchema("c" * 64))
            connection.execute(
                f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
                " notification_sha256, status, poll_attempts, failures, max_failures,"
                " next_poll_at, lease_owner, lease_token, lease_expires_at, created_at,"
                " updated_at) SELECT 'e' || lpad(g::text, 7, '0'), 'n' || g, 's',"
                " 'published', repeat('a', 64), 'leased', 1, 0, 5, 1, 'w', 't' || g,"
                " 1e6 + g, g, g FROM generate_series(1, 30000) AS g"
            )
            connection.execute(f"VACUUM ANALYZE {TABLE}")
            claim = claim_in_place(store.statements)
            assert isinstance(claim, ClaimInPlace)
            inputs = {"now": 1e3, "worker_id": "w2", "lease_token": "t", "lease_seconds": 600.0}
            statements = [
                (expiry_queries(store)["expired"], [1e3]),
                (expiry_queries(store)["count_expired"], [1e3]),
                (claim.statement, [*(inputs[name] for name in claim.inputs),
                                   *store._guard_params]),
            ]
            raw = psycopg.RawCursor(connection)
            for statement, params in statements:
                cursor = raw if statement is claim.statement else connection.cursor()
                shown = "\n".join(row[0] for row in cursor.execute(
                    f"EXPLAIN {statement}", params).fetchall())
                assert f"Index Only Scan using {TABLE}_lease_expiry" in shown or (
                    f"Index Scan using {TABLE}_lease_expiry" in shown), shown
                assert "Index Cond: (lease_expires_at <=" in shown, shown
                assert f"Seq Scan on {TABLE} " not in shown, shown  # the meta table aside
            assert store.count_expired(1e6 + 2.5) == 2
            assert [r.event_id for r in store.expired_leases(1e6 + 2.5)] == [
                "e0000001", "e0000002"]
        finally:
            connection.close()
