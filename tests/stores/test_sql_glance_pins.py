"""When the SQL store's glance (``SQLStore.glance``) may answer, and when it must not.

The glance is the claim's shortcut: one read outside any transaction, on which a claim
is decided and then written by a compare-and-set of the whole record. It is offered
only where it is sound: on SQLite (the dialect ``glances``), outside a transaction
(inside one the protocol's own queries run under its lock), and once the store has
verified the schema it reads. Anywhere else it answers ``None`` and reads nothing, so
the claim takes the one-transaction protocol. A code-mutation study found each of the
three conditions unguarded (issue 26).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.postgres import Connect, pg_connect, pg_schema
from support.tasks import TASKS, TaskInputs, new_task

from lifecycles.machines import lease
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

NOW = 200.0


def queued(task_id: str = "t001") -> Any:
    return new_task(task_id, now=100.0)


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    opened = sqlite3.connect(tmp_path / "store.sqlite3")
    yield opened
    opened.close()


def statements_during(connection: sqlite3.Connection, call: Any) -> tuple[Any, list[str]]:
    """What ``call()`` returns, and the statements SQLite ran meanwhile."""
    seen: list[str] = []
    connection.set_trace_callback(seen.append)
    try:
        result = call()
    finally:
        connection.set_trace_callback(None)
    return result, [sql for sql in seen if not sql.startswith("--")]


def test_on_sqlite_outside_a_transaction_the_glance_reads_once(
    connection: sqlite3.Connection,
) -> None:
    store = SQLiteStore(TASKS, connection)
    due = store.insert(queued())
    glance, ran = statements_during(connection, lambda: store.glance(NOW))
    assert glance == lease.Glance(expired=False, first_due=due)
    assert len(ran) == 1 and ran[0].startswith("SELECT EXISTS")


def test_inside_a_transaction_there_is_no_glance(connection: sqlite3.Connection) -> None:
    store = SQLiteStore(TASKS, connection)
    store.insert(queued())
    with store.transaction():
        glance, ran = statements_during(connection, lambda: store.glance(NOW))
        assert glance is None and ran == []
        with store.transaction():  # a savepoint is inside the transaction too
            assert store.glance(NOW) is None
    assert store.glance(NOW) is not None  # and once it is over, the glance is back


def test_a_store_that_never_verified_its_schema_does_not_glance(
    connection: sqlite3.Connection,
) -> None:
    """A store whose opening failed before its schema was confirmed (here a hook of a
    subclass raises after the schema was ensured) reads nothing outside a transaction,
    even with a valid table and a due record behind it."""
    SQLiteStore(TASKS, connection).insert(queued())
    unfinished: list[SQLiteStore[Any]] = []

    class FailsToOpen(SQLiteStore[Any]):
        def ensure_rules_indexes(self) -> None:
            unfinished.append(self)
            raise RuntimeError("the opening fails here")

    with pytest.raises(RuntimeError, match="the opening fails here"):
        FailsToOpen(TASKS, connection)
    (store,) = unfinished
    glance, ran = statements_during(connection, lambda: store.glance(NOW))
    assert glance is None and ran == []
    assert not connection.in_transaction


def test_on_postgresql_there_is_no_glance(pg_connect: Connect) -> None:
    """PostgreSQL claims in one statement instead (``claim_in_place``), row locks and
    all: a glance would read without them."""
    store = PostgresStore(TASKS, pg_connect())
    store.insert(queued())
    assert store.glance(NOW) is None
    claimed = store.claim(
        TaskInputs(now=NOW, worker_id="w-1", lease_token="t1", lease_seconds=30.0))
    assert claimed is not None and claimed.lease_token == "t1"
