"""``lifecycles.stores.sqlite.connect``: a SQLite connection set up for workers, with the
durability the caller chose, usable by any store (the tests' tasks here; the monitor on it
is tested in tests/monitor/test_monitor_facade.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.tasks import TASKS, TaskInputs, new_task

from lifecycles.stores._base import StoreUnavailable
from lifecycles.stores.sqlite import SQLiteStore, connect

SYNCHRONOUS_LEVELS = {"off": 0, "normal": 1, "full": 2, "extra": 3}


def pragma(connection: sqlite3.Connection, name: str) -> Any:
    return connection.execute(f"PRAGMA {name}").fetchone()[0]


def test_the_defaults_are_wal_full_sync_and_a_five_second_busy_timeout(tmp_path: Path) -> None:
    connection = connect(tmp_path / "db.sqlite3")
    assert pragma(connection, "journal_mode") == "wal"
    assert pragma(connection, "synchronous") == SYNCHRONOUS_LEVELS["full"]
    assert pragma(connection, "busy_timeout") == 5000
    connection.close()


@pytest.mark.parametrize("synchronous", list(SYNCHRONOUS_LEVELS))
@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_each_setting_is_applied(tmp_path: Path, synchronous: str, journal_mode: str) -> None:
    connection = connect(tmp_path / "db.sqlite3", synchronous=synchronous,
                         journal_mode=journal_mode, busy_timeout=0.25)
    assert pragma(connection, "journal_mode") == journal_mode
    assert pragma(connection, "synchronous") == SYNCHRONOUS_LEVELS[synchronous]
    assert pragma(connection, "busy_timeout") == 250
    connection.close()


def test_a_store_on_it_writes_what_another_connection_reads(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite3"
    writer = connect(path, synchronous="normal")
    store = SQLiteStore(TASKS, writer)
    store.insert(new_task("t-1", now=10.0))
    claimed = store.claim(TaskInputs(now=20.0, worker_id="w1", lease_token="lease-1"))
    assert claimed is not None
    reader = connect(path)
    assert SQLiteStore(TASKS, reader).get("t-1") == claimed
    writer.close()
    reader.close()


@pytest.mark.parametrize(("keyword", "value"), [
    ("synchronous", "fastest"), ("synchronous", "FULL; DROP TABLE x"),
    ("journal_mode", "wal2"), ("journal_mode", "memory"),
    ("busy_timeout", -1), ("busy_timeout", "5"), ("busy_timeout", float("nan")),
])
def test_a_setting_sqlite_does_not_have_is_refused_and_no_file_is_made(
    tmp_path: Path, keyword: str, value: Any
) -> None:
    with pytest.raises(ValueError, match=keyword):
        connect(tmp_path / "db.sqlite3", **{keyword: value})
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_opened_is_database_unreachable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        connect(tmp_path / "missing-directory" / "db.sqlite3")
    assert raised.value.code == "lifecycles.database_unreachable"


def test_a_database_that_cannot_take_wal_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="journal_mode=wal"):
        connect(":memory:")
