"""`lifecycles monitor health` when the disk is full or a read fails: what the operator reads.

A full disk is made real without mounting anything: the command runs in a child process
whose file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) is the size the files have, so
SQLite's writes fail as on a full file system (EFBIG, which SQLite reports as it reports
ENOSPC). Damage is real bytes overwritten in the file. The README's "Faults" section says
what each answer means and what to do.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support.monitor import CAPABILITIES, notification

from lifecycles.cli import main
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor
from lifecycles.monitor.schema import TABLE
from lifecycles.stores.sqlite import connect

CODE = "terminal_processing_monitor."
HINT = "SQLite reports a failed read (EIO) as corruption too: once the device is healthy, sqlite3 "


def monitor_file(path: Path, journal_mode: str) -> None:
    """A monitor database with five items, closed (in WAL: no -wal or -shm file left)."""
    monitor = DurableTerminalProcessingMonitor(connect(path, journal_mode=journal_mode),
                                               CAPABILITIES)
    for index in range(5):
        monitor.register(*notification(index), now=10)
    monitor.connection.close()


def health_json(path: Path) -> list[str]:
    return ["monitor", "health", "--db", str(path), "--capabilities", CAPABILITIES, "--json"]


def test_a_full_disk_when_opening_is_database_unreachable_exit_7_not_a_damaged_file(
    tmp_path: Path,
) -> None:
    """Opening a WAL database creates its -shm and -wal files: on a full disk SQLite says
    "disk I/O error", which the command reported as "not a usable SQLite database" (exit
    6). The file is fine: the answer is the workers' own code, exit 7, retry later."""
    path = tmp_path / "monitor.db"
    monitor_file(path, "wal")
    before = path.read_bytes()
    child = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n"
        "from lifecycles.cli import main\n"
        f"sys.exit(main({health_json(path)!r}))\n"
    )
    finished = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                              check=False)
    assert finished.returncode == 7, finished.stderr
    answer = json.loads(finished.stdout)
    assert answer["error"] == "database_unreachable"
    assert answer["message"] == (
        f"{path} cannot be read or written right now (disk I/O error): a full disk or a "
        "failing device; free space or check the kernel log, then retry"
    )
    assert path.read_bytes() == before
    # Once the disk has room again the same command answers, and the file is whole.
    assert main(health_json(path)) == 0
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def _overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)


def test_a_damaged_schema_exits_6_saying_a_read_error_looks_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "monitor.db"
    monitor_file(path, "delete")
    text = path.read_bytes()
    at = text.index(b"CREATE TABLE cms_source_terminal_processing_meta")
    _overwrite(path, at + len("CREATE TABLE"), b"(((")
    damaged = path.read_bytes()
    assert main(health_json(path)) == 6
    answer = json.loads(capsys.readouterr().out)
    assert answer["error"] == "not_a_database"
    assert answer["message"].startswith(f"{path} is not a usable SQLite database (malformed")
    assert answer["message"].endswith(
        f"; check the path; {HINT}{path} 'PRAGMA integrity_check' answers ok if the file is "
        "not damaged"
    )
    assert path.read_bytes() == damaged


def test_damage_found_by_health_exits_3_saying_a_read_error_looks_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "monitor.db"
    monitor_file(path, "delete")
    connection = sqlite3.connect(path)
    (root,) = connection.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = ?", (TABLE,)
    ).fetchone()
    (page_size,) = connection.execute("PRAGMA page_size").fetchone()
    connection.close()
    _overwrite(path, (root - 1) * page_size, b"\x0d" + b"\xff" * 7)  # a leaf page's header
    damaged = path.read_bytes()
    assert main(health_json(path)) == 3
    answer = json.loads(capsys.readouterr().out)
    assert answer["error"] == CODE + "database_integrity"
    assert answer["message"].startswith(f"refused: {CODE}database_integrity: SQLite reports "
                                        "damage")
    assert answer["message"].endswith(
        f"; {HINT}{path} 'PRAGMA integrity_check' answers ok if the file is not damaged"
    )
    assert path.read_bytes() == damaged
