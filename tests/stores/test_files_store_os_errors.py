"""No OS error leaves the files store as it is (issue 26, item 1, the filesystem side).

Every public method of `FilesStore`, and its constructor, is run with each of its `os`
calls failing in turn (and `fcntl.flock`): each failure leaves as `FilesUnavailable`, a
`StoreUnavailable` with the stable code `lifecycles.store_unavailable`, and still an
`OSError` carrying the injected errno, whatever call failed; a file system reporting
its own damage (`EUCLEAN`) leaves as `FilesDamaged` (`lifecycles.store_damaged`).
After each failure no descriptor is leaked, no temporary file is left, every record is
what it was before the call or what the call would have made of it (never half), and
the store works again once the fault ends.

Then the same on real faults: a full tmpfs (ENOSPC), a read-only directory seen by an
unprivileged user (EACCES), a directory removed under an open store (never created
again), and a directory replaced by a link or a file under an open store (refused on
every call, as a store opened afterwards refuses it).

All of it on lifecycles made for these tests: the parcels (tests/support/files_layouts.py)
in a declared layout with a quarantine status, and the leased tasks
(tests/support/tasks.py) in the default layout, for the lease queries and the claims.
The outbox's own OS errors, as its callers see them, are in
tests/outbox/test_outbox_os_errors.py.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.files_layouts import PARCELS, PARCELS_LAYOUT, ParcelInputs, new_parcel
from support.os_faults import (
    fill,
    full_file_system,
    injected_errno,
    run_unprivileged,
    unprivileged_directory,
)
from support.tasks import TASKS, TaskInputs, new_task

from lifecycles.machines._declaration import LifecycleError
from lifecycles.stores._base import StoreDamaged, StoreUnavailable
from lifecycles.stores._files import (
    FilesDamaged,
    FilesStore,
    FilesUnavailable,
    StoreMissing,
    UnsafePath,
)

T0 = 1000.0
UNAVAILABLE = "lifecycles.store_unavailable"
DAMAGED = "lifecycles.store_damaged"
# Every os function the store calls that can fail with an I/O error (os.close too:
# on Linux the descriptor is released even then, so a failing close is not simulated).
OS_CALLS = ("open", "read", "write", "fsync", "replace", "unlink", "listdir", "stat",
            "fstat", "mkdir", "fchmod", "access", "dup")


def parcel(name: str) -> Any:
    return PARCELS.create(new_parcel(name))


def task(i: int) -> Any:
    return TASKS.create(new_task(f"t{i:03d}", now=100.0 - i))


def claim_inputs(now: float, token: str) -> TaskInputs:
    return TaskInputs(now=now, worker_id="w-" + token, lease_token=token, lease_seconds=30.0)


def parcel_store(root: Path) -> FilesStore[Any]:
    return FilesStore(PARCELS, root, PARCELS_LAYOUT)


def prepare_parcels(root: Path) -> dict[str, Any]:
    """Two pending records (one attempted), one delivered, one quarantined, and the
    tail of an interrupted move: a pending copy shadowed by its delivered record."""
    store = parcel_store(root)
    pending = store.insert(parcel("pending"))
    attempted = store.fire(store.insert(parcel("attempted")), "attempt", ParcelInputs(T0))
    moved = store.fire(store.insert(parcel("moved")), "attempt", ParcelInputs(T0))
    tail = (root / "pending" / f"{moved.parcel_id}.json").read_bytes()
    store.fire(moved, "deliver", ParcelInputs(T0))
    (root / "pending" / f"{moved.parcel_id}.json").write_bytes(tail)
    os.chmod(root / "pending" / f"{moved.parcel_id}.json", 0o600)
    store.fire(store.insert(parcel("quarantined")), "quarantine",
               ParcelInputs(T0, reason="set aside for the test"))
    return {"pending": pending, "attempted": attempted, "moved": moved}


def prepare_tasks(root: Path) -> dict[str, Any]:
    store = FilesStore(TASKS, root)
    for i in range(3):
        store.insert(task(i))
    leased = store.claim(claim_inputs(100.0, "t0"))
    return {"leased": leased}


@dataclass(frozen=True)
class Call:
    """One public entry point, run on a prepared store."""

    lifecycle: str  # "parcels" or "tasks"
    run: Callable[[Path, dict[str, Any]], Any]
    writes: bool


def opened(root: Path, lifecycle: str) -> FilesStore[Any]:
    return parcel_store(root) if lifecycle == "parcels" else FilesStore(TASKS, root)


def _transaction(root: Path, records: dict[str, Any]) -> None:
    store = parcel_store(root)
    with store.transaction():
        store.fire(records["pending"], "attempt", ParcelInputs(T0))
        store.fire(records["attempted"], "deliver", ParcelInputs(T0))


CALLS: dict[str, Call] = {
    "constructor": Call("parcels", lambda root, r: parcel_store(root), writes=False),
    "constructor of a new store": Call(
        "parcels", lambda root, r: parcel_store(root.parent / "new" / "parcels"), True),
    "reading constructor": Call(
        "parcels", lambda root, r: FilesStore(PARCELS, root, PARCELS_LAYOUT, create=False), False),
    "get": Call("parcels", lambda root, r: parcel_store(root).get(r["pending"].parcel_id), False),
    "get of an absent key": Call("parcels", lambda root, r: parcel_store(root).get("absent"),
                                 False),
    "insert": Call("parcels", lambda root, r: parcel_store(root).insert(parcel("new")),
                   True),
    "write": Call("parcels", lambda root, r: parcel_store(root).write(
        r["pending"], PARCELS.apply_row(PARCELS.select_row("attempt", r["pending"],
                                                        ParcelInputs(T0)),
                                       r["pending"], ParcelInputs(T0)),
        PARCELS.select_row("attempt", r["pending"], ParcelInputs(T0))), True),
    "fire (a move)": Call("parcels", lambda root, r: parcel_store(root).fire(
        r["attempted"], "deliver", ParcelInputs(T0)), True),
    "fire (into quarantine)": Call("parcels", lambda root, r: parcel_store(root).fire(
        r["pending"], "quarantine", ParcelInputs(T0, reason="because")), True),
    "transaction": Call("parcels", _transaction, True),
    "read_named": Call("parcels", lambda root, r: parcel_store(root).read_named(
        "pending", f"{r['pending'].parcel_id}.json"), False),
    "discard_shadowed": Call("parcels", lambda root, r: parcel_store(root).discard_shadowed(
        r["moved"], "pending"), True),
    "first_names": Call("parcels", lambda root, r: parcel_store(root).first_names("pending", 1),
                        False),
    "names": Call("parcels", lambda root, r: parcel_store(root).names("quarantined"), False),
    "count": Call("parcels", lambda root, r: parcel_store(root).count("pending"), False),
    "sweep": Call("parcels", lambda root, r: parcel_store(root).sweep("delivered"), False),
    "has_quarantined": Call("parcels", lambda root, r: parcel_store(root).has_quarantined(
        r["pending"].parcel_id), False),
    "quarantine_material": Call("parcels", lambda root, r: parcel_store(root).quarantine_material(
        "pending", f"{r['pending'].parcel_id}.json", "set aside"), True),
    "quarantine_entries": Call("parcels", lambda root, r: parcel_store(root).quarantine_entries(),
                               False),
    "count_by_status": Call("parcels", lambda root, r: parcel_store(root).count_by_status(),
                            False),
    "scan": Call("parcels", lambda root, r: list(parcel_store(root).scan()), False),
    "due": Call("tasks", lambda root, r: FilesStore(TASKS, root).due(100.0, 5), False),
    "next_due": Call("tasks", lambda root, r: FilesStore(TASKS, root).next_due(100.0),
                     False),
    "expired_leases": Call("tasks", lambda root, r: FilesStore(TASKS, root).expired_leases(
        1000.0), False),
    "count_due": Call("tasks", lambda root, r: FilesStore(TASKS, root).count_due(100.0),
                      False),
    "count_expired": Call("tasks", lambda root, r: FilesStore(TASKS, root).count_expired(
        1000.0), False),
    "claim": Call("tasks", lambda root, r: FilesStore(TASKS, root).claim(
        claim_inputs(1000.0, "t9")), True),
    "claim_many": Call("tasks", lambda root, r: FilesStore(TASKS, root).claim_many(
        lambda n: claim_inputs(1000.0, f"t{n + 10}"), 2), True),
}
# os.makedirs probes each parent with os.path.exists, which answers False when its
# stat fails, and then finds the parent there: the failure is absorbed, the call whole.
ABSORBED = {("constructor of a new store", "stat")}


# --- injecting a failure into each call in turn ----------------------------------------


@dataclass
class Plan:
    """Counts the calls of each name, and fails the `nth` call of `name` with `number`."""

    name: str | None = None
    nth: int = 0
    number: int = errno.EIO
    fired: bool = False

    def __post_init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def call(self, name: str) -> None:
        self.counts[name] += 1
        if name == self.name and self.counts[name] == self.nth:
            self.fired = True
            raise OSError(self.number, f"injected {os.strerror(self.number)}")


@contextlib.contextmanager
def injected(plan: Plan) -> Iterator[None]:
    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            plan.call(name)
            return real(*args, **kwargs)

        return call

    with pytest.MonkeyPatch.context() as patch:
        for name in OS_CALLS:
            patch.setattr(os, name, counted(name, getattr(os, name)))
        patch.setattr(fcntl, "flock", counted("flock", fcntl.flock))
        yield


def open_descriptors() -> set[str]:
    """Each open descriptor as ``fd->target``. Compare with :func:`leaked`, not ``==``: the
    garbage collector may close another test's descriptor (a SQLite file) meanwhile."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            found.add(f"{name}->{os.readlink(f'/proc/self/fd/{name}')}")
    return found


