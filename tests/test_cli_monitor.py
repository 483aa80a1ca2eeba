"""`lifecycles monitor health|status`: readable and JSON answers, and exit codes scripts use."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from monitor_support import CAPABILITIES, answer, notification

from lifecycles.cli import main
from lifecycles.monitor import DurableTerminalProcessingMonitor


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "monitor.db"
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(3):
        monitor.register(*notification(index), now=10)
    monitor.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=20)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_health_ok_exits_0_and_prints_counts(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "monitor", "health", "--db", str(database),
                       "--capabilities", CAPABILITIES, "--now", "30")
    assert code == 0
    assert "status: ok" in out and "succeeded   1" in out and "due now: 2" in out


def test_health_blocked_exits_1_with_json(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(database), CAPABILITIES)
    monitor.claim("w1", now=30, lease_seconds=10)
    code, out, _ = run(capsys, "monitor", "health", "--db", str(database),
                       "--capabilities", CAPABILITIES, "--now", "100", "--json")
    assert code == 1
    health = json.loads(out)
    assert health["status"] == "blocked" and health["expired_leases"] == 1
    assert list(health["counts"]) == ["pending", "leased", "watching", "retry_wait",
                                      "succeeded", "failed"]


def test_status_prints_one_item(database: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "monitor", "status", "--db", str(database),
                       "--capabilities", CAPABILITIES, "--now", "30", "--json", "e0")
    assert code == 0
    assert json.loads(out)["status"] == "succeeded"


@pytest.mark.parametrize(
    ("argv_tail", "expected_code", "message"),
    [
        (["status", "e404"], 3, "terminal_processing_monitor.missing"),
        (["status", "e/1"], 3, "terminal_processing_monitor.event_invalid"),
    ],
)
def test_refusals_exit_3_with_the_code(
    database: Path, capsys: pytest.CaptureFixture[str],
    argv_tail: list[str], expected_code: int, message: str,
) -> None:
    command, *rest = argv_tail
    code, _, err = run(capsys, "monitor", command, "--db", str(database),
                       "--capabilities", CAPABILITIES, "--now", "30", *rest)
    assert code == expected_code
    assert message in err


def test_wrong_capabilities_exit_3_schema_altered(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = database.read_bytes()
    code, _, err = run(capsys, "monitor", "health", "--db", str(database),
                       "--capabilities", "e" * 64)
    assert code == 3 and "schema_altered" in err
    assert database.read_bytes() == before


def test_a_missing_or_foreign_database_exits_4_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent.db"
    code, _, err = run(capsys, "monitor", "health", "--db", str(missing),
                       "--capabilities", CAPABILITIES)
    assert code == 4 and not missing.exists()
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE other (x)")
    code, _, err = run(capsys, "monitor", "health", "--db", str(foreign),
                       "--capabilities", CAPABILITIES)
    assert code == 4 and "no monitor schema" in err
    tables = sqlite3.connect(foreign).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("other",)]


def test_python_dash_m_runs_the_same_command(database: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "lifecycles", "monitor", "status", "--db", str(database),
         "--capabilities", CAPABILITIES, "--now", "30", "e1"],
        capture_output=True, text=True, check=False,
    )
    assert finished.returncode == 0, finished.stderr
    assert "pending" in finished.stdout
