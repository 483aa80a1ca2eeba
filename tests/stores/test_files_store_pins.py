"""Promises of the files store that a code-mutation study found unguarded (issue 26).

Each test here fails against one mutation of stores/_files/ that every other test let
through: a stale write inside a transaction, a record file in another program's
spelling, the clean-up of a write that failed half-way, the modes of what the store
creates (checked as an unprivileged user too: the suite runs as root, where a mode
that locks the owner out never shows), and a dangling link shadowing a copy.

All of it on lifecycles made for these tests: the leased tasks (tests/support/tasks.py) in
the default layout, or with running/ searched first (tests/support/files_layouts.py), and
the parcels in a declared layout with a quarantine status (the same module).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.files_layouts import (
    PARCELS,
    PARCELS_LAYOUT,
    TASKS_RUNNING_FIRST,
    ParcelInputs,
    new_parcel,
)
from support.tasks import TASKS, TaskInputs, new_task

from lifecycles.stores._base import StaleRecord
from lifecycles.stores._files import FilesStore, UntrustedRecord, canonical_json

T0 = 1000.0
UNPRIVILEGED_USER = "nobody"


def task(i: int, now: float = 100.0) -> Any:
    return TASKS.create(new_task(f"t{i:03d}", now=now))


def parcel(i: int) -> Any:
    return PARCELS.create(new_parcel(f"p{i:03d}"))


def claim_inputs(now: float, token: str) -> TaskInputs:
    return TaskInputs(now=now, worker_id=f"w-{token}", lease_token=token, lease_seconds=30.0)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: a file's bytes, ``None`` for a directory."""
    return {str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
            for path in sorted(root.rglob("*"))}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def task_store(tmp_path: Path) -> FilesStore[Any]:
    return FilesStore(TASKS, tmp_path / "tasks")


@pytest.fixture
def parcel_store(tmp_path: Path) -> FilesStore[Any]:
    return FilesStore(PARCELS, tmp_path / "parcels", PARCELS_LAYOUT)


# --- one transaction, two writes from the same read ------------------------------------


def test_a_second_claim_from_the_same_read_inside_a_transaction_is_stale(
    task_store: FilesStore[Any],
) -> None:
    """The file still holds the record both claims read, but the transaction staged the
    first claim over it: the second is based on an out-of-date copy and must not win."""
    record = task_store.insert(task(1))
    with task_store.transaction():
        first = task_store.fire(record, "claim", claim_inputs(200.0, "t1"))
        with pytest.raises(StaleRecord):
            task_store.fire(record, "claim", claim_inputs(200.0, "t2"))
        assert task_store.get(record.task_id) == first
    stored = task_store.get(record.task_id)
    assert stored is not None
    assert (stored.worker_id, stored.lease_token) == ("w-t1", "t1")
    assert tree(task_store.root / "running") == {
        "t001.json": canonical_json(task_store.values_of(first)) + b"\n"}
    assert os.listdir(task_store.root / "queued") == []


def test_a_second_attempt_from_the_same_read_inside_a_transaction_is_stale(
    parcel_store: FilesStore[Any],
) -> None:
    """The same within one directory: the staged write is not overwritten by a write
    that compares with the file on disk."""
    record = parcel_store.insert(parcel(1))
    path = parcel_store.root / "pending" / f"{record.parcel_id}.json"
    with parcel_store.transaction():
        attempted = parcel_store.fire(record, "attempt", ParcelInputs(T0))
        with pytest.raises(StaleRecord):
            parcel_store.fire(record, "attempt", ParcelInputs(T0 + 1))
    assert parcel_store.get(record.parcel_id) == attempted
    assert attempted.attempts == 1 and attempted.last_attempt_at == T0
    assert path.read_bytes() == canonical_json(parcel_store.values_of(attempted)) + b"\n"


# --- a record file in another spelling ---------------------------------------------------


def another_programs_spelling(values: dict[str, Any]) -> bytes:
    """Valid JSON of the same values, not the canonical encoding: keys in another order,
    indented, non-ASCII escaped."""
    return json.dumps(dict(reversed(list(values.items()))), indent=2).encode() + b"\n"


