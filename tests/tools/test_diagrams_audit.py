"""The auditor's sections: who fires each trigger, every error code, the checklist.

Each declaration is held complete against the code, not against a copied list: the
codes come from the error families and the source, the exception classes from the
facade module, the triggers from the tables.
"""

from __future__ import annotations

import ast
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, notification

import lifecycles.machines.monitor as monitor_machine
import lifecycles.outbox.facade as outbox_facade
from lifecycles._diagrams_audit import declared
from lifecycles._diagrams_page import page
from lifecycles._diagrams_pictures import mermaid
from lifecycles._registry import import_target, registered
from lifecycles.diagrams import generate
from lifecycles.invariants.monitor import RESPONSE_INVALID
from lifecycles.machines._audit import FiredBy, PublicErrors, RecordedCodes
from lifecycles.machines._core import Lifecycle
from lifecycles.machines.monitor import CODE, MONITOR, AnswerRefused, MonitorInputs, poll_step
from lifecycles.machines.outbox import OUTBOX
from lifecycles.monitor import errors as monitor_errors
from lifecycles.monitor.errors import TerminalProcessingMonitorBlocked
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor

AnyLifecycle = Lifecycle[Any, Any]
ROOT = Path(__file__).resolve().parents[2]
REVIEW = import_target(str(ROOT / "examples" / "review" / "lifecycle.py")).REVIEW
EVERY_TABLE = [*registered().values(), REVIEW]


def rendered(lifecycle: AnyLifecycle) -> str:
    return page(lifecycle, mermaid(lifecycle), svg_name="x.svg", dot_name="x.dot",
                mermaid_name="x.mmd")


def section(text: str, title: str) -> str:
    """The Markdown under ``title`` (a ``##`` or ``###`` heading) up to the next heading
    of the same or a higher level."""
    level = title.split(" ", 1)[0]
    start = text.index(title + "\n")
    stop = re.compile(rf"^#{{1,{len(level)}}} ", re.M)
    found = stop.search(text, start + len(title))
    return text[start:found.start() if found else len(text)]


