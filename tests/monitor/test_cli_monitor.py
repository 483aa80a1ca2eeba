"""`lifecycles monitor health|status`: readable and JSON answers, and exit codes scripts use."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support.monitor import CAPABILITIES, notification, three_items
from support.postgres import connect_in, require_postgres, temporary_schema

from lifecycles.cli import main
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "monitor.db"
    three_items(path).connection.close()
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


def test_a_missing_item_exits_3_with_the_code(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "monitor", "status", "--db", str(database),
                       "--capabilities", CAPABILITIES, "--now", "30", "e404")
    assert code == 3
    assert err == ("lifecycles: refused: terminal_processing_monitor.missing: "
                   "no item with event id 'e404'\n")


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


# --- every error path: its exit code, one line, no traceback, JSON under --json ------


def _error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lifecycles: ")
    return lines[0]


def run_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], exit_code: int, error: str
) -> str:
    """Run ``argv`` plain and with ``--json``; both must fail the same way. The message."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (exit_code, "")
    line = _error_line(err)
    code, out, err = run(capsys, *argv, "--json")
    assert code == exit_code
    assert json.loads(out) == {"error": error, "message": line.removeprefix("lifecycles: ")}
    assert _error_line(err) == line
    return line


def health_argv(database: Path, *rest: str) -> list[str]:
    return ["monitor", "health", "--db", str(database), "--capabilities", CAPABILITIES, *rest]