def test_a_record_file_in_another_spelling_is_compared_by_value_and_rewritten_canonically(
    parcel_store: FilesStore[Any],
) -> None:
    """Byte equality is only a shortcut (``_unchanged_on_disk``): bytes that differ are
    read and compared as a record, so a file another program wrote is no stale record."""
    record = parcel_store.insert(parcel(1))
    path = parcel_store.root / "pending" / f"{record.parcel_id}.json"
    path.write_bytes(another_programs_spelling(parcel_store.values_of(record)))
    assert path.read_bytes() != canonical_json(parcel_store.values_of(record)) + b"\n"
    assert parcel_store.get(record.parcel_id) == record
    attempted = parcel_store.fire(record, "attempt", ParcelInputs(T0))
    assert path.read_bytes() == canonical_json(parcel_store.values_of(attempted)) + b"\n"
    assert parcel_store.get(record.parcel_id) == attempted


@pytest.mark.parametrize("spelling", ["canonical", "another program's"])
def test_a_record_file_that_changed_is_stale_whatever_its_spelling(
    parcel_store: FilesStore[Any], spelling: str
) -> None:
    """The file holds another valid record (someone attempted it meanwhile): the write
    based on the old one is refused and the file is left exactly as it is."""
    record = parcel_store.insert(parcel(1))
    changed = parcel_store.values_of(PARCELS.fire("attempt", record, ParcelInputs(T0)))
    path = parcel_store.root / "pending" / f"{record.parcel_id}.json"
    path.write_bytes(canonical_json(changed) + b"\n" if spelling == "canonical"
                     else another_programs_spelling(changed))
    before = tree(parcel_store.root)
    with pytest.raises(StaleRecord):
        parcel_store.fire(record, "attempt", ParcelInputs(T0 + 1))
    assert tree(parcel_store.root) == before


# --- the clean-up of a write that failed half-way ----------------------------------------


@pytest.fixture
def running_first_store(tmp_path: Path) -> FilesStore[Any]:
    """Tasks with running/ searched before queued/: a queued copy is the shadowed one."""
    return FilesStore(TASKS, tmp_path / "tasks", TASKS_RUNNING_FIRST)


