"""`lifecycles check`: definition checks, the status snapshot, and exhaustive bounded exploration.

For each lifecycle (every registered one, those named, or those a ``--module`` declares):

1. the definition checks (:mod:`lifecycles.machines.checks`);
2. the status snapshot: every status recorded in the snapshot file (statuses that stored
   records may hold) must still be declared, else ``status_removed`` fails the check;
3. a breadth-first search over the pure machine with the exploration inputs declared
   beside the table (:mod:`lifecycles.machines.exploration`); every invariant is checked
   in every reached state, and every table row and every status must be reached.

It prints the figures (states, edges, depth, time, states/s, fires per row). A violation
prints the shortest trace and writes it as a pytest file that replays it from any
directory.

The status snapshot: ``--statuses FILE``, else the first ``lifecycle-statuses.json``
found from the current directory upwards, up to and including the project root (the
first directory holding ``pyproject.toml`` or ``.git``). When none is found the summary
says so in a WARNING (removed statuses cannot be detected), and ``--record-statuses``
creates it at the project root (else in the current directory). A ``--statuses FILE``
that does not exist is an error (``snapshot_missing``) unless ``--record-statuses``
is given, which creates it.

exit codes:
  0  every check passed
  1  a check failed: an invariant violation (trace and replay file printed), a
     definition check, a recorded status the table no longer declares, a row never
     fired, a status never reached, no exploration inputs
  2  the check could not run; one line on stderr says where and what to do (with
     --json also {"error": CODE, "message": ...} on stdout; --traceback adds the
     Python traceback on stderr):
       module_not_found      the --module (or a module it imports) cannot be found
       module_syntax_error   a module has a syntax error (file:line)
       module_import_failed  importing a module raised an exception (file:line)
       definition_invalid    a lifecycle declaration is invalid (file:line of the
                             Lifecycle(...) call)
       check_raised          a guard, effect, invariant or exploration input raised
                             during the exploration (file:line; the trace and replay
                             file are printed on stdout when the step is known)
       unknown_lifecycle     a NAME no loaded module declares
       snapshot_invalid      the status snapshot is not JSON of the expected shape
       snapshot_missing      --statuses FILE does not exist (without --record-statuses)

With --json, stdout is one JSON object: the error above, or the outcome
{"ok": ..., "lifecycles": [...], "snapshot": ..., "warnings": [...], "seconds": ...}.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import attrs

import lifecycles
import lifecycles.invariants
import lifecycles.machines
import lifecycles.stores
from lifecycles.machines.checks import DEFINITION_CHECKS
from lifecycles.machines.core import DefinitionError, Lifecycle
from lifecycles.machines.exploration import (
    Exploration,
    ExplorationResult,
    Violation,
    explore,
    replay,
)
from lifecycles.registry import import_target as registry_import_target
from lifecycles.registry import registered

AnyLifecycle = Lifecycle[Any, Any]
AnyExploration = Exploration[Any]

SNAPSHOT_DEFAULT = "lifecycle-statuses.json"
TRACE_DIR_DEFAULT = "lifecycles-traces"
PROJECT_ROOT_MARKERS = ("pyproject.toml", ".git")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNAVAILABLE = 2


class CheckerError(Exception):
    """The checker cannot run; ``error`` is a stable code of the module docstring.

    The message is one line: where (``file:line`` when user code is at fault), what is
    wrong and what to do. The exception at fault, if any, is the ``__cause__``.
    """

    code = "lifecycles.check_unavailable"

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# --- where user code went wrong -----------------------------------------------------


def _prefixes(paths: Iterable[str | Path]) -> tuple[str, ...]:
    return tuple(f"{Path(p).resolve()}{os.sep}" for p in paths)


def _own_directories() -> set[Path]:
    """Where lifecycles' code runs from: its subpackages are mapped from top-level
    folders, and a strict editable install links each file from elsewhere."""
    packages = (lifecycles, lifecycles.machines, lifecycles.stores, lifecycles.invariants)
    # Not __path__: lifecycles' own may hold a whole checkout root (see its __init__).
    folders = {Path(package.__file__ or "").parent for package in packages}
    return folders | {file.resolve().parent for folder in folders for file in folder.glob("*.py")}


_OWN = _prefixes(_own_directories())
_INSTALLED = _prefixes({sysconfig.get_paths()[key]
                        for key in ("stdlib", "platstdlib", "purelib", "platlib")})


def _display(path: str | Path) -> str:
    """``path`` relative to the current directory when it lies below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def where(error: BaseException, module_file: Path | None = None) -> str | None:
    """``file:line`` of the user's code where ``error`` happened, or ``None``.

    The innermost frame outside lifecycles, the standard library and installed packages
    (a guard, an effect, the line of a ``Lifecycle(...)`` call, an ``import``); else the
    innermost frame in ``module_file``; else the innermost frame outside lifecycles.
    """
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return f"{_display(error.filename)}:{error.lineno}"
    frames: list[tuple[str, int]] = []
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith("<"):  # <frozen importlib._bootstrap>, <string>
            frames.append((str(Path(name).resolve()), tb.tb_lineno))
        tb = tb.tb_next
    own_file = str(module_file.resolve()) if module_file is not None else None
    tests: list[Callable[[str], bool]] = [
        lambda name: not name.startswith(_OWN + _INSTALLED),
        lambda name: name == own_file,
        lambda name: not name.startswith(_OWN),
    ]
    for test in tests:
        for name, line in reversed(frames):
            if test(name):
                return f"{_display(name)}:{line}"
    return None


