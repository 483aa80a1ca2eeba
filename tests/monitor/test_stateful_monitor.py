"""The monitor's generated stateful test: every trigger, every invariant, on each store.

Built by :func:`lifecycles.testing.build_state_machine` from the exploration inputs
beside the monitor's table; the same machine runs on the in-memory reference store
and on SQLite files on disk with the reference schema.
"""

from __future__ import annotations

from support.stateful import on_memory_and_sqlite

from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.responses import CAPABILITIES_SHA256
from lifecycles.monitor.schema import MonitorSchema

TestMonitorOnMemory, TestMonitorOnSQLite = on_memory_and_sqlite(
    MONITOR, "monitor", schema=lambda: MonitorSchema(CAPABILITIES_SHA256, MONITOR)
)
