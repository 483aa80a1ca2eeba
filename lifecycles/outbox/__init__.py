"""The close outbox, an app on the framework: a drop-in for the reference ``close_outbox``
module (``from lifecycles.outbox import CloseOutbox``).

The app's parts, one module each: ``facade`` (the drop-in class, its errors and layout),
``cli`` (``lifecycles outbox ...``), ``hooks`` (what the generic tools ask of it),
``strategies`` (Hypothesis strategies). Its table and exploration inputs are in
:mod:`lifecycles.machines.outbox`, its record in :mod:`lifecycles.invariants.outbox`.
"""

from lifecycles.outbox.facade import (
    OUTBOX_LAYOUT,
    OUTBOX_VERSION,
    CloseOutbox,
    CloseOutboxError,
    CloseRequest,
    EnqueueReceipt,
    InvalidCloseRequestError,
    OutboxConflictError,
    OutboxCorruptError,
    OutboxReentryError,
    OutboxStorageDamagedError,
    OutboxStorageError,
    OutboxUnsafePathError,
    ReplayReport,
    default_state_dir,
)

__all__ = [
    "OUTBOX_LAYOUT",
    "OUTBOX_VERSION",
    "CloseOutbox",
    "CloseOutboxError",
    "CloseRequest",
    "EnqueueReceipt",
    "InvalidCloseRequestError",
    "OutboxConflictError",
    "OutboxCorruptError",
    "OutboxReentryError",
    "OutboxStorageDamagedError",
    "OutboxStorageError",
    "OutboxUnsafePathError",
    "ReplayReport",
    "default_state_dir",
]
