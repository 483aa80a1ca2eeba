"""Diagrams and auditor pages generated from the lifecycle tables, with a drift check.

For every lifecycle of the project (the ``modules`` of ``[tool.lifecycles]`` in its
pyproject.toml, :mod:`lifecycles.project`), else of every installed one (the shipped ones
and the entry points'), or of each ``--module``, the diagrams directory (the project's
``diagrams`` setting, default ``diagrams/`` beside its pyproject.toml) holds:

* ``<name>.mmd``: a Mermaid ``stateDiagram-v2``, written from the table in the edge
  order of the ``transitions`` library's Mermaid engine, whose ``GraphMachine`` must
  accept the table; the engine's own text is not used, because it drops its title,
  styles by a model's current state, marks no final status and breaks on statuses
  named like Mermaid keywords. :mod:`lifecycles._diagrams_pictures` says where and why
  in detail.
* ``<name>.dot`` and ``<name>.svg``: the same table through Graphviz (``dot -Tsvg``).
* ``<name>.md``: the auditor's page (:mod:`lifecycles._diagrams_page`).
* ``<name>.sqlite.sql`` and ``<name>.postgres.sql``: every statement the SQL stores run
  for the lifecycle, in named blocks (:mod:`lifecycles._diagrams_sql`); none for a
  lifecycle no SQL store keeps.

plus ``README.md`` (the index) and ``graphviz-version.txt`` (the Graphviz version and
font that drew the SVG files).

``lifecycles diagrams`` writes them; ``lifecycles diagrams --check`` generates them
in memory, compares with the directory and names each drifted, missing or extra
file (exit 1), else exits 0. Output is deterministic: no timestamps, table and
declaration order only. SVG bytes depend on the Graphviz version and font, so SVG
files are compared only where the installed Graphviz identity equals the recorded
one, and the check says when it skips them. Without ``dot`` the SVG files are
skipped (and said to be), and everything else is still written or checked.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import traceback
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import attrs

from lifecycles._diagrams_page import index, page
from lifecycles._diagrams_pictures import DiagramError, Graphviz, dot, find_graphviz, mermaid
from lifecycles._diagrams_sql import sql_files
from lifecycles.cli import CommandError
from lifecycles.machines._core import Lifecycle

# The pages from Python (docs/extending.md); the rest serves `lifecycles diagrams`.
__all__ = ["Drift", "Generation", "Written", "check", "generate", "write"]

AnyLifecycle = Lifecycle[Any, Any]

GRAPHVIZ_VERSION_FILE = "graphviz-version.txt"
INDEX_FILE = "README.md"
INSTALL_GRAPHVIZ = "apt-get install -y graphviz"
NO_DIRECTORY = "lifecycles.diagrams.directory_not_found"
EXIT_CANNOT_RUN = 2  # a usage error, a module that does not import, no diagrams directory
EXIT_UNWRITABLE = 3


@attrs.frozen
class Generation:
    """Every generated file of a set of lifecycles, by file name, in a stable order.

    ``renderer_dependent`` names the files whose bytes depend on the installed
    Graphviz (the SVG files and the version file); ``not_rendered`` names those of
    them that could not be drawn because ``dot`` is absent.
    """

    files: Mapping[str, bytes]
    renderer_dependent: frozenset[str]
    not_rendered: tuple[str, ...]
    graphviz: Graphviz | None

    @property
    def expected(self) -> frozenset[str]:
        """Every file name the directory should hold."""
        return frozenset(self.files) | frozenset(self.not_rendered)


@attrs.frozen
class Drift:
    """What a drift check found; ``clean`` when nothing drifted, is missing or is extra."""

    drifted: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    compared: tuple[str, ...]
    not_compared: tuple[str, ...]
    reason_not_compared: str | None

    @property
    def clean(self) -> bool:
        return not (self.drifted or self.missing or self.extra)


@attrs.frozen
class Written:
    """What :func:`write` changed."""

    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    removed: tuple[str, ...]


def generate(
    lifecycles: Mapping[str, AnyLifecycle], graphviz: Graphviz | None,
    present: Collection[str] = (),
) -> Generation:
    """Every file for ``lifecycles``, drawn with ``graphviz`` (``None``: no SVG).

    A page links its SVG only when it is drawn here or already ``present`` in the
    directory (drawn earlier, committed): never a file that does not exist.
    """
    files: dict[str, bytes] = {}
    renderer_dependent = {GRAPHVIZ_VERSION_FILE}
    sql: dict[str, list[str]] = {}
    for name in sorted(lifecycles):
        lifecycle = lifecycles[name]
        mermaid_source = mermaid(lifecycle)
        dot_source = dot(lifecycle)
        files[f"{name}.mmd"] = mermaid_source.encode()
        files[f"{name}.dot"] = dot_source.encode()
        drawn = graphviz is not None or f"{name}.svg" in present
        files[f"{name}.md"] = page(
            lifecycle, mermaid_source,
            svg_name=f"{name}.svg" if drawn else None, dot_name=f"{name}.dot",
            mermaid_name=f"{name}.mmd",
        ).encode()
        statements = sql_files(name, lifecycle)
        files.update(statements)
        sql[name] = list(statements)
        renderer_dependent.add(f"{name}.svg")
        if graphviz is not None:
            files[f"{name}.svg"] = graphviz.svg(dot_source)
    files[INDEX_FILE] = index(
        {name: lifecycles[name] for name in sorted(lifecycles)}, sql).encode()
    if graphviz is not None:
        files[GRAPHVIZ_VERSION_FILE] = graphviz.identity.encode()
    not_rendered = () if graphviz is not None else tuple(sorted(renderer_dependent))
    return Generation(
        files=dict(sorted(files.items())),
        renderer_dependent=frozenset(renderer_dependent),
        not_rendered=not_rendered,
        graphviz=graphviz,
    )


def check(directory: Path, generation: Generation) -> Drift:
    """Compare ``generation`` with ``directory`` without writing anything."""
    present = _files_in(directory)
    skip: set[str] = set(generation.not_rendered)
    reason: str | None = None
    if generation.graphviz is None:
        reason = f"Graphviz `dot` is not on PATH (install: {INSTALL_GRAPHVIZ})"
    else:
        recorded = _read(directory / GRAPHVIZ_VERSION_FILE)
        installed = generation.files[GRAPHVIZ_VERSION_FILE]
        if recorded is not None and recorded != installed:
            skip |= generation.renderer_dependent
            reason = (
                f"they were drawn by {_one_line(recorded)}; this machine has "
                f"{_one_line(installed)}"
            )
    drifted, missing, compared = [], [], []
    for name, content in generation.files.items():
        if name in skip:
            continue
        on_disk = _read(directory / name)
        if on_disk is None:
            missing.append(name)
        else:
            compared.append(name)
            if on_disk != content:
                drifted.append(name)
    extra = sorted(present - generation.expected)
    return Drift(
        drifted=tuple(drifted),
        missing=tuple(missing),
        extra=tuple(extra),
        compared=tuple(compared),
        not_compared=tuple(sorted(skip)),
        reason_not_compared=reason,
    )


def write(directory: Path, generation: Generation) -> Written:
    """Write every generated file that differs, atomically; remove stale generated files.

    Files that could not be drawn (no ``dot``) are left as they are.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written, unchanged = [], []
    for name, content in generation.files.items():
        target = directory / name
        if _read(target) == content:
            unchanged.append(name)
            continue
        _replace(target, content)
        written.append(name)
    removed = sorted(_files_in(directory) - generation.expected)
    for name in removed:
        (directory / name).unlink()
    return Written(tuple(written), tuple(unchanged), tuple(removed))


