"""The replay file: a pytest module that re-runs the shortest trace to a violation found
by ``lifecycles check``, from any directory, and fails until the violation is fixed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._exploration import Violation

AnyLifecycle = Lifecycle[Any, Any]

TRACE_DIR_DEFAULT = "lifecycles-traces"


def identifier(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_") or "lifecycle"


def import_root(spec: str) -> str | None:
    """The directory a replay must put on ``sys.path`` to import ``spec``'s module.

    ``None`` for a ``.py`` path (imported by path) and for lifecycles' own modules
    (installed); for a dotted name, the folder above its top-level package, else the
    current directory (where the checker imported it from).
    """
    module_name = spec.rpartition(":")[0]
    if module_name.endswith(".py") or module_name.split(".")[0] == "lifecycles":
        return None
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if file is not None:
        root = Path(file).resolve().parent
        for _ in range(module_name.count(".") + (Path(file).name == "__init__.py")):
            root = root.parent
        top = module_name.split(".")[0]
        if (root / top).is_dir() or (root / f"{top}.py").is_file():
            return str(root)
    return str(Path.cwd().resolve())


def write_replay(directory: Path, spec: str, lifecycle: AnyLifecycle, violation: Violation) -> Path:
    """Write a pytest file replaying ``violation``'s trace; fails until it is fixed.

    It runs from any directory: ``SPEC`` is an absolute path, or ``IMPORT_ROOT`` is
    where its dotted module was imported from.
    """
    directory.mkdir(parents=True, exist_ok=True)
    name = identifier(lifecycle.name)
    path = directory / f"test_replay_{name}.py"
    steps = "".join(
        f"    ({step.move!r}, {step.choice}, {step.description!r}),\n" for step in violation.trace
    )
    path.write_text(
        f'"""Shortest violation found by `lifecycles check` in {lifecycle.name} '
        f"(table v{lifecycle.table_version}).\n\n"
        f"{violation.message}\n\n"
        "Replays the trace from the initial record: it fails while the violation is\n"
        "there and passes once it is fixed; if the exploration inputs changed since, it\n"
        'fails with TraceMismatch (re-run `lifecycles check`).\n"""\n\n'
        "import sys\n\n"
        "from lifecycles._loading import load_exploration\n"
        "from lifecycles.machines._exploration import replay\n\n"
        f"SPEC = {spec!r}\n"
        f"IMPORT_ROOT = {import_root(spec)!r}\n"
        f"INITIAL = {violation.initial}\n"
        f"STEPS = [\n{steps}]\n\n\n"
        f"def test_{name}_trace_holds_every_invariant() -> None:\n"
        "    if IMPORT_ROOT is not None and IMPORT_ROOT not in sys.path:\n"
        "        sys.path.append(IMPORT_ROOT)\n"
        "    replay(load_exploration(SPEC), INITIAL, STEPS)\n",
        encoding="utf-8",
    )
    return path


def write_finding_replay(directory: Path, spec: str, lifecycle: AnyLifecycle, failure: str,
                         message: str, trace: Sequence[str]) -> Path:
    """Write a pytest file that searches again and fails while the search still finds
    ``failure`` (a row never fired, a trapped state, an undeclared cycle, ...): what it
    found, and the shortest trace to it, are in its docstring."""
    directory.mkdir(parents=True, exist_ok=True)
    name = identifier(lifecycle.name)
    kind = identifier(failure)
    path = directory / f"test_replay_{name}_{kind}.py"
    shown = "".join(f"  {number}. {step}\n" for number, step in enumerate(trace, 1))
    path.write_text(
        f'"""Found by `lifecycles check` in {lifecycle.name} '
        f"(table v{lifecycle.table_version}): {failure}.\n\n"
        f"{message}\n"
        + (f"\nThe shortest trace to it:\n\n{shown}" if trace else "")
        + "\nSearches the exploration again: it fails while the search still finds this,\n"
        'and passes once it is fixed (or declared, where the finding says how).\n"""\n\n'
        "import sys\n\n"
        "from lifecycles._loading import load_exploration\n"
        "from lifecycles.machines._exhaustive import explore\n"
        "from lifecycles.machines._findings import search_findings\n\n"
        f"SPEC = {spec!r}\n"
        f"IMPORT_ROOT = {import_root(spec)!r}\n"
        f"FAILURE = {failure!r}\n\n\n"
        f"def test_{name}_search_no_longer_finds_{kind}() -> None:\n"
        "    if IMPORT_ROOT is not None and IMPORT_ROOT not in sys.path:\n"
        "        sys.path.append(IMPORT_ROOT)\n"
        "    exploration = load_exploration(SPEC)\n"
        "    result = explore(exploration, keep_graph=True)\n"
        "    found = [finding.message for finding in search_findings(exploration, result)\n"
        "             if finding.failure == FAILURE]\n"
        "    assert not found, found[0]\n",
        encoding="utf-8",
    )
    return path