def _at(place: str | None) -> str:
    return f"{place}: " if place else ""


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _targets_named(missing: str | None, target: str) -> bool:
    """Whether ``ModuleNotFoundError.name`` is ``target`` itself or one of its parents."""
    return missing is not None and (target == missing or target.startswith(f"{missing}."))


def import_failure(target: str, error: BaseException, module_file: Path | None = None
                   ) -> CheckerError:
    """The :class:`CheckerError` for ``error``, raised while importing ``target``."""
    place = _at(where(error, module_file))
    if isinstance(error, SyntaxError):
        return CheckerError("module_syntax_error",
                            f"{place}{type(error).__name__}: {error.msg}: {target} does not "
                            "import; fix the syntax there")
    if isinstance(error, ModuleNotFoundError):
        if _targets_named(error.name, target):
            return CheckerError("module_not_found",
                                f"no module named {target!r}: run from the directory it is "
                                "imported from, or pass the path to its .py file")
        return CheckerError("module_not_found",
                            f"{place}{target} imports {error.name!r}, which is not installed "
                            "or not on the path: install it, or fix the import there")
    if isinstance(error, DefinitionError):
        return CheckerError("definition_invalid",
                            f"{place}the lifecycle declared here is invalid: {error}; fix its "
                            "table or declaration there")
    return CheckerError("module_import_failed",
                        f"{place}{_one_line(error)} (raised while importing {target}); fix "
                        "the code there (--traceback shows the traceback)")


# --- finding lifecycles and their exploration inputs ---------------------------------


def import_target(target: str) -> ModuleType:
    """Import a module named on the command line (see :func:`registry.import_target`);
    any failure becomes a :class:`CheckerError` naming the line at fault."""
    module_file = Path(target) if target.endswith(".py") else None
    if module_file is not None and not module_file.is_file():
        raise CheckerError("module_not_found", f"no such file: {target}")
    try:
        return registry_import_target(target)
    except (Exception, SystemExit) as error:  # a module may sys.exit() while importing
        raise import_failure(target, error, module_file) from error


def _spec_module(spec: str) -> tuple[str, str]:
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute:
        raise CheckerError("exploration_not_found",
                           f"{spec!r} is not 'module:ATTRIBUTE' or 'path.py:ATTRIBUTE'")
    return module, attribute


