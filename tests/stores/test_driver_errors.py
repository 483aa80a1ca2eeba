"""No driver exception leaves a SQL store or the monitor: real SQLite files (issue 26, 1).

Every public entry point, the constructors included, meets a database it cannot use
(locked by another connection past the busy timeout, a full disk, a closed
connection) with the store error it means, never a ``sqlite3`` exception: the
generic store ``lifecycles.database_unreachable`` (a ``StoreUnavailable``), the monitor
``terminal_processing_monitor.database_unreachable`` (a ``DatabaseUnreachable``, also
a ``StoreUnavailable``). Each such failure came before any commit was sent:
``outcome_unknown`` is false, and each test shows that nothing changed. The
PostgreSQL side, where a commit's answer can be lost, is
tests/monitor/test_monitor_uncertain_commit.py.
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
from support.store_operations import (
    OPERATION_NAMES,
    WITHOUT_STATEMENTS,
    filled,
    operations,
    public_methods,
    record,
)

from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.facade import DatabaseUnreachable, DurableTerminalProcessingMonitor
from lifecycles.stores._base import StoreUnavailable
from lifecycles.stores.sqlite import SQLiteStore, connect

GENERIC = "lifecycles.database_unreachable"
MONITOR_CODE = "terminal_processing_monitor.database_unreachable"
TIMEOUT = 0.05


def generic(connection: sqlite3.Connection) -> Any:
    return SQLiteStore(MONITOR, connection)  # the table derived from the record


def monitor(connection: sqlite3.Connection) -> Any:
    return DurableTerminalProcessingMonitor(connection, CAPABILITIES)


OPENERS: dict[str, tuple[Callable[[sqlite3.Connection], Any], str]] = {
    "generic store": (generic, GENERIC), "monitor": (monitor, MONITOR_CODE),
}


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


# --- the constructors --------------------------------------------------------------


@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize("kind", OPENERS)
def test_a_new_file_locked_past_the_timeout_at_construction_is_refused_and_left_empty(
    tmp_path: Path, kind: str, journal: str
) -> None:
    """The issue's case: another connection holds ``BEGIN IMMEDIATE`` while a worker opens
    the file. The constructor's own ``BEGIN IMMEDIATE`` waits out the timeout."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute(f"PRAGMA journal_mode = {journal}")
    holder.execute("BEGIN IMMEDIATE")
    opener, code = OPENERS[kind]
    try:
        error = refusal(lambda: opener(sqlite3.connect(path, timeout=TIMEOUT)))
    finally:
        holder.execute("ROLLBACK")
    assert error.code == code
    assert isinstance(error, DatabaseUnreachable) is (kind == "monitor")
    assert every_table(path) == []  # nothing created: no table, no meta row, no index
    holder.close()
    opener(sqlite3.connect(path))  # the lock gone, the same file opens


