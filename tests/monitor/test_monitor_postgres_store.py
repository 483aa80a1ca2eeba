"""The monitor on PostgreSQL: its reference schema, the server's checks, its facade's codes.

The contract every store shares is in tests/stores/test_conformance.py, and what only the
PostgreSQL store does (its search path, SKIP LOCKED, transactions and errors) in
tests/stores/test_postgres_store.py, on the tests' tasks; here is what the monitor
keeps on PostgreSQL. Without LIFECYCLES_TEST_POSTGRES_DSN the whole module skips at
collection, through ``require_postgres``, so the reason is reported once for all of
PostgreSQL (tests/support/postgres.py).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from support.monitor import CAPABILITIES, answer, notification
from support.postgres import Connect, pg_connect, pg_schema, require_postgres

from lifecycles.invariants.monitor import COLUMNS
from lifecycles.machines.monitor import MonitorInputs
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StorageBlocked
from lifecycles.monitor.schema import open_monitor_store, render
from lifecycles.stores import StoreUnavailable, UniqueViolation
from lifecycles.stores.postgres import PostgresDialect

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

require_postgres()  # without a server, the whole module skips: one line in the summary

pytestmark = pytest.mark.postgres

OTHER_CAPABILITIES = "e" * 64


def dump(connection: Any) -> list[tuple[Any, ...]]:
    """Every row of both monitor tables (whatever columns they have), to show nothing changed."""
    rows: list[tuple[Any, ...]] = []
    for table in ("cms_source_terminal_processing_meta", "cms_source_terminal_processing"):
        exists = connection.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
        if exists:
            rows.extend(connection.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall())
    return rows


def columns(connection: Any, table: str) -> list[tuple[str, str, str]]:
    return connection.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()


def register(monitor: DurableTerminalProcessingMonitor, count: int, now: float = 10.0) -> None:
    for index in range(count):
        value, sha = notification(index)
        monitor.register(value, sha, now=now)


# --- the schema ---------------------------------------------------------------------


def test_the_monitor_schema_is_the_references_with_postgresql_types(pg_connect: Connect) -> None:
    connection = pg_connect()
    DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    found = columns(connection, "cms_source_terminal_processing")
    assert tuple(name for name, _, _ in found) == COLUMNS
    types = {name: kind for name, kind, _ in found}
    assert types["next_poll_at"] == types["created_at"] == "double precision"
    assert types["poll_attempts"] == types["max_failures"] == "integer"
    assert types["event_id"] == types["status"] == "text"
    not_null = {name for name, _, nullable in found if nullable == "NO"}
    assert {"event_id", "status", "next_poll_at", "created_at"} <= not_null
    assert "lease_token" not in not_null
    assert connection.execute(
        "SELECT singleton, schema_version, expected_capabilities_sha256"
        " FROM cms_source_terminal_processing_meta"
    ).fetchall() == [(1, 2, CAPABILITIES)]


@pytest.mark.parametrize(
    ("column", "value"),
    [("status", "'bogus'"), ("max_failures", "21"), ("lease_token", "'t'"), ("failures", "-1")],
)
def test_the_servers_own_checks_refuse_what_the_reference_refuses(
    pg_connect: Connect, column: str, value: str
) -> None:
    connection = pg_connect()
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    register(monitor, 1)
    before = dump(connection)
    with pytest.raises(psycopg.errors.CheckViolation):
        connection.execute(f"UPDATE cms_source_terminal_processing SET {column} = {value}")
    assert dump(connection) == before


def test_notification_id_stays_unique_and_a_collision_changes_nothing(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    register(monitor, 1)
    before = dump(connection)
    value, sha = notification(7, notification_id="n0")
    with pytest.raises(Exception) as raised:
        monitor.register(value, sha, now=11)
    assert raised.value.code == "terminal_processing_monitor.idempotency_collision"  # type: ignore[attr-defined]
    assert dump(connection) == before


def test_reopening_with_the_same_capabilities_continues(pg_connect: Connect) -> None:
    register(DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES), 2)
    again = DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES)
    assert again.health(now=11).counts["pending"] == 2


def test_other_capabilities_are_refused_and_nothing_changes(pg_connect: Connect) -> None:
    connection = pg_connect()
    register(DurableTerminalProcessingMonitor(connection, CAPABILITIES), 1)
    before = dump(connection)
    with pytest.raises(StorageBlocked) as raised:
        DurableTerminalProcessingMonitor(pg_connect(), OTHER_CAPABILITIES)
    assert raised.value.code == "terminal_processing_monitor.schema_altered"
    assert dump(connection) == before


@pytest.mark.parametrize(
    "alteration",
    [
        "ALTER TABLE cms_source_terminal_processing ADD COLUMN extra text",
        "ALTER TABLE cms_source_terminal_processing DROP COLUMN receiver_processed_at",
        "ALTER TABLE cms_source_terminal_processing ALTER COLUMN failures TYPE bigint",
        "ALTER TABLE cms_source_terminal_processing_meta ADD COLUMN extra text",
        "DELETE FROM cms_source_terminal_processing_meta",
        "DROP TABLE cms_source_terminal_processing",
        "DROP TABLE cms_source_terminal_processing_meta",
    ],
)
def test_an_altered_schema_is_refused_and_nothing_changes(
    pg_connect: Connect, alteration: str
) -> None:
    connection = pg_connect()
    register(DurableTerminalProcessingMonitor(connection, CAPABILITIES), 1)
    connection.execute(alteration)
    before = dump(connection)
    with pytest.raises(StorageBlocked) as raised:
        DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES)
    assert raised.value.code == "terminal_processing_monitor.schema_altered"
    assert dump(connection) == before


def make_version_1(connection: Any) -> None:
    connection.execute(
        "CREATE TABLE cms_source_terminal_processing_meta ("
        " singleton integer PRIMARY KEY CHECK (singleton = 1),"
        " schema_version integer NOT NULL)"
    )
    connection.execute("INSERT INTO cms_source_terminal_processing_meta VALUES (1, 1)")
    connection.execute(render("create_table", PostgresDialect()))


def test_an_empty_version_1_database_is_bound_to_the_capabilities(pg_connect: Connect) -> None:
    connection = pg_connect()
    make_version_1(connection)
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    assert connection.execute(
        "SELECT * FROM cms_source_terminal_processing_meta"
    ).fetchall() == [(1, 2, CAPABILITIES)]
    register(monitor, 1)
    assert monitor.health(now=11).counts["pending"] == 1


def test_a_version_1_database_with_rows_is_refused_as_legacy_unbound(pg_connect: Connect) -> None:
    connection = pg_connect()
    make_version_1(connection)
    connection.execute(
        "INSERT INTO cms_source_terminal_processing (event_id, notification_id, site_id,"
        " terminal_status, notification_sha256, status, poll_attempts, failures, max_failures,"
        " next_poll_at, created_at, updated_at)"
        " VALUES ('e1', 'n1', 's', 'published', %s, 'pending', 0, 0, 5, 1, 1, 1)",
        ("a" * 64,),
    )
    before = dump(connection)
    with pytest.raises(StorageBlocked) as raised:
        DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES)
    assert raised.value.code == "terminal_processing_monitor.legacy_unbound"
    assert dump(connection) == before


# --- transactions and errors ----------------------------------------------------------


def test_a_connection_inside_a_transaction_is_refused(pg_connect: Connect) -> None:
    connection = pg_connect()
    DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    busy = pg_connect()
    busy.autocommit = False
    busy.execute("SELECT 1")  # psycopg opened a transaction the store did not
    with pytest.raises(StorageBlocked) as raised:
        DurableTerminalProcessingMonitor(busy, CAPABILITIES)
    assert raised.value.code == "terminal_processing_monitor.transaction_nested"
    busy.rollback()


def test_a_closed_connection_has_a_stable_code_through_the_facade(pg_connect: Connect) -> None:
    connection = pg_connect()
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    register(monitor, 1)
    connection.close()
    with pytest.raises(Exception) as raised:
        monitor.claim("w1", now=11)
    assert raised.value.code == "terminal_processing_monitor.database_unreachable"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as raised:
        DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    assert raised.value.code == "terminal_processing_monitor.database_unreachable"  # type: ignore[attr-defined]


def test_a_server_that_drops_the_connection_mid_claim_commits_nothing(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    store = open_monitor_store(connection, CAPABILITIES)
    monitor = DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES)
    register(monitor, 1)
    admin = pg_connect()
    pid = connection.info.backend_pid

    def killed(record: Any) -> None:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        connection.execute("SELECT 1")  # the server has gone: this statement fails

    store.on_lease = killed
    with pytest.raises(StoreUnavailable) as raised:
        store.claim(MonitorInputs(now=11, worker_id="w1", lease_token="t1"))
    assert raised.value.code == "terminal_processing_monitor.database_unreachable"
    assert monitor.status("e0", now=11).status == "pending"


def test_a_unique_violation_inside_a_transaction_leaves_the_rest_usable(
    pg_connect: Connect,
) -> None:
    """On the monitor's exact schema, whose notification_id is unique."""
    from lifecycles.machines.monitor import new_record

    store = open_monitor_store(pg_connect(), CAPABILITIES)
    first = new_record(event_id="e1", notification_id="n1", site_id="s",
                       terminal_status="published", notification_sha256="a" * 64,
                       max_failures=3, now=1.0)
    clash = new_record(event_id="e2", notification_id="n1", site_id="s",
                       terminal_status="published", notification_sha256="a" * 64,
                       max_failures=3, now=1.0)
    third = new_record(event_id="e3", notification_id="n3", site_id="s",
                       terminal_status="published", notification_sha256="a" * 64,
                       max_failures=3, now=1.0)
    with store.transaction():
        store.insert(first)
        with pytest.raises(UniqueViolation):
            store.insert(clash)
        store.insert(third)
    assert [r.event_id for r in store.scan()] == ["e1", "e3"]


# --- the facade beside SQLite ---------------------------------------------------------


def test_run_once_on_postgresql_matches_sqlite(pg_connect: Connect, tmp_path: Any) -> None:
    import sqlite3

    monitors = [
        DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES),
        DurableTerminalProcessingMonitor(sqlite3.connect(tmp_path / "m.db"), CAPABILITIES),
    ]
    outcomes = []
    for monitor in monitors:
        register(monitor, 3)
        seen = []
        for kind in ("succeeded", "leased", "failed"):
            seen.append(monitor.run_once(lambda e, s, k=kind: answer(e, s, k), "w", now=20))
        seen.append(monitor.health(now=20))
        seen.extend(monitor.status(f"e{n}", now=20) for n in range(3))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]