def load_exploration(spec: str) -> AnyExploration:
    """The :class:`Exploration` named by ``module:ATTRIBUTE`` (module may be a path)."""
    module, attribute = _spec_module(spec)
    found = getattr(import_target(module), attribute, None)
    if not isinstance(found, Exploration):
        raise CheckerError("exploration_not_found", f"{spec} is not an Exploration")
    return found


def explorations_in(module: ModuleType, target: str) -> list[tuple[AnyExploration, str]]:
    """Every module-level :class:`Exploration` in ``module``, with its replay spec."""
    return [
        (value, f"{target}:{name}")
        for name, value in vars(module).items()
        if isinstance(value, Exploration) and not name.startswith("_")
    ]


def find_exploration(lifecycle: AnyLifecycle) -> tuple[AnyExploration, str] | None:
    """The exploration declared beside ``lifecycle``'s table: ``<module>_inputs``, then
    ``<module>`` itself."""
    for name in (f"{lifecycle.module}_inputs", lifecycle.module):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            continue
        for exploration, spec in explorations_in(module, name):
            if exploration.lifecycle is lifecycle:
                return exploration, spec
    return None


def _declared_exploration(lifecycle: AnyLifecycle) -> tuple[AnyExploration, str] | None:
    """:func:`find_exploration`, with an inputs module that fails to import reported."""
    try:
        return find_exploration(lifecycle)
    except (Exception, SystemExit) as error:
        raise import_failure(f"the exploration inputs of {lifecycle.name}", error) from error


@attrs.frozen
class Target:
    """One thing to check: a lifecycle, and the exploration to drive it with."""

    lifecycle: AnyLifecycle
    exploration: AnyExploration | None
    spec: str | None


def targets(names: Sequence[str], modules: Sequence[str]) -> list[Target]:
    """What ``lifecycles check [NAME ...] [--module M ...]`` checks.

    A module contributes its explorations and the lifecycles it declares, not those it
    merely imports; the registered lifecycles join when no module is given, or names are.
    """
    found: list[Target] = []
    for target in modules:
        module = import_target(target)
        # A path is recorded absolute so a replay file runs from any directory.
        named = str(Path(target).resolve()) if target.endswith(".py") else target
        given = explorations_in(module, named)
        explored = {id(exploration.lifecycle) for exploration, _ in given}
        found.extend(Target(e.lifecycle, e, spec) for e, spec in given)
        for value in vars(module).values():
            if (isinstance(value, Lifecycle) and value.module == module.__name__
                    and id(value) not in explored):
                explored.add(id(value))
                declared = _declared_exploration(value)
                found.append(Target(value, *(declared or (None, None))))
    if not modules or names:
        known = {id(t.lifecycle) for t in found}
        for lifecycle in registered().values():
            if id(lifecycle) not in known:
                declared = _declared_exploration(lifecycle)
                found.append(Target(lifecycle, *(declared or (None, None))))
    if names:
        unknown = sorted(set(names) - {t.lifecycle.name for t in found})
        if unknown:
            raise CheckerError(
                "unknown_lifecycle",
                f"unknown lifecycles {unknown}; known: "
                f"{sorted({t.lifecycle.name for t in found})}: check the spelling, or add "
                "--module MODULE for a lifecycle that is not registered")
        found = [t for t in found if t.lifecycle.name in names]
    return found


# --- the status snapshot ------------------------------------------------------------


@attrs.frozen
class SnapshotSearch:
    """Where ``lifecycle-statuses.json`` was looked for, and what was found."""

    start: Path
    found: Path | None
    root: Path | None  # the project root the search stopped at, if any

    @property
    def record_path(self) -> Path:
        """Where ``--record-statuses`` writes: the snapshot found, else at the root."""
        return self.found or (self.root or self.start) / SNAPSHOT_DEFAULT

    def warning(self) -> str:
        limit = (f"up to the project root {self.root}" if self.root
                 else "(no project root: no pyproject.toml or .git above it)")
        return (f"no status snapshot found: {SNAPSHOT_DEFAULT} not in {self.start} or any "
                f"parent {limit}; removed statuses cannot be detected — pass --statuses "
                "FILE or run --record-statuses")


