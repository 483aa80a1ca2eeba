"""The monitor on a disk that is full: every write refused as ``database_unreachable``,
reads still answered, nothing lost or half-written, and work goes on once there is room.

The disk is made full for one child process, without mounting anything: its file-size
limit (RLIMIT_FSIZE, SIGXFSZ ignored) is zero, so every write to a file fails as on a
full file system (EFBIG, which SQLite reports as SQLITE_FULL or an I/O error, as it
reports ENOSPC). That is a little stricter than a full disk, where rewriting a block a
file already has succeeds. The README's "Faults" section is written from this and from
runs on a full tmpfs.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support.monitor import CAPABILITIES, answer, notification

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor
from lifecycles.stores.sqlite import connect

CODE = "terminal_processing_monitor."

CHILD = """
import json, os, resource, signal, sys
sys.path.insert(0, {support!r})
from support.monitor import CAPABILITIES, answer, notification
from lifecycles.monitor import DurableTerminalProcessingMonitor, TerminalProcessingMonitorBlocked
from lifecycles.stores.sqlite import connect

path, mode = {path!r}, {mode!r}
monitor = DurableTerminalProcessingMonitor(connect(path, journal_mode=mode), CAPABILITIES)
monitor.status("e0", now=20)  # the pages are read, the -shm mapped, before the disk fills
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

def answered(call):
    try:
        call()
        return "answered"
    except TerminalProcessingMonitorBlocked as error:
        return error.code

succeeded = lambda e, s: answer(e, s, "succeeded")
print(json.dumps({{
    "register": answered(lambda: monitor.register(*notification(100), now=20)),
    "claim": answered(lambda: monitor.claim("w1", now=20)),
    "run_once": answered(lambda: monitor.run_once(succeeded, "w1", now=20)),
    "status": answered(lambda: monitor.status("e0", now=20)),
    "health": answered(lambda: monitor.health(now=20)),
}}))
"""


def rows(path: Path) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(
            "SELECT * FROM cms_source_terminal_processing ORDER BY event_id"
        ).fetchall()
    finally:
        connection.close()


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_full_disk_refuses_every_write_and_loses_nothing(
    tmp_path: Path, journal_mode: str
) -> None:
    path = tmp_path / "monitor.db"
    monitor = DurableTerminalProcessingMonitor(connect(path, journal_mode=journal_mode),
                                               CAPABILITIES)
    for index in range(5):
        monitor.register(*notification(index), now=10)
    before = rows(path)
    support = str(Path(__file__).resolve().parents[1])
    child = CHILD.format(support=support, path=str(path), mode=journal_mode)
    finished = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                              check=False)
    assert finished.returncode == 0, finished.stderr
    unreachable = CODE + "database_unreachable"
    assert json.loads(finished.stdout) == {
        "register": unreachable, "claim": unreachable, "run_once": unreachable,
        "status": "answered", "health": "answered",
    }
    # Nothing half-written: the refused calls left the rows as they were, the file whole
    # (a write that failed part-way is rolled back from the journal or the log).
    assert rows(path) == before
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    check.close()
    # With room again (this process has no limit), the same connection goes on.
    outcome = monitor.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=30)
    assert outcome is not None and (outcome.event_id, outcome.status) == ("e0", "succeeded")
    assert monitor.register(*notification(9), now=30).status == "pending"
