"""Docs that run: the Python blocks of README.md and docs/extending.md are executed.

The convention, for anyone writing these files:

* Every fenced block whose info string starts with ``python`` is run, in file order,
  in one namespace shared by the file's blocks (like a notebook: a later block may use
  the names an earlier one defined), in a fresh temporary working directory, with the
  repository root on ``sys.path`` (as when run from a clone's root: ``examples`` imports).
* A block that must not run says so on its fence, after the language, and gives the
  reason in a comment on its first line::

      ```python no-run
      # Needs a PostgreSQL server and a reader: a sketch of a worker's loop.
      ...
      ```

  GitHub (like CommonMark) highlights by the first word of the info string, so such a
  block is still highlighted as Python.
* ``sh`` blocks are not run (the commands are tested elsewhere), but every
  ``lifecycles ...`` command in them, and every ``$ lifecycles ...`` line of an output
  transcript (a block without a language), must parse with the real argument parser.
  Square brackets mark an optional part (``[--json]``): the command must parse both
  with every bracketed part left out and with every one kept (brackets removed).
  Upper-case words (``SHA``, ``EVENT_ID``) are placeholders; they parse as any value.

Blocks and the files under ``examples/`` import only public names: those the packages
``lifecycles``, ``lifecycles.machines``, ``lifecycles.invariants`` and ``lifecycles.stores``
export, the apps (``lifecycles.monitor``, ``lifecycles.outbox``, ``lifecycles.testing``) and
the commands' entry points (see ``APP_MODULES``); a driver's ``connect`` comes from its
module (``lifecycles.stores.sqlite``, ``lifecycles.stores.postgres``).

A failure names the file, the block's first line and the exception, with a traceback
whose line numbers are the file's own.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import traceback
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from lifecycles.cli import CommandError, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/extending.md", "docs/your-project.md")
NO_RUN = "no-run"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@attrs.frozen
class Block:
    """One fenced code block: where it starts (the fence's line, 1-based) and its text."""

    path: str
    line: int
    language: str
    options: tuple[str, ...]
    code: str

    @property
    def runs(self) -> bool:
        return self.language == "python" and NO_RUN not in self.options

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: str, text: str) -> Iterator[Block]:
    """Every fenced block of a Markdown text, its indentation (list items) removed."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        words = opening["info"].split()
        body: list[str] = []
        end = index + 1
        while end < len(lines):
            closing = FENCE.match(lines[end])
            if (closing is not None and closing["fence"][0] == fence[0]
                    and len(closing["fence"]) >= len(fence) and not closing["info"].strip()):
                break
            line = lines[end]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            end += 1
        yield Block(path, index + 1, words[0] if words else "", tuple(words[1:]),
                    "\n".join(body) + "\n")
        index = end + 1


def blocks_of(document: str) -> list[Block]:
    return list(blocks(document, (ROOT / document).read_text(encoding="utf-8")))


def run_block(block: Block, namespace: dict[str, object]) -> None:
    """Run one block; line numbers in its traceback are the Markdown file's."""
    padded = "\n" * block.line + block.code  # the code starts on the line after the fence
    try:
        exec(compile(padded, str(ROOT / block.path), "exec"), namespace)
    except Exception as error:
        failure = (f"{block.where}: the python block starting there raised "
                   f"{type(error).__name__}: {error}\n"
                   + "".join(traceback.format_exception(error)))
    else:
        return
    pytest.fail(failure, pytrace=False)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_python_block_runs(document: str, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    runnable = [block for block in blocks_of(document) if block.runs]
    assert runnable, f"{document} has no python block that runs"
    namespace: dict[str, object] = {"__name__": f"docs:{document}"}
    for block in runnable:
        run_block(block, namespace)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_block_that_does_not_run_says_why(document: str) -> None:
    for block in blocks_of(document):
        if block.language == "python" and not block.runs:
            first = block.code.strip().splitlines()[0] if block.code.strip() else ""
            assert first.startswith("#") and first.lstrip("# "), (
                f"{block.where}: a `{NO_RUN}` block starts with a comment saying why"
            )
        assert not (block.language != "python" and NO_RUN in block.options), (
            f"{block.where}: `{NO_RUN}` only applies to python blocks"
        )


# --- the commands named in sh blocks and output transcripts ---------------------------

OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
SEPARATOR = re.compile(r"&&|\|\||;|\|")


def commands(block: Block) -> Iterator[str]:
    """``lifecycles ...`` commands of an sh block, or ``$ lifecycles ...`` of a transcript."""
    for line in block.code.splitlines():
        if block.language == "sh":
            text = line.split(" #", 1)[0]
            for part in SEPARATOR.split(text):
                if part.strip().startswith("lifecycles "):
                    yield part.strip()
        elif block.language == "" and line.startswith("$ lifecycles "):
            yield line[2:].strip()


def variants(command: str) -> list[str]:
    """The command with every optional part left out, and with every one kept."""
    return list(dict.fromkeys([OPTIONAL.sub("", command), OPTIONAL.sub(r"\1", command)]))


def command_cases() -> list[object]:
    return [
        pytest.param(block, command, id=f"{block.where}:{command}")
        for document in DOCUMENTS
        for block in blocks_of(document)
        for command in commands(block)
    ]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_document_names_lifecycles_commands(document: str) -> None:
    assert [command for block in blocks_of(document) for command in commands(block)]


@pytest.mark.parametrize(("block", "command"), command_cases())
def test_every_lifecycles_command_in_the_documents_parses(block: Block, command: str) -> None:
    parser = build_parser()
    for variant in variants(command):
        try:
            parser.parse_args(shlex.split(variant)[1:])
        except SystemExit as stopped:
            if stopped.code not in (0, None):  # --help and --version exit 0 once parsed
                pytest.fail(f"{block.where}: `{variant}` does not parse", pytrace=False)
        except CommandError as error:
            pytest.fail(f"{block.where}: `{variant}` does not parse: {error}", pytrace=False)


# --- only public names are imported -------------------------------------------------------

# The API: these packages' `__all__` (pinned by test_exports.py). Everything else may move.
PUBLIC_PACKAGES = ("lifecycles", "lifecycles.machines", "lifecycles.invariants",
                   "lifecycles.stores")
# Imported as they are: the shipped lifecycles as apps (the monitor's table and record too,
# for examples/monitor_defect.py, which puts a defect back into it), the test helpers, and the
# commands' Python entry points (`main`, the pages' `generate`, the logs and metrics hooks).
APP_MODULES = ("lifecycles.monitor", "lifecycles.outbox", "lifecycles.testing",
               "lifecycles.monitor.strategies", "lifecycles.outbox.strategies",
               "lifecycles.machines.monitor", "lifecycles.machines.monitor.inputs",
               "lifecycles.invariants.monitor", "lifecycles.cli", "lifecycles.diagrams",
               "lifecycles.observe")
# A driver's module, for its `connect` alone (each takes that driver's own options).
DRIVER_NAMES = {"lifecycles.stores.sqlite": {"connect"}, "lifecycles.stores.postgres": {"connect"}}
def exported(package: str) -> set[str]:
    return set(importlib.import_module(package).__all__)


def private_imports(path: str, code: str, first_line: int = 1) -> Iterator[tuple[str, str, str]]:
    """``(where, module, name)`` of each import of a lifecycles name that is not public."""
    tree = ast.parse(code, filename=path)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        where = f"{path}:{first_line + node.lineno - 1}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "lifecycles" and alias.name not in PUBLIC_PACKAGES + APP_MODULES:
                    yield where, alias.name, "*"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module.split(".")[0] != "lifecycles" or module in APP_MODULES:
                continue
            for alias in node.names:
                if module in PUBLIC_PACKAGES and (alias.name in exported(module)
                                                  or f"{module}.{alias.name}" in APP_MODULES):
                    continue
                if alias.name in DRIVER_NAMES.get(module, ()):
                    continue
                yield where, module, alias.name


def import_sources() -> list[tuple[str, str, int]]:
    """Every Python block of the documents (run or not) and every file under examples/."""
    sources = [(block.path, block.code, block.line + 1)
               for document in DOCUMENTS for block in blocks_of(document)
               if block.language == "python"]
    sources += [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"), 1)
                for path in sorted((ROOT / "examples").rglob("*.py"))]
    return sources


def test_the_documents_and_examples_import_only_public_names() -> None:
    found = [(where, module, name) for path, code, line in import_sources()
             for where, module, name in private_imports(path, code, line)]
    unexpected = [f"{where}: from {module} import {name}" for where, module, name in found]
    assert not unexpected, ("import these from lifecycles (or lifecycles.machines, "
                            ".invariants, .stores) instead:\n" + "\n".join(unexpected))


def test_the_import_check_names_a_private_import_and_passes_public_ones() -> None:
    code = ("import lifecycles.machines._core\n"
            "from lifecycles import Lifecycle, observe\n"
            "from lifecycles.machines import guard, lease\n"
            "from lifecycles.machines._exploration import Exploration\n"
            "from lifecycles.stores import SQLiteStore\n"
            "from lifecycles.stores.sqlite import SQLiteStore, connect\n"
            "from lifecycles.monitor import DurableTerminalProcessingMonitor\n"
            "from examples.refund.lifecycle import REFUND\n")
    assert list(private_imports("sample.py", code, 10)) == [
        ("sample.py:10", "lifecycles.machines._core", "*"),
        ("sample.py:12", "lifecycles.machines", "lease"),
        ("sample.py:13", "lifecycles.machines._exploration", "Exploration"),
        ("sample.py:15", "lifecycles.stores.sqlite", "SQLiteStore"),
    ]


# --- the extraction itself ---------------------------------------------------------------

SAMPLE = """\
Text.

```python
x = 1
```

- a list item:

  ```python no-run
  # Not run: for the test.
  y = x
  ```

```sh
lifecycles check && lifecycles monitor health --db m.db [--json]   # a comment
```

```
$ lifecycles check review
review (table v...)
```
"""


def test_blocks_are_found_with_their_line_options_and_dedented_code() -> None:
    found = list(blocks("sample.md", SAMPLE))
    assert [(b.line, b.language, b.options, b.runs) for b in found] == [
        (3, "python", (), True),
        (9, "python", ("no-run",), False),
        (14, "sh", (), False),
        (18, "", (), False),
    ]
    assert found[1].code == "# Not run: for the test.\ny = x\n"
    assert [c for b in found for c in commands(b)] == [
        "lifecycles check", "lifecycles monitor health --db m.db [--json]",
        "lifecycles check review",
    ]
    assert variants("lifecycles outbox status [--state-dir DIR] [--json]") == [
        "lifecycles outbox status  ", "lifecycles outbox status --state-dir DIR --json",
    ]


def test_a_failing_block_is_reported_with_its_file_line_and_exception() -> None:
    block = Block("sample.md", 7, "python", (), "x = 1\nsqlite_store()\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_block(block, {})
    message = str(failed.value)
    assert message.startswith("sample.md:7: the python block starting there raised NameError")
    assert "sqlite_store" in message
    assert f'File "{ROOT / "sample.md"}", line 9' in message  # the Markdown file's own line
    with pytest.raises(pytest.fail.Exception) as failed:
        run_block(attrs.evolve(block, code="TABLE = [\n    ...\n    {}]\n"), {})
    assert str(failed.value).startswith("sample.md:7: the python block starting there raised "
                                        "SyntaxError")