def find_snapshot(start: Path | None = None) -> SnapshotSearch:
    """Look for the snapshot from ``start`` (the current directory) upwards, up to and
    including the first directory holding ``pyproject.toml`` or ``.git``."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / SNAPSHOT_DEFAULT
        if candidate.is_file():
            # Shown as found from here (e.g. ../lifecycle-statuses.json): a parent at most.
            return SnapshotSearch(here, Path(os.path.relpath(candidate)), None)
        if any((directory / marker).exists() for marker in PROJECT_ROOT_MARKERS):
            return SnapshotSearch(here, None, directory)
    return SnapshotSearch(here, None, None)


def _snapshot_invalid(path: Path, line: int | None, problem: str) -> CheckerError:
    place = f"{path}:{line}" if line else str(path)
    return CheckerError("snapshot_invalid",
                        f"{place}: not a status snapshot: {problem}; fix it, or delete it and "
                        "run `lifecycles check --record-statuses`")


def read_snapshot(path: Path) -> dict[str, dict[str, Any]]:
    """The recorded statuses per lifecycle name (empty when the file does not exist)."""
    if not path.is_file():
        return {}
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise _snapshot_invalid(path, error.lineno, f"invalid JSON ({error.msg})") from error
    except (OSError, UnicodeDecodeError) as error:
        raise _snapshot_invalid(path, None, _one_line(error)) from error
    lifecycles_ = content.get("lifecycles") if isinstance(content, dict) else None
    if not isinstance(lifecycles_, dict):
        raise _snapshot_invalid(path, None, 'expected {"lifecycles": {NAME: {...}}}')
    for name, recorded in lifecycles_.items():
        statuses = recorded.get("statuses") if isinstance(recorded, dict) else None
        if not (isinstance(statuses, list) and all(isinstance(s, str) for s in statuses)):
            raise _snapshot_invalid(path, None, f"lifecycle {name!r} has no list of statuses")
    return lifecycles_


def write_snapshot(path: Path, lifecycles: Iterable[AnyLifecycle]) -> None:
    """Record the statuses each lifecycle's stored records may hold from now on."""
    recorded = read_snapshot(path)
    for lifecycle in lifecycles:
        recorded[lifecycle.name] = {
            "statuses": [status.value for status in lifecycle.statuses],
            "final": sorted(status.value for status in lifecycle.final),
            "table_version": lifecycle.table_version,
        }
    content = {
        "about": (
            "Statuses that stored records may hold, per lifecycle. `lifecycles check` fails "
            "when a table no longer declares one; after migrating stored records, update "
            "this file with `lifecycles check --record-statuses`."
        ),
        "lifecycles": dict(sorted(recorded.items())),
    }
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def removed_statuses(lifecycle: AnyLifecycle, recorded: dict[str, Any] | None) -> list[str]:
    """Statuses recorded for ``lifecycle`` that its table no longer declares."""
    if not recorded:
        return []
    declared = {status.value for status in lifecycle.statuses}
    return [status for status in recorded.get("statuses", []) if status not in declared]


# --- the replay file ----------------------------------------------------------------


def _identifier(text: str) -> str:
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
    name = _identifier(lifecycle.name)
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
        "from lifecycles.checker import load_exploration\n"
        "from lifecycles.machines.exploration import replay\n\n"
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


# --- running and reporting -------------------------------------------------------------


@attrs.define
class Outcome:
    """What checking one lifecycle found."""

    name: str
    failures: list[str] = attrs.field(factory=list)
    result: ExplorationResult | None = None
    replay_path: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.failures


def _summary(record: Any) -> str:
    """The record's set fields, on one line."""
    values = attrs.asdict(record, recurse=False)
    return ", ".join(f"{name}={value!s}" for name, value in values.items() if value is not None)