def test_a_failed_move_keeps_a_destination_name_it_did_not_create(
    running_first_store: FilesStore[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim from queued was interrupted before it unlinked its source, so queued/
    still names the record (shadowed: running/ is searched first). The next move back
    into queued renames over that name, then its directory sync fails: the clean-up
    removes only names the write created (package docstring: "a new file whose directory
    cannot be synced is removed again"), so the name stays; the record is still the
    running one."""
    store = running_first_store
    record = store.insert(task(1))
    held = store.fire(record, "claim", claim_inputs(100.0, "t1"))
    waiting = store.fire(held, "fail", TaskInputs(
        now=101.0, worker_id="w-t1", lease_token="t1", error="timeout", retryable=True))
    leased = store.fire(waiting, "claim", claim_inputs(200.0, "t2"))
    left_by_the_move = store.root / "queued" / "t001.json"
    left_by_the_move.write_bytes(canonical_json(store.values_of(waiting)) + b"\n")
    leased_bytes = (store.root / "running" / "t001.json").read_bytes()
    real_fsync = os.fsync

    def failing_directory_sync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_directory_sync)
    with pytest.raises(OSError):
        store.fire(leased, "fail", TaskInputs(
            now=201.0, worker_id="w-t2", lease_token="t2", error="timeout", retryable=True))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert left_by_the_move.is_file(), "the clean-up removed a name the write did not create"
    assert (store.root / "running" / "t001.json").read_bytes() == leased_bytes
    assert store.get("t001") == leased


# --- modes ------------------------------------------------------------------------------


def modes_under(base: Path) -> dict[str, int]:
    return {str(path.relative_to(base)): mode(path) for path in sorted(base.rglob("*"))}


def use_a_store(root: Path) -> FilesStore[Any]:
    """Open a store at ``root`` and make it write each kind of file it writes."""
    store = FilesStore(PARCELS, root, PARCELS_LAYOUT)
    record = store.insert(parcel(1))
    store.fire(record, "quarantine", ParcelInputs(T0, reason="testing modes"))
    store.insert(parcel(2))
    return store


def private(modes: dict[str, int], base: Path) -> dict[str, int]:
    """What ``modes`` must be: every directory 0700, every file 0600."""
    return {name: 0o700 if (base / name).is_dir() else 0o600 for name in modes}


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_what_the_store_creates_is_private_from_its_first_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    """Every directory the store creates (the missing parent of its root too) is 0700
    when it comes into existence, not only once it has been tightened: with a loose
    umask a looser mode would let another user in for that moment."""
    created: list[tuple[str, int]] = []
    real_mkdir = os.mkdir

    def observed_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(path, mode, dir_fd=dir_fd)
        info = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        created.append((os.fsdecode(path), stat.S_IMODE(info.st_mode)))

    previous = os.umask(umask)
    monkeypatch.setattr(os, "mkdir", observed_mkdir)
    try:
        FilesStore(PARCELS, tmp_path / "parent" / "parcels", PARCELS_LAYOUT)
    finally:
        monkeypatch.setattr(os, "mkdir", real_mkdir)
        os.umask(previous)
    names = [Path(name).name for name, _ in created]
    assert sorted(names) == ["delivered", "parcels", "parent", "pending", "quarantine"]
    assert [(Path(name).name, oct(found)) for name, found in created] == [
        (name, oct(0o700)) for name in names]
    assert mode(tmp_path / "parent") == 0o700


def run_unprivileged(check: Callable[[Path], Any]) -> Any:
    """``check(base)`` as a user without root privileges, ``base`` a fresh directory that
    user owns; what it returns (JSON) or an AssertionError with the child's traceback.

    Not root already: in this process. Root: in a forked child that drops to
    :data:`UNPRIVILEGED_USER` (supplementary groups, then group, then user), after
    ``base`` is given to that user. Skips, with the reason, when that user does not exist
    or cannot reach a temporary directory.
    """
    base = Path(tempfile.mkdtemp(prefix="lifecycles-unprivileged-"))
    try:
        if os.geteuid() != 0:
            return check(base)
        try:
            user = pwd.getpwnam(UNPRIVILEGED_USER)
        except KeyError:
            pytest.skip(f"running as root and no {UNPRIVILEGED_USER!r} user to drop to")
        os.chown(base, user.pw_uid, user.pw_gid)
        return _in_child(check, base, user.pw_uid, user.pw_gid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _in_child(check: Callable[[Path], Any], base: Path, uid: int, gid: int) -> Any:
    readable, writable = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        answer: dict[str, Any]
        try:
            os.close(readable)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                os.listdir(base)
            except PermissionError:
                answer = {"skip": f"{UNPRIVILEGED_USER} cannot reach {base.parent}"}
            else:
                answer = {"result": check(base)}
        except BaseException as error:
            answer = {"error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()}
        try:
            os.write(writable, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(writable)
    chunks = []
    while chunk := os.read(readable, 1 << 16):
        chunks.append(chunk)
    os.close(readable)
    os.waitpid(child, 0)
    answer = json.loads(b"".join(chunks))
    if "skip" in answer:
        pytest.skip(answer["skip"])
    if "error" in answer:
        raise AssertionError(f"as {UNPRIVILEGED_USER}: {answer['error']}\n{answer['traceback']}")
    return answer["result"]


def created_under_umask(umask: int) -> Callable[[Path], Any]:
    def check(base: Path) -> Any:
        os.umask(umask)
        use_a_store(base / "parcels")
        use_a_store(base / "parent" / "parcels")  # its missing parent made too
        use_a_store(base / "a" / "b" / "parcels")  # every missing parent, 0700
        found = modes_under(base)
        return {"found": found, "expected": private(found, base)}
    return check


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277, 0o777])
def test_modes_as_a_user_without_root_privileges(umask: int) -> None:
    modes = run_unprivileged(created_under_umask(umask))
    assert modes["found"] == modes["expected"]


def test_loose_modes_of_ones_own_store_are_tightened_and_a_reader_changes_none() -> None:
    """As an unprivileged user: an existing root (and directories and lock file in it)
    with another mode is made private by a store that writes; one opened with
    ``create=False`` leaves every mode as it found it."""

    def check(base: Path) -> Any:
        root = base / "parcels"
        use_a_store(root)
        for path, loose in ((root, 0o755), (root / "pending", 0o777), (root / ".lock", 0o644)):
            os.chmod(path, loose)
        loosened = modes_under(base)
        reader = FilesStore(PARCELS, root, PARCELS_LAYOUT, create=False)
        counted = reader.count("pending")
        after_reader = modes_under(base)
        FilesStore(PARCELS, root, PARCELS_LAYOUT)
        return {"loosened": loosened, "counted": counted, "after_reader": after_reader,
                "after_writer": modes_under(base), "expected": private(loosened, base)}

    modes = run_unprivileged(check)
    assert modes["counted"] == 1
    assert modes["after_reader"] == modes["loosened"]
    assert modes["loosened"]["parcels"] == 0o755
    assert modes["after_writer"] == modes["expected"]


def test_another_users_root_keeps_its_mode() -> None:
    """A root owned by another user is not the store's to re-mode (``make_owned_private``):
    the store works in it and leaves its mode, while what it creates there is private."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory that belongs to another user")
    theirs = Path(tempfile.mkdtemp(prefix="lifecycles-theirs-"))
    try:
        os.chmod(theirs, 0o777)  # writable by the unprivileged user; owned by root

        def check(base: Path) -> Any:
            os.umask(0o022)
            use_a_store(theirs)
            return modes_under(theirs) | {".": mode(theirs)}

        modes = run_unprivileged(check)
        assert modes.pop(".") == 0o777
        assert modes == private(modes, theirs)
    finally:
        shutil.rmtree(theirs, ignore_errors=True)


# --- a dangling link shadowing a copy -------------------------------------------------------


@pytest.fixture
def shadowed_by_a_dangling_link(parcel_store: FilesStore[Any], tmp_path: Path) -> Iterator[str]:
    """pending/ holds a record; delivered/ (searched first) a link to nothing, by its name."""
    record = parcel_store.insert(parcel(1))
    name = f"{record.parcel_id}.json"
    os.symlink(tmp_path / "gone.json", parcel_store.root / "delivered" / name)
    assert not (tmp_path / "gone.json").exists()
    yield name


def test_a_dangling_link_shadows_alike_when_probed_and_when_listed(
    parcel_store: FilesStore[Any], shadowed_by_a_dangling_link: str
) -> None:
    """``_shadowed`` probes each name when there are few, and reads a listing of the other
    directory when it has one: both see the link itself, never its missing target."""
    name = shadowed_by_a_dangling_link
    probed = parcel_store.first_names("pending", 10)  # delivered/ not listed: probed
    with parcel_store.locked():
        assert parcel_store.names("delivered") == [name]  # listed under this lock
        listed = parcel_store.first_names("pending", 10)
    assert probed.shadowed == listed.shadowed == {name}
    assert (probed.total, parcel_store.count("pending")) == (1, 0)
    with pytest.raises(UntrustedRecord) as refused:  # what get() meets first
        parcel_store.get(name.removesuffix(".json"))
    assert refused.value.rules == ("record_is_regular_file",)


def test_a_dangling_link_shadows_alike_among_many_names(
    parcel_store: FilesStore[Any], shadowed_by_a_dangling_link: str
) -> None:
    """With more names than are worth probing, delivered/ is listed instead."""
    name = shadowed_by_a_dangling_link
    for number in range(300):
        (parcel_store.root / "pending" / f"{number:032x}.json").write_bytes(b"{}")
    listing = parcel_store.first_names("pending", 1)
    assert (listing.total, listing.shadowed) == (301, {name})
    assert parcel_store.count("pending") == 300
