"""A downstream project with [tool.lifecycles]: `check`, `diagrams` and `worker` with no
--module from its root and from a subdirectory (as subprocesses, as a user runs them),
the commands its generated pages print working as printed, and each mistake refused in
one line with its exit code, changing nothing."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.project import fresh_imports, refund_package, write_pyproject

from lifecycles import cli

__all__ = ["fresh_imports"]

SETTINGS = '''\
modules = ["refunds/lifecycle.py"]
diagrams = "docs/diagrams"
store = "sqlite:data/refunds.db"
'''
ENV = {**os.environ, "LIFECYCLES_CHECK_PROCESSES": "1"}


def lifecycles(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lifecycles", *argv], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=300, check=False)


def submit_refunds(root: Path, count: int) -> None:
    """Refunds submitted into the project's store, by a program of the project."""
    program = (
        "from refunds.lifecycle import REFUND, new_refund\n"
        "from lifecycles.stores.sqlite import SQLiteStore, connect\n"
        "store = SQLiteStore(REFUND, connect('data/refunds.db'))\n"
        f"for n in range({count}):\n"
        "    store.insert(REFUND.create(new_refund(f'rf-{n}', amount_cents=100 + n,"
        " currency='EUR', now=0.0)))\n"
    )
    (root / "data").mkdir()
    subprocess.run([sys.executable, "-c", program], cwd=root, env=ENV, check=True,
                   timeout=120)


def test_a_fresh_project_runs_check_diagrams_and_worker_with_no_module(tmp_path: Path) -> None:
    root = tmp_path / "refund-service"
    write_pyproject(root, SETTINGS)
    refund_package(root)
    sub = root / "refunds" / "deep"
    sub.mkdir()

    checked = lifecycles(root, "check")
    assert checked.returncode == 0, checked.stderr
    assert "refund (table v" in checked.stdout and "monitor" not in checked.stdout
    last = checked.stdout.splitlines()[-1]
    assert re.fullmatch(r"checked 1 lifecycles in [\d.]+ s: all OK \(WARNING: status snapshot "
                        + re.escape(str(root / "lifecycle-statuses.json"))
                        + r" does not exist; .*\)", last), last

    recorded = lifecycles(sub, "check", "--record-statuses")
    assert recorded.returncode == 0, recorded.stderr
    snapshot = json.loads((root / "lifecycle-statuses.json").read_text())
    assert list(snapshot["lifecycles"]) == ["refund"]
    again = lifecycles(sub, "check")
    assert again.returncode == 0
    assert re.fullmatch(r"checked 1 lifecycles in [\d.]+ s: all OK",
                        again.stdout.splitlines()[-1])
    assert f"statuses recorded in {root / 'lifecycle-statuses.json'}" in again.stdout

    named = lifecycles(sub, "check", "outbox")  # a shipped one is checked when named
    assert named.returncode == 0 and "outbox (table v" in named.stdout
    assert "refund (table v" not in named.stdout

    drawn = lifecycles(sub, "diagrams")
    assert drawn.returncode == 0, drawn.stderr
    directory = root / "docs" / "diagrams"
    assert {"README.md", "refund.md", "refund.mmd", "refund.dot"} <= {
        p.name for p in directory.iterdir()}
    assert f"in {directory}" in drawn.stdout.splitlines()[-1]
    for cwd in (root, sub):
        clean = lifecycles(cwd, "diagrams", "--check")
        assert clean.returncode == 0, clean.stdout
        assert clean.stdout.splitlines()[-1].startswith(
            f"diagrams in {directory} match the tables")
    (directory / "refund.mmd").unlink()
    drift = lifecycles(sub, "diagrams", "--check")
    assert drift.returncode == 1 and f"missing: {directory / 'refund.mmd'}" in drift.stdout
    assert lifecycles(root, "diagrams", "--output", str(directory)).returncode == 0

    submit_refunds(root, 3)
    worked = lifecycles(sub, "worker", "refund", "--handler", "refunds.handler:pay_back",
                        "--until-idle")
    assert worked.returncode == 0, worked.stderr
    assert worked.stderr.splitlines()[-1].endswith(": stopped; 3 succeeded")
    connection = sqlite3.connect(root / "data" / "refunds.db")
    try:
        statuses = connection.execute("SELECT status FROM lifecycle_refund").fetchall()
    finally:
        connection.close()
    assert statuses == [("succeeded",)] * 3


def test_the_commands_the_generated_pages_print_work_as_printed(tmp_path: Path) -> None:
    write_pyproject(tmp_path, SETTINGS)
    refund_package(tmp_path)
    assert lifecycles(tmp_path, "check", "--record-statuses").returncode == 0
    assert lifecycles(tmp_path, "diagrams").returncode == 0
    pages = tmp_path / "docs" / "diagrams"
    printed = sorted({command for page in ("README.md", "refund.md")
                      for command in re.findall(r"`(lifecycles [^`]*)`",
                                                (pages / page).read_text())})
    assert "lifecycles check" in printed and "lifecycles diagrams --check" in printed
    assert not any("monitor" in command or "outbox" in command for command in printed)
    assert "lifecycles explain NAME KEY" in printed  # a stored record, on the project's store
    submit_refunds(tmp_path, 1)
    for command in printed:  # the placeholders as a reader fills them in
        argv = (command.replace("NAME", "refund").replace("KEY", "rf-0")
                .replace(" N ", " 2 ").replace(" M", " 1"))
        ran = lifecycles(tmp_path / "refunds", *argv.split()[1:])
        assert ran.returncode == 0, (command, ran.stdout[-500:], ran.stderr)