def _replace(target: Path, content: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _files_in(directory: Path) -> set[str]:
    if not directory.is_dir():
        return set()
    return {
        entry.name
        for entry in directory.iterdir()
        if not entry.name.startswith(".") and (entry.is_file() or entry.is_dir())
    }


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _one_line(identity: bytes) -> str:
    return "; ".join(identity.decode(errors="replace").strip().splitlines()) or "(empty)"


# --- where the diagrams live ---------------------------------------------------------


class DirectoryNotFound(Exception):
    """No diagrams directory was named and none was found; ``code`` is stable."""

    code = NO_DIRECTORY


def resolve_directory(explicit: str | None, start: Path | None = None) -> Path:
    """The diagrams directory: ``explicit`` if given; else ``./diagrams`` if it exists;
    else the ``diagrams/`` beside the ``pyproject.toml`` of the nearest enclosing project."""
    if explicit is not None:
        return Path(explicit)
    here = (start or Path.cwd()).resolve()
    if (here / "diagrams").is_dir():
        return here / "diagrams"
    for base in here.parents:
        if (base / "pyproject.toml").is_file() and (base / "diagrams").is_dir():
            return base / "diagrams"
    raise DirectoryNotFound(
        f"{NO_DIRECTORY}: no diagrams/ directory in {here} or in an enclosing project; "
        "run from the project root or pass --output DIR"
    )


# --- the command -----------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``lifecycles diagrams [--check] [--output DIR]``."""
    parser = subparsers.add_parser(
        "diagrams",
        help="generate diagrams and auditor pages from the tables (or --check for drift)",
        description=(
            "Write every lifecycle's Mermaid, Graphviz and Markdown pages into the "
            "diagrams directory, or with --check compare them with what the tables give "
            "now and exit 1 on any drift. In a project (the nearest pyproject.toml with "
            "[tool.lifecycles]) its modules' lifecycles are drawn into its diagrams "
            "setting (default: diagrams/ beside the pyproject.toml), from any of its "
            "directories; elsewhere every installed lifecycle. Exit codes: 0 written or "
            "no drift; 1 drift; 2 cannot run (directory_not_found, a module that does "
            "not import or declares no lifecycle (no_lifecycle), duplicate_name, "
            "project_invalid, ...); 3 the directory cannot be written."
        ),
    )
    parser.add_argument(
        "--check", action="store_true",
        help="write nothing; name each drifted, missing or extra file and exit 1 if any",
    )
    parser.add_argument(
        "--output", "--dir", dest="output", metavar="DIR", default=None,
        help="the diagrams directory (default: the project's diagrams setting, else "
        "./diagrams, else the diagrams/ beside the nearest pyproject.toml)",
    )
    parser.add_argument(
        "--module", action="append", default=[], metavar="MODULE",
        help="draw the lifecycles defined in this module (dotted name or path to a .py "
        "file) instead of the project's or installed ones; needs --output; repeatable",
    )
    parser.add_argument("--traceback", action="store_true",
                        help="when a --module does not import, also print the traceback")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``diagrams`` command: 0 when written or clean, 1 on drift, 2 on an error."""
    from lifecycles._loading import CheckerError
    from lifecycles.project import find_project, own

    if args.module and args.output is None:
        # Writing removes pages no lifecycle generates: never aim that at diagrams/ by default.
        raise CommandError(EXIT_CANNOT_RUN, "usage",
                           "diagrams --module needs --output (a directory of its own)")
    try:
        project = find_project()
        if args.output is None and project is not None:
            directory = project.diagrams  # the project's, from any of its directories
        else:
            directory = resolve_directory(args.output)
        chosen = own(args.module)
        generation = generate(chosen, find_graphviz(), _files_in(directory))
    except DirectoryNotFound as error:
        raise CommandError(EXIT_CANNOT_RUN, "directory_not_found", str(error)) from None
    except DiagramError as error:
        raise CommandError(EXIT_CANNOT_RUN, "diagram_failed", str(error)) from None
    except CheckerError as error:  # a --module that does not import: file:line and what to do
        if args.traceback and error.__cause__ is not None:
            traceback.print_exception(error.__cause__)
        raise CommandError(EXIT_CANNOT_RUN, error.error, error.message) from None
    if args.check:
        return report_check(directory, check(directory, generation))
    try:
        written = write(directory, generation)
    except OSError as error:
        raise CommandError(
            EXIT_UNWRITABLE, "output_unwritable",
            f"cannot write the diagrams into {directory}: {error.strerror or error}; "
            "choose another --output or fix its permissions",
        ) from None
    return report_write(directory, written, generation)


def report_check(directory: Path, drift: Drift) -> int:
    """Print what the check found; the exit code."""
    for label, names in (("drifted", drift.drifted), ("missing", drift.missing),
                         ("extra", drift.extra)):
        for name in names:
            print(f"{label}: {directory / name}")
    if drift.not_compared:
        print(
            f"not compared: {', '.join(drift.not_compared)}, because "
            f"{drift.reason_not_compared}"
        )
    if not drift.clean:
        print(
            f"diagrams in {directory} do not match the tables: run `lifecycles diagrams` "
            "and commit the result"
        )
        return 1
    print(f"diagrams in {directory} match the tables ({len(drift.compared)} files compared)")
    return 0


def report_write(directory: Path, written: Written, generation: Generation) -> int:
    """Print what was written; the exit code."""
    for name in written.written:
        print(f"wrote {directory / name}")
    for name in written.removed:
        print(f"removed {directory / name} (no registered lifecycle generates it)")
    if generation.not_rendered:
        print(
            f"skipped {', '.join(generation.not_rendered)}: Graphviz `dot` is not on PATH "
            f"(install: {INSTALL_GRAPHVIZ}); existing copies were left as they are"
        )
    print(
        f"{len(written.written)} written, {len(written.unchanged)} unchanged, "
        f"{len(written.removed)} removed in {directory}"
    )
    return 0
