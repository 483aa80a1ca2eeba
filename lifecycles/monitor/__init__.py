"""The terminal processing monitor, an app on the framework: a drop-in for the reference
``terminal_processing_monitor`` module (``from lifecycles.monitor import
DurableTerminalProcessingMonitor``).

The app's parts, one module each: ``facade`` (the drop-in class and its public names),
``errors`` (the stable error codes), ``values`` (what the facade returns), ``schema`` (+
``schema.sql``, the SQLite/PostgreSQL tables), ``cli`` (``lifecycles monitor ...``),
``hooks`` (what the generic tools ask of it), ``strategies`` (Hypothesis strategies). Its
table and exploration inputs are in :mod:`lifecycles.machines.monitor`, its record in
:mod:`lifecycles.invariants.monitor`.
"""

from lifecycles.monitor.facade import (
    NOTIFICATION_FIELDS,
    NOTIFICATION_SCHEMA,
    REMOTE_STATUSES,
    RULE_CODES,
    SCHEMA_VERSION,
    STATUS_SCHEMA,
    STATUSES,
    TERMINAL_STATUSES,
    DatabaseUnreachable,
    DurableTerminalProcessingMonitor,
    InputInvalid,
    LeaseLost,
    MonitorRow,
    StateInvalid,
    StorageBlocked,
    TerminalProcessingHealth,
    TerminalProcessingMonitorBlocked,
    TerminalProcessingOutcome,
    TerminalProcessingStatus,
    blocked,
    canonical_sha256,
    new_lease_token,
)

__all__ = [
    "NOTIFICATION_FIELDS",
    "NOTIFICATION_SCHEMA",
    "REMOTE_STATUSES",
    "RULE_CODES",
    "SCHEMA_VERSION",
    "STATUSES",
    "STATUS_SCHEMA",
    "TERMINAL_STATUSES",
    "DatabaseUnreachable",
    "DurableTerminalProcessingMonitor",
    "InputInvalid",
    "LeaseLost",
    "MonitorRow",
    "StateInvalid",
    "StorageBlocked",
    "TerminalProcessingHealth",
    "TerminalProcessingMonitorBlocked",
    "TerminalProcessingOutcome",
    "TerminalProcessingStatus",
    "blocked",
    "canonical_sha256",
    "new_lease_token",
]
