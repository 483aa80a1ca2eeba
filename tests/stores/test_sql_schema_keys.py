"""A generic SQL store on a table that exists already: refused before anything is created in
it when it lacks its key or has other columns, on SQLite and PostgreSQL.

The store's insert is idempotent through ``ON CONFLICT`` on the key, and every
compare-and-set is one row's because the key is unique; a table made by hand without
the key would take a second row for one key. The store is the tests' leased tasks'
(tests/support/tasks.py); the monitor's own tables are tested in
tests/monitor/test_monitor_legacy_schema.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.postgres import Connect, pg_connect, pg_schema
from support.tasks import TASKS

from lifecycles.stores._base import SchemaMismatch
from lifecycles.stores._sql_dialect import Dialect
from lifecycles.stores._sql_schema import SQLSchema
from lifecycles.stores.sqlite import SQLiteStore

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

SCHEMA = SQLSchema(TASKS)


def table_without_key(dialect: Dialect, *, extra_column: bool = False) -> str:
    """The generic table's columns, typed as the store types them, no key."""
    columns = [
        f"{dialect.quote(column.name)} {dialect.type_names[column.kind]}".rstrip()
        for column in SCHEMA.columns
    ]
    if extra_column:
        columns.append("note " + dialect.type_names["text"])
    return f"CREATE TABLE {dialect.quote(SCHEMA.table)} ({', '.join(columns)})"


def catalogue(connection: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()


@pytest.mark.parametrize("extra_column", [False, True])
def test_sqlite_refuses_an_existing_table_before_creating_its_indexes(
    tmp_path: Path, extra_column: bool
) -> None:
    connection = sqlite3.connect(tmp_path / "generic.db", isolation_level=None)
    connection.execute(table_without_key(SQLiteStore.dialect, extra_column=extra_column))
    before = catalogue(connection)
    with pytest.raises(SchemaMismatch) as refused:
        SQLiteStore(TASKS, connection)
    assert refused.value.code == "lifecycles.schema_altered"
    expected = (f"{SCHEMA.table} has other columns note" if extra_column
                else f"{SCHEMA.table} does not keep task_id unique")
    assert str(refused.value).startswith(expected)
    assert catalogue(connection) == before


def test_sqlite_opens_an_existing_table_once_its_key_is_added(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "generic.db", isolation_level=None)
    connection.execute(table_without_key(SQLiteStore.dialect))
    connection.execute(f"CREATE UNIQUE INDEX generic_key ON {SCHEMA.table} (task_id)")
    store = SQLiteStore(TASKS, connection)
    assert store.count_by_status() == dict.fromkeys(
        (status.value for status in TASKS.statuses), 0
    )


@pytest.mark.postgres
@pytest.mark.parametrize("extra_column", [False, True])
def test_postgres_refuses_an_existing_table_before_creating_its_indexes(
    pg_connect: Connect, extra_column: bool
) -> None:
    from lifecycles.stores.postgres import PostgresStore

    connection = pg_connect()
    connection.execute(table_without_key(PostgresStore.dialect, extra_column=extra_column))
    indexes = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    with pytest.raises(SchemaMismatch) as refused:
        PostgresStore(TASKS, pg_connect())
    assert refused.value.code == "lifecycles.schema_altered"
    expected = (f"{SCHEMA.table} has other columns ('note', 'text')" if extra_column
                else f"{SCHEMA.table} does not keep task_id unique")
    assert str(refused.value).startswith(expected)
    assert connection.execute(indexes).fetchall() == []
