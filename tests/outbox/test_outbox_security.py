"""Security tests: private modes whatever the umask, planted symbolic links are never
followed, and identifiers that try to escape the store are refused.

A planted link points at a directory or file outside the store. The test watches that
target with inotify (Linux) and compares a snapshot of it before and after, so "never
followed" means: the target is not opened, read, written, created or chmodded. The
operation must then either refuse with a `CloseOutboxError` subclass or quarantine the
link itself (move it aside with a reason); it may never succeed through the link.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.outbox import (
    IMPL_VARIABLE,
    LOCK_NAME,
    RECORD_STATUSES,
    STATUS_DIRS,
    StoreView,
    entry_id_of,
    implementation_spec,
    load_outbox,
    make_request,
    store_root,
    tree_snapshot,
)

RUN = "run-security"
PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600
OUTSIDE_DIRECTORY_MODE = 0o755
OUTSIDE_FILE_MODE = 0o644
IN_ALL_EVENTS = 0x00000FFF
IN_EVENT_HEADER = struct.Struct("iIII")
PROBE_TIMEOUT_SECONDS = 30


@pytest.fixture
def outbox() -> ModuleType:
    return load_outbox()


# --- watching a target outside the store -------------------------------------------


class Watch:
    """inotify watches on paths outside the store: any open, read, write, attribute
    change, creation or deletion there is recorded as an event."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._add_watch = libc.inotify_add_watch
        self._add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.names: dict[int, str] = {}

    def add(self, path: Path) -> None:
        descriptor = self._add_watch(self.fd, os.fsencode(path), IN_ALL_EVENTS)
        if descriptor < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        self.names[descriptor] = str(path)

    def events(self) -> list[str]:
        found: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return found
            offset = 0
            while offset < len(data):
                descriptor, mask, _cookie, length = IN_EVENT_HEADER.unpack_from(data, offset)
                start = offset + IN_EVENT_HEADER.size
                name = data[start : start + length].rstrip(b"\0").decode(errors="replace")
                found.append(f"{self.names.get(descriptor, '?')}/{name} mask={mask:#x}")
                offset = start + length

    def close(self) -> None:
        os.close(self.fd)


@contextlib.contextmanager
def untouched(*targets: Path) -> Iterator[None]:
    """Fail unless the block leaves every target (and what is inside) unopened, unread,
    unwritten and unchanged."""
    existing = [t for t in targets if os.path.lexists(t)]
    before = {t: outside_snapshot(t) for t in targets}
    watch = Watch()
    try:
        for target in existing:
            watch.add(target)
        for target in targets:
            if not os.path.lexists(target):
                watch.add(target.parent)
        watch.events()
        yield
        events = watch.events()
    finally:
        watch.close()
    assert not events, f"the link target was touched: {events}"
    after = {t: outside_snapshot(t) for t in targets}
    assert after == before, "the link target changed"


def outside_snapshot(target: Path) -> Any:
    if not os.path.lexists(target):
        return None
    info = os.lstat(target)
    if stat.S_ISDIR(info.st_mode):
        return (stat.S_IMODE(info.st_mode), tree_snapshot(target))
    return (stat.S_IMODE(info.st_mode), target.read_bytes())


# --- the store and what is planted in it -------------------------------------------


def seeded_store(outbox: ModuleType, state_dir: Path) -> Any:
    """A store with one delivered and one pending record."""
    store = outbox.CloseOutbox(state_dir=state_dir)
    store.enqueue(make_request(outbox, RUN, "tx-delivered"))
    store.replay(lambda request: None, limit=100)
    store.enqueue(make_request(outbox, RUN, "tx-pending"))
    return store


def outside_directory(tmp_path: Path) -> Path:
    """A directory outside the store that looks like a status directory: it holds a
    valid pending record, so following a link to it would be visible."""
    outside = tmp_path / "outside"
    outside.mkdir()
    scratch = tmp_path / "scratch"
    scratch_store = seeded_store(load_outbox(), scratch)
    del scratch_store
    for entry in (store_root(scratch) / "pending").iterdir():
        (outside / entry.name).write_bytes(entry.read_bytes())
        (outside / entry.name).chmod(OUTSIDE_FILE_MODE)
    outside.chmod(OUTSIDE_DIRECTORY_MODE)
    return outside


