"""No driver exception leaves the monitor facade: real SQLite files (issue 26, 1).

The facade's constructor and its batches meet a database they cannot use (locked by
another connection past the busy timeout, a full disk, a closed connection) with
``terminal_processing_monitor.database_unreachable`` (a ``DatabaseUnreachable``, also a
``StoreUnavailable``), never a ``sqlite3`` exception; each failure came before any
commit was sent: ``outcome_unknown`` is false, and nothing changed. The generic store's
side of the same failures, on the tests' tasks, is tests/stores/test_driver_errors.py;
the single-item calls are pinned in test_monitor_hardening.py.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, answer, every_table, notification
from support.store_operations import record

from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.facade import DatabaseUnreachable, DurableTerminalProcessingMonitor
from lifecycles.stores import StoreUnavailable

MONITOR_CODE = "terminal_processing_monitor.database_unreachable"
TIMEOUT = 0.05


def monitor(connection: sqlite3.Connection) -> DurableTerminalProcessingMonitor:
    return DurableTerminalProcessingMonitor(connection, CAPABILITIES)


def refusal(action: Callable[[], Any]) -> StoreUnavailable:
    """What ``action`` raised: a ``StoreUnavailable`` caused by the driver's own error
    (kept, for the operator), whose outcome is known: nothing was committed."""
    with pytest.raises(StoreUnavailable) as raised:
        action()
    error = raised.value
    assert error.outcome_unknown is False
    assert isinstance(driver_cause(error), sqlite3.Error)
    return error


def driver_cause(error: BaseException) -> BaseException | None:
    """The first exception of the driver in ``error``'s chain of causes."""
    cause = error.__cause__
    while cause is not None and not isinstance(cause, sqlite3.Error):
        cause = cause.__cause__
    return cause


# --- the constructor -----------------------------------------------------------------


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_new_file_locked_past_the_timeout_at_construction_is_refused_and_left_empty(
    tmp_path: Path, journal: str
) -> None:
    """The issue's case: another connection holds ``BEGIN IMMEDIATE`` while a worker opens
    the file. The constructor's own ``BEGIN IMMEDIATE`` waits out the timeout."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute(f"PRAGMA journal_mode = {journal}")
    holder.execute("BEGIN IMMEDIATE")
    try:
        error = refusal(lambda: monitor(sqlite3.connect(path, timeout=TIMEOUT)))
    finally:
        holder.execute("ROLLBACK")
    assert error.code == MONITOR_CODE
    assert isinstance(error, DatabaseUnreachable)
    assert every_table(path) == []  # nothing created: no table, no meta row, no index
    holder.close()
    monitor(sqlite3.connect(path))  # the lock gone, the same file opens


def test_an_existing_file_locked_past_the_timeout_at_construction_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "existing.db"
    monitor(sqlite3.connect(path)).store.insert(MONITOR.create(record(0)))
    before = every_table(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert refusal(lambda: monitor(sqlite3.connect(path, timeout=TIMEOUT))).code == (
            MONITOR_CODE)
    finally:
        holder.execute("ROLLBACK")
    assert every_table(path) == before


def test_a_closed_connection_at_construction_has_the_code(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "closed.db")
    connection.close()
    assert refusal(lambda: monitor(connection)).code == MONITOR_CODE
    assert every_table(tmp_path / "closed.db") == []


# --- a full disk, for real -----------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 256 KiB tmpfs filled to its last block: the kernel answers every
    write that needs space with ENOSPC, as a full disk does.

    Why a tmpfs and not ``RLIMIT_FSIZE`` in a child process: a file-size limit fails
    writes with EFBIG, which SQLite reports as ``SQLITE_IOERR_WRITE``, not the
    ``SQLITE_FULL`` ("database or disk is full") the campaign met. Mounting needs root
    (CAP_SYS_ADMIN in this namespace); without it the test skips and says so.
    """
    mount_point = tmp_path / "full"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("the full-disk test mounts a small tmpfs, which needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
        capture_output=True, text=True, check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the full-disk "
                    "test needs CAP_SYS_ADMIN")
    try:
        filler = mount_point / "filler"
        try:
            with filler.open("wb", buffering=0) as out:
                while True:
                    out.write(b"\0" * 1024)
        except OSError as error:
            assert error.errno == 28  # ENOSPC: the disk is full
        yield mount_point
    finally:
        # Lazily: a connection a failed test left open must not keep the mount.
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_a_new_file_on_a_full_disk_is_refused_and_left_empty(full_disk: Path) -> None:
    path = full_disk / "new.db"
    error = refusal(lambda: monitor(sqlite3.connect(path)))
    assert error.code == MONITOR_CODE
    assert getattr(driver_cause(error), "sqlite_errorname", None) == "SQLITE_FULL"
    # sqlite3.connect made the empty file; the monitor wrote nothing into it and left no
    # journal beside it.
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "new.db"]
    assert path.stat().st_size == 0
    (full_disk / "filler").unlink()  # space again: the same file opens and works
    monitor(sqlite3.connect(path)).store.insert(MONITOR.create(record(0)))


# --- the batches ---------------------------------------------------------------------


MONITOR_CALLS: dict[str, Callable[[Any], Any]] = {
    "register_many": lambda m: m.register_many([notification(5)], now=200),
    "run_many": lambda m: m.run_many(lambda e, s: answer(e, s, "pending"), "w1", now=200),
}


@pytest.mark.parametrize("method", MONITOR_CALLS)
def test_the_monitor_batches_on_a_locked_or_closed_database_are_database_unreachable(
    tmp_path: Path, method: str
) -> None:
    """The single-item calls are pinned in test_monitor_hardening.py; the batches here."""
    path = tmp_path / "monitor.db"
    ours = DurableTerminalProcessingMonitor(sqlite3.connect(path, timeout=TIMEOUT),
                                            CAPABILITIES)
    ours.register(*notification(0), now=100)
    before = every_table(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        error = refusal(lambda: MONITOR_CALLS[method](ours))
    finally:
        holder.execute("ROLLBACK")
    assert isinstance(error, DatabaseUnreachable) and error.code == MONITOR_CODE
    ours.connection.close()
    assert refusal(lambda: MONITOR_CALLS[method](ours)).code == MONITOR_CODE
    assert every_table(path) == before