def _explore(target: Target, exploration: AnyExploration) -> ExplorationResult:
    """:func:`explore`; what escapes it (initial records, choices, the abstraction)
    becomes ``check_raised`` at the user's line."""
    try:
        return explore(exploration)
    except Exception as error:
        raise CheckerError(
            "check_raised",
            f"{_at(where(error))}{_one_line(error)} (raised while exploring "
            f"{target.lifecycle.name}, outside any step: its initial records, choices, "
            "descriptions or abstraction); fix the code there (--traceback shows the traceback)",
        ) from error


def _raised_in_step(target: Target, exploration: AnyExploration, violation: Violation,
                    replay_path: Path | None) -> CheckerError:
    """``check_raised`` for a step that raised (not a broken rule): the search keeps no
    traceback, so the trace is replayed to find the line at fault."""
    steps = [(step.move, step.choice, step.description) for step in violation.trace]
    try:
        replay(exploration, violation.initial, steps)
        reproduced: BaseException | None = None
    except Exception as error:
        reproduced = error
    replayed = f", replay: pytest {replay_path}" if replay_path else ""
    failure = CheckerError(
        "check_raised",
        f"{_at(where(reproduced) if reproduced else None)}{violation.message} (raised by a "
        f"guard, effect, invariant or move while exploring {target.lifecycle.name}, "
        f"{len(steps)} steps from initial record {violation.initial}: trace above{replayed}); "
        "fix the code there (--traceback shows the traceback)",
    )
    failure.__cause__ = reproduced
    return failure


def check_one(target: Target, snapshot: dict[str, dict[str, Any]], snapshot_path: Path | None,
              trace_dir: Path, out: TextIO) -> Outcome:
    """Check one lifecycle, printing to ``out``; ``snapshot_path`` is ``None`` when no
    snapshot was found. Raises :class:`CheckerError` (``check_raised``) when user code
    raises during the exploration."""
    lifecycle = target.lifecycle
    outcome = Outcome(lifecycle.name)

    def say(line: str) -> None:
        print(line, file=out)

    say(f"{lifecycle.name} (table v{lifecycle.table_version})")
    try:
        for definition_check in DEFINITION_CHECKS:
            definition_check(lifecycle)
        say(f"  definition checks: {len(DEFINITION_CHECKS)} passed")
    except DefinitionError as error:
        outcome.failures.append(f"definition check {error.check}")
        say(f"  FAIL definition check {error}")

    recorded = snapshot.get(lifecycle.name)
    removed = removed_statuses(lifecycle, recorded)
    if removed:
        outcome.failures.append("status_removed")
        for status in removed:
            say(f"  FAIL status_removed: {status!r} is recorded in {snapshot_path} (stored "
                "records may hold it) but the table no longer declares it: such records "
                "could no longer be read or moved. Keep the status (route no rows into it, "
                "keep a row out of it) until stored records are migrated, then run "
                "`lifecycles check --record-statuses`.")
    elif recorded:
        added = sorted({s.value for s in lifecycle.statuses} - set(recorded["statuses"]))
        note = f"; new, not yet recorded: {added}" if added else ""
        say(f"  statuses recorded in {snapshot_path}: all still declared{note}")
    elif snapshot_path is None:
        say(f"  statuses: no {SNAPSHOT_DEFAULT} found (run with --record-statuses)")
    else:
        say(f"  statuses: not recorded in {snapshot_path} (run with --record-statuses)")

    exploration = target.exploration
    if exploration is None:
        outcome.failures.append("no exploration inputs")
        say(f"  FAIL no exploration inputs: declare an Exploration in {lifecycle.module}_inputs")
        return outcome
    result = _explore(target, exploration)
    declared = [status.value for status in lifecycle.statuses]
    missing_statuses = [status for status in declared if status not in result.statuses]
    outcome.result = result
    edges_per_second = result.edges / result.seconds if result.seconds else float("inf")
    say(f"  bounds: {exploration.bounds}")
    say(f"  abstraction: {exploration.abstraction_doc}")
    say(f"  explored: {result.states} states, {result.edges} edges ({result.refusals} refused), "
        f"depth {result.depth}, {result.seconds:.2f} s, {result.states_per_second:,.0f} states/s, "
        f"{edges_per_second:,.0f} edges/s"
        + (" (stopped at the first violation)" if result.violation
           else " (search cut at its max_depth/max_states)" if result.truncated
           else " (complete)"))
    if result.violation is None:
        say(f"  statuses reached: {len(declared) - len(missing_statuses)}/{len(declared)}"
            + (f", never: {missing_statuses}" if missing_statuses else ""))
    else:
        violation = result.violation
        outcome.failures.append(f"violation: {violation.message}")
        say(f"  FAIL {violation.message}")
        say(f"  shortest trace (from initial record {violation.initial}: "
            f"{_summary(exploration.initial()[violation.initial])}):")
        for number, step in enumerate(violation.trace, 1):
            say(f"    {number}. {step.move}: {step.description}")
        if target.spec is not None:
            outcome.replay_path = write_replay(trace_dir, target.spec, lifecycle, violation)
            say(f"  replay: pytest {outcome.replay_path}")
        if violation.kind == "error":  # code that raised, not a rule that broke
            raise _raised_in_step(target, exploration, violation, outcome.replay_path)
        return outcome
    coverage = result.coverage
    assert coverage is not None
    say("  rows fired:")
    for row in lifecycle.rows:
        count = coverage.row_fires.get(row, 0)
        say(f"    {count:>8}  {row.source} -> {row.dest}: {row.label}"
            + ("   <-- never fired" if not count else ""))
    one_sided = coverage.one_sided_guards
    if one_sided:
        say(f"  guards seen only one way (defensive, or inputs too narrow): {one_sided}")
    if coverage.unfired_rows:
        outcome.failures.append("rows never fired")
        say(f"  FAIL rows never fired: {[row.label for row in coverage.unfired_rows]}")
    if missing_statuses:
        outcome.failures.append("statuses never reached")
        say(f"  FAIL statuses never reached: {missing_statuses}")
    say("  OK" if outcome.ok else f"  FAILED: {'; '.join(outcome.failures)}")
    return outcome


