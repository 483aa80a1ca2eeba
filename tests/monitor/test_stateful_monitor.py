"""The monitor's generated stateful test: every trigger, every invariant, on each store.

Built by :func:`lifecycles.testing.build_state_machine` from the exploration inputs
beside the monitor's table; the same machine runs on the in-memory reference store
and on SQLite files on disk with the reference schema.
"""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
from pathlib import Path

from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor_inputs import CAPABILITIES_SHA256
from lifecycles.monitor_schema import MonitorSchema
from lifecycles.stores.memory import MemoryStore
from lifecycles.stores.sqlite import SQLiteStore
from lifecycles.testing import build_state_machine

_DATABASES = tempfile.TemporaryDirectory(prefix="lifecycles-stateful-")
_NUMBERS = itertools.count()


def memory_store() -> MemoryStore[MonitorRecord]:
    return MemoryStore(MONITOR)


def sqlite_store() -> SQLiteStore[MonitorRecord]:
    """A fresh database file per example, with the reference's schema.

    ``synchronous = OFF``: this test checks the SQL against the pure machine, not
    crash durability (the crash tests do that), and an fsync per step would make it
    ten times slower.
    """
    path = Path(_DATABASES.name) / f"monitor-{next(_NUMBERS)}.sqlite3"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA synchronous = OFF")
    return SQLiteStore(MONITOR, connection, MonitorSchema(CAPABILITIES_SHA256, MONITOR))


def close_sqlite(store: SQLiteStore[MonitorRecord]) -> None:
    store.connection.close()


TestMonitorOnMemory = build_state_machine(
    MONITOR, memory_store, name="monitor on MemoryStore"
).TestCase
TestMonitorOnSQLite = build_state_machine(
    MONITOR, sqlite_store, name="monitor on SQLiteStore", teardown=close_sqlite
).TestCase