def table(text: str) -> list[list[str]]:
    """The cells of every body row of the Markdown tables in ``text``."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[1:]
            if not row.startswith("| ---")]


# --- item 1: error codes -------------------------------------------------------------

MONITOR_SOURCES = [ROOT / "lifecycles" / "monitor" / f"{name}.py" for name in (
    "facade", "errors", "schema", "cli")] + [
    ROOT / "machines" / "monitor" / "__init__.py", ROOT / "machines" / "lease.py"]
STORE_SOURCES = sorted((ROOT / "stores").rglob("*.py"))


def family_codes() -> set[str]:
    """Every code of every error family of the facade."""
    families, found = [TerminalProcessingMonitorBlocked], set()
    while families:
        family = families.pop()
        found |= family.family_codes
        families += family.__subclasses__()
    return found


def codes_in_source() -> set[str]:
    """Every monitor code spelled in the source: ``CODE + "x"`` and a store's
    ``error("x")`` (prefixed with the monitor's CODE by its schema binding)."""
    found: set[str] = set()
    for path in MONITOR_SOURCES:
        found |= {CODE + name for name in re.findall(r'CODE \+ "(\w+)"', path.read_text())}
    for path in STORE_SOURCES:
        found |= {CODE + name for name in re.findall(r'\berror\("(\w+)"\)', path.read_text())}
    return found


def declared_codes(errors: PublicErrors) -> set[str]:
    return {error.code for error in errors.errors if error.code is not None}


def test_every_code_the_monitor_can_raise_is_declared_once() -> None:
    errors = declared(MONITOR, PublicErrors)
    assert errors is monitor_errors.PUBLIC_ERRORS
    codes = [error.code for error in errors.errors if error.code]
    assert len(codes) == len(set(codes))
    assert set(codes) == family_codes()
    # A code spelled in the source is raised (a family's) or recorded (last_error_code).
    recorded = declared(MONITOR, RecordedCodes)
    assert recorded is not None
    stray = codes_in_source() - set(codes) - set(recorded.values)
    assert not stray, f"codes in the source that no declaration explains: {sorted(stray)}"
    assert set(monitor_errors.RULE_CODES.values()) <= {c.removeprefix(CODE) for c in codes}


def test_every_code_the_reference_raises_is_declared_and_new_ones_say_so() -> None:
    from support.monitor import reference_monitor

    source = Path(reference_monitor().__file__).read_text()
    # _blocked("x") raises CODE + "x"; _duration and _positive_integer pass "x" to it.
    raised = r'(?:_blocked\(|_duration\([^,]+, |_positive_integer\([^,]+, )"(\w+)"'
    reference = {CODE + name for name in re.findall(raised, source)}
    reference |= set(re.findall(r"terminal_processing_monitor\.\w+", source))
    errors = monitor_errors.PUBLIC_ERRORS
    recorded = declared(MONITOR, RecordedCodes)
    assert recorded is not None
    assert reference <= declared_codes(errors) | set(recorded.values)
    for error in errors.errors:
        if error.code is not None and error.code not in reference:
            assert "Not in the reference" in error.meaning, error.code


@pytest.mark.parametrize("lifecycle", [MONITOR, OUTBOX], ids=lambda lc: lc.name)
def test_every_public_error_is_on_its_page_with_its_meaning_call_and_change(
    lifecycle: AnyLifecycle,
) -> None:
    errors = declared(lifecycle, PublicErrors)
    assert errors is not None
    rows = table(section(rendered(lifecycle), "### Every public error"))
    assert [(row[0].strip("`"), row[1].strip("`")) for row in rows] == [
        (error.exception, error.code or "-") for error in errors.errors]
    for row in rows:
        assert len(row) == 5 and all(cell not in ("", "-") for cell in row[2:]), row
    assert {error.changed.split(":")[0].rstrip(".") for error in errors.errors} <= {
        "Nothing", "Nothing for that notification",
        "Nothing, unless `outcome_unknown` is true",  # a commit's answer lost: unknown
        "The call stops there; what a `replay` wrote before it stays written"}


def test_every_outbox_exception_class_is_declared_with_its_code() -> None:
    errors = declared(OUTBOX, PublicErrors)
    assert errors is outbox_facade.PUBLIC_ERRORS
    classes = {value for value in vars(outbox_facade).values() if isinstance(value, type)
               and issubclass(value, outbox_facade.CloseOutboxError)}
    by_name = {error.exception: error for error in errors.errors}
    assert {kind.__name__ for kind in classes} <= set(by_name)
    for kind in classes:
        assert by_name[kind.__name__].code == kind.code
    assert set(by_name) - {kind.__name__ for kind in classes} == {"ValueError"}


@pytest.mark.parametrize("lifecycle", [MONITOR, OUTBOX], ids=lambda lc: lc.name)
def test_every_guard_says_whether_a_caller_meets_its_code_and_why(
    lifecycle: AnyLifecycle,
) -> None:
    errors = declared(lifecycle, PublicErrors)
    assert errors is not None
    assert set(errors.guards) == set(lifecycle.guards)
    rows = table(section(rendered(lifecycle), "### The code each guard refuses with"))
    assert [row[0] for row in rows] == [f"`{name}`" for name in lifecycle.guards] + [
        "(the trigger is not allowed from the status)"]
    for row, guard in zip(rows, lifecycle.guards.values(), strict=False):
        assert row[1] == f"`{guard.refusal_code}`"
    assert rows[-1][1] == f"`{lifecycle.not_allowed_code}`"


def test_not_yet_due_is_said_to_keep_the_references_claim_lost_and_is_never_raised(
    tmp_path: Path,
) -> None:
    rows = {row[0]: row for row in table(
        section(rendered(MONITOR), "### The code each guard refuses with"))}
    due = rows["`poll_is_due`"]
    assert due[1] == f"`{CODE}claim_lost`"
    assert "not yet due" in due[2] and "reference's" in due[2] and "Never raised" in due[2]
    # What the page says: a claim passes over a record that is not yet due.
    monitor = DurableTerminalProcessingMonitor(
        sqlite3.connect(tmp_path / "m.db", isolation_level=None), CAPABILITIES)
    monitor.register(*notification(1), now=100)
    assert monitor.claim("worker-1", now=99) is None
    assert monitor.claim("worker-1", now=100) is not None


def test_every_last_error_code_a_record_can_carry_is_listed_with_when() -> None:
    recorded = declared(MONITOR, RecordedCodes)
    assert recorded is not None and recorded.field == "last_error_code"
    written = codes_an_effect_or_poll_step_writes()
    assert written == {CODE + name for name in (
        "remote_failed", "response_invalid", "reader_failure", "lease_expired")}
    assert set(recorded.values) == written
    rows = table(section(rendered(MONITOR), "### Codes a record carries in `last_error_code`"))
    assert {row[0].strip("`"): row[1] for row in rows} == dict(recorded.values)
    assert all(row[1].startswith("Written by `") for row in rows)
    # And what poll_step gives a failed read or a refused answer is among them.
    lease = MonitorInputs(now=1.0)
    for read in (RuntimeError("no code"), AnswerRefused(("answer_fields_exact",))):
        assert poll_step(lease, read).inputs.error_code in recorded.values


def codes_an_effect_or_poll_step_writes() -> set[str]:
    """``CODE + "x"`` in the monitor's machine, except guards' refusal codes and the
    not-allowed code, plus the constants it imports for an error code."""
    tree = ast.parse(Path(monitor_machine.__file__).read_text())
    refusals: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                refusals |= {id(inner) for inner in ast.walk(decorator)}
        if isinstance(node, ast.keyword) and node.arg == "not_allowed_code":
            refusals |= {id(inner) for inner in ast.walk(node)}
    found = {
        CODE + node.right.value for node in ast.walk(tree)
        if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Name)
        and node.left.id == "CODE" and isinstance(node.right, ast.Constant)
        and id(node) not in refusals
    }
    # RESPONSE_INVALID given as an error code: ``error_code=`` or an ``"error_code":`` key.
    for node in ast.walk(tree):
        pairs: list[tuple[object, ast.AST]] = []
        if isinstance(node, ast.keyword):
            pairs = [(node.arg, node.value)]
        elif isinstance(node, ast.Dict):
            pairs = [(key.value if isinstance(key, ast.Constant) else None, value)
                     for key, value in zip(node.keys, node.values, strict=True)]
        if any(name == "error_code" and isinstance(value, ast.Name)
               and value.id == "RESPONSE_INVALID" for name, value in pairs):
            found.add(RESPONSE_INVALID)
    return found