@pytest.mark.parametrize("kind", OPENERS)
def test_an_existing_file_locked_past_the_timeout_at_construction_is_left_as_it_was(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "existing.db"
    opener, code = OPENERS[kind]
    first = opener(sqlite3.connect(path))
    (first.store if kind == "monitor" else first).insert(MONITOR.create(record(0)))
    before = every_table(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert refusal(lambda: opener(sqlite3.connect(path, timeout=TIMEOUT))).code == code
    finally:
        holder.execute("ROLLBACK")
    assert every_table(path) == before


@pytest.mark.parametrize("kind", OPENERS)
def test_a_closed_connection_at_construction_has_the_code(tmp_path: Path, kind: str) -> None:
    connection = sqlite3.connect(tmp_path / "closed.db")
    connection.close()
    opener, code = OPENERS[kind]
    assert refusal(lambda: opener(connection)).code == code
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


@pytest.mark.parametrize("kind", OPENERS)
def test_a_new_file_on_a_full_disk_is_refused_and_left_empty(full_disk: Path, kind: str) -> None:
    path = full_disk / "new.db"
    opener, code = OPENERS[kind]
    error = refusal(lambda: opener(sqlite3.connect(path)))
    assert error.code == code
    assert getattr(driver_cause(error), "sqlite_errorname", None) == "SQLITE_FULL"
    # sqlite3.connect made the empty file; the store wrote nothing into it and left no
    # journal beside it.
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "new.db"]
    assert path.stat().st_size == 0
    (full_disk / "filler").unlink()  # space again: the same file opens and works
    opened = opener(sqlite3.connect(path))
    (opened.store if kind == "monitor" else opened).insert(MONITOR.create(record(0)))


def test_connect_on_a_full_disk_is_database_unreachable(full_disk: Path) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        connect(full_disk / "new.db")
    assert raised.value.code == GENERIC


def test_a_commit_that_fills_the_disk_changes_nothing(full_disk: Path) -> None:
    """SQLite refuses the commit's write for lack of space and rolls the transaction
    back: a failure of the commit, yet a known outcome."""
    filler = full_disk / "filler"
    filler.unlink()
    path = full_disk / "store.db"
    store = generic(sqlite3.connect(path))
    store.insert(MONITOR.create(record(0)))
    before = every_table(path)
    try:  # full again, the database's file in it
        with filler.open("wb", buffering=0) as out:
            while True:
                out.write(b"\0" * 1024)
    except OSError as error:
        assert error.errno == 28

    def fill() -> None:
        with store.transaction():
            for index in range(1, 60):
                store.insert(MONITOR.create(record(index)))

    error = refusal(fill)
    assert error.code == GENERIC
    assert getattr(driver_cause(error), "sqlite_errorname", None) == "SQLITE_FULL"
    assert not store.connection.in_transaction
    assert every_table(path) == before


# --- every operation of the generic store, and of the monitor ------------------------


def opened_generic(path: Path) -> SQLiteStore[Any]:
    store = SQLiteStore(MONITOR, sqlite3.connect(path, timeout=TIMEOUT))
    filled(store)  # e0..e2, e0 leased to w1 under t0
    return store


# SQLite settles no claim in place and locks the file, not the schema: no statement.
OPERATIONS = sorted(set(OPERATION_NAMES) - {"claim_in_place", "claim_many_in_place",
                                             "lock_schema"})
# PRAGMA database_list reads no page of the file: no lock can stop it.
LOCKABLE = [name for name in OPERATIONS if name != "locate"]


def test_the_operations_listed_are_every_public_one(tmp_path: Path) -> None:
    assert public_methods(SQLiteStore) - WITHOUT_STATEMENTS == set(OPERATION_NAMES)
    assert set(operations(opened_generic(tmp_path / "store.db"))) == set(OPERATION_NAMES)


@pytest.mark.parametrize("operation", LOCKABLE)
def test_every_store_operation_on_a_locked_database_is_database_unreachable(
    tmp_path: Path, operation: str
) -> None:
    """``BEGIN EXCLUSIVE`` in a rollback journal keeps readers out too."""
    path = tmp_path / "store.db"
    store = opened_generic(path)
    action = operations(store)[operation]
    before = every_table(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert refusal(action).code == GENERIC
    finally:
        holder.execute("ROLLBACK")
    assert not store.connection.in_transaction
    assert every_table(path) == before


@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_store_operation_on_a_closed_connection_is_database_unreachable(
    tmp_path: Path, operation: str
) -> None:
    path = tmp_path / "store.db"
    store = opened_generic(path)
    action = operations(store)[operation]
    before = every_table(path)
    store.connection.close()
    assert refusal(action).code == GENERIC
    assert every_table(path) == before


def test_a_commit_kept_out_by_a_reader_changes_nothing(tmp_path: Path) -> None:
    """In a rollback journal a reader's open transaction keeps the writer's ``COMMIT`` from
    the exclusive lock it needs: SQLite answers busy and the transaction stays open. The
    store rolls it back and says ``outcome_unknown`` false: nothing was committed."""
    path = tmp_path / "store.db"
    store = opened_generic(path)
    before = every_table(path)
    reader = sqlite3.connect(path, isolation_level=None)

    def insert_while_read() -> None:
        with store.transaction():
            store.insert(MONITOR.create(record(7)))
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM lifecycle_monitor").fetchone()

    error = refusal(insert_while_read)
    reader.execute("ROLLBACK")
    assert error.code == GENERIC
    assert getattr(driver_cause(error), "sqlite_errorname", "").startswith("SQLITE_BUSY")
    assert not store.connection.in_transaction
    assert every_table(path) == before
    assert store.get("e7") is None  # and the store goes on
    assert store.insert(MONITOR.create(record(7))).event_id == "e7"


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
