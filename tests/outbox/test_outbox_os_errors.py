"""What the outbox raises when its directories cannot be used, or changed under it (issue
26: item 1 for the outbox, and item 4's third case).

- Every outbox error is a `CloseOutboxError` (a `RuntimeError`, as in the reference) and
  a `LifecycleError`, with the same codes as before.
- An OS error (a full file system, a directory an unprivileged user may not write, a
  directory removed under the open outbox, a damaged file system) leaves as an
  `OutboxStorageError`: an `OSError` too, with the original errno, so the reference's
  callers' `except OSError` still works; it has a stable code, and nothing changes.
- An outbox opened before `delivered/` became a link (or `quarantine/` a file) refuses
  every call with `OutboxUnsafePathError`, as one opened afterwards does, even a call
  that has nothing to move.

The differences from the reference are pinned in tests/outbox/test_outbox_differences.py.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.os_faults import (
    fill,
    full_file_system,
    injected_errno,
    run_unprivileged,
    unprivileged_directory,
)
from support.outbox import tree_snapshot

from lifecycles.cli import main
from lifecycles.machines import LifecycleError
from lifecycles.outbox.facade import (
    CloseOutbox,
    CloseOutboxError,
    CloseRequest,
    InvalidCloseRequestError,
    OutboxConflictError,
    OutboxCorruptError,
    OutboxReentryError,
    OutboxStorageDamagedError,
    OutboxStorageError,
    OutboxUnsafePathError,
)

UNAVAILABLE = "close_outbox.storage_unavailable"


def request(i: int) -> CloseRequest:
    return CloseRequest(f"run-{i}", "tx", "complete", {"i": i})


def calls_of(outbox: CloseOutbox, state_dir: Path) -> dict[str, Callable[[], Any]]:
    """Every public call of an open outbox, and opening it again."""
    return {
        "enqueue": lambda: outbox.enqueue(request(9)),
        "enqueue again": lambda: outbox.enqueue(request(1)),
        "replay": lambda: outbox.replay(lambda delivered: None),
        "pending_count": outbox.pending_count,
        "open again": lambda: CloseOutbox(state_dir=state_dir),
    }


def test_every_outbox_error_is_a_lifecycle_error_and_a_runtime_error() -> None:
    classes = (CloseOutboxError, InvalidCloseRequestError, OutboxConflictError,
               OutboxCorruptError, OutboxUnsafePathError, OutboxReentryError,
               OutboxStorageError, OutboxStorageDamagedError)
    for kind in classes:
        assert issubclass(kind, CloseOutboxError) and issubclass(kind, RuntimeError)
        assert issubclass(kind, LifecycleError)
    assert [kind.code for kind in classes] == [
        "close_outbox.error", "close_outbox.request_invalid", "close_outbox.conflict",
        "close_outbox.record_invalid", "close_outbox.unsafe_path",
        "close_outbox.replay_reentered", UNAVAILABLE, "close_outbox.storage_damaged",
    ]
    assert issubclass(OutboxStorageError, OSError)
    assert issubclass(OutboxStorageDamagedError, OutboxStorageError)
    with pytest.raises(LifecycleError) as caught:
        CloseRequest("../escape", "tx", "complete", {})
    assert caught.value.code == "close_outbox.request_invalid"


def test_a_full_file_system_refuses_writes_changes_nothing_and_recovers(tmp_path: Path) -> None:
    with full_file_system(tmp_path / "fs") as mounted:
        outbox = CloseOutbox(state_dir=mounted / "state")
        outbox.enqueue(request(1))
        filler = fill(mounted)
        before = tree_snapshot(mounted / "state")
        for name, call in {
            "enqueue": lambda: outbox.enqueue(request(2)),
            "replay": lambda: outbox.replay(lambda delivered: pytest.fail("no attempt stored")),
        }.items():
            with pytest.raises(OutboxStorageError) as raised:
                call()
            error = raised.value
            assert (error.code, error.errno, type(error)) == (
                UNAVAILABLE, errno.ENOSPC, OutboxStorageError), name
            assert isinstance(error, OSError) and "No space left on device" in str(error)
            assert tree_snapshot(mounted / "state") == before, f"{name} changed files"
        assert outbox.pending_count() == 1  # reading needs no space
        assert outbox.enqueue(request(1)).created is False  # the same intent: a read
        filler.unlink()
        assert outbox.enqueue(request(2)).created
        assert outbox.replay(lambda delivered: None).delivered == 2


def test_no_inode_left_refuses_a_new_outbox(tmp_path: Path) -> None:
    with full_file_system(tmp_path / "fs", inodes=64) as mounted:
        fillers: list[Path] = []
        with contextlib.suppress(OSError):
            while True:
                fillers.append(mounted / f"f{len(fillers)}")
                fillers[-1].touch()
        with pytest.raises(OutboxStorageError) as raised:
            CloseOutbox(state_dir=mounted / "state")
        assert (raised.value.code, raised.value.errno) == (UNAVAILABLE, errno.ENOSPC)
        for filler in fillers:
            with contextlib.suppress(FileNotFoundError):
                filler.unlink()
        assert CloseOutbox(state_dir=mounted / "state").pending_count() == 0


def _unprivileged_outcomes(base: str) -> dict[str, Any]:
    """As an unprivileged user, each call on an outbox whose directories it may not
    write or read: (class, code, errno) of what it raises, or what it returns."""
    state = Path(base) / "state"
    outbox = CloseOutbox(state_dir=state)
    outbox.enqueue(request(1))
    outcomes: dict[str, Any] = {}

    def outcome(call: Callable[[], Any]) -> Any:
        try:
            return ["returned", repr(call())]
        except OutboxStorageError as error:
            return [type(error).__name__, error.code, error.errno, isinstance(error, OSError)]
        except Exception as error:
            return [type(error).__name__, repr(error)]

    os.chmod(outbox.pending_dir, 0o500)  # read-only
    outcomes["enqueue"] = outcome(lambda: outbox.enqueue(request(2)))
    outcomes["replay"] = outcome(lambda: outbox.replay(lambda delivered: None))
    outcomes["pending_count"] = outcome(outbox.pending_count)
    os.chmod(outbox.pending_dir, 0o300)  # not readable
    outcomes["pending_count, unreadable"] = outcome(outbox.pending_count)
    os.chmod(outbox.pending_dir, 0o700)
    os.chmod(base, 0o500)
    outcomes["a new outbox"] = outcome(lambda: CloseOutbox(state_dir=Path(base) / "other"))
    os.chmod(base, 0o700)
    outcomes["files"] = sorted(tree_snapshot(state))
    outcomes["after"] = outcome(lambda: outbox.replay(lambda delivered: None).delivered)
    return outcomes


def test_directories_an_unprivileged_user_may_not_use_refuse_with_an_os_error() -> None:
    base = unprivileged_directory()
    try:
        outcomes = run_unprivileged(lambda: _unprivileged_outcomes(str(base)))
    finally:
        shutil.rmtree(base)
    refused = ["OutboxStorageError", UNAVAILABLE, errno.EACCES, True]
    assert outcomes["enqueue"] == refused
    assert outcomes["replay"] == refused
    assert outcomes["pending_count"] == ["returned", "1"]
    assert outcomes["pending_count, unreadable"] == refused
    assert outcomes["a new outbox"] == refused
    entry = request(1).entry_id
    assert outcomes["files"] == ["close-outbox", "close-outbox/.lock", "close-outbox/delivered",
                                 "close-outbox/pending", f"close-outbox/pending/{entry}.json",
                                 "close-outbox/quarantine"]
    assert outcomes["after"] == ["returned", "1"]


def test_a_file_system_reporting_damage_is_a_damaged_storage_error(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    outbox.enqueue(request(1))
    before = tree_snapshot(tmp_path)
    with injected_errno("listdir", errno.EUCLEAN), pytest.raises(OutboxStorageError) as raised:
        outbox.replay(lambda delivered: None)
    assert type(raised.value) is OutboxStorageDamagedError
    assert (raised.value.code, raised.value.errno) == ("close_outbox.storage_damaged",
                                                       errno.EUCLEAN)
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("removed", ["close-outbox", "pending", "delivered", "quarantine"])
def test_a_directory_removed_under_an_open_outbox_fails_every_call(
    tmp_path: Path, removed: str
) -> None:
    """Nothing is created again behind the caller's back (a directory on a file system
    that was unmounted would be replaced by an empty one, hiding what it held); opening
    the outbox again creates it, as the constructor always does."""
    state = tmp_path / "state"
    outbox = CloseOutbox(state_dir=state)
    outbox.enqueue(request(1))
    shutil.rmtree(outbox.root if removed == "close-outbox" else outbox.root / removed)
    before = tree_snapshot(tmp_path)
    calls = calls_of(outbox, state)
    del calls["open again"]
    for name, call in calls.items():
        with pytest.raises(OutboxStorageError) as raised:
            call()
        assert (raised.value.code, raised.value.errno) == (UNAVAILABLE, errno.ENOENT), name
        assert isinstance(raised.value, OSError) and "vanished" in str(raised.value)
        assert tree_snapshot(tmp_path) == before, f"{name} created something"
    still_pending = 0 if removed in ("close-outbox", "pending") else 1
    assert CloseOutbox(state_dir=state).pending_count() == still_pending  # opened: created


CHANGES = {
    "delivered/ a link": ("delivered", "link"),
    "pending/ a link": ("pending", "link"),
    "quarantine/ a link": ("quarantine", "link"),
    "quarantine/ a file": ("quarantine", "file"),
    "delivered/ a file": ("delivered", "file"),
}


@pytest.mark.parametrize("pending", [0, 1], ids=["nothing pending", "one pending"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_an_outbox_opened_before_a_directory_changed_refuses_every_call(
    tmp_path: Path, change: str, pending: int
) -> None:
    """Whether or not the call has anything to move (with nothing pending, `replay` and
    `pending_count` open only `pending/`): the open outbox and a new one alike raise
    `OutboxUnsafePathError`, and nothing is written through the link."""
    directory, kind = CHANGES[change]
    state = tmp_path / "state"
    outbox = CloseOutbox(state_dir=state)
    outbox.enqueue(request(1))
    outbox.replay(lambda delivered: None)
    for i in range(2, 2 + pending):
        outbox.enqueue(request(i))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = outbox.root / directory
    moved_away = tmp_path / "moved-away"
    os.rename(path, moved_away)
    if kind == "link":
        path.symlink_to(elsewhere)
    else:
        path.write_bytes(b"")
    before = tree_snapshot(tmp_path)
    for name, call in calls_of(outbox, state).items():
        with pytest.raises(OutboxUnsafePathError) as raised:
            call()
        assert raised.value.code == "close_outbox.unsafe_path"
        assert f"{directory} is a symbolic link or not a directory" in str(raised.value), name
        assert tree_snapshot(tmp_path) == before, f"{name} changed files"
    # Put back, the same outbox object works again: the check is made on every call.
    path.unlink()
    os.rename(moved_away, path)
    assert outbox.pending_count() == pending


def _status_of_an_unreadable_outbox(base: str) -> list[Any]:
    state = Path(base) / "state"
    outbox = CloseOutbox(state_dir=state)
    outbox.enqueue(request(1))
    os.chmod(outbox.pending_dir, 0o300)
    before = tree_snapshot(state)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["outbox", "status", "--state-dir", str(state), "--json"])
    unchanged = tree_snapshot(state) == before
    os.chmod(outbox.pending_dir, 0o700)
    return [code, json.loads(out.getvalue()), err.getvalue(), unchanged]


def test_status_of_an_outbox_an_unprivileged_user_may_not_read_exits_5() -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["outbox", "--help"])  # imports the parser: the child may not read the stdlib
    base = unprivileged_directory()
    try:
        code, document, err, unchanged = run_unprivileged(
            lambda: _status_of_an_unreadable_outbox(str(base)))
    finally:
        shutil.rmtree(base)
    assert (code, document["error"]) == (5, "unreadable")
    assert "Permission denied" in err and unchanged
