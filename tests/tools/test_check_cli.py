"""`lifecycles check` when it cannot run: one line with file:line and what to do, exit 2.

Also: the status snapshot found from anywhere in a project, `--module` checking only what
the module declares, replay files that run from any directory, `--json` and `--help`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycles.cli import COMMAND_MODULES, build_parser, main
from lifecycles.machines.outbox import OUTBOX

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests" / "tools"
FIXTURES = TESTS / "fixtures_check"
DEFECT_MODULE = ROOT / "examples" / "monitor_defect.py"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project root (pyproject.toml) as the current directory; the modules the test
    imports from it are forgotten afterwards, and sys.path is restored."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def line_of(path: Path, marker: str) -> int:
    """The number of the first line of ``path`` holding ``marker``."""
    lines = path.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if marker in line)


def assert_one_line(code: int, out: str, err: str, expected_start: str) -> str:
    """Exit 2, exactly one line on stderr starting as expected, no traceback."""
    assert code == 2, out + err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"lifecycles check: {expected_start}"), err
    assert "Traceback" not in out + err
    return err


# --- the module does not import ------------------------------------------------------


def test_syntax_error_names_file_and_line(project: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    (project / "syntax_broken.py").write_text("X = 1\ndef declare(:\n    pass\n")
    code, out, err = run(capsys, "--module", "syntax_broken.py")
    text = assert_one_line(code, out, err, "syntax_broken.py:2: SyntaxError: invalid syntax")
    assert "fix the syntax there" in text


def test_syntax_error_as_json(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "syntax_json.py").write_text("\n\nclass (\n")
    code, out, err = run(capsys, "--json", "--module", "syntax_json.py")
    assert code == 2 and "Traceback" not in out + err
    assert len(out.splitlines()) == 1
    printed = json.loads(out)
    assert printed["error"] == "module_syntax_error"
    assert printed["message"].startswith("syntax_json.py:3: SyntaxError")
    assert err == f"lifecycles check: {printed['message']}\n"


def test_missing_file_and_missing_dotted_module(project: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--module", "not_there.py")
    assert_one_line(code, out, err, "no such file: not_there.py")
    code, out, err = run(capsys, "--json", "--module", "no_such_package_here.inputs")
    assert code == 2
    printed = json.loads(out)
    assert printed["error"] == "module_not_found"
    assert printed["message"].startswith("no module named 'no_such_package_here.inputs'")


def test_a_missing_dependency_names_the_import_line(project: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (project / "needs_dependency.py").write_text(
        '"""Imports what is not installed."""\n\nimport json\nimport not_installed_anywhere\n')
    code, out, err = run(capsys, "--module", "needs_dependency.py")
    assert_one_line(code, out, err, "needs_dependency.py:4: needs_dependency.py imports "
                                    "'not_installed_anywhere', which is not installed")
    code, out, _ = run(capsys, "--json", "--module", "needs_dependency.py")
    assert json.loads(out)["error"] == "module_not_found"


def test_an_exception_while_importing_names_its_line(project: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (project / "helper_raising.py").write_text("def load():\n    return {}['missing']\n")
    (project / "imports_raising.py").write_text("import helper_raising\n\nhelper_raising.load()\n")
    code, out, err = run(capsys, "--module", "imports_raising.py")
    # The innermost line of the user's code: in the helper module, not the one named.
    assert_one_line(code, out, err, "helper_raising.py:2: KeyError: 'missing' (raised while "
                                    "importing imports_raising.py)")
    code, out, _ = run(capsys, "--json", "--module", "imports_raising.py")
    assert json.loads(out)["error"] == "module_import_failed"


def test_traceback_flag_prints_the_traceback_then_the_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "raises_at_import.py").write_text("X = 1\nraise RuntimeError('no database')\n")
    code, _, err = run(capsys, "--traceback", "--module", "raises_at_import.py")
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert 'raises_at_import.py", line 2, in <module>' in err
    assert lines[-1].startswith("lifecycles check: raises_at_import.py:2: RuntimeError: no "
                                "database")


# --- the declaration is invalid, or user code raises while exploring --------------------


def test_an_invalid_declaration_names_the_lifecycle_call(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = FIXTURES / "definition_invalid.py"
    code, out, err = run(capsys, "--module", str(module))
    line = line_of(module, "= Lifecycle(")
    assert_one_line(code, out, err, f"{module}:{line}: the lifecycle declared here is invalid: "
                                    "statuses_declared: undeclared statuses in the table: "
                                    "['archived']")
    code, out, _ = run(capsys, "--json", "--module", str(module))
    assert json.loads(out)["error"] == "definition_invalid"


def test_an_invalid_declaration_built_by_a_helper_names_the_declaring_module(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The table is the module's; the Lifecycle(...) call is in a helper of the author's.
    (project / "jobs_helper.py").write_text(
        "from examples.defects._jobs import ENDINGS, job_lifecycle\n")
    (project / "twice_claimed.py").write_text(
        "from jobs_helper import ENDINGS, job_lifecycle\n\n"
        "TWICE = job_lifecycle('twice_claimed', [\n"
        "    {'trigger': 'claim', 'source': 'idle', 'dest': 'running'},\n"
        "    *ENDINGS,\n"
        "], __name__)\n")
    code, _, err = run(capsys, "--module", "twice_claimed.py")
    assert code == 2
    assert err.startswith("lifecycles check: twice_claimed.py:3: the lifecycle declared here "
                          "is invalid: guards_and_effects_declared"), err


# A shipped table edited into an invalid one: the broken source runs as the shipped module
# itself (its code compiled under the shipped file's name), as after an edit in place.
SWAP_SHIPPED = """\
import importlib.abc, importlib.util, sys
from pathlib import Path

