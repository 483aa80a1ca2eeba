"""The stores a generated stateful test runs on: in memory, and a SQLite file per example."""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lifecycles.stores._memory import MemoryStore
from lifecycles.stores.sqlite import SQLiteStore
from lifecycles.testing import build_state_machine

_DATABASES = tempfile.TemporaryDirectory(prefix="lifecycles-stateful-")
_NUMBERS = itertools.count()


def close_sqlite(store: SQLiteStore[Any]) -> None:
    store.connection.close()


def on_memory_and_sqlite(
    lifecycle: Any, label: str, schema: Callable[[], Any] | None = None,
    workers: int | None = None,
) -> tuple[type, type]:
    """The generated test cases of ``lifecycle`` on a ``MemoryStore`` and on a
    ``SQLiteStore`` with a fresh database file per example (``schema()``'s schema, or
    the generic one derived from the record), labelled ``"<label> on <store>"``; the
    SQLite one also checks each workers' step (or, with ``workers=0``, the protocol's
    claims at any instant, ``claim_due``) against the memory store.

    ``synchronous = OFF``: these tests check the SQL against the pure machine, not crash
    durability (the crash tests do that), and an fsync per step would make them ten
    times slower.
    """

    def memory_store() -> MemoryStore[Any]:
        return MemoryStore(lifecycle)

    def sqlite_store() -> SQLiteStore[Any]:
        connection = sqlite3.connect(Path(_DATABASES.name) / f"{label}-{next(_NUMBERS)}.db")
        connection.execute("PRAGMA synchronous = OFF")
        if schema is None:
            return SQLiteStore(lifecycle, connection)
        return SQLiteStore(lifecycle, connection, schema())

    return (
        # The memory store is the protocol's reference: its machine runs the moves alone.
        build_state_machine(lifecycle, memory_store, name=f"{label} on MemoryStore",
                            lease_protocol=False, workers=workers).TestCase,
        build_state_machine(
            lifecycle, sqlite_store, name=f"{label} on SQLiteStore", teardown=close_sqlite,
            workers=workers,
        ).TestCase,
    )