def elsewhere(tmp_path: Path) -> Path:
    """A directory outside the store holding only link targets, so that watching it
    (for a dangling link's target to appear) sees nothing but what happens to them."""
    directory = tmp_path / "elsewhere"
    directory.mkdir(exist_ok=True)
    return directory


def outside_record(tmp_path: Path, outbox: ModuleType, transaction_id: str) -> Path:
    """A complete, valid pending record for `transaction_id`, outside the store."""
    scratch = tmp_path / f"scratch-{transaction_id}"
    outbox.CloseOutbox(state_dir=scratch).enqueue(make_request(outbox, RUN, transaction_id))
    source = store_root(scratch) / "pending" / f"{entry_id_of(RUN, transaction_id)}.json"
    target = elsewhere(tmp_path) / f"outside-{transaction_id}.json"
    target.write_bytes(source.read_bytes())
    target.chmod(OUTSIDE_FILE_MODE)
    return target


def replace_with_link(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    elif os.path.lexists(path):
        path.unlink()
    path.symlink_to(target)


Operation = Callable[[ModuleType, Path], Any]


def open_only(outbox: ModuleType, state_dir: Path) -> Any:
    return outbox.CloseOutbox(state_dir=state_dir)


def enqueue_new(outbox: ModuleType, state_dir: Path) -> Any:
    store = outbox.CloseOutbox(state_dir=state_dir)
    return store.enqueue(make_request(outbox, RUN, "tx-new"))


def replay_all(outbox: ModuleType, state_dir: Path) -> Any:
    store = outbox.CloseOutbox(state_dir=state_dir)
    return store.replay(delivered_through_link_guard, limit=100)


def count_pending(outbox: ModuleType, state_dir: Path) -> Any:
    return outbox.CloseOutbox(state_dir=state_dir).pending_count()


def delivered_through_link_guard(request: Any) -> None:
    if request.transaction_id.startswith("tx-outside"):
        raise AssertionError(f"delivered a record read through a link: {request!r}")


OPERATIONS: dict[str, Operation] = {
    "open": open_only,
    "enqueue": enqueue_new,
    "replay": replay_all,
    "pending_count": count_pending,
}


def refused_or_link_moved_aside(
    outbox: ModuleType, operation: Operation, state_dir: Path, link: Path
) -> None:
    """Run the operation: it must refuse with a CloseOutboxError subclass, or succeed
    only after moving the link itself out of the way (quarantine)."""
    try:
        operation(outbox, state_dir)
    except outbox.CloseOutboxError:
        assert os.path.islink(link) or not os.path.lexists(link)
        return
    assert not os.path.islink(link), f"{operation.__name__} succeeded with a link planted at {link}"


# --- modes -------------------------------------------------------------------------


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def modes_in_store(state_dir: Path) -> dict[str, int]:
    root = store_root(state_dir)
    modes = {".": stat.S_IMODE(os.lstat(root).st_mode)}
    for relative, (kind, mode, _content) in tree_snapshot(root).items():
        assert kind != "link", f"{relative} is a link"
        modes[relative] = mode
    return modes


def test_everything_is_private_under_umask_000(outbox: ModuleType, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with umask(0):
        store = seeded_store(outbox, state_dir)
        corrupt = store_root(state_dir) / "pending" / f"{entry_id_of(RUN, 'tx-corrupt')}.json"
        descriptor = os.open(corrupt, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(descriptor, b"not json")
        os.close(descriptor)
        report = store.replay(lambda request: None, limit=100)
        store.enqueue(make_request(outbox, RUN, "tx-after"))
    assert report.quarantined == 1
    modes = modes_in_store(state_dir)
    directories = {".", *STATUS_DIRS}
    assert {name: modes[name] for name in directories} == dict.fromkeys(
        directories, PRIVATE_DIRECTORY
    )
    files = {name: mode for name, mode in modes.items() if name not in directories}
    assert LOCK_NAME in files
    assert any(name.startswith("quarantine/") and name.endswith(".error.json") for name in files)
    assert any(name.startswith("delivered/") for name in files)
    assert any(name.startswith("pending/") for name in files)
    assert files == dict.fromkeys(files, PRIVATE_FILE)


def test_loose_modes_left_by_someone_else_are_tightened(outbox: ModuleType, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    root = store_root(state_dir)
    for directory in (root, *(root / name for name in STATUS_DIRS)):
        directory.chmod(0o777)
    (root / LOCK_NAME).chmod(0o666)
    with umask(0):
        outbox.CloseOutbox(state_dir=state_dir).pending_count()
    modes = modes_in_store(state_dir)
    assert {name: modes[name] for name in (".", *STATUS_DIRS)} == dict.fromkeys(
        (".", *STATUS_DIRS), PRIVATE_DIRECTORY
    )
    assert modes[LOCK_NAME] == PRIVATE_FILE


# --- links planted at directories and at the lock file -----------------------------


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("status", STATUS_DIRS)
def test_a_linked_status_directory_is_never_followed(
    outbox: ModuleType, tmp_path: Path, status: str, operation: str
) -> None:
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    outside = outside_directory(tmp_path)
    link = store_root(state_dir) / status
    replace_with_link(link, outside)
    with untouched(outside):
        refused_or_link_moved_aside(outbox, OPERATIONS[operation], state_dir, link)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_linked_store_root_is_never_followed(
    outbox: ModuleType, tmp_path: Path, operation: str
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    outside = tmp_path / "outside-root"
    outside.mkdir()
    for name in STATUS_DIRS:
        (outside / name).mkdir()
    outside.chmod(OUTSIDE_DIRECTORY_MODE)
    link = store_root(state_dir)
    link.symlink_to(outside)
    with untouched(outside), pytest.raises(outbox.CloseOutboxError):
        OPERATIONS[operation](outbox, state_dir)
    assert link.is_symlink()


@pytest.mark.parametrize("dangling", [False, True], ids=["existing", "dangling"])
@pytest.mark.parametrize("operation", ["enqueue", "replay", "pending_count"])
def test_a_linked_lock_file_is_never_followed(
    outbox: ModuleType, tmp_path: Path, operation: str, dangling: bool
) -> None:
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    target = elsewhere(tmp_path) / "outside-lock"
    if not dangling:
        target.write_bytes(b"someone else's file\n")
        target.chmod(OUTSIDE_FILE_MODE)
    link = store_root(state_dir) / LOCK_NAME
    replace_with_link(link, target)
    before = tree_snapshot(store_root(state_dir))
    with untouched(target):
        refused_or_link_moved_aside(outbox, OPERATIONS[operation], state_dir, link)
    assert not dangling or not os.path.lexists(target), "the dangling lock target was created"
    if os.path.islink(link):
        assert tree_snapshot(store_root(state_dir)) == before, "a refused call changed the store"


# --- links planted at record paths -------------------------------------------------


@pytest.mark.parametrize("dangling", [False, True], ids=["existing", "dangling"])
@pytest.mark.parametrize("status", RECORD_STATUSES)
def test_a_linked_record_is_never_read_on_enqueue(
    outbox: ModuleType, tmp_path: Path, status: str, dangling: bool
) -> None:
    """The record path of the very identity being enqueued is a link."""
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    transaction_id = "tx-outside-enqueue"
    target = outside_record(tmp_path, outbox, transaction_id)
    if dangling:
        target.unlink()
    link = store_root(state_dir) / status / f"{entry_id_of(RUN, transaction_id)}.json"
    link.symlink_to(target)
    with untouched(target):
        try:
            receipt = outbox.CloseOutbox(state_dir=state_dir).enqueue(
                make_request(outbox, RUN, transaction_id)
            )
        except outbox.CloseOutboxError:
            assert link.is_symlink(), "a refused enqueue moved the link"
            return
    assert not link.is_symlink(), f"enqueue answered {receipt!r} through a link at {status}/"
    assert receipt.created, f"enqueue reported {receipt!r}, state read through a link"
    view = StoreView(outbox, state_dir)
    assert not view.problems
    assert entry_id_of(RUN, transaction_id) in view.records["pending"]


@pytest.mark.parametrize("dangling", [False, True], ids=["existing", "dangling"])
def test_a_linked_pending_record_is_quarantined_not_read(
    outbox: ModuleType, tmp_path: Path, dangling: bool
) -> None:
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    transaction_id = "tx-outside-pending"
    target = outside_record(tmp_path, outbox, transaction_id)
    if dangling:
        target.unlink()
    entry_id = entry_id_of(RUN, transaction_id)
    link = store_root(state_dir) / "pending" / f"{entry_id}.json"
    link.symlink_to(target)
    with untouched(target):
        try:
            report = outbox.CloseOutbox(state_dir=state_dir).replay(
                delivered_through_link_guard, limit=100
            )
        except outbox.CloseOutboxError:
            assert link.is_symlink()
            return
    assert report.quarantined == 1
    assert report.delivered == 1  # the healthy pending record still goes through
    assert not os.path.lexists(link)
    view = StoreView(outbox, state_dir)
    assert not view.problems
    assert view.is_quarantined(entry_id)
    with untouched(target), pytest.raises(outbox.OutboxCorruptError):
        outbox.CloseOutbox(state_dir=state_dir).enqueue(make_request(outbox, RUN, transaction_id))


def test_a_linked_delivered_destination_is_never_followed(
    outbox: ModuleType, tmp_path: Path
) -> None:
    """A pending record whose delivered/ name is taken by a link to an outside file."""
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    entry_id = entry_id_of(RUN, "tx-pending")
    target = elsewhere(tmp_path) / "outside-destination.json"
    target.write_bytes(b"someone else's file\n")
    target.chmod(OUTSIDE_FILE_MODE)
    link = store_root(state_dir) / "delivered" / f"{entry_id}.json"
    link.symlink_to(target)
    with untouched(target):
        try:
            report = outbox.CloseOutbox(state_dir=state_dir).replay(lambda request: None, limit=100)
        except outbox.CloseOutboxError:
            report = None
        # Whatever replay did, the identity is never answered from the link.
        with pytest.raises(outbox.OutboxCorruptError):
            outbox.CloseOutbox(state_dir=state_dir).enqueue(make_request(outbox, RUN, "tx-pending"))
    if report is not None:
        assert report.delivered == 0, "delivered over a planted link"
        assert StoreView(outbox, state_dir).is_quarantined(entry_id)


# --- other things planted at a record path ----------------------------------------

PLANTED_PROBE = """
import json, sys
from support.outbox import load_outbox, make_request

outbox = load_outbox()
state_dir, run_id, transaction_id = sys.argv[1:]
outcome = {}
try:
    report = outbox.CloseOutbox(state_dir=state_dir).replay(lambda request: None, limit=100)
    outcome["replay"] = {"delivered": report.delivered, "quarantined": report.quarantined}
except outbox.CloseOutboxError as error:
    outcome["replay"] = {"refused": type(error).__name__}
try:
    receipt = outbox.CloseOutbox(state_dir=state_dir).enqueue(
        make_request(outbox, run_id, transaction_id)
    )
    outcome["enqueue"] = {"created": receipt.created, "state": receipt.state}
except outbox.CloseOutboxError as error:
    outcome["enqueue"] = {"refused": type(error).__name__}
print(json.dumps(outcome))
"""


def run_probe(state_dir: Path, transaction_id: str) -> dict[str, dict[str, Any]]:
    """Replay, then enqueue `transaction_id`, in a child process: a store that opened a
    FIFO for reading would block forever, and only a child can be stopped."""
    environment = dict(os.environ)
    environment[IMPL_VARIABLE] = implementation_spec()
    tests = str(Path(__file__).resolve().parents[1])  # where `support` is imported from
    environment["PYTHONPATH"] = os.pathsep.join(
        [tests, *filter(None, [environment.get("PYTHONPATH")])]
    )
    try:
        finished = subprocess.run(
            [sys.executable, "-c", PLANTED_PROBE, str(state_dir), RUN, transaction_id],
            capture_output=True,
            text=True,
            env=environment,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the outbox blocked for {PROBE_TIMEOUT_SECONDS} s on a planted file")
    assert finished.returncode == 0, finished.stderr
    outcome: dict[str, dict[str, Any]] = json.loads(finished.stdout)
    return outcome


@pytest.mark.parametrize("status", RECORD_STATUSES)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_at_a_record_path_is_not_trusted_and_never_blocks(
    outbox: ModuleType, tmp_path: Path, kind: str, status: str
) -> None:
    state_dir = tmp_path / "state"
    seeded_store(outbox, state_dir)
    transaction_id = f"tx-planted-{kind}"
    planted = store_root(state_dir) / status / f"{entry_id_of(RUN, transaction_id)}.json"
    if kind == "fifo":
        os.mkfifo(planted, 0o600)
    else:
        planted.mkdir(mode=0o700)
    outcome = run_probe(state_dir, transaction_id)
    if status == "pending" and "refused" not in outcome["replay"]:
        assert outcome["replay"] == {"delivered": 1, "quarantined": 1}
        assert not os.path.lexists(planted), "replay reported the planted file quarantined"
        assert StoreView(outbox, state_dir).is_quarantined(entry_id_of(RUN, transaction_id))
    if status == "delivered":
        assert outcome["replay"] == {"delivered": 1, "quarantined": 0}
    # The identity is never answered from, nor written over, what was planted.
    assert outcome["enqueue"] == {"refused": "OutboxCorruptError"}


# --- identifiers that try to escape the store ---------------------------------------


ESCAPING_IDENTIFIERS = [
    "../x",
    "..",
    ".",
    "../../etc/passwd",
    "/etc/passwd",
    "/tmp/x",
    "a/b",
    "a\\b",
    "a\0b",
    "\0",
    "",
    " ",
    "a b",
    "a\nb",
    "x\n",
    ".hidden",
    "-leading-dash",
    "x" * 201,
    "x" * 10_000,
    "caf\u00e9",
    "\u2215etc",
]


def short_id(value: str) -> str:
    return repr(value) if len(value) <= 20 else f"{len(value)}-characters"


@pytest.mark.parametrize("field", ["run_id", "transaction_id"])
@pytest.mark.parametrize("identifier", ESCAPING_IDENTIFIERS, ids=short_id)
def test_an_escaping_identifier_is_refused_and_nothing_is_written(
    outbox: ModuleType, tmp_path: Path, field: str, identifier: str
) -> None:
    state_dir = tmp_path / "state"
    store = seeded_store(outbox, state_dir)
    before = tree_snapshot(tmp_path)
    fields = {"run_id": RUN, "transaction_id": "tx-escape", field: identifier}
    with pytest.raises(outbox.InvalidCloseRequestError):
        outbox.CloseRequest(action="complete", result={"ok": True}, **fields)
    forged = make_request(outbox, RUN, "tx-escape")
    object.__setattr__(forged, field, identifier)
    with pytest.raises(outbox.InvalidCloseRequestError):
        store.enqueue(forged)
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "not_a_request",
    [None, "../x", {"run_id": "r", "transaction_id": "t"}, ("r", "t")],
    ids=repr,
)
def test_enqueue_refuses_what_is_not_a_request(
    outbox: ModuleType, tmp_path: Path, not_a_request: object
) -> None:
    store = seeded_store(outbox, tmp_path / "state")
    before = tree_snapshot(tmp_path)
    with pytest.raises(outbox.InvalidCloseRequestError):
        store.enqueue(not_a_request)
    assert tree_snapshot(tmp_path) == before


def test_the_longest_identifier_is_accepted(outbox: ModuleType, tmp_path: Path) -> None:
    """The bound is 200 characters: the refusals above are not a blanket refusal."""
    state_dir = tmp_path / "state"
    store = outbox.CloseOutbox(state_dir=state_dir)
    longest = "r" * 200
    receipt = store.enqueue(make_request(outbox, longest, "t" * 200))
    assert (receipt.created, receipt.state) == (True, "pending")
    assert receipt.entry_id == entry_id_of(longest, "t" * 200)
    assert not StoreView(outbox, state_dir).problems


def test_a_state_directory_reached_through_a_link_is_the_callers_choice(
    outbox: ModuleType, tmp_path: Path
) -> None:
    """Links are refused inside the store, not above it: a state directory whose path
    goes through a link the caller chose (as /var does on some systems) works."""
    real = tmp_path / "real"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    store = seeded_store(outbox, alias / "state")
    report = store.replay(lambda request: None, limit=100)
    assert (report.delivered, report.remaining) == (1, 0)
    view = StoreView(outbox, real / "state")
    assert not view.problems
    assert len(view.records["delivered"]) == 2