def report_error(error: CheckerError, *, out: TextIO, err: TextIO, as_json: bool = False,
                 show_traceback: bool = False) -> int:
    """Print ``error`` as one line on ``err`` (as JSON on ``out`` too with ``as_json``);
    the traceback at fault first with ``show_traceback``. Returns exit code 2."""
    if show_traceback:
        cause = error.__cause__ or error
        err.write("".join(traceback.format_exception(cause)))
    if as_json:
        print(json.dumps({"error": error.error, "message": error.message}), file=out)
    print(f"lifecycles check: {error.message}", file=err)
    return EXIT_UNAVAILABLE


def _outcome_json(target: Target, outcome: Outcome) -> dict[str, Any]:
    result = outcome.result
    figures = {} if result is None else {
        "states": result.states, "edges": result.edges, "depth": result.depth,
        "complete": not result.truncated and result.violation is None,
    }
    return {"name": outcome.name, "table_version": target.lifecycle.table_version,
            "ok": outcome.ok, "failures": outcome.failures, **figures,
            "replay": None if outcome.replay_path is None else str(outcome.replay_path)}


def run_check(names: Sequence[str] = (), modules: Sequence[str] = (), *,
              snapshot_path: Path | None = None, record: bool = False,
              trace_dir: Path = Path(TRACE_DIR_DEFAULT), out: TextIO | None = None,
              err: TextIO | None = None, as_json: bool = False,
              show_traceback: bool = False) -> int:
    """Check the chosen lifecycles; 0 when all pass, 1 otherwise, 2 when it cannot run.

    Without ``snapshot_path`` the snapshot is looked for (:func:`find_snapshot`); a
    ``snapshot_path`` that does not exist is read as empty, with the same WARNING.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        return _run(names, modules, snapshot_path, record, trace_dir, out, as_json)
    except CheckerError as error:
        return report_error(error, out=out, err=err, as_json=as_json,
                            show_traceback=show_traceback)


def _run(names: Sequence[str], modules: Sequence[str], snapshot_path: Path | None,
         record: bool, trace_dir: Path, out: TextIO, as_json: bool) -> int:
    started = time.perf_counter()
    search: SnapshotSearch | None = None
    if snapshot_path is None:
        search = find_snapshot()
        path, record_to = search.found, search.record_path
    else:
        path = record_to = snapshot_path
    snapshot = read_snapshot(path) if path is not None else {}
    warnings: list[str] = []
    if not record and search is not None and search.found is None:
        warnings.append(search.warning())
    elif not record and path is not None and not path.is_file():
        warnings.append(f"status snapshot {path} does not exist; removed statuses cannot be "
                        "detected — pass an existing --statuses FILE or run --record-statuses")
    chosen = targets(names, modules)
    human = io.StringIO() if as_json else out  # --json: one JSON object, nothing else
    outcomes = [check_one(t, snapshot, path, trace_dir, human) for t in chosen]
    recorded_in: Path | None = None
    if record:
        failed_otherwise = [o.name for o in outcomes
                            if any(f != "status_removed" for f in o.failures)]
        if failed_otherwise:
            print(f"statuses not recorded: {failed_otherwise} failed their checks", file=human)
        else:
            recorded_in = record_to
            write_snapshot(recorded_in, (t.lifecycle for t in chosen))
            print(f"recorded the statuses of {[t.lifecycle.name for t in chosen]} in "
                  f"{recorded_in}", file=human)
            outcomes = [attrs.evolve(o, failures=[f for f in o.failures if f != "status_removed"])
                        for o in outcomes]
    failed = [o.name for o in outcomes if not o.ok]
    elapsed = time.perf_counter() - started
    if as_json:
        print(json.dumps({
            "ok": not failed,
            "lifecycles": [_outcome_json(t, o) for t, o in zip(chosen, outcomes, strict=True)],
            "snapshot": None if (recorded_in or path) is None else str(recorded_in or path),
            "warnings": warnings, "seconds": round(elapsed, 3),
        }), file=out)
    else:
        print(f"checked {len(outcomes)} lifecycles in {elapsed:.2f} s: "
              + (f"FAILED {failed}" if failed else "all OK")
              + "".join(f" (WARNING: {warning})" for warning in warnings), file=out)
    return EXIT_FAILED if failed else EXIT_OK


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="definition checks and exhaustive bounded exploration of lifecycles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="lifecycles to check (default: every registered one, or with "
                             "--module every one the modules declare)")
    parser.add_argument("--module", action="append", default=[], metavar="MODULE",
                        help="also load lifecycles and explorations from this module "
                             "(dotted name or path to a .py file); repeatable")
    parser.add_argument("--statuses", type=Path, default=None, metavar="FILE",
                        help=f"the status snapshot to compare with (default: {SNAPSHOT_DEFAULT} "
                             "in the current directory or a parent, up to the project root)")
    parser.add_argument("--record-statuses", action="store_true",
                        help="after checking, record the current statuses in the snapshot")
    parser.add_argument("--trace-dir", type=Path, default=Path(TRACE_DIR_DEFAULT),
                        metavar="DIR", help="where replay tests of violations are written "
                                            f"(default {TRACE_DIR_DEFAULT})")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout (the outcome, or the error)")
    parser.add_argument("--traceback", action="store_true",
                        help="when the check cannot run, also print the Python traceback")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    statuses: Path | None = args.statuses
    if statuses is not None and not statuses.is_file() and not args.record_statuses:
        # A mistyped path must not silently disable the removed-status check.
        return report_error(
            CheckerError("snapshot_missing",
                         f"status snapshot {statuses} does not exist: check the path, or "
                         "create it with --record-statuses"),
            out=sys.stdout, err=sys.stderr, as_json=args.json)
    return run_check(args.names, args.module, snapshot_path=statuses,
                     record=args.record_statuses, trace_dir=args.trace_dir,
                     as_json=args.json, show_traceback=args.traceback)
