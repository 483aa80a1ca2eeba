"""Claims flat in the number of leases held: "has a lease expired?", asked before every
claim, reads a partial index of the leased records by expiry, on SQLite and PostgreSQL,
instead of every leased record through the lease-order index.

The index is named from the table and generated from the lease declaration: its key the
expiry (led by the status on SQLite, whose planner has no statistics to prefer it
otherwise), its ``WHERE`` the leased status as a literal. Shown on the generic table of
the tests' tasks (tests/support/tasks.py); the same plans on the monitor's reference
schema are tests/stores/test_lease_expiry_index_on_the_monitor_schema.py.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest
from support.postgres import connect_in, temporary_schema
from support.tasks import TASKS

from lifecycles.machines import lease
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_claim import ClaimInPlace, claim_in_place
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore

TABLE = "lifecycle_tasks"


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


def test_the_leased_lifecycle_gets_a_partial_index_of_its_leases_by_expiry() -> None:
    connection = sqlite3.connect(":memory:")
    table = SQLiteStore(TASKS, connection).schema.table
    declared = lease.declared_lease(TASKS)
    status = TASKS.status_field
    ((sql,),) = connection.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?",
        (f"{table}_lease_expiry",),
    ).fetchall()
    assert sql == (
        f"CREATE INDEX {table}_lease_expiry ON {table} ({status}, {declared.expires_field})"
        f" WHERE {status} = '{lease.leased_status(TASKS)}'"
    )
    assert sql == (f"CREATE INDEX {TABLE}_lease_expiry ON {TABLE} (status, lease_expires_at)"
                   " WHERE status = 'running'")


def fill_leased(connection: sqlite3.Connection, count: int) -> None:
    """``count`` running tasks, none expired at 1,000, and 10 queued ones."""
    with connection:
        connection.executemany(
            f"INSERT INTO {TABLE} (task_id, status, attempts, max_attempts, available_at,"
            " worker_id, lease_token, lease_expires_at, last_error, updated_at)"
            " VALUES (?, ?, 0, 3, ?, ?, ?, ?, NULL, ?)",
            [(f"t{i:07d}", "running", 1.0, "w", f"k{i}", 1e6 + i, float(i))
             for i in range(count)]
            + [(f"q{i:07d}", "queued", 1e6 + i, None, None, None, 1e6 + i) for i in range(10)],
        )


@pytest.mark.parametrize("analysed", [False, True])
@pytest.mark.parametrize("name", ["glance", "expired", "count_expired"])
def test_sqlite_asks_for_expired_leases_through_the_expiry_index(
    name: str, analysed: bool,
) -> None:
    """With many leases held, with and without statistics: the expiry is searched as a
    range of the expiry index, never by reading every leased record.

    The generic table's glance also counts the due records and walks the claim order,
    through the due index led by the status (``status=?``) as the monitor's reference
    schema does not: there the due index is searched too, but for the due status only,
    so the leased status is asked about in the statement once, with the expiry."""
    connection = sqlite3.connect(":memory:")
    store = SQLiteStore(TASKS, connection)
    fill_leased(connection, 3000)
    if analysed:
        connection.execute("ANALYZE")
    statement = expiry_queries(store)[name]
    plan = [row[3] for row in connection.execute(
        f"EXPLAIN QUERY PLAN {statement}", params_of(store, name))]
    assert any(f"INDEX {TABLE}_lease_expiry (status=? AND lease_expires_at<?)" in line
               for line in plan), plan
    if name == "glance":
        assert statement.count("'running'") == 1, statement
        assert "status = 'running' AND lease_expires_at <= " in statement, statement
        assert statement.count("INDEXED BY") == statement.count(
            f"INDEXED BY {TABLE}_due WHERE status IN ('queued') ") == 1, statement
    else:
        assert not any(f"{TABLE}_due (status=?)" in line for line in plan), plan
    assert not any(line.startswith(f"SCAN {TABLE}") and "INDEX" not in line
                   for line in plan), plan
    # and the answers are those of the rows themselves
    assert store.count_expired(1e3) == 0
    assert store.count_expired(1e6 + 2.5) == 3
    assert [r.task_id for r in store.expired_leases(1e6 + 2.5)] == [
        "t0000000", "t0000001", "t0000002"]


def test_a_postgresql_claim_asks_for_expired_leases_through_the_expiry_index() -> None:
    """On a table with 30,000 leases held and statistics: the one-statement claim's "no
    lease expired" and the expiry queries are index scans of the expiry index whose
    condition is the expiry's range, not a scan of every lease."""
    with temporary_schema() as name:
        connection = connect_in(name)
        try:
            store = PostgresStore(TASKS, connection)
            connection.execute(
                f"INSERT INTO {TABLE} (task_id, status, attempts, max_attempts, available_at,"
                " worker_id, lease_token, lease_expires_at, last_error, updated_at)"
                " SELECT 't' || lpad(g::text, 7, '0'), 'running', 0, 3, 1, 'w', 'k' || g,"
                " 1e6 + g, NULL, g FROM generate_series(1, 30000) AS g"
            )
            connection.execute(f"VACUUM ANALYZE {TABLE}")
            claim = claim_in_place(store.statements)
            assert isinstance(claim, ClaimInPlace)
            inputs = {"now": 1e3, "worker_id": "w2", "lease_token": "k", "lease_seconds": 600.0}
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
                assert f"Seq Scan on {TABLE} " not in shown, shown
            assert store.count_expired(1e6 + 2.5) == 2
            assert [r.task_id for r in store.expired_leases(1e6 + 2.5)] == [
                "t0000001", "t0000002"]
        finally:
            connection.close()
