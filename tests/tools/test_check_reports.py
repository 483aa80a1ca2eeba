"""What `lifecycles check` reports for a finding that breaks no rule (a cycle nobody
declared, a row never fired): each once, with its shortest trace, in ``--json`` too, and a
replay file that fails while the search still finds it and passes once it is fixed.
Planted on the task lifecycle made for the framework's tests (its renewals are a cycle
without a final status, declared as intended; the plant leaves the declaration out)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycles._checker import run_check
from lifecycles._checker_report import EXIT_FAILED

TESTS = Path(__file__).resolve().parents[1]

PLANT = """
import attrs
from support.tasks_inputs import EXPLORATION as DECLARED

EXPLORATION = attrs.evolve(DECLARED, workers=None, accepted_cycles={cycles})
"""


def planted(tmp_path: Path, cycles: str = "()") -> Path:
    module = tmp_path / "cyclic_tasks.py"
    module.write_text(PLANT.format(cycles=cycles))
    return module


def check(tmp_path: Path, module: Path) -> tuple[int, str, dict[str, object]]:
    human, machine = io.StringIO(), io.StringIO()
    code = run_check(["tasks"], [str(module)], out=human, err=io.StringIO(),
                     trace_dir=tmp_path / "traces", snapshot_path=tmp_path / "none.json")
    run_check(["tasks"], [str(module)], as_json=True, out=machine, err=io.StringIO(),
              trace_dir=tmp_path / "traces", snapshot_path=tmp_path / "none.json")
    # The module's own exploration only: the one it imports to derive it is not checked too.
    [outcome] = json.loads(machine.getvalue())["lifecycles"]
    assert "checked 1 lifecycles" in human.getvalue()
    return code, human.getvalue(), outcome


def replay(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(path)], capture_output=True, text=True, env=env, cwd=path.parent)


@pytest.fixture
def found(tmp_path: Path) -> tuple[int, str, dict[str, object]]:
    return check(tmp_path, planted(tmp_path))


def test_an_undeclared_cycle_is_one_finding_printed_once(found: tuple[int, str, dict[str, object]]
                                                         ) -> None:
    code, text, _ = found
    assert code == EXIT_FAILED
    assert text.count("FAIL a cycle of 1 states never reaches a final status, made of "
                      "renew (3 such cycles") == 1
    assert "\n  FAILED: a cycle without a final status\n" in text


def test_the_json_carries_the_finding_its_trace_and_its_replay(
        found: tuple[int, str, dict[str, object]]) -> None:
    _, _, outcome = found
    assert outcome["failures"] == ["a cycle without a final status"]
    [report] = outcome["findings"]  # type: ignore[misc]
    assert report["failure"] == "a cycle without a final status"
    assert [step.split(":")[0] for step in report["trace"]] == ["claim", "renew"]
    assert report["replay"] == outcome["replay"] and Path(report["replay"]).is_file()
    assert {"states", "edges", "refusals", "depth", "seconds", "states_per_second",
            "cut_at"} <= set(outcome)


def test_the_replay_fails_until_the_cycle_is_declared(
        tmp_path: Path, found: tuple[int, str, dict[str, object]]) -> None:
    _, _, outcome = found
    path = Path(str(outcome["replay"]))
    assert path.name == "test_replay_tasks_a_cycle_without_a_final_status.py"
    assert "1. claim: " in path.read_text() and "2. renew: " in path.read_text()
    failed = replay(path)
    assert failed.returncode == 1, failed.stdout
    assert "made of renew" in failed.stdout
    planted(tmp_path, 'DECLARED.accepted_cycles')  # the fix: declared, with its reason
    passed = replay(path)
    assert passed.returncode == 0, passed.stdout


def test_a_row_never_fired_gets_a_replay_too(tmp_path: Path) -> None:
    module = tmp_path / "narrow_tasks.py"
    module.write_text("import attrs\nfrom support.tasks_inputs import EXPLORATION as DECLARED\n\n"
                      "EXPLORATION = attrs.evolve(DECLARED, workers=None, moves=tuple(\n"
                      "    move for move in DECLARED.moves if move.name != 'renew'))\n")
    code, text, outcome = check(tmp_path, module)
    assert code == EXIT_FAILED
    assert "FAIL rows never fired: ['renew [lease_is_held, lease_is_live]']" in text
    reports = {report["failure"]: report for report in outcome["findings"]}  # type: ignore[union-attr]
    path = Path(reports["rows never fired"]["replay"])
    assert path.name == "test_replay_tasks_rows_never_fired.py"
    assert replay(path).returncode == 1