def leaked(before: set[str]) -> set[str]:
    """Descriptors open now that were not open ``before``: what the call left open."""
    return open_descriptors() - before


def files_under(root: Path) -> dict[str, bytes | None]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def records_of(root: Path, lifecycle: str) -> dict[str, Any]:
    """Every record a fresh store answers for, by key (trusted reads only)."""
    return {lifecycle_key(record, lifecycle): record for record in opened(root, lifecycle).scan()}


def lifecycle_key(record: Any, lifecycle: str) -> str:
    return str(record.parcel_id if lifecycle == "parcels" else record.task_id)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("templates")
    parcels_root, tasks_root = base / "parcels" / "parcels", base / "tasks" / "store"
    return {"parcels": (parcels_root, prepare_parcels(parcels_root)),
            "tasks": (tasks_root, prepare_tasks(tasks_root))}


def copy_of(template: Path, where: Path) -> Path:
    root = where / template.parent.name / template.name
    shutil.copytree(template.parent, root.parent, symlinks=True)
    return root


def count_calls(call: Call, root: Path, records: dict[str, Any]) -> Counter[str]:
    plan = Plan()
    with injected(plan):
        call.run(root, records)
    return plan.counts


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """Earlier tests' garbage collected once, and what survives set aside (gc.freeze), so the
    collections this test makes between calls scan only its own objects: in a full run the
    heap is large and a whole collection before each of some thousand calls took minutes."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_failing_os_call_leaves_as_a_store_error_and_loses_nothing(
    templates: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path, name: str,
    frozen_heap: None
) -> None:
    call = CALLS[name]
    template, records = templates[call.lifecycle]
    after = copy_of(template, tmp_path / "after")
    counts = count_calls(call, after, records)
    assert sum(counts.values()) > 0
    expected_after = records_of(after, call.lifecycle)
    before_records = records_of(template, call.lifecycle)
    for os_call, calls in sorted(counts.items()):
        for nth in range(1, calls + 1):
            where = f"{name}: {os_call} call {nth} of {calls}"
            root = copy_of(template, tmp_path / f"{os_call}-{nth}")
            before_files = files_under(root)
            # Garbage left by earlier calls (a file held by a traceback's frames) is collected
            # now, not mid-call, where its closed descriptor would look like ours.
            gc.collect()
            descriptors = open_descriptors()
            plan = Plan(os_call, nth)
            raised: BaseException | None = None
            with injected(plan):
                try:
                    call.run(root, records)
                except BaseException as exc:
                    raised = exc
            assert plan.fired, where
            if raised is None:
                assert (name, os_call) in ABSORBED, f"{where}: the failure was swallowed"
                assert not leaked(descriptors), f"{where}: leaked descriptors"
                continue
            error = raised
            assert isinstance(error, FilesUnavailable), f"{where}: {error!r}"
            assert (error.code, error.errno) == (UNAVAILABLE, errno.EIO), where
            assert isinstance(error, StoreUnavailable) and isinstance(error, OSError), where
            assert isinstance(error, LifecycleError), where
            assert isinstance(error.__cause__, OSError) and "injected" in str(error.__cause__)
            assert "(EIO)" in str(error), where
            del raised, error
            assert not leaked(descriptors), f"{where}: leaked descriptors"
            leftovers = [path for path in files_under(root.parent) if path.endswith(".tmp")]
            assert not leftovers, f"{where}: left {leftovers}"
            if not call.writes:
                assert files_under(root) == before_files, f"{where}: a read changed files"
            if name == "constructor of a new store":
                continue  # nothing stored yet: it must open again (below)
            found = records_of(root, call.lifecycle)
            for key in before_records.keys() | expected_after.keys():
                assert found.get(key) in (before_records.get(key), expected_after.get(key)), (
                    f"{where}: {key} is {found.get(key)!r}")
    fresh = copy_of(template, tmp_path / "fresh")
    call.run(fresh, records)  # the same call, without a fault, works


def test_a_file_system_reporting_damage_is_store_damaged(tmp_path: Path) -> None:
    """`EUCLEAN` (ext4's and XFS's "structure needs cleaning") is damage, not a device
    that is busy: `FilesDamaged`, a `StoreDamaged`, an `OSError` with that errno."""
    root = tmp_path / "parcels"
    store = parcel_store(root)
    store.insert(parcel("one"))
    before = files_under(root)
    with injected_errno("listdir", errno.EUCLEAN), pytest.raises(FilesDamaged) as raised:
        store.count("pending")
    assert (raised.value.code, raised.value.errno) == (DAMAGED, errno.EUCLEAN)
    assert isinstance(raised.value, StoreDamaged) and isinstance(raised.value, OSError)
    assert not isinstance(raised.value, StoreUnavailable)
    assert files_under(root) == before
    assert store.count("pending") == 1


def test_driver_error_says_what_an_os_error_means(tmp_path: Path) -> None:
    store = parcel_store(tmp_path / "parcels")
    unavailable = store.driver_error(OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(unavailable, FilesUnavailable) and unavailable.errno == errno.ENOSPC
    assert isinstance(store.driver_error(OSError(errno.EBADMSG, "Bad message")), FilesDamaged)
    assert store.driver_error(ValueError("not the file system's")) is None


# --- real faults ------------------------------------------------------------------------


def test_a_full_file_system_is_unavailable_and_nothing_is_half_written(tmp_path: Path) -> None:
    with full_file_system(tmp_path / "fs") as mounted:
        root = mounted / "parcels"
        store = parcel_store(root)
        stored = store.insert(parcel("stored"))
        filler = fill(mounted)
        before = files_under(root)
        with pytest.raises(FilesUnavailable) as raised:
            store.insert(parcel("refused"))
        assert (raised.value.code, raised.value.errno) == (UNAVAILABLE, errno.ENOSPC)
        with pytest.raises(FilesUnavailable) as raised:
            store.fire(stored, "attempt", ParcelInputs(T0))
        assert raised.value.errno == errno.ENOSPC
        assert files_under(root) == before  # no temporary file, nothing renamed
        assert store.count("pending") == 1 and store.get(stored.parcel_id) == stored  # reads work
        filler.unlink()  # the fault ends: the store goes on
        refused = store.insert(parcel("refused"))
        assert store.get(refused.parcel_id) == refused and store.count("pending") == 2


def test_a_full_file_system_refuses_a_new_store_and_a_later_one_opens(tmp_path: Path) -> None:
    """No inode left: the constructor cannot create the layout (ENOSPC)."""
    with full_file_system(tmp_path / "fs", inodes=64) as mounted:
        fillers = []
        with contextlib.suppress(OSError):
            while True:
                fillers.append(mounted / f"f{len(fillers)}")
                fillers[-1].touch()
        with pytest.raises(FilesUnavailable) as raised:
            parcel_store(mounted / "state" / "parcels")
        assert (raised.value.code, raised.value.errno) == (UNAVAILABLE, errno.ENOSPC)
        for filler in fillers:
            with contextlib.suppress(FileNotFoundError):
                filler.unlink()
        store = parcel_store(mounted / "state" / "parcels")
        assert store.count_by_status() == {"pending": 0, "delivered": 0, "quarantined": 0}


def _read_only_outcomes(base: str) -> dict[str, Any]:
    """As an unprivileged user: what each call does on a store whose directories it may
    not write (and on a new store under a directory it may not write)."""
    root = Path(base) / "parcels"
    store = parcel_store(root)
    stored = store.insert(parcel("stored"))
    outcomes: dict[str, Any] = {}
    os.chmod(root / "pending", 0o500)
    os.chmod(Path(base), 0o500)
    calls: dict[str, Callable[[], Any]] = {
        "insert": lambda: store.insert(parcel("refused")),
        "fire": lambda: store.fire(stored, "attempt", ParcelInputs(T0)),
        "new store": lambda: parcel_store(Path(base) / "other" / "parcels"),
        "count": lambda: store.count("pending"),
    }
    for name, run in calls.items():
        try:
            outcomes[name] = ["returned", repr(run())]
        except FilesUnavailable as error:
            outcomes[name] = ["FilesUnavailable", error.code, error.errno]
        except Exception as error:
            outcomes[name] = [type(error).__name__, repr(error)]
    os.chmod(root / "pending", 0o000)
    try:
        store.count("pending")
    except FilesUnavailable as error:
        outcomes["count of an unreadable directory"] = ["FilesUnavailable", error.code,
                                                        error.errno]
    os.chmod(root / "pending", 0o700)
    os.chmod(Path(base), 0o700)
    outcomes["files"] = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    outcomes["stored unchanged"] = store.get(stored.parcel_id) == stored
    return outcomes


def test_a_directory_an_unprivileged_user_may_not_write_is_unavailable() -> None:
    base = unprivileged_directory()
    try:
        outcomes = run_unprivileged(lambda: _read_only_outcomes(str(base)))
    finally:
        shutil.rmtree(base)
    refused = ["FilesUnavailable", UNAVAILABLE, errno.EACCES]
    assert outcomes["insert"] == refused
    assert outcomes["fire"] == refused
    assert outcomes["new store"] == refused
    assert outcomes["count"] == ["returned", "1"]  # reading a read-only directory works
    assert outcomes["count of an unreadable directory"] == refused
    assert outcomes["stored unchanged"] is True
    stored = parcel("stored").parcel_id
    assert outcomes["files"] == [".lock", "delivered", "pending", f"pending/{stored}.json",
                                 "quarantine"]


@pytest.mark.parametrize("removed", ["root", "pending", "delivered", "quarantine"])
def test_a_directory_removed_under_an_open_store_fails_every_call_and_is_not_recreated(
    tmp_path: Path, removed: str
) -> None:
    root = tmp_path / "state" / "parcels"
    store = parcel_store(root)
    stored = store.insert(parcel("stored"))
    gone = root if removed == "root" else root / removed
    shutil.rmtree(gone)
    before = files_under(tmp_path)
    for name, run in {
        "get": lambda: store.get(stored.parcel_id),
        "insert": lambda: store.insert(parcel("new")),
        "count": lambda: store.count("pending"),
        "count_by_status": store.count_by_status,
        "quarantine_entries": store.quarantine_entries,
    }.items():
        with pytest.raises(FilesUnavailable) as raised:
            run()
        assert (raised.value.code, raised.value.errno) == (UNAVAILABLE, errno.ENOENT), name
        assert "vanished" in str(raised.value), name
        assert files_under(tmp_path) == before, f"{name} created something"
    reader = None
    with contextlib.suppress(StoreMissing):
        reader = FilesStore(PARCELS, root, PARCELS_LAYOUT, create=False)
    assert reader is None  # a reading store finds it missing, as ever
    # Opening the store again is what creates the layout (empty where it was removed).
    still_pending = 0 if removed in ("root", "pending") else 1
    assert parcel_store(root).count("pending") == still_pending


@pytest.mark.parametrize("changed", ["pending", "delivered", "quarantine"])
@pytest.mark.parametrize("into", ["a link", "a file"])
def test_a_directory_changed_under_an_open_store_is_refused_on_every_call(
    tmp_path: Path, changed: str, into: str
) -> None:
    """A store opened before `delivered/` became a link (or `quarantine/` a file)
    refuses every call, as one opened afterwards does, whichever directory the call
    would have touched; nothing is written through the link."""
    root = tmp_path / "parcels"
    store = parcel_store(root)
    stored = store.insert(parcel("stored"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = root / changed
    shutil.rmtree(path)
    if into == "a link":
        path.symlink_to(elsewhere)
    else:
        path.write_bytes(b"")
    before = files_under(tmp_path)
    calls: dict[str, Callable[[], Any]] = {
        "get": lambda: store.get(stored.parcel_id),
        "insert": lambda: store.insert(parcel("new")),
        "count": lambda: store.count("pending"),
        "names": lambda: store.names("pending"),
        "first_names": lambda: store.first_names("pending", 1),
        "read_named": lambda: store.read_named("pending", f"{stored.parcel_id}.json"),
        "has_quarantined": lambda: store.has_quarantined("absent"),
        "count_by_status": store.count_by_status,
        "scan": lambda: list(store.scan()),
        "locked": lambda: enter(store.locked()),
    }
    for name, run in calls.items():
        with pytest.raises(UnsafePath, match=f"{changed} is a symbolic link or not a directory"):
            run()
        assert files_under(tmp_path) == before, name
    with pytest.raises(UnsafePath):
        parcel_store(root)
    assert os.listdir(elsewhere) == []


def enter(block: contextlib.AbstractContextManager[None]) -> None:
    with block:
        pass
