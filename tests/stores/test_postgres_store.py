"""The PostgreSQL store's own promises: the monitor schema, its checks, SKIP LOCKED, errors.

The contract every store shares is in test_conformance.py; here is what only
PostgreSQL does. Without LIFECYCLES_TEST_POSTGRES_DSN the whole module skips at
collection, through ``require_postgres``, so the reason is reported once for all of
PostgreSQL (tests/support/postgres.py).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from support.monitor import CAPABILITIES, answer, notification
from support.postgres import Connect, pg_connect, pg_schema, require_postgres

from lifecycles.invariants.monitor import COLUMNS
from lifecycles.machines.monitor import MONITOR, MonitorInputs
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StorageBlocked
from lifecycles.monitor.schema import open_monitor_store, render
from lifecycles.stores._base import StoreUnavailable, UniqueViolation
from lifecycles.stores._postgres_dialect import PostgresDialect
from lifecycles.stores.postgres import PostgresStore, connect

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


def test_the_schema_lives_in_the_connections_search_path(
    pg_connect: Connect, pg_schema: str
) -> None:
    connection = pg_connect()
    DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    (schema,) = connection.execute(
        "SELECT table_schema FROM information_schema.tables"
        " WHERE table_name = 'cms_source_terminal_processing_meta'"
        " AND table_schema = current_schema()"
    ).fetchone()
    assert schema == pg_schema


def test_workers_starting_together_create_the_schema_once(pg_connect: Connect) -> None:
    connections = [pg_connect() for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(connections))

    def open_one(connection: Any) -> None:
        start.wait()
        try:
            DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert connections[0].execute(
        "SELECT count(*) FROM cms_source_terminal_processing_meta"
    ).fetchone() == (1,)


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


def test_a_non_autocommit_connection_works_and_is_left_idle(pg_connect: Connect) -> None:
    connection = pg_connect()
    connection.autocommit = False
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    register(monitor, 2)
    assert monitor.claim("w1", now=11) is not None
    assert monitor.health(now=11).counts["leased"] == 1
    assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    other = pg_connect()
    assert other.execute(
        "SELECT count(*) FROM cms_source_terminal_processing WHERE status = 'leased'"
    ).fetchone() == (1,)


def test_an_unreachable_server_has_a_stable_code() -> None:
    with pytest.raises(StoreUnavailable) as raised:
        connect("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2)
    assert raised.value.code == "lifecycles.database_unreachable"


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


# --- SKIP LOCKED ---------------------------------------------------------------------------


def test_claims_in_flight_never_wait_for_each_other_nor_share_an_item(
    pg_connect: Connect,
) -> None:
    holder = open_monitor_store(pg_connect(), CAPABILITIES)
    register(DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES), 3)
    hurried_connection = pg_connect()
    hurried_connection.execute("SET lock_timeout = '100ms'")  # waiting would fail the test
    hurried = open_monitor_store(hurried_connection, CAPABILITIES)
    with holder.transaction():
        held = holder.claim(MonitorInputs(now=11, worker_id="w1", lease_token="t1"))
        other = hurried.claim(MonitorInputs(now=11, worker_id="w2", lease_token="t2"))
    assert held is not None and other is not None
    assert (held.event_id, other.event_id) == ("e0", "e1")


def test_expired_leases_being_recovered_are_skipped_by_another_recovery(
    pg_connect: Connect,
) -> None:
    first = open_monitor_store(pg_connect(), CAPABILITIES)
    register(DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES), 2)
    for token in ("t1", "t2"):
        first.claim(MonitorInputs(now=11, worker_id="w1", lease_token=token, lease_seconds=5))
    second_connection = pg_connect()
    second_connection.execute("SET lock_timeout = '100ms'")
    second = open_monitor_store(second_connection, CAPABILITIES)
    late = MonitorInputs(now=100, worker_id="w2", lease_token="t3")
    with first.transaction():
        assert len(first.expired_leases(100)) == 2  # now locked by this transaction
        assert second.recover_expired(late) == []
        recovered = first.recover_expired(late)
    assert [r.status for r in recovered] == ["retry_wait", "retry_wait"]
    assert second.count_expired(100) == 0


def test_many_threads_claim_every_item_exactly_once(pg_connect: Connect) -> None:
    register(DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES), 60)
    claimed: list[str] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        store = open_monitor_store(pg_connect(), CAPABILITIES)
        count = 0
        while (record := store.claim(MonitorInputs(
            now=11, worker_id=f"w{worker}", lease_token=f"t{worker}-{count}"
        ))) is not None:
            count += 1
            with lock:
                claimed.append(record.event_id)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == sorted(f"e{n}" for n in range(60))


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


def test_generic_store_derives_types_from_the_record(pg_connect: Connect) -> None:
    connection = pg_connect()
    PostgresStore(MONITOR, connection)
    types = dict((name, kind) for name, kind, _ in columns(connection, "lifecycle_monitor"))
    assert types["poll_attempts"] == "bigint"
    assert types["next_poll_at"] == "double precision"
    assert types["event_id"] == "text"


def test_an_async_connection_is_refused_plainly() -> None:
    async_connection = psycopg.AsyncConnection.__new__(psycopg.AsyncConnection)
    with pytest.raises(TypeError, match="synchronous"):
        open_monitor_store(async_connection, CAPABILITIES)  # type: ignore[arg-type]


def test_statements_with_literal_percents_and_markers_run_as_psycopg_would(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    store = open_monitor_store(connection, CAPABILITIES)
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    register(monitor, 3)
    rows = store.run(
        "SELECT event_id, 7 %% 4 FROM cms_source_terminal_processing"
        " WHERE event_id LIKE 'e%%' AND max_failures = %s ORDER BY event_id",
        (5,),
    )
    assert rows == [("e0", 3), ("e1", 3), ("e2", 3)]
    assert store.run_write(
        "UPDATE cms_source_terminal_processing SET max_failures = %s WHERE event_id LIKE %s",
        (6, "e1%"),
    ) == 1
    assert store.run("SELECT %s || '%%'", ("a",)) == [("a%",)]