NAME = "lifecycles.machines.monitor"
SHIPPED = importlib.util.find_spec(NAME).origin
SOURCE = Path(sys.argv[1]).read_text()


class EditedInPlace(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        spec = importlib.util.spec_from_loader(name, self, is_package=True)
        spec.submodule_search_locations = [str(Path(SHIPPED).parent)]  # its inputs, audit
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = SHIPPED
        exec(compile(SOURCE, SHIPPED, "exec"), module.__dict__)


sys.meta_path.insert(0, EditedInPlace())
from lifecycles.cli import COMMAND_MODULES, build_parser, main

sys.exit(main(sys.argv[2:]))
"""


def with_shipped_monitor(tmp_path: Path, source: str, *args: str
                         ) -> subprocess.CompletedProcess[str]:
    """``lifecycles ARGS`` run with the shipped monitor module's source replaced."""
    (tmp_path / "swap_shipped.py").write_text(SWAP_SHIPPED)
    (tmp_path / "edited_monitor.py").write_text(source)
    return subprocess.run([sys.executable, "swap_shipped.py", "edited_monitor.py", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_an_invalid_shipped_declaration_exits_2_naming_its_line(tmp_path: Path) -> None:
    import lifecycles.machines.monitor as shipped_module

    shipped = Path(shipped_module.__file__ or "").resolve()
    source = shipped.read_text()
    edited = source.replace('"dest": "leased",', '"dest": "archived",', 1)
    assert edited != source
    expected = (f"{shipped}:{line_of(shipped, '= Lifecycle(')}: the lifecycle declared here "
                "is invalid: statuses_declared: undeclared statuses in the table: "
                "['archived']; fix its table or declaration there")

    for names in ([], ["outbox"]):  # the registered lifecycles are imported either way
        done = with_shipped_monitor(tmp_path, edited, "check", *names)
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.splitlines() == [f"lifecycles check: {expected}"]
    done = with_shipped_monitor(tmp_path, edited, "check", "--json")
    assert done.returncode == 2 and done.stderr == f"lifecycles check: {expected}\n"
    assert json.loads(done.stdout) == {"error": "definition_invalid", "message": expected}

    # The other commands that need the table say the same, each in its own words.
    for args in (["monitor", "health", "--db", "m.db", "--capabilities", "c" * 64, "--json"],):
        done = with_shipped_monitor(tmp_path, edited, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"lifecycles: {expected}\n"
        assert json.loads(done.stdout) == {"error": "definition_invalid", "message": expected}
    assert not (tmp_path / "m.db").exists()
    # The outbox's own commands never read the monitor's table.
    done = with_shipped_monitor(tmp_path, edited, "outbox", "status", "--json")
    assert "definition_invalid" not in done.stdout + done.stderr
    (tmp_path / "pages").mkdir()
    done = with_shipped_monitor(tmp_path, edited, "diagrams", "--output", "pages")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"lifecycles: {expected}\n")
    assert list((tmp_path / "pages").iterdir()) == []

    # The unmodified source, run the same way, checks as it does installed.
    done = with_shipped_monitor(tmp_path, source, "check", "monitor", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True


def test_a_shipped_module_that_raises_otherwise_is_a_bug_and_leaves_the_others_working(
    tmp_path: Path
) -> None:
    """Not a declaration: exit 70 from the commands that import it; `check --module` of a
    module that does not import it still runs."""
    edited = "raise RuntimeError('edited')\n"
    for args in (["monitor", "health", "--db", "m.db", "--capabilities", "c" * 64],
                 ["check", "monitor"]):
        done = with_shipped_monitor(tmp_path, edited, *args)
        assert done.returncode == 70, done.stderr
        assert done.stderr.startswith("lifecycles: unexpected error (RuntimeError: edited)")
    (tmp_path / "own_lifecycle.py").write_text(
        "from lifecycles.machines.outbox import OUTBOX\n"
        "from lifecycles.machines.outbox.inputs import EXPLORATION\n")
    done = with_shipped_monitor(tmp_path, edited, "check", "--module", "own_lifecycle.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checked 1 lifecycles" in done.stdout


def test_every_command_module_registers_the_command_it_is_listed_with() -> None:
    """The stand-in of a module that does not import takes the listed name."""
    parser = build_parser()
    (commands,) = [action for action in parser._actions
                   if isinstance(action, argparse._SubParsersAction)]
    assert sorted(commands.choices) == sorted(COMMAND_MODULES.values())


INVALID_EXPLORATIONS = {
    "lifecycle_declared": (
        "EXPLORED = attrs.evolve(exploration(TINY), lifecycle='tiny')\n",
        "lifecycle_declared: its lifecycle is str 'tiny', not a Lifecycle"),
    "workers_on_a_lease": (
        "EXPLORED = attrs.evolve(exploration(TINY), workers=Workers(\n"
        "    records=lambda count: [], inputs=lambda now, worker, token: None,\n"
        "    work=lambda held, inputs: [], calls='nothing'))\n",
        "workers_on_a_lease: it declares workers for tiny, which declares no lease: declare "
        "the lease (Lifecycle(lease=...)) or drop the workers"),
    "accepted_cycles_declared": (
        "EXPLORED = attrs.evolve(exploration(TINY), accepted_cycles=(\n"
        "    AcceptedCycle(['add', 'reopen'], 'a typo hides nothing'),))\n",
        "accepted_cycles_declared: accepted cycles name triggers tiny's table does not "
        "declare: ['reopen']"),
}


@pytest.mark.parametrize("check", sorted(INVALID_EXPLORATIONS))
def test_an_exploration_the_checker_cannot_run_names_its_line(
    project: Path, capsys: pytest.CaptureFixture[str], check: str
) -> None:
    declaration, problem = INVALID_EXPLORATIONS[check]
    module = project / f"explored_{check}.py"
    module.write_text(
        "import attrs\n\n"
        "from fixtures_check.tiny import TINY, exploration\n"
        "from lifecycles.machines._exploration import AcceptedCycle\n"
        "from lifecycles.machines._interleaving import Workers\n\n"
        "EXPLORED = None  # the last assignment is the one that counts\n"
        f"{declaration}")
    expected = (f"{module.name}:{line_of(module, 'EXPLORED = attrs')}: the exploration "
                f"EXPLORED declared here is invalid: {problem}; fix it there")
    code, out, err = run(capsys, "--module", module.name)
    assert_one_line(code, out, err, expected)
    assert err == f"lifecycles check: {expected}\n" and out == ""
    code, out, err = run(capsys, "--json", "--module", module.name)
    assert code == 2 and json.loads(out) == {"error": "definition_invalid", "message": expected}


def test_a_guard_that_raises_names_its_line_and_keeps_the_trace(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = FIXTURES / "guard_raises.py"
    code, out, err = run(capsys, "--module", str(module), "--trace-dir", "traces")
    line = line_of(module, "# raises")
    text = assert_one_line(code, out, err, f"{module}:{line}: ZeroDivisionError: ")
    assert "while exploring raising, 2 steps from initial record 0" in text
    assert "replay: pytest traces/test_replay_raising.py" in text
    # The trace is on stdout, as for a violation: to count 2, then the guard raises.
    assert "    1. add: Amount(amount=2)\n    2. add: Amount(amount=1)\n" in out
    assert (project / "traces" / "test_replay_raising.py").is_file()

    code, out, err = run(capsys, "--json", "--module", str(module), "--trace-dir", "traces")
    assert code == 2 and len(out.splitlines()) == 1
    assert json.loads(out)["error"] == "check_raised"


def test_exploration_inputs_that_raise_outside_a_step(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = project / "inputs_raising.py"
    module.write_text(
        "import attrs\n\n"
        "from fixtures_check.tiny import TINY, exploration\n\n\n"
        "def no_records():\n"
        "    return [][0]\n\n\n"
        "RAISING_INITIAL = attrs.evolve(exploration(TINY), initial=no_records)\n"
    )
    code, out, err = run(capsys, "--module", "inputs_raising.py")
    assert_one_line(code, out, err, "inputs_raising.py:7: IndexError: list index out of range "
                                    "(raised while exploring tiny, outside any step")
    code, out, _ = run(capsys, "--json", "--module", "inputs_raising.py")
    assert json.loads(out)["error"] == "check_raised"


# --- names and snapshots -------------------------------------------------------------


def test_unknown_lifecycle(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "no-such-lifecycle")
    assert_one_line(code, out, err, "unknown lifecycles ['no-such-lifecycle']; known: "
                                    "['monitor', 'outbox']")
    code, out, _ = run(capsys, "--json", "no-such-lifecycle")
    assert json.loads(out)["error"] == "unknown_lifecycle"


@pytest.mark.parametrize(("content", "expected"), [
    ('{"lifecycles": {\n  "outbox": ', "lifecycle-statuses.json:2: not a status snapshot: "
                                        "invalid JSON"),
    ('["outbox"]', "lifecycle-statuses.json: not a status snapshot: expected"),
    ('{"lifecycles": {"outbox": {"statuses": "pending"}}}',
     "lifecycle-statuses.json: not a status snapshot: lifecycle 'outbox' has no list"),
])
def test_a_snapshot_that_is_not_one(project: Path, capsys: pytest.CaptureFixture[str],
                                    content: str, expected: str) -> None:
    (project / "lifecycle-statuses.json").write_text(content)
    code, out, err = run(capsys, "outbox")
    assert_one_line(code, out, err, expected)
    code, out, _ = run(capsys, "--json", "outbox")
    assert json.loads(out)["error"] == "snapshot_invalid"


def test_a_named_snapshot_that_does_not_exist(project: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "outbox", "--statuses", "typo.json")
    assert_one_line(code, out, err, "status snapshot typo.json does not exist")
    code, out, _ = run(capsys, "--json", "outbox", "--statuses", "typo.json")
    assert json.loads(out)["error"] == "snapshot_missing"
    # Recording creates it.
    code, out, _ = run(capsys, "outbox", "--statuses", "typo.json", "--record-statuses")
    assert code == 0 and (project / "typo.json").is_file()


def test_no_snapshot_found_is_a_visible_warning_and_recording_puts_it_at_the_root(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A snapshot above the project root belongs to another project: not found.
    (project / "mine").mkdir()
    (project / "mine" / "src").mkdir()
    (project / "mine" / "pyproject.toml").write_text("")
    (project / "lifecycle-statuses.json").write_text('{"lifecycles": {}}')
    monkeypatch.chdir(project / "mine" / "src")
    code, out, err = run(capsys, "outbox")
    summary = out.splitlines()[-1]
    assert code == 0 and err == ""
    assert summary.startswith("checked 1 lifecycles in ")
    assert summary.endswith(
        f": all OK (WARNING: no status snapshot found: lifecycle-statuses.json not in "
        f"{project / 'mine' / 'src'} or any parent up to the project root "
        f"{project / 'mine'}; removed "
        "statuses cannot be detected — pass --statuses FILE or run --record-statuses)")
    assert "  statuses: no lifecycle-statuses.json found (run with --record-statuses)" in out

    code, out, _ = run(capsys, "outbox", "--record-statuses")
    assert code == 0 and "WARNING" not in out
    recorded = json.loads((project / "mine" / "lifecycle-statuses.json").read_text())
    assert recorded["lifecycles"]["outbox"]["table_version"] == OUTBOX.table_version

    # From then on it is found from the subdirectory, and the warning is gone.
    code, out, _ = run(capsys, "outbox")
    assert code == 0 and "WARNING" not in out
    assert "statuses recorded in ../lifecycle-statuses.json: all still declared" in out


def test_json_outcome(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--json", "outbox")
    assert code == 0 and err == "" and len(out.splitlines()) == 1
    printed = json.loads(out)
    assert printed["ok"] is True and printed["snapshot"] is None
    assert [entry["name"] for entry in printed["lifecycles"]] == ["outbox"]
    assert printed["lifecycles"][0]["complete"] is True
    assert printed["warnings"][0].startswith("no status snapshot found")


# --- what --module checks ------------------------------------------------------------


def test_a_module_alone_checks_what_it_declares_not_the_registered_ones(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = str(FIXTURES / "tiny.py")  # it declares tiny and tiny_twin, imports the monitor
    code, out, _ = run(capsys, "--module", module)
    checked = [line.split(" (table")[0] for line in out.splitlines() if " (table v" in line]
    assert code == 0, out
    assert checked == ["tiny", "tiny_twin"]
    assert "checked 2 lifecycles" in out

    # Names choose among the module's lifecycles and the registered ones.
    code, out, _ = run(capsys, "--module", module, "tiny_twin", "outbox")
    checked = [line.split(" (table")[0] for line in out.splitlines() if " (table v" in line]
    assert code == 0 and sorted(checked) == ["outbox", "tiny_twin"]


def test_help_shows_the_exit_and_error_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = capsys.readouterr().out
    assert "exit codes:\n  0  every check passed\n" in text
    for error in ("module_not_found", "module_syntax_error", "module_import_failed",
                  "definition_invalid", "check_raised", "unknown_lifecycle",
                  "snapshot_invalid", "snapshot_missing"):
        assert f"\n       {error} " in text, error


# --- end to end: the command, and replay files from anywhere ------------------------------


def lifecycles_command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lifecycles", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def run_pytest(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )


def test_the_command_prints_one_line_for_a_broken_module(tmp_path: Path) -> None:
    (tmp_path / "broken_module.py").write_text("import os\n\n\nLIMIT = int('ten')\n")
    done = lifecycles_command("check", "--module", "broken_module.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "lifecycles check: broken_module.py:4: ValueError: invalid literal for int() with "
        "base 10: 'ten' (raised while importing broken_module.py); fix the code there "
        "(--traceback shows the traceback)"
    ]


def test_a_replay_of_a_path_module_runs_from_another_directory(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    done = lifecycles_command("check", "--module", "examples/monitor_defect.py",
                              "--trace-dir", str(traces), cwd=ROOT)
    assert done.returncode == 1, done.stdout + done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    replayed = run_pytest(traces / "test_replay_monitor.py", cwd=elsewhere)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr  # 1: a test failed
    assert "1 failed" in replayed.stdout
    assert "InvariantViolation" in replayed.stdout
    assert "receiver_error_iff_receiver_waiting_or_failed" in replayed.stdout


def test_a_replay_of_a_dotted_module_runs_from_another_directory(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    # A dotted name imports from the current directory: tests/, where fixtures_check is.
    done = lifecycles_command("check", "--module", "fixtures_check.guard_raises",
                              "--trace-dir", str(traces), cwd=TESTS)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "SPEC = 'fixtures_check.guard_raises:RAISING_EXPLORATION'" in \
        (traces / "test_replay_raising.py").read_text()
    replayed = run_pytest(traces / "test_replay_raising.py", cwd=tmp_path)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "1 failed" in replayed.stdout and "ZeroDivisionError" in replayed.stdout


def test_a_reader_that_stops_reading_ends_the_command_quietly() -> None:
    """`lifecycles check | head -1`: the reader has gone; no internal_error, no
    traceback, the exit status a shell gives a command killed by SIGPIPE."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first write: every write fails with EPIPE
    try:
        finished = subprocess.run(
            [sys.executable, "-m", "lifecycles.cli", "check", "monitor"],
            stdout=write_end, stderr=subprocess.PIPE, timeout=120, check=False,
        )
    finally:
        os.close(write_end)
    assert finished.returncode == 141
    assert finished.stderr == b""
