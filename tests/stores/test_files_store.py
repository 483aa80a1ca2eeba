"""The general files store: layout, durability discipline, locking, links, quarantine.

The contract every store shares is checked by tests/stores/test_conformance.py; these are the
files store's own promises, on real directories, for lifecycles made for these tests: the
leased tasks (tests/support/tasks.py) in the default layout, one directory per status, and
the parcels (tests/support/files_layouts.py) in a layout of their own, with a quarantine
status and a reason field, as a facade declares one. The outbox's own layout, as the
reference sees it, is tested in tests/outbox/test_outbox_layout.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.files_layouts import PARCELS, PARCELS_LAYOUT, ParcelInputs, new_parcel
from support.tasks import TASKS, TaskInputs, new_task

from lifecycles.stores._base import StaleRecord
from lifecycles.stores._files import (
    FilesLayout,
    FilesStore,
    Listing,
    Reentered,
    StoreMissing,
    UnsafePath,
    UntrustedRecord,
    canonical_json,
    quarantine_stem,
    stem_for,
)

T0 = 1000.0
TESTS = Path(__file__).resolve().parents[1]


def task(i: int, now: float = 100.0) -> Any:
    """Task t<i>, due at ``now - i``: the higher ``i``, the earlier it is due."""
    return TASKS.create(new_task(f"t{i:03d}", now=now - i))


def parcel(i: int) -> Any:
    return PARCELS.create(new_parcel(f"p{i:03d}"))


@pytest.fixture
def task_store(tmp_path: Path) -> FilesStore[Any]:
    return FilesStore(TASKS, tmp_path / "tasks")


@pytest.fixture
def parcel_store(tmp_path: Path) -> FilesStore[Any]:
    return FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)


def tree(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = None if path.is_dir() else path.read_bytes()
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- layout and modes ---------------------------------------------------------------


def test_default_layout_is_one_directory_per_status_plus_quarantine(
    task_store: FilesStore[Any],
) -> None:
    names = sorted(p.name for p in task_store.root.iterdir())
    assert names == sorted([".lock", "quarantine", *(s.value for s in TASKS.statuses)])
    assert task_store.layout.search_order[:2] == ("succeeded", "failed")


def test_a_declared_layout_has_its_directories_and_a_record_file_is_canonical_json(
    parcel_store: FilesStore[Any],
) -> None:
    """A layout a facade declares (directory names of its own, the quarantine status in
    the quarantine directory) is what the store creates, and a record's file is the
    canonical JSON of its values and a newline."""
    assert sorted(p.name for p in parcel_store.root.iterdir()) == [
        ".lock", "delivered", "pending", "quarantine"
    ]
    record = parcel_store.insert(parcel(1))
    path = parcel_store.root / "pending" / f"{record.parcel_id}.json"
    assert path.read_bytes() == canonical_json(parcel_store.values_of(record)) + b"\n"


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o777])
def test_directories_are_0700_and_files_0600_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    previous = os.umask(umask)
    try:
        store = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
        record = store.insert(parcel(1))
        store.fire(record, "quarantine", ParcelInputs(T0, reason="testing modes"))
        store.insert(parcel(2))
    finally:
        os.umask(previous)
    for path in [store.root, *store.root.rglob("*")]:
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path


def test_existing_loose_modes_are_tightened(tmp_path: Path) -> None:
    root = tmp_path / "parcels"
    (root / "pending").mkdir(parents=True, mode=0o755)
    os.chmod(root, 0o755)
    (root / ".lock").touch(mode=0o644)
    os.chmod(root / ".lock", 0o644)
    FilesStore(PARCELS, root, PARCELS_LAYOUT)
    assert (mode(root), mode(root / "pending"), mode(root / ".lock")) == (0o700, 0o700, 0o600)


def test_without_create_nothing_is_created(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing):
        FilesStore(PARCELS, tmp_path / "absent" / "parcels", PARCELS_LAYOUT, create=False)
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize(
    "changes",
    [
        {"directories": {"pending": "../x", "delivered": "d", "quarantined": "quarantine"}},
        {"directories": {"pending": "same", "delivered": "same", "quarantined": "quarantine"}},
        {"directories": {"pending": "p", "delivered": "d"}},
        {"quarantine_directory": "elsewhere"},
        {"search_order": ("pending",)},
        {"lock_name": "../.lock"},
    ],
)
def test_an_unsafe_or_inconsistent_layout_is_refused(tmp_path: Path, changes: Any) -> None:
    layout = attrs.evolve(PARCELS_LAYOUT, **changes)
    with pytest.raises(ValueError):
        FilesStore(PARCELS, tmp_path / "parcels", layout)
    assert not (tmp_path / "parcels").exists()


# --- names are never built from unchecked input --------------------------------------


@pytest.mark.parametrize("key", ["../../etc/passwd", "a/b", ".hidden", "x" * 300, "caf\u00e9", ""])
def test_an_unsafe_key_becomes_a_hashed_file_name(key: str) -> None:
    stem = stem_for(key)
    assert stem.startswith("_") and len(stem) == 65 and "/" not in stem


def test_a_key_with_nul_is_refused() -> None:
    with pytest.raises(ValueError):
        stem_for("a\0b")


def test_a_record_with_an_awkward_key_round_trips(task_store: FilesStore[Any]) -> None:
    record = attrs.evolve(task(1), task_id="..")
    task_store.insert(record)
    assert task_store.get("..") == record
    (name,) = os.listdir(task_store.root / "queued")
    assert name == stem_for("..") + ".json"
    assert [r.task_id for r in task_store.scan()] == [".."]


# --- atomic, durable writes and transactions -----------------------------------------


def test_no_temporary_file_is_left_behind(parcel_store: FilesStore[Any]) -> None:
    record = parcel_store.insert(parcel(1))
    record = parcel_store.fire(record, "attempt", ParcelInputs(T0))
    parcel_store.fire(record, "deliver", ParcelInputs(T0))
    names = [p.name for p in parcel_store.root.rglob("*") if p.is_file()]
    assert sorted(names) == [".lock", f"{record.parcel_id}.json"]


def test_a_stray_temporary_file_is_ignored(parcel_store: FilesStore[Any]) -> None:
    stray = parcel_store.root / "pending" / ".abc.json.0123456789abcdef.tmp"
    stray.write_bytes(b"{half")
    assert parcel_store.first_names("pending", 10) == Listing([], 0, set())
    assert list(parcel_store.scan()) == []


def test_writes_inside_a_transaction_are_staged_until_it_ends(
    parcel_store: FilesStore[Any],
) -> None:
    with parcel_store.transaction():
        record = parcel_store.insert(parcel(1))
        assert parcel_store.get(record.parcel_id) == record
        assert parcel_store.count_by_status()["pending"] == 1
        assert os.listdir(parcel_store.root / "pending") == []
    assert os.listdir(parcel_store.root / "pending") == [f"{record.parcel_id}.json"]


def test_an_inner_transaction_is_a_savepoint(parcel_store: FilesStore[Any]) -> None:
    with parcel_store.transaction():
        kept = parcel_store.insert(parcel(1))
        with pytest.raises(RuntimeError), parcel_store.transaction():
            parcel_store.insert(parcel(2))
            raise RuntimeError("undo the inner one only")
        attempted = parcel_store.fire(kept, "attempt", ParcelInputs(T0))
    assert [r.parcel_id for r in parcel_store.scan()] == [kept.parcel_id]
    assert parcel_store.get(kept.parcel_id) == attempted


def test_a_stale_write_is_refused(parcel_store: FilesStore[Any]) -> None:
    record = parcel_store.insert(parcel(1))
    attempted = parcel_store.fire(record, "attempt", ParcelInputs(T0))
    parcel_store.fire(attempted, "deliver", ParcelInputs(T0))
    before = tree(parcel_store.root)
    with pytest.raises(StaleRecord):
        parcel_store.fire(attempted, "fail_delivery", ParcelInputs(T0, error="late"))
    assert tree(parcel_store.root) == before


def test_a_move_leaves_one_copy_and_quarantine_by_row_writes_a_reason(
    parcel_store: FilesStore[Any],
) -> None:
    record = parcel_store.insert(parcel(1))
    parcel_store.fire(record, "quarantine", ParcelInputs(T0, reason="  operator   said so "))
    assert os.listdir(parcel_store.root / "pending") == []
    names = sorted(os.listdir(parcel_store.root / "quarantine"))
    assert len(names) == 2 and names[0].endswith(".error.json")
    reason = json.loads((parcel_store.root / "quarantine" / names[0]).read_bytes())
    assert reason["entry_id"] == record.parcel_id and reason["reason"] == "operator said so"
    assert parcel_store.get(record.parcel_id).state == "quarantined"
    assert parcel_store.has_quarantined(record.parcel_id)
    assert parcel_store.count_by_status() == {"pending": 0, "delivered": 0, "quarantined": 1}


def test_a_failed_directory_sync_after_a_move_leaves_the_source_only(
    parcel_store: FilesStore[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = parcel_store.fire(parcel_store.insert(parcel(1)), "attempt", ParcelInputs(T0))
    before = tree(parcel_store.root)
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        parcel_store.fire(record, "deliver", ParcelInputs(T0))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert tree(parcel_store.root) == before
    assert parcel_store.get(record.parcel_id) == record


# --- locking ---------------------------------------------------------------------------


def test_the_lock_is_reentrant_across_store_objects_in_one_thread(tmp_path: Path) -> None:
    first = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    second = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    with first.locked(), second.locked(), first.locked():
        second.insert(parcel(1))
        assert first.count("pending") == 1


def test_threads_take_turns(tmp_path: Path) -> None:
    store = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    other = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    events: list[str] = []
    entered = threading.Event()

    def contender() -> None:
        entered.set()
        with other.locked():
            events.append("other in")

    with store.locked():
        thread = threading.Thread(target=contender)
        thread.start()
        entered.wait(5)
        time.sleep(0.2)
        events.append("first out")
    thread.join(5)
    assert events == ["first out", "other in"]


HOLD_LOCK = """
import sys
sys.path.insert(0, sys.argv[2])
from support.files_layouts import PARCELS, PARCELS_LAYOUT
from lifecycles.stores._files import FilesStore
store = FilesStore(PARCELS, sys.argv[1], PARCELS_LAYOUT)
with store.locked():
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_the_lock_excludes_another_process(tmp_path: Path) -> None:
    store = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(store.root), str(TESTS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "held"
        done = threading.Event()

        def insert() -> None:
            store.insert(parcel(1))
            done.set()

        worker = threading.Thread(target=insert)
        worker.start()
        assert not done.wait(0.5), "the insert ran while another process held the lock"
        child.stdin.write("\n")
        child.stdin.flush()
        assert done.wait(10)
        worker.join(5)
    finally:
        child.kill()
        child.wait(10)
    assert store.count("pending") == 1


# --- symbolic links are never followed -------------------------------------------------


@pytest.mark.parametrize("planted", ["pending", "quarantine", ".lock"])
def test_a_link_planted_at_a_directory_or_the_lock_is_refused(
    parcel_store: FilesStore[Any], tmp_path: Path, planted: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = parcel_store.root / planted
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    os.symlink(elsewhere, path)
    with pytest.raises(UnsafePath):
        parcel_store.insert(parcel(1))
    with pytest.raises(UnsafePath):
        FilesStore(PARCELS, parcel_store.root, PARCELS_LAYOUT)
    assert os.listdir(elsewhere) == []


def test_a_link_planted_at_the_store_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "parcels")
    with pytest.raises(UnsafePath):
        FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    assert os.listdir(tmp_path / "real") == []


def test_a_link_planted_at_a_record_path_is_untrusted_and_never_followed(
    parcel_store: FilesStore[Any], tmp_path: Path
) -> None:
    record = parcel(1)
    target = tmp_path / "secret.json"
    target.write_bytes(canonical_json(parcel_store.values_of(record)) + b"\n")
    os.chmod(target, 0o644)
    os.symlink(target, parcel_store.root / "pending" / f"{record.parcel_id}.json")
    with pytest.raises(UntrustedRecord) as refused:
        parcel_store.get(record.parcel_id)
    assert refused.value.rules == ("record_is_regular_file",)
    moved = parcel_store.quarantine_material("pending", f"{record.parcel_id}.json", "a link")
    assert os.path.islink(parcel_store.root / "quarantine" / moved)
    assert target.read_bytes() == canonical_json(parcel_store.values_of(record)) + b"\n"
    assert mode(target) == 0o644  # the link was moved, its target never touched


def test_quarantine_material_refuses_a_path(parcel_store: FilesStore[Any]) -> None:
    before = tree(parcel_store.root)
    for name in ["../x.json", "a/b.json", "..", ".", "x\0.json"]:
        with pytest.raises(ValueError):
            parcel_store.quarantine_material("pending", name, "reason")
    assert tree(parcel_store.root) == before


# --- listing: one pass, smallest names, exact count --------------------------------------


def test_first_names_are_the_smallest_and_the_count_is_exact(
    parcel_store: FilesStore[Any],
) -> None:
    names = [f"{i:032x}.json" for i in (7, 3, 11, 5, 1, 9)]
    for name in names:
        (parcel_store.root / "pending" / name).write_bytes(b"{}")
    (parcel_store.root / "pending" / ".x.tmp").write_bytes(b"")
    (parcel_store.root / "pending" / "notes.txt").write_bytes(b"")
    listing = parcel_store.first_names("pending", 3)
    assert listing == Listing(sorted(names)[:3], 6, set())
    assert parcel_store.count("pending") == 6


# --- a leased lifecycle lives here too, leases included -----------------------------------


def claim_inputs(now: float, token: str) -> TaskInputs:
    return TaskInputs(now=now, worker_id="w-" + token, lease_token=token, lease_seconds=30.0)


def test_a_leased_lifecycle_claims_recovers_and_counts(task_store: FilesStore[Any]) -> None:
    """The claim takes the task due first; once its lease expired, the next claim
    recovers it (the expiry row: counted as an attempt, back in the queue with its
    backoff) before it takes the next due task; the directories follow the statuses."""
    for i in range(4):
        task_store.insert(task(i))
    assert task_store.count_due(100.0) == 4
    first = task_store.claim(claim_inputs(200.0, "t1"))
    assert first.task_id == "t003"  # due first
    assert task_store.count_by_status()["running"] == 1
    assert task_store.count_expired(230.0) == 1
    assert task_store.expired_leases(229.0) == []
    second = task_store.claim(claim_inputs(230.0, "t2"))
    assert second.task_id == "t002" and second.lease_token == "t2"
    recovered = task_store.get("t003")
    assert (recovered.status, recovered.attempts, recovered.lease_token) == ("queued", 1, None)
    assert recovered.last_error == "lease_expired"
    assert sorted(os.listdir(task_store.root / "running")) == ["t002.json"]
    assert sorted(os.listdir(task_store.root / "queued")) == [
        "t000.json", "t001.json", "t003.json"]


def test_one_corrupt_file_never_blocks_the_queue(task_store: FilesStore[Any]) -> None:
    for i in range(3):
        task_store.insert(task(i))
    bad = task_store.root / "queued" / "t002.json"
    values = json.loads(bad.read_bytes())
    values["attempts"] = 99  # breaks attempts_within_max
    bad.write_bytes(canonical_json(values) + b"\n")
    claimed = task_store.claim(claim_inputs(200.0, "t1"))
    assert claimed.task_id == "t001"
    assert not bad.exists()
    quarantined = sorted(os.listdir(task_store.root / "quarantine"))
    assert len(quarantined) == 2
    reason = json.loads((task_store.root / "quarantine" / quarantined[0]).read_bytes())
    assert reason["entry_id"] == "t002" and "attempts_within_max" in reason["reason"]


def test_a_record_in_the_wrong_directory_is_untrusted(task_store: FilesStore[Any]) -> None:
    record = task_store.insert(task(1))
    os.rename(task_store.root / "queued" / "t001.json",
              task_store.root / "running" / "t001.json")
    with pytest.raises(UntrustedRecord) as refused:
        task_store.get(record.task_id)
    assert refused.value.rules == ("status_matches_directory",)
    assert refused.value.detail == "running directory contains state 'queued'"


@pytest.fixture
def cwd_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def test_a_relative_root_works(cwd_tmp: Path) -> None:
    store = FilesStore(TASKS, Path("relative"))
    store.insert(task(1))
    assert (cwd_tmp / "relative" / "queued" / "t001.json").is_file()


def test_layout_for_lifecycle_accepts_options(tmp_path: Path) -> None:
    layout = FilesLayout.for_lifecycle(TASKS, noun="task record", max_file_bytes=4096)
    store = FilesStore(TASKS, tmp_path / "t", layout)
    (store.root / "queued" / "t001.json").write_bytes(b" " * 5000)
    with pytest.raises(UntrustedRecord) as refused:
        store.get("t001")
    assert refused.value.rules == ("record_size_bound",)
    assert refused.value.detail == "task record exceeds the durable size bound"


# --- recovery after a crash ------------------------------------------------------------


def test_temporary_files_of_dead_writers_are_swept_by_the_next_listing(tmp_path: Path) -> None:
    store = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    ours = store.root / "pending" / ".abc.json.0123456789abcdef.tmp"
    theirs = store.root / "delivered" / f".abc.json.{'f' * 32}.tmp"
    unrelated = store.root / "pending" / ".notes.tmp"
    for path in (ours, theirs, unrelated):
        path.write_bytes(b"{half")
    reader = FilesStore(PARCELS, store.root, PARCELS_LAYOUT, create=False)
    assert reader.count("pending") == 0 and reader.count("delivered") == 0
    assert ours.exists() and theirs.exists(), "a read-only store removes nothing"
    assert store.first_names("pending", 10) == Listing([], 0, set())
    assert store.count_by_status() == {"pending": 0, "delivered": 0, "quarantined": 0}
    assert not ours.exists() and not theirs.exists() and unrelated.exists()


def test_sweep_removes_only_what_a_dead_writer_leaves(tmp_path: Path) -> None:
    """A writer killed mid-move leaves its temp file in delivered/ (or quarantine/), which
    no routine query lists: sweep() removes it (and the quarantine's listing does), and
    only a writer's leftover: a regular file with one link."""
    store = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    root = tmp_path / "parcels"
    delivered = root / "delivered" / f".{'a' * 32}.json.0123456789abcdef.tmp"
    quarantined = root / "quarantine" / f".{'b' * 32}.0123456789ab.json.{'f' * 32}.tmp"
    for path in (delivered, quarantined):
        path.write_bytes(b"{half")
    look_alikes = [root / "delivered" / ".c.json.0123456789abcdef.tmp"]
    look_alikes[0].mkdir()
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    look_alikes.append(root / "delivered" / ".d.json.0123456789abcdef.tmp")
    os.link(outside, look_alikes[1])
    reader = FilesStore(PARCELS, root, PARCELS_LAYOUT, create=False)
    reader.sweep("delivered")
    assert not reader.has_quarantined("b" * 32)
    assert delivered.exists() and quarantined.exists(), "a read-only store removes nothing"
    FilesStore(PARCELS, root, PARCELS_LAYOUT)
    assert delivered.exists(), "opening a store lists nothing"
    store.sweep("delivered")
    assert not delivered.exists()
    assert not store.has_quarantined("b" * 32)
    assert not quarantined.exists()
    assert all(os.path.lexists(path) for path in look_alikes), "not a writer's leftover"


def test_a_copy_shadowed_by_an_earlier_directory_is_not_counted(
    parcel_store: FilesStore[Any],
) -> None:
    """get() answers from delivered/ first, so a pending copy beside a delivered one (an
    interrupted move) is no pending record: count and first_names say so."""
    records = [parcel_store.insert(parcel(i)) for i in range(3)]
    record = parcel_store.fire(records[0], "attempt", ParcelInputs(T0))
    parcel_store.fire(record, "deliver", ParcelInputs(T0))
    name = f"{record.parcel_id}.json"
    pending = parcel_store.root / "pending" / name
    pending.write_bytes(canonical_json(parcel_store.values_of(record)) + b"\n")
    assert parcel_store.count("pending") == 2
    assert parcel_store.count_by_status()["pending"] == 2
    listing = parcel_store.first_names("pending", 10)
    assert (listing.total, listing.shadowed) == (3, {name})
    pending.unlink()
    assert parcel_store.first_names("pending", 10).shadowed == set()
    assert parcel_store.count("pending") == 2


def test_a_quarantined_entry_keeps_its_own_stem_unless_it_is_unsafe(
    parcel_store: FilesStore[Any],
) -> None:
    pending = parcel_store.root / "pending"
    quarantine = parcel_store.root / "quarantine"
    (pending / ".hidden.json").write_bytes(b"{}")
    moved = parcel_store.quarantine_material("pending", ".hidden.json", "not a record")
    assert moved.startswith(".hidden.") and (quarantine / moved).exists()
    reason = json.loads((quarantine / moved.replace(".json", ".error.json")).read_bytes())
    assert set(reason) == {"entry_id", "quarantined_at", "reason"}
    assert reason["entry_id"] == ".hidden"
    for raw in (b"bad-\xff.json", b"line\nbreak.json", b"x" * 201 + b".json", b".json"):
        with open(os.fsencode(pending) + b"/" + raw, "wb") as handle:
            handle.write(b"{}")
        name = os.fsdecode(raw)
        moved = parcel_store.quarantine_material("pending", name, f"bad {name}")
        assert moved.startswith("invalid-name-"), raw
        reason_bytes = (quarantine / moved.replace(".json", ".error.json")).read_bytes()
        reason = json.loads(reason_bytes)
        assert reason["original_name"] == raw.decode("utf-8", "backslashreplace"), raw
        assert reason["entry_id"] == moved.rsplit(".", 2)[0]
    assert quarantine_stem("bad-\udcff.json") == quarantine_stem("bad-\udcff.json")
    assert quarantine_stem("café.json") == ("café", None)


def test_nested_entry_into_an_exclusive_section_is_refused(tmp_path: Path) -> None:
    first = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    second = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    with first.exclusive("replay"):
        with pytest.raises(Reentered), second.exclusive("replay"):
            pass
        with second.exclusive("other"):
            pass
    with second.exclusive("replay"):  # left on the way out, even after the refusal
        pass


def test_a_shadowed_copy_is_discarded_only_while_it_holds_the_record(
    parcel_store: FilesStore[Any],
) -> None:
    """Whether a copy is the tail of a move is the caller's judgement (a facade's
    machine); the store removes only a shadowed copy that holds exactly that record."""
    record = parcel_store.fire(parcel_store.insert(parcel(1)), "attempt", ParcelInputs(T0))
    delivered = parcel_store.fire(record, "deliver", ParcelInputs(T0))
    source = parcel_store.root / "pending" / f"{record.parcel_id}.json"
    source.write_bytes(canonical_json(parcel_store.values_of(record)) + b"\n")
    older = parcel(1)
    assert not parcel_store.discard_shadowed(older, "pending"), "the file holds another record"
    assert source.exists()
    assert parcel_store.discard_shadowed(record, "pending")
    assert not source.exists()
    assert parcel_store.get(record.parcel_id) == delivered
    assert not parcel_store.discard_shadowed(record, "pending")


def test_a_copy_that_get_answers_is_never_discarded(task_store: FilesStore[Any]) -> None:
    record = task_store.insert(task(1))
    task_store.claim(claim_inputs(200.0, "t1"))
    source = task_store.root / "queued" / "t001.json"
    source.write_bytes(canonical_json(task_store.values_of(record)) + b"\n")
    assert not task_store.discard_shadowed(record, "queued"), "queued is searched first"
    assert source.exists()


def test_a_copy_shadowed_by_a_link_is_not_discarded(
    parcel_store: FilesStore[Any], tmp_path: Path
) -> None:
    record = parcel_store.fire(parcel_store.insert(parcel(1)), "attempt", ParcelInputs(T0))
    target = tmp_path / "outside.json"
    delivered = attrs.evolve(record, state="delivered")
    target.write_bytes(canonical_json(parcel_store.values_of(delivered)) + b"\n")
    os.symlink(target, parcel_store.root / "delivered" / f"{record.parcel_id}.json")
    assert not parcel_store.discard_shadowed(record, "pending")
    assert (parcel_store.root / "pending" / f"{record.parcel_id}.json").exists()


def test_what_one_store_object_remembers_follows_another_ones_writes(tmp_path: Path) -> None:
    first = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    second = FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)
    record = first.insert(parcel(1))
    with first.locked():
        assert first.get(record.parcel_id) == record  # remembered while the lock is held
        assert not first.has_quarantined(record.parcel_id)
        attempted = second.fire(record, "attempt", ParcelInputs(T0))
        assert first.get(record.parcel_id) == attempted
        second.fire(attempted, "quarantine", ParcelInputs(T0, reason="set aside"))
        assert first.has_quarantined(record.parcel_id)
        assert first.get(record.parcel_id).state == "quarantined"
        with pytest.raises(StaleRecord):
            first.fire(attempted, "deliver", ParcelInputs(T0))