def test_other_capabilities_than_the_binding_exit_8_showing_both_prefixes(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = database.read_bytes()
    other = "e" * 64
    line = run_error(capsys, ["monitor", "health", "--db", str(database),
                              "--capabilities", other], 8, "capabilities_differ")
    assert f"bound to capabilities {CAPABILITIES[:12]}..., not the given {other[:12]}..." in line
    assert "expected_capabilities_sha256" in line
    assert database.read_bytes() == before


def test_help_says_where_the_capabilities_value_is_found(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["monitor", "health", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "cms_source_terminal_processing_meta.expected_capabilities_sha256" in text
    for code in range(10):
        assert f" {code} " in text  # every exit code is in the table


def test_malformed_capabilities_are_a_usage_error(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = database.read_bytes()
    line = run_error(capsys, ["monitor", "health", "--db", str(database),
                              "--capabilities", "ABC"], 2, "capabilities_invalid")
    assert "64 lowercase hex digits" in line
    assert database.read_bytes() == before


def test_a_missing_argument_is_one_usage_line(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = run_error(capsys, ["monitor", "health", "--db", str(database)], 2, "usage")
    assert "--capabilities" in line and "lifecycles monitor health --help" in line


def test_db_and_dsn_exclude_each_other(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = run_error(capsys, [*health_argv(database), "--dsn", "postgresql://x"], 2, "usage")
    assert "not allowed with argument" in line


@pytest.mark.parametrize(("now", "event_id", "error"), [
    ("nan", "e1", "terminal_processing_monitor.time_invalid"),
    ("-1", "e1", "terminal_processing_monitor.time_invalid"),
    ("30", "e/1", "terminal_processing_monitor.event_invalid"),
])
def test_an_invalid_time_or_event_id_is_a_usage_error(
    database: Path, capsys: pytest.CaptureFixture[str], now: str, event_id: str, error: str
) -> None:
    before = database.read_bytes()
    line = run_error(capsys, ["monitor", "status", "--db", str(database), "--capabilities",
                              CAPABILITIES, "--now", now, event_id], 2, error)
    assert error in line
    assert database.read_bytes() == before


def test_a_file_that_is_not_sqlite_exits_6_and_is_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are notes, not a database\n" * 200)
    line = run_error(capsys, health_argv(path), 6, "not_a_database")
    assert "is not a usable SQLite database" in line
    assert path.read_bytes() == b"these are notes, not a database\n" * 200


def test_a_directory_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_error(capsys, health_argv(tmp_path), 5, "unreadable")
    assert "is not a regular file" in line


def test_an_unreadable_file_exits_5(
    database: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests run as root here, where chmod 000 does not stop a read: deny the access check.
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: False if Path(path) == database else real_access(
            path, mode
        )
    )
    line = run_error(capsys, health_argv(database), 5, "unreadable")
    assert "no permission" in line


def test_a_locked_database_exits_7_not_blocked(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = run_error(capsys, health_argv(database, "--timeout", "0.05"), 7, "database_locked")
    finally:
        holder.execute("ROLLBACK")
    assert "locked by another connection" in line and "--timeout" in line


def test_a_lock_met_during_the_call_exits_7_too(
    database: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycles.monitor.facade import blocked

    def locked_mid_call(*args: object, **kwargs: object) -> None:
        raise blocked("terminal_processing_monitor.database_unreachable")

    monkeypatch.setattr(DurableTerminalProcessingMonitor, "health", locked_mid_call)
    line = run_error(capsys, health_argv(database), 7,
                     "terminal_processing_monitor.database_unreachable")
    assert "is locked or cannot be read right now" in line


def test_a_missing_database_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_error(capsys, health_argv(tmp_path / "absent.db"), 4, "no_database")
    assert "never creates one" in line
    assert not (tmp_path / "absent.db").exists()


def test_state_invalid_names_the_event_ids_the_rules_and_how_to_inspect(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(database) as connection:
        connection.execute(
            "UPDATE cms_source_terminal_processing SET failures = 99 WHERE event_id = 'e1'"
        )
    before = database.read_bytes()
    line = run_error(capsys, health_argv(database, "--now", "30"), 3,
                     "terminal_processing_monitor.state_invalid")
    assert "stored record(s) e1 break the rules failures_within_max, polls_cover_failures;" in line
    assert (f'inspect it with: sqlite3 {database} "SELECT * FROM '
            "cms_source_terminal_processing WHERE event_id = 'e1'\"") in line
    assert database.read_bytes() == before


def test_an_altered_schema_is_refused_with_its_code(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(database) as connection:
        connection.execute("ALTER TABLE cms_source_terminal_processing ADD COLUMN extra TEXT")
    line = run_error(capsys, health_argv(database), 3, "terminal_processing_monitor.schema_altered")
    assert "not the one the monitor wrote" in line


def test_an_unreachable_postgres_exits_9(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["monitor", "health", "--dsn", "postgresql://nobody@127.0.0.1:9/none",
            "--capabilities", CAPABILITIES, "--timeout", "1"]
    line = run_error(capsys, argv, 9, "database_unreachable")
    assert "cannot reach the PostgreSQL server" in line


def test_a_malformed_dsn_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["monitor", "health", "--dsn", "host", "--capabilities", CAPABILITIES]
    line = run_error(capsys, argv, 2, "dsn_invalid")
    assert "--dsn is not a valid connection string" in line


def test_an_unexpected_error_exits_70_in_one_line(
    database: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(DurableTerminalProcessingMonitor, "health", broken)
    monkeypatch.delenv("LIFECYCLES_TRACEBACK", raising=False)
    line = run_error(capsys, health_argv(database), 70, "internal_error")
    assert "ZeroDivisionError: planted" in line and "LIFECYCLES_TRACEBACK=1" in line
    monkeypatch.setenv("LIFECYCLES_TRACEBACK", "1")
    code, _, err = run(capsys, *health_argv(database))
    assert code == 70 and "Traceback" in err and "ZeroDivisionError" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"lifecycles \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_no_traceback_through_the_installed_command(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    path.write_text("not sqlite")
    finished = subprocess.run(
        [sys.executable, "-m", "lifecycles", "monitor", "health", "--db", str(path),
         "--capabilities", CAPABILITIES], capture_output=True, text=True, check=False,
    )
    assert finished.returncode == 6 and "Traceback" not in finished.stderr
    assert finished.stdout == ""


def test_health_and_status_over_a_postgres_dsn(capsys: pytest.CaptureFixture[str]) -> None:
    postgres_dsn = require_postgres()
    with temporary_schema() as schema:
        monitor = DurableTerminalProcessingMonitor(connect_in(schema), CAPABILITIES)
        monitor.register(*notification(1), now=10)
        monitor.connection.close()
        dsn = f"{postgres_dsn}?options=-c%20search_path%3D{schema}"
        code, out, _ = run(capsys, "monitor", "health", "--dsn", dsn, "--capabilities",
                           CAPABILITIES, "--now", "30", "--json")
        assert code == 0 and json.loads(out)["counts"]["pending"] == 1
        code, out, _ = run(capsys, "monitor", "status", "--dsn", dsn, "--capabilities",
                           CAPABILITIES, "--now", "30", "e1")
        assert code == 0 and "pending" in out
        line = run_error(capsys, ["monitor", "health", "--dsn", dsn, "--capabilities",
                                  "e" * 64], 8, "capabilities_differ")
        assert f"{CAPABILITIES[:12]}..." in line
    empty = f"{postgres_dsn}?options=-c%20search_path%3Dpg_catalog"
    run_error(capsys, ["monitor", "health", "--dsn", empty, "--capabilities", CAPABILITIES],
              4, "no_monitor_schema")
