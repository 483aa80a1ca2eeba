"""The monitor's generated stateful test: every trigger, every invariant, on each store.

Built by :func:`lifecycles.testing.build_state_machine` from the exploration inputs
beside the monitor's table; the same machine runs on the in-memory reference store
and on SQLite files on disk with the reference schema, with its workers and without.
"""

from __future__ import annotations

from support.stateful import on_memory_and_sqlite

from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.responses import CAPABILITIES_SHA256
from lifecycles.monitor.schema import MonitorSchema

TestMonitorOnMemory, TestMonitorOnSQLite = on_memory_and_sqlite(
    MONITOR, "monitor", schema=lambda: MonitorSchema(CAPABILITIES_SHA256, MONITOR)
)
# Without workers the steps go to the moves from every status (a repeated registration
# of a record watching, say, which the workers pass through quickly) and to claims at
# any instant; the coverage report merges both.
TestMonitorMovesOnMemory, TestMonitorMovesOnSQLite = on_memory_and_sqlite(
    MONITOR, "monitor moves", schema=lambda: MonitorSchema(CAPABILITIES_SHA256, MONITOR),
    workers=0,
)
