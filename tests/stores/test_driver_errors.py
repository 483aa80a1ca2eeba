"""No driver exception leaves a SQL store: real SQLite files (issue 26, 1).

Every public entry point of the generic store, the constructor included, meets a
database it cannot use (locked by another connection past the busy timeout, a full
disk, a closed connection) with the store error it means, never a ``sqlite3``
exception: ``lifecycles.database_unreachable`` (a ``StoreUnavailable``). Each such
failure came before any commit was sent: ``outcome_unknown`` is false, and each test
shows that nothing changed. The store holds the tests' tasks (tests/support/tasks.py);
the monitor facade's own codes on the same failures are
tests/monitor/test_monitor_driver_errors.py. The PostgreSQL side, where a commit's
answer can be lost, is tests/stores/test_postgres_commit_outcome.py.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.task_operations import (
    OPERATION_NAMES,
    TABLE,
    WITHOUT_STATEMENTS,
    filled,
    operations,
    public_methods,
    record,
)
from support.tasks import TASKS

from lifecycles.stores._base import StoreUnavailable
from lifecycles.stores.sqlite import SQLiteStore, connect

GENERIC = "lifecycles.database_unreachable"
TIMEOUT = 0.05


def generic(connection: sqlite3.Connection) -> SQLiteStore[Any]:
    return SQLiteStore(TASKS, connection)  # the table derived from the record


def every_table(path: Path) -> list[Any]:
    """Every row of every table (whatever its columns), read by a connection of its own."""
    other = sqlite3.connect(path)
    try:
        tables = [name for (name,) in other.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )]
        return [(table, *other.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall())
                for table in tables]
    finally:
        other.close()


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
        error = refusal(lambda: generic(sqlite3.connect(path, timeout=TIMEOUT)))
    finally:
        holder.execute("ROLLBACK")
    assert error.code == GENERIC
    assert every_table(path) == []  # nothing created: no table, no index
    holder.close()
    generic(sqlite3.connect(path))  # the lock gone, the same file opens


def test_an_existing_file_locked_past_the_timeout_at_construction_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "existing.db"
    generic(sqlite3.connect(path)).insert(TASKS.create(record(0)))
    before = every_table(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert refusal(lambda: generic(sqlite3.connect(path, timeout=TIMEOUT))).code == GENERIC
    finally:
        holder.execute("ROLLBACK")
    assert every_table(path) == before


def test_a_closed_connection_at_construction_has_the_code(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "closed.db")
    connection.close()
    assert refusal(lambda: generic(connection)).code == GENERIC
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
    error = refusal(lambda: generic(sqlite3.connect(path)))
    assert error.code == GENERIC
    assert getattr(driver_cause(error), "sqlite_errorname", None) == "SQLITE_FULL"
    # sqlite3.connect made the empty file; the store wrote nothing into it and left no
    # journal beside it.
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "new.db"]
    assert path.stat().st_size == 0
    (full_disk / "filler").unlink()  # space again: the same file opens and works
    generic(sqlite3.connect(path)).insert(TASKS.create(record(0)))


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
    store.insert(TASKS.create(record(0)))
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
                store.insert(TASKS.create(record(index)))

    error = refusal(fill)
    assert error.code == GENERIC
    assert getattr(driver_cause(error), "sqlite_errorname", None) == "SQLITE_FULL"
    assert not store.connection.in_transaction
    assert every_table(path) == before


# --- every operation of the generic store --------------------------------------------


def opened_generic(path: Path) -> SQLiteStore[Any]:
    store = SQLiteStore(TASKS, sqlite3.connect(path, timeout=TIMEOUT))
    filled(store)  # t0..t2, t0 leased to w1 under k0
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
            store.insert(TASKS.create(record(7)))
            reader.execute("BEGIN")
            reader.execute(f"SELECT count(*) FROM {TABLE}").fetchone()

    error = refusal(insert_while_read)
    reader.execute("ROLLBACK")
    assert error.code == GENERIC
    assert getattr(driver_cause(error), "sqlite_errorname", "").startswith("SQLITE_BUSY")
    assert not store.connection.in_transaction
    assert every_table(path) == before
    assert store.get("t7") is None  # and the store goes on
    assert store.insert(TASKS.create(record(7))).task_id == "t7"
