"""The outbox's directory as the reference lays it out, on the general files store.

The reference's close outbox keeps ``pending/`` and ``delivered/`` with one
``<entry_id>.json`` each and a ``quarantine/`` directory, beside a ``.lock`` file, and a
record file is the canonical JSON of its values and a newline: ``OUTBOX_LAYOUT`` must
make the files store write exactly that, or a directory would not move between the two.
The files store's own promises, on a lifecycle made for its tests, are in
tests/stores/test_files_store.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycles import FilesStore, canonical_json
from lifecycles.machines.outbox import OUTBOX
from lifecycles.outbox.facade import OUTBOX_LAYOUT, CloseRequest
from lifecycles.outbox.facade import new_record as new_outbox_record

T0 = "2026-01-01T00:00:00+00:00"


def outbox_record(i: int) -> Any:
    request = CloseRequest(f"run-{i}", "tx", "complete", {"i": i})
    return OUTBOX.create(new_outbox_record(request, T0))


@pytest.fixture
def outbox_store(tmp_path: Path) -> FilesStore[Any]:
    return FilesStore(OUTBOX, tmp_path / "close-outbox", OUTBOX_LAYOUT)


def test_the_outbox_layout_is_the_references(outbox_store: FilesStore[Any]) -> None:
    assert sorted(p.name for p in outbox_store.root.iterdir()) == [
        ".lock", "delivered", "pending", "quarantine"
    ]
    record = outbox_store.insert(outbox_record(1))
    path = outbox_store.root / "pending" / f"{record.entry_id}.json"
    assert path.read_bytes() == canonical_json(record.values()) + b"\n"
