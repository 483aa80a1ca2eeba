"""Every store, opened the same way, for the conformance and agreement tests.

A :class:`StoreKind` opens a fresh, empty store for any lifecycle in a place of its
own (a temporary directory, a throw-away PostgreSQL schema), can damage one stored
record behind the store's back (to test validation on read), and cleans up.
Which kinds exist is decided at import time: a store module that is not there yet,
or PostgreSQL without ``LIFECYCLES_TEST_POSTGRES_DSN``, is listed with the reason
(``missing``). Suites leave the PostgreSQL kinds out rather than skipping each of their
tests, and skip once through ``support.postgres.require_postgres`` instead, so the
reason is reported once (see tests/support/postgres.py).
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from lifecycles.machines._core import Lifecycle
from lifecycles.stores._base import Store
from lifecycles.stores._memory import MemoryStore
from support.postgres import (
    DSN,
    SKIP_REASON,
    connect_in,
    create_schema,
    drop_schema,
)

MONITOR_NAME = "monitor"


class Opened:
    """One open store plus what it needs cleaning up."""

    def __init__(self, store: Store[Any], cleanup: Callable[[], None]) -> None:
        self.store = store
        self._cleanup = cleanup

    def close(self) -> None:
        self._cleanup()


@attrs.frozen
class StoreKind:
    """How to open one kind of store; ``missing`` says why it cannot run here.

    ``postgres`` marks the kinds that need the PostgreSQL server.
    """

    name: str
    open: Callable[[Lifecycle[Any, Any]], Opened]
    corrupt: Callable[[Store[Any], Any, str, Any], None]
    missing: str | None = None
    postgres: bool = False


# --- memory ------------------------------------------------------------------------


def _open_memory(lifecycle: Lifecycle[Any, Any]) -> Opened:
    return Opened(MemoryStore(lifecycle), lambda: None)


def _corrupt_memory(store: Store[Any], record: Any, field: str, value: Any) -> None:
    assert isinstance(store, MemoryStore)
    key = store.lifecycle.key_of(record)
    store._records[key] = attrs.evolve(store._records[key], **{field: value})


def _monitor_schema(lifecycle: Lifecycle[Any, Any]) -> Any:
    """The monitor's exact reference schema (one object for SQLite and PostgreSQL)."""
    from lifecycles.monitor.schema import MonitorSchema

    return MonitorSchema("c" * 64, lifecycle)


# --- SQLite: a file on disk --------------------------------------------------------


def _open_sqlite(lifecycle: Lifecycle[Any, Any], exact_monitor: bool = False) -> Opened:
    from lifecycles.stores.sqlite import SQLiteStore

    directory = tempfile.TemporaryDirectory(prefix="lifecycles-sqlite-")
    connection = sqlite3.connect(Path(directory.name) / "store.db")
    schema = _monitor_schema(lifecycle) if exact_monitor else None
    store = SQLiteStore(lifecycle, connection, schema)

    def cleanup() -> None:
        connection.close()
        directory.cleanup()

    return Opened(store, cleanup)


def _corrupt_sqlite(store: Store[Any], record: Any, field: str, value: Any) -> None:
    # Identifiers come from the lifecycle's own declaration, never from test data.
    table, key = store.schema.table, store.lifecycle.key_field  # type: ignore[attr-defined]
    store.connection.execute(  # type: ignore[attr-defined]
        f"UPDATE {table} SET {field} = ? WHERE {key} = ?",
        (json.dumps(value) if isinstance(value, dict | list) else value,
         store.lifecycle.key_of(record)),
    )
    store.connection.commit()  # type: ignore[attr-defined]


# --- files -------------------------------------------------------------------------


def _open_files(lifecycle: Lifecycle[Any, Any]) -> Opened:
    from lifecycles.stores._files import FilesStore

    directory = tempfile.TemporaryDirectory(prefix="lifecycles-files-")
    store = FilesStore(lifecycle, Path(directory.name) / "store")
    return Opened(store, directory.cleanup)


def _corrupt_files(store: Store[Any], record: Any, field: str, value: Any) -> None:
    from lifecycles.stores._files import canonical_json, stem_for

    status = str(store.lifecycle.status_of(record))
    directory = store.layout.directories[status]  # type: ignore[attr-defined]
    path = store.root / directory / (stem_for(store.lifecycle.key_of(record)) + ".json")  # type: ignore[attr-defined]
    values = json.loads(path.read_bytes())
    values[field] = value
    path.write_bytes(canonical_json(values) + b"\n")


# --- PostgreSQL --------------------------------------------------------------------


def _open_postgres(lifecycle: Lifecycle[Any, Any], exact_monitor: bool = False) -> Opened:
    from lifecycles.stores.postgres import PostgresStore

    schema_name = create_schema()
    connection = connect_in(schema_name)
    schema = _monitor_schema(lifecycle) if exact_monitor else None
    store = PostgresStore(lifecycle, connection, schema)

    def cleanup() -> None:
        connection.close()
        drop_schema(schema_name)

    return Opened(store, cleanup)


def _corrupt_postgres(store: Store[Any], record: Any, field: str, value: Any) -> None:
    from psycopg import sql

    table, key = store.schema.table, store.lifecycle.key_field  # type: ignore[attr-defined]
    encode = store._encoders[field]  # type: ignore[attr-defined]
    store.connection.execute(  # type: ignore[attr-defined]
        sql.SQL("UPDATE {} SET {} = %s WHERE {} = %s").format(
            sql.Identifier(table), sql.Identifier(field), sql.Identifier(key)
        ),
        (encode(value), store.lifecycle.key_of(record)),
    )


def _module_missing(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return f"{module} is not written yet"
    return None


KINDS: tuple[StoreKind, ...] = (
    StoreKind("memory", _open_memory, _corrupt_memory),
    StoreKind("sqlite", _open_sqlite, _corrupt_sqlite),
    StoreKind("files", _open_files, _corrupt_files,
              _module_missing("lifecycles.stores._files")),
    StoreKind("postgres", _open_postgres, _corrupt_postgres,
              None if DSN is not None else SKIP_REASON, postgres=True),
)

# The monitor's exact production schemas, besides the generic ones derived from its record.
MONITOR_SCHEMA_KINDS: tuple[StoreKind, ...] = (
    StoreKind("sqlite-monitor-schema", lambda lc: _open_sqlite(lc, True), _corrupt_sqlite),
    StoreKind("postgres-monitor-schema", lambda lc: _open_postgres(lc, True), _corrupt_postgres,
              None if DSN is not None else SKIP_REASON, postgres=True),
)


def kinds_for(lifecycle_name: str) -> tuple[StoreKind, ...]:
    """Every store kind a lifecycle runs on (the monitor also on its exact schemas)."""
    if lifecycle_name == MONITOR_NAME:
        return KINDS + MONITOR_SCHEMA_KINDS
    return KINDS
