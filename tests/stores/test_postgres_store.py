"""The PostgreSQL store's own promises: its search path, SKIP LOCKED, transactions, errors.

The contract every store shares is in test_conformance.py; here is what only
PostgreSQL does, on the generic table of the tests' tasks (tests/support/tasks.py). The
monitor's reference schema and its facade's codes on PostgreSQL are
tests/monitor/test_monitor_postgres_store.py. Without LIFECYCLES_TEST_POSTGRES_DSN the
whole module skips at collection, through ``require_postgres``, so the reason is
reported once for all of PostgreSQL (tests/support/postgres.py).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from support.postgres import Connect, pg_connect, pg_schema, require_postgres
from support.tasks import TASKS, Task, TaskInputs, TaskStatus, new_task

from lifecycles.stores._base import StoreUnavailable, TransactionNested, UniqueViolation
from lifecycles.stores.postgres import PostgresStore, connect

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

require_postgres()  # without a server, the whole module skips: one line in the summary

pytestmark = pytest.mark.postgres

TABLE = "lifecycle_tasks"


def opened(connection: Any) -> PostgresStore[Task]:
    return PostgresStore(TASKS, connection)


def submit(store: PostgresStore[Task], count: int, now: float = 10.0) -> None:
    """Tasks t0..t<count - 1>, due at ``now``."""
    for index in range(count):
        store.insert(TASKS.create(new_task(f"t{index}", now=now)))


def claim_inputs(worker: str, token: str, now: float = 11.0,
                 lease_seconds: float = 30.0) -> TaskInputs:
    return TaskInputs(now=now, worker_id=worker, lease_token=token, lease_seconds=lease_seconds)


def columns(connection: Any, table: str) -> list[tuple[str, str, str]]:
    return connection.execute(  # type: ignore[no-any-return]
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()


# --- the schema ---------------------------------------------------------------------


def test_the_schema_lives_in_the_connections_search_path(
    pg_connect: Connect, pg_schema: str
) -> None:
    connection = pg_connect()
    opened(connection)
    (schema,) = connection.execute(
        "SELECT table_schema FROM information_schema.tables"
        " WHERE table_name = %s AND table_schema = current_schema()", (TABLE,)
    ).fetchone()
    assert schema == pg_schema


def test_workers_starting_together_create_the_schema_once(pg_connect: Connect) -> None:
    connections = [pg_connect() for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(connections))

    def open_one(connection: Any) -> None:
        start.wait()
        try:
            opened(connection)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert connections[0].execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = %s"
        " AND table_schema = current_schema()", (TABLE,)
    ).fetchone() == (1,)
    store = opened(connections[0])
    submit(store, 1)
    assert store.count_by_status()["queued"] == 1


def test_generic_store_derives_types_from_the_record(pg_connect: Connect) -> None:
    connection = pg_connect()
    opened(connection)
    types = dict((name, kind) for name, kind, _ in columns(connection, TABLE))
    assert types["attempts"] == types["max_attempts"] == "bigint"
    assert types["available_at"] == types["lease_expires_at"] == "double precision"
    assert types["task_id"] == types["status"] == "text"


# --- transactions and errors ----------------------------------------------------------


def test_a_connection_inside_a_transaction_is_refused(pg_connect: Connect) -> None:
    connection = pg_connect()
    opened(connection)
    busy = pg_connect()
    busy.autocommit = False
    busy.execute("SELECT 1")  # psycopg opened a transaction the store did not
    with pytest.raises(TransactionNested) as raised:
        opened(busy)
    assert raised.value.code == "lifecycles.transaction_nested"
    busy.rollback()


def test_a_non_autocommit_connection_works_and_is_left_idle(pg_connect: Connect) -> None:
    connection = pg_connect()
    connection.autocommit = False
    store = opened(connection)
    submit(store, 2)
    assert store.claim(claim_inputs("w1", "k1")) is not None
    assert store.count_by_status()["running"] == 1
    assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    other = pg_connect()
    assert other.execute(
        f"SELECT count(*) FROM {TABLE} WHERE status = 'running'"
    ).fetchone() == (1,)


def test_an_unreachable_server_has_a_stable_code() -> None:
    with pytest.raises(StoreUnavailable) as raised:
        connect("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2)
    assert raised.value.code == "lifecycles.database_unreachable"


def test_a_server_that_drops_the_connection_mid_claim_commits_nothing(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    store = opened(connection)
    submit(opened(pg_connect()), 1)
    admin = pg_connect()
    pid = connection.info.backend_pid

    def killed(record: Any) -> None:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        connection.execute("SELECT 1")  # the server has gone: this statement fails

    store.on_lease = killed
    with pytest.raises(StoreUnavailable) as raised:
        store.claim(claim_inputs("w1", "k1"))
    assert raised.value.code == "lifecycles.database_unreachable"
    task = opened(pg_connect()).get("t0")
    assert task is not None and task.status == TaskStatus.QUEUED


def test_a_unique_violation_inside_a_transaction_leaves_the_rest_usable(
    pg_connect: Connect,
) -> None:
    """An insert whose key is new but which repeats a value the table keeps unique (an
    operator's own unique index here: the generic table keeps only its key unique, and a
    repeated key is the idempotent insert) fails alone; the transaction goes on."""
    connection = pg_connect()
    store = opened(connection)
    connection.execute(f"CREATE UNIQUE INDEX {TABLE}_available_at_key ON {TABLE} (available_at)")
    with store.transaction():
        store.insert(TASKS.create(new_task("t1", now=1.0)))
        with pytest.raises(UniqueViolation):
            store.insert(TASKS.create(new_task("t2", now=1.0)))
        store.insert(TASKS.create(new_task("t3", now=3.0)))
    assert [r.task_id for r in store.scan()] == ["t1", "t3"]


def test_an_async_connection_is_refused_plainly() -> None:
    async_connection = psycopg.AsyncConnection.__new__(psycopg.AsyncConnection)
    with pytest.raises(TypeError, match="synchronous"):
        PostgresStore(TASKS, async_connection)  # type: ignore[arg-type]


def test_statements_with_literal_percents_and_markers_run_as_psycopg_would(
    pg_connect: Connect,
) -> None:
    store = opened(pg_connect())
    submit(store, 3)
    rows = store.run(
        f"SELECT task_id, 7 %% 4 FROM {TABLE}"
        " WHERE task_id LIKE 't%%' AND max_attempts = %s ORDER BY task_id",
        (3,),
    )
    assert rows == [("t0", 3), ("t1", 3), ("t2", 3)]
    assert store.run_write(
        f"UPDATE {TABLE} SET max_attempts = %s WHERE task_id LIKE %s", (6, "t1%"),
    ) == 1
    assert store.run("SELECT %s || '%%'", ("a",)) == [("a%",)]


# --- SKIP LOCKED ---------------------------------------------------------------------------


def test_claims_in_flight_never_wait_for_each_other_nor_share_an_item(
    pg_connect: Connect,
) -> None:
    holder = opened(pg_connect())
    submit(opened(pg_connect()), 3)
    hurried_connection = pg_connect()
    hurried_connection.execute("SET lock_timeout = '100ms'")  # waiting would fail the test
    hurried = opened(hurried_connection)
    with holder.transaction():
        held = holder.claim(claim_inputs("w1", "k1"))
        other = hurried.claim(claim_inputs("w2", "k2"))
    assert held is not None and other is not None
    assert (held.task_id, other.task_id) == ("t0", "t1")


def test_expired_leases_being_recovered_are_skipped_by_another_recovery(
    pg_connect: Connect,
) -> None:
    first = opened(pg_connect())
    submit(opened(pg_connect()), 2)
    for token in ("k1", "k2"):
        first.claim(claim_inputs("w1", token, lease_seconds=5))
    second_connection = pg_connect()
    second_connection.execute("SET lock_timeout = '100ms'")
    second = opened(second_connection)
    late = claim_inputs("w2", "k3", now=100)
    with first.transaction():
        assert len(first.expired_leases(100)) == 2  # now locked by this transaction
        assert second.recover_expired(late) == []
        recovered = first.recover_expired(late)
    assert [r.status for r in recovered] == [TaskStatus.QUEUED, TaskStatus.QUEUED]
    assert second.count_expired(100) == 0


def test_many_threads_claim_every_item_exactly_once(pg_connect: Connect) -> None:
    submit(opened(pg_connect()), 60)
    claimed: list[str] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        store = opened(pg_connect())
        count = 0
        while (record := store.claim(claim_inputs(f"w{worker}", f"k{worker}-{count}"))
               ) is not None:
            count += 1
            with lock:
                claimed.append(record.task_id)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == sorted(f"t{n}" for n in range(60))