# --- item 2: fired by ----------------------------------------------------------------


@pytest.mark.parametrize("lifecycle", EVERY_TABLE, ids=lambda lc: lc.name)
def test_every_trigger_of_every_table_says_who_fires_it(lifecycle: AnyLifecycle) -> None:
    fired = declared(lifecycle, FiredBy)
    assert fired is not None, f"no FiredBy beside {lifecycle.module}"
    assert set(fired.triggers) == set(lifecycle.triggers) | {lifecycle.creation}
    rows = table(section(rendered(lifecycle), "## Who fires each trigger"))
    assert {row[0].strip("`") for row in rows} == set(fired.triggers)
    for row in rows:
        assert row[1] not in ("", "-"), row
        numbers = [int(n) for n in re.findall(r"#(\d+) ", row[2])]
        assert numbers == [i + 1 for i, entry in enumerate(lifecycle.table)
                           if entry["trigger"] == row[0].strip("`")]


def test_a_trigger_with_several_rows_says_how_the_row_is_chosen() -> None:
    fired = section(rendered(MONITOR), "## Who fires each trigger")
    rows = {row[0]: row[2] for row in table(fired)}
    assert rows["`expire_lease`"] == (
        "#2 `leased` → `retry_wait`, when `lease_has_expired` and `another_failure_allowed`"
        "<br>#3 `leased` → `failed`, when `lease_has_expired` and NOT "
        "`another_failure_allowed`")
    assert "when" not in rows["`claim`"]  # one row: nothing to choose


# --- item 5: the checklist and the glossary ------------------------------------------


def index_text() -> str:
    return generate(registered(), None).files["README.md"].decode()


def test_the_index_has_a_checklist_pinning_every_version_and_a_glossary() -> None:
    text = index_text()
    checklist = section(text, "## An auditor's checklist")
    for name, lifecycle in registered().items():
        assert f"`{name}` `{lifecycle.table_version}`" in checklist
    for needed in ("lifecycles check", "lifecycles diagrams --check", "table_version",
                   "Invariants", "trace", "pytest"):
        assert needed in checklist, needed
    words = {line.split("**")[1] for line in section(text, "## Glossary").splitlines()
             if line.startswith("- **")}
    assert {"status", "trigger", "row", "guard", "effect", "invariant", "step invariant",
            "lease", "accepted cycle", "interleaving"} <= words


def test_every_command_and_option_the_checklist_names_exists() -> None:
    checklist = section(index_text(), "## An auditor's checklist")
    commands = re.findall(r"`(lifecycles [a-z]+(?: [a-z]+)?)((?: [^`]*)?)`", checklist)
    assert len(commands) >= 6
    for command, rest in commands:
        words = command.split()[1:]
        if words[-1].isupper() or words[-1] not in {"check", "diagrams", "monitor", "outbox",
                                                     "status", "health"}:
            words = words[:-1]
        help_text = subprocess.run(
            [sys.executable, "-m", "lifecycles", *words, "--help"],
            capture_output=True, text=True, check=True).stdout
        for option in re.findall(r"--[a-z-]+", rest):
            assert option in help_text, f"{command}: {option}"


@pytest.mark.parametrize("lifecycle", EVERY_TABLE, ids=lambda lc: lc.name)
def test_the_new_sections_are_plain_markdown(lifecycle: AnyLifecycle) -> None:
    text = rendered(lifecycle)
    start = text.index("## Who fires each trigger")
    new = text[start:text.index("## Lease", start)]
    assert "``" not in new and ":func:" not in new and ":data:" not in new
    assert "``" not in section(index_text(), "## An auditor's checklist")