# --- each mistake: one line, its exit code, nothing changed ---------------------------------


def files_in(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def refused(capsys: pytest.CaptureFixture[str], root: Path, argv: list[str], code: int,
            error: str) -> str:
    """Run ``argv`` in ``root``; it must exit ``code`` with one line on stderr (and, for
    `check`, the same error as JSON), changing no file. The line."""
    before = files_in(root)
    assert cli.main(argv) == code
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
    if argv[0] == "check":
        assert cli.main([*argv, "--json"]) == code
        out, _ = capsys.readouterr()
        assert json.loads(out)["error"] == error
    assert files_in(root) == before
    return err.strip()


def two_refund_packages(root: Path) -> None:
    refund_package(root)
    refund_package(root, "refunds_again")


MISTAKES: list[tuple[str, str, Callable[[Path], None], str]] = [
    ("no_lifecycle", 'modules = ["empty.py"]\n',
     lambda root: (root / "empty.py").write_text("VALUE = 1\n"),
     "empty.py declares no lifecycle"),
    ("duplicate_name", 'modules = ["refunds/lifecycle.py", "refunds_again.lifecycle"]\n',
     lambda root: two_refund_packages(root),
     "two lifecycles are named 'refund': one in refunds.lifecycle, one in "
     "refunds_again.lifecycle"),
    ("module_not_found", 'modules = ["refunds/lifecycle.py"]\n', lambda root: None,
     "no such file: "),
    ("project_invalid", 'modules = ["refunds/lifecycle.py"]\nstatus = "s.json"\n',
     lambda root: None, "pyproject.toml: [tool.lifecycles] status: unknown key"),
]


@pytest.mark.usefixtures("fresh_imports")
@pytest.mark.parametrize(("error", "settings", "make", "said"), MISTAKES,
                         ids=[m[0] for m in MISTAKES])
@pytest.mark.parametrize("command", ["check", "diagrams", "diagrams-check", "worker"])
def test_each_mistake_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    error: str, settings: str, make: Callable[[Path], None], said: str, command: str,
) -> None:
    write_pyproject(tmp_path, settings + 'store = "sqlite:refunds.db"\n')
    make(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = {"check": ["check"], "diagrams": ["diagrams"],
            "diagrams-check": ["diagrams", "--check"],
            "worker": ["worker", "refund", "--handler", "handler.py:pay"]}[command]
    line = refused(capsys, tmp_path, argv, 2, error)
    prefix = "lifecycles check: " if command == "check" else "lifecycles: "
    assert line.startswith(prefix) and said in line, line
    if error in ("no_lifecycle", "module_not_found"):  # where the module is named
        assert line.endswith(f"(named in {tmp_path / 'pyproject.toml'} [tool.lifecycles] "
                             "modules)"), line


@pytest.mark.usefixtures("fresh_imports")
def test_an_unknown_name_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    write_pyproject(tmp_path, SETTINGS)
    refund_package(tmp_path)
    monkeypatch.chdir(tmp_path / "refunds")
    line = refused(capsys, tmp_path, ["check", "refnud"], 2, "unknown_lifecycle")
    assert line.startswith("lifecycles check: unknown lifecycles ['refnud']; known: "
                           "['monitor', 'outbox', 'refund']")
    line = refused(capsys, tmp_path, ["worker", "refnud", "--handler", "h.py:f"], 2, "")
    assert line.startswith("lifecycles: no lifecycle named 'refnud' (known: ['monitor', "
                           "'outbox', 'refund'])")


@pytest.mark.usefixtures("fresh_imports")
def test_a_module_declaring_nothing_fails_check_outside_a_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's case: `check --module empty.py` said `checked 0 lifecycles ... all OK`."""
    (tmp_path / "empty.py").write_text('"""Nothing declared here."""\n')
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, tmp_path, ["check", "--module", "empty.py"], 2, "no_lifecycle")
    assert line == ("lifecycles check: empty.py declares no lifecycle and no exploration: "
                    "check the module named, or remove it")


@pytest.mark.usefixtures("fresh_imports")
def test_a_worker_with_no_store_given_or_configured_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    write_pyproject(tmp_path, 'modules = ["refunds/lifecycle.py"]\n')
    refund_package(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, tmp_path, ["worker", "refund", "--handler",
                                      "refunds/handler.py:pay_back"], 2, "usage")
    assert line.startswith("lifecycles: worker: no store: pass --db FILE, --dsn DSN or "
                           "--root DIR, or set store")


@pytest.mark.usefixtures("fresh_imports")
def test_the_statuses_setting_is_the_snapshot_check_records_and_compares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    write_pyproject(tmp_path, 'modules = ["refunds.lifecycle"]\nstatuses = "state/s.json"\n')
    refund_package(tmp_path)
    monkeypatch.chdir(tmp_path / "refunds")
    assert cli.main(["check", "--record-statuses"]) == 0
    snapshot = tmp_path / "state" / "s.json"
    recorded = json.loads(snapshot.read_text())
    assert recorded["lifecycles"]["refund"]["statuses"] == [
        "submitted", "leased", "retry_wait", "succeeded", "failed", "cancelled"]
    recorded["lifecycles"]["refund"]["statuses"].append("on_hold")  # a status since removed
    snapshot.write_text(json.dumps(recorded))
    capsys.readouterr()
    assert cli.main(["check"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL status_removed: 'on_hold' is recorded in {snapshot}" in out
