"""The generated diagrams and auditor pages: complete, deterministic, and checked for drift."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from enum import StrEnum
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles import cli
from lifecycles._diagrams_markdown import markdown
from lifecycles._diagrams_page import page
from lifecycles._diagrams_pictures import find_graphviz, mermaid, mermaid_engine_can_draw
from lifecycles._registry import registered
from lifecycles.diagrams import (
    GRAPHVIZ_VERSION_FILE,
    NO_DIRECTORY,
    DirectoryNotFound,
    check,
    generate,
    resolve_directory,
    write,
)
from lifecycles.invariants._core import InvariantSet, field_rules
from lifecycles.machines._core import Lifecycle
from lifecycles.machines.monitor import MONITOR

AnyLifecycle = Lifecycle[Any, Any]
COMMITTED = Path(__file__).resolve().parents[2] / "diagrams"
GRAPHVIZ = find_graphviz()
needs_dot = pytest.mark.skipif(
    GRAPHVIZ is None, reason="Graphviz `dot` is not installed (apt-get install -y graphviz)"
)


def run_command(*argv: str) -> int:
    """``lifecycles diagrams ...`` as the command line runs it."""
    return cli.main(["diagrams", *argv])


def rebuilt(lifecycle: AnyLifecycle, **changes: Any) -> AnyLifecycle:
    """A new lifecycle with the same declaration as ``lifecycle`` except ``changes``."""
    declaration: dict[str, Any] = {
        "module": __name__,
        "name": lifecycle.name,
        "statuses": lifecycle.statuses,
        "table": [dict(row) for row in lifecycle.table],
        "initial": lifecycle.initial,
        "final": lifecycle.final,
        "creation": lifecycle.creation,
        "guards": list(lifecycle.guards.values()),
        "effects": list(lifecycle.effects.values()),
        "invariants": lifecycle.invariants,
        "record_type": lifecycle.record_type,
        "key_field": lifecycle.key_field,
        "status_field": lifecycle.status_field,
        "not_allowed_code": lifecycle.not_allowed_code,
        "lease": lifecycle.lease,
        "description": lifecycle.description,
        "status_meanings": lifecycle.status_meanings,
        "beside_the_table": lifecycle.beside_the_table,
    }
    declaration.update(changes)
    return Lifecycle(**declaration)


def monitor_with_renamed_guard_and_new_row() -> AnyLifecycle:
    """The monitor with ``poll_is_due`` renamed and a new ``abandon`` row."""
    renamed = attrs.evolve(MONITOR.guards["poll_is_due"], name="poll_time_reached")
    table = [dict(row) for row in MONITOR.table]
    for row in table:
        row["conditions"] = [
            "poll_time_reached" if name == "poll_is_due" else name
            for name in row.get("conditions", [])
        ]
    table.append({"trigger": "abandon", "source": "watching", "dest": "failed",
                  "after": "record_final_failure"})
    guards = [renamed if g.name == "poll_is_due" else g for g in MONITOR.guards.values()]
    return rebuilt(MONITOR, table=table, guards=guards)


class OddStatus(StrEnum):
    """Statuses Mermaid cannot take as ids: a keyword and a name with a dash."""

    STATE = "state"
    RETRY_WAIT = "retry-wait"
    DONE = "done"


@attrs.frozen
class OddRecord:
    key: str
    status: OddStatus


ODD: AnyLifecycle = Lifecycle(
    module=__name__,
    name="odd",
    statuses=OddStatus,
    table=[
        {"trigger": "start", "source": "state", "dest": "retry-wait"},
        {"trigger": "again", "source": "retry-wait", "dest": "retry-wait"},
        {"trigger": "finish", "source": ["state", "retry-wait"], "dest": "done"},
    ],
    initial=OddStatus.STATE,
    final=[OddStatus.DONE],
    creation="open",
    guards=[],
    effects=[],
    invariants=InvariantSet("odd.invalid", []),
    record_type=OddRecord,
    key_field="key",
    not_allowed_code="odd.not_allowed",
)


def mermaid_edges(source: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """(status name by Mermaid id, [(source id, dest id, one row label)]) from a diagram."""
    names = dict(
        (alias, name) for name, alias in re.findall(r'^\s*state "([^"]*)" as (\S+)$', source, re.M)
    )
    edges = [
        (src, dst, label)
        for src, dst, labels in re.findall(r"^\s*(\S+) --> (\S+): (.*)$", source, re.M)
        for label in labels.split("<br/>")
        if "[*]" not in (src, dst)
    ]
    return names, edges


def svg_texts(svg: bytes) -> list[str]:
    """Every text element of an SVG document, entities decoded."""
    return [
        (element.text or "").strip()
        for element in ElementTree.fromstring(svg).iter()
        if element.tag.rsplit("}", 1)[-1] == "text"
    ]


# --- the drift check -----------------------------------------------------------------


def test_the_command_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    assert "lifecycles.diagrams" in cli.COMMAND_MODULES
    assert cli.main(["diagrams", "--check", "--dir", str(COMMITTED)]) == 0
    assert f"diagrams in {COMMITTED} match the tables" in capsys.readouterr().out


def test_committed_diagrams_match_the_tables(capsys: pytest.CaptureFixture[str]) -> None:
    # As `lifecycles diagrams --check` does: without Graphviz here, the pages still link
    # the committed SVGs, so they are compared as committed.
    committed = {path.name for path in COMMITTED.iterdir()}
    drift = check(COMMITTED, generate(registered(), GRAPHVIZ, committed))
    assert drift.clean, f"run `lifecycles diagrams`: {drift}"
    for name in registered():
        assert f"{name}.md" in drift.compared and f"{name}.mmd" in drift.compared
    assert run_command("--check", "--output", str(COMMITTED)) == 0
    assert "match the tables" in capsys.readouterr().out


def test_a_changed_table_fails_the_check_and_names_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "diagrams"
    shutil.copytree(COMMITTED, copy)
    before = {path.name: path.read_bytes() for path in copy.iterdir()}
    changed = monitor_with_renamed_guard_and_new_row()
    generation = generate({**registered(), "monitor": changed}, GRAPHVIZ)

    drift = check(copy, generation)

    assert not drift.clean
    expected = {"monitor.mmd", "monitor.dot", "monitor.md", "README.md"}
    if GRAPHVIZ is not None:
        expected.add("monitor.svg")
    assert expected <= set(drift.drifted)
    assert not drift.missing and not drift.extra
    mmd = generation.files["monitor.mmd"].decode()
    assert "watching --> failed: abandon" in mmd
    assert "poll_time_reached" in mmd and "poll_is_due" not in mmd
    assert {path.name: path.read_bytes() for path in copy.iterdir()} == before

    from lifecycles.diagrams import report_check

    assert report_check(copy, drift) == 1
    out = capsys.readouterr().out
    assert f"drifted: {copy / 'monitor.mmd'}" in out
    assert f"drifted: {copy / 'monitor.md'}" in out


def test_missing_and_extra_files_are_named_and_writing_repairs_them(tmp_path: Path) -> None:
    generation = generate(registered(), GRAPHVIZ)
    write(tmp_path, generation)
    (tmp_path / "monitor.md").unlink()
    (tmp_path / "retired.mmd").write_text("stateDiagram-v2\n")

    drift = check(tmp_path, generation)
    assert drift.missing == ("monitor.md",)
    assert drift.extra == ("retired.mmd",)
    assert not drift.drifted

    written = write(tmp_path, generation)
    assert written.written == ("monitor.md",)
    assert written.removed == ("retired.mmd",)
    assert check(tmp_path, generation).clean
    again = write(tmp_path, generation)
    assert again.written == () and again.removed == ()


@needs_dot
def test_svg_is_compared_only_when_the_recorded_graphviz_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert GRAPHVIZ is not None
    generation = generate(registered(), GRAPHVIZ)
    write(tmp_path, generation)
    (tmp_path / "monitor.svg").write_text("<svg>drawn elsewhere</svg>\n")
    assert check(tmp_path, generation).drifted == ("monitor.svg",)

    other = attrs.evolve(GRAPHVIZ, identity="dot - graphviz version 99.0.0 (0)\n")
    drift = check(tmp_path, generate(registered(), other))
    assert drift.clean
    assert "monitor.svg" in drift.not_compared
    assert GRAPHVIZ_VERSION_FILE in drift.not_compared
    assert "99.0.0" in (drift.reason_not_compared or "")


def test_without_dot_the_command_says_what_it_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "diagrams"
    shutil.copytree(COMMITTED, target)
    svg_before = (target / "monitor.svg").read_bytes() if GRAPHVIZ else None
    (target / "monitor.md").write_text("stale\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert find_graphviz() is None

    assert run_command("--check", "--output", str(target)) == 1
    out = capsys.readouterr().out
    assert f"drifted: {target / 'monitor.md'}" in out
    assert "not compared: " in out and "monitor.svg" in out and "not on PATH" in out

    assert run_command("--output", str(target)) == 0
    out = capsys.readouterr().out
    assert "skipped " in out and "monitor.svg" in out and "apt-get install -y graphviz" in out
    assert run_command("--check", "--output", str(target)) == 0
    if svg_before is not None:
        assert (target / "monitor.svg").read_bytes() == svg_before


def test_the_directory_is_found_or_the_command_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / "diagrams").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (project / "src" / "deep").mkdir(parents=True)
    assert resolve_directory("elsewhere") == Path("elsewhere")
    assert resolve_directory(None, project) == (project / "diagrams").resolve()
    assert resolve_directory(None, project / "src" / "deep") == (project / "diagrams").resolve()

    lost = tmp_path / "lost"
    lost.mkdir()
    with pytest.raises(DirectoryNotFound):
        resolve_directory(None, lost)
    monkeypatch.chdir(lost)
    assert run_command("--check") == 2
    assert NO_DIRECTORY in capsys.readouterr().err
    assert list(lost.iterdir()) == []


# --- the pictures ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(registered()))
def test_mermaid_draws_every_row_once(name: str) -> None:
    lifecycle = registered()[name]
    source = mermaid(lifecycle)
    names, edges = mermaid_edges(source)
    drawn = sorted((names[src], names[dst], label) for src, dst, label in edges)
    assert drawn == sorted((row.source, row.dest, row.label) for row in lifecycle.rows)
    assert sorted(names.values()) == sorted(status.value for status in lifecycle.statuses)
    ids = {status: alias for alias, status in names.items()}
    assert f"[*] --> {ids[lifecycle.initial.value]}: {lifecycle.creation}" in source
    for final in lifecycle.final:
        assert f"{ids[final.value]} --> [*]" in source
    if lifecycle.leased is not None:
        assert f"class {ids[lifecycle.leased.value]} leased_status" in source
    assert re.search(r"^title: ", source, re.M), "Mermaid reads only a title: key"
    assert "s_active" not in source and "Class " not in source


def test_monitor_labels_show_guards_and_unless_guards() -> None:
    source = mermaid(MONITOR)
    assert "pending --> leased: claim [poll_is_due, failures_remain]" in source
    assert "expire_lease [lease_has_expired, !another_failure_allowed]" in source


def test_statuses_mermaid_cannot_name_are_drawn_under_aliases() -> None:
    assert not mermaid_engine_can_draw(ODD)
    source = mermaid(ODD)
    names, edges = mermaid_edges(source)
    drawn = sorted((names[src], names[dst], label) for src, dst, label in edges)
    assert drawn == sorted((row.source, row.dest, row.label) for row in ODD.rows)
    assert all(re.fullmatch(r"status_\d+", alias) for alias in names)
    assert not re.search(r"^\s*(state|retry-wait) -->", source, re.M)
    generation = generate({"odd": ODD}, GRAPHVIZ)
    assert "This lifecycle does not lease records to workers." in (
        generation.files["odd.md"].decode()
    )


@needs_dot
@pytest.mark.parametrize("name", sorted(registered()))
def test_svg_shows_every_status_trigger_and_guard_as_text(name: str) -> None:
    assert GRAPHVIZ is not None
    lifecycle = registered()[name]
    svg = generate({name: lifecycle}, GRAPHVIZ).files[f"{name}.svg"]
    texts = svg_texts(svg)
    for status in lifecycle.statuses:
        assert status.value in texts
    for trigger in (*lifecycle.triggers, lifecycle.creation):
        assert trigger in texts
    words = " ".join(texts)
    for guard_name in lifecycle.guards:
        assert guard_name in words
    assert lifecycle.table_version in words


@needs_dot
def test_svg_of_odd_status_names_renders_them() -> None:
    assert GRAPHVIZ is not None
    texts = svg_texts(generate({"odd": ODD}, GRAPHVIZ).files["odd.svg"])
    for status in OddStatus:
        assert status.value in texts


# --- the auditor page ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(registered()))
def test_the_page_tells_an_auditor_everything_the_table_decides(name: str) -> None:
    lifecycle = registered()[name]
    text = generate({name: lifecycle}, GRAPHVIZ).files[f"{name}.md"].decode()
    assert f"table version **`{lifecycle.table_version}`**" in text
    assert "```mermaid\n" + mermaid(lifecycle) + "```" in text
    for status in lifecycle.statuses:
        assert f"| `{status.value}` |" in text
        meaning = lifecycle.status_meanings.get(status.value)
        if meaning:
            assert meaning in text
    for row in lifecycle.rows:
        assert f"| `{row.trigger}` |" in text
        assert ", ".join(f"`{field}`" for field in lifecycle.writes(row)) in text
    for guard_ in lifecycle.guards.values():
        assert f"`{guard_.name}`" in text and guard_.refusal_code in text
    for rule in lifecycle.invariants:
        assert f"| `{rule.name}` |" in text
    for field, field_rule in field_rules(lifecycle.record_type):
        assert f"| `{field}` | `{field_rule.name}` |" in text
    for function in lifecycle.beside_the_table:
        assert f"### `{function.__name__}`" in text
        first_line = (function.__doc__ or "").strip().splitlines()[0]
        assert f"> {markdown(first_line)}" in text  # as Markdown, not reStructuredText


@pytest.mark.parametrize("name", sorted(registered()))
def test_the_page_lists_every_way_into_each_final_status(name: str) -> None:
    lifecycle = registered()[name]
    text = page(lifecycle, mermaid(lifecycle), svg_name="x.svg", dot_name="x.dot",
                mermaid_name="x.mmd")
    reaching = text.split("## How a record reaches each final status", 1)[1].split("\n## ", 1)[0]
    for final in lifecycle.final:
        section = reaching.split(f"### `{final.value}`", 1)[1].split("\n### ", 1)[0]
        lines = [line for line in section.splitlines() if line.startswith("- ")]
        into = [row for row in lifecycle.rows
                if row.dest == final.value and row.source != final.value]
        assert len(lines) == len(into)
        for line, row in zip(lines, into, strict=True):
            assert line.startswith(f"- `{row.trigger}` from `{row.source}`")
            for guard_name in row.conditions:
                assert f"`{guard_name}` (" in line
            for guard_name in row.unless:
                assert f"NOT `{guard_name}`" in line


def test_the_monitor_page_answers_how_an_item_reaches_failed() -> None:
    text = (COMMITTED / "monitor.md").read_text()
    failed = text.split("### `failed`", 1)[1].split("\n## ", 1)[0]
    assert "- `expire_lease` from `leased`" in failed
    assert "- `observe_failure` from `leased`" in failed
    assert "- `fail_attempt` from `leased`" in failed
    assert "NOT `retry_is_allowed`" in failed and "NOT `another_failure_allowed`" in failed
    assert "`register` → `pending` → `claim` → `leased`" in failed


# --- determinism ------------------------------------------------------------------------


def test_generation_is_byte_identical_across_runs_and_hash_seeds(tmp_path: Path) -> None:
    first = generate(registered(), GRAPHVIZ)
    second = generate(registered(), GRAPHVIZ)
    assert first.files == second.files
    digests = {name: hashlib.sha256(content).hexdigest() for name, content in first.files.items()}
    script = (
        "import hashlib, json\n"
        "from lifecycles.diagrams import generate\n"
        "from lifecycles._diagrams_pictures import find_graphviz\n"
        "from lifecycles._registry import registered\n"
        "files = generate(registered(), find_graphviz()).files\n"
        "print(json.dumps({n: hashlib.sha256(c).hexdigest() for n, c in files.items()}))\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, check=True, cwd=tmp_path,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert json.loads(other.stdout) == digests


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "review"


def test_the_example_lifecycle_gets_its_diagrams_from_the_framework_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = str(EXAMPLE / "lifecycle.py")
    code = cli.main(["diagrams", "--check", "--module", module,
                     "--output", str(EXAMPLE / "diagrams")])
    assert code == 0, capsys.readouterr().out
    page_text = (EXAMPLE / "diagrams" / "review.md").read_text()
    assert "# The `review` lifecycle" in page_text


def test_module_without_output_is_refused_so_diagrams_is_never_emptied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["diagrams", "--module", str(EXAMPLE / "lifecycle.py")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--module needs --output" in err and len(err.splitlines()) == 1


def test_an_output_that_cannot_be_written_exits_3_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = cli.main(["diagrams", "--output", str(blocker / "diagrams")])
    captured = capsys.readouterr()
    assert (code, captured.out) == (3, "") and "Traceback" not in captured.err
    assert captured.err.startswith("lifecycles: cannot write the diagrams into")
    assert len(captured.err.splitlines()) == 1


def test_a_module_that_does_not_import_is_one_line_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    broken = tmp_path / "broken_lifecycle.py"
    broken.write_text("x = 1\ndef (:\n")
    code = cli.main(["diagrams", "--module", str(broken), "--output", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err
    assert "broken_lifecycle.py:2" in captured.err and "SyntaxError" in captured.err
    assert not (tmp_path / "out").exists()
    code = cli.main(["diagrams", "--module", str(broken), "--output", str(tmp_path / "out"),
                     "--traceback"])
    assert code == 2 and "Traceback" in capsys.readouterr().err
