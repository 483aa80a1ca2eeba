"""The outbox's generated stateful test: every trigger, every invariant, on each store.

Built by :func:`lifecycles.testing.build_state_machine` from the exploration inputs
beside the outbox table; it runs on the in-memory reference store and on the files
store with the reference's directory layout (real files, fsync'ed).
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from lifecycles.invariants.outbox import OutboxRecord
from lifecycles.machines.outbox import OUTBOX
from lifecycles.outbox.facade import OUTBOX_LAYOUT
from lifecycles.stores import FilesStore, MemoryStore
from lifecycles.testing import build_state_machine

_ROOTS = tempfile.TemporaryDirectory(prefix="lifecycles-stateful-outbox-")
_NUMBERS = itertools.count()


def memory_store() -> MemoryStore[OutboxRecord]:
    return MemoryStore(OUTBOX)


def files_store() -> FilesStore[OutboxRecord]:
    """A fresh outbox directory per example, laid out as the reference lays it out."""
    return FilesStore(OUTBOX, Path(_ROOTS.name) / f"outbox-{next(_NUMBERS)}", OUTBOX_LAYOUT)


TestOutboxOnMemory = build_state_machine(
    OUTBOX, memory_store, name="outbox on MemoryStore"
).TestCase
TestOutboxOnFiles = build_state_machine(OUTBOX, files_store, name="outbox on FilesStore").TestCase
