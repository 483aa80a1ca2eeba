"""`lifecycles check`: definition checks, the status snapshot, and exhaustive bounded exploration.

For each lifecycle (every registered one, those named, or those found with ``--module``):

1. the definition checks (:mod:`lifecycles.machines.checks`);
2. the status snapshot: every status recorded in the snapshot file (statuses that stored
   records may hold) must still be declared, else ``status_removed`` fails the check;
3. a breadth-first search over the pure machine with the exploration inputs declared
   beside the table (:mod:`lifecycles.machines.exploration`); every invariant is checked
   in every reached state, and every table row and every status must be reached.

It prints the figures (states, edges, depth, time, states/s, fires per row). A violation
prints the shortest trace and writes it as a pytest file that replays it; the exit
code is then 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import attrs

from lifecycles.machines.checks import DEFINITION_CHECKS
from lifecycles.machines.core import DefinitionError, Lifecycle
from lifecycles.machines.exploration import Exploration, ExplorationResult, Violation, explore
from lifecycles.registry import import_target as registry_import_target
from lifecycles.registry import registered

AnyLifecycle = Lifecycle[Any, Any]
AnyExploration = Exploration[Any]

SNAPSHOT_DEFAULT = "lifecycle-statuses.json"
TRACE_DIR_DEFAULT = "lifecycles-traces"


class CheckerError(Exception):
    """The checker cannot run: an unknown name, a module that does not import."""

    code = "lifecycles.check_unavailable"


# --- finding lifecycles and their exploration inputs ---------------------------------


def import_target(target: str) -> ModuleType:
    """Import a module named on the command line (see :func:`registry.import_target`)."""
    try:
        return registry_import_target(target)
    except FileNotFoundError as missing:
        raise CheckerError(str(missing)) from None


def _spec_module(spec: str) -> tuple[str, str]:
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute:
        raise CheckerError(f"{spec!r} is not 'module:ATTRIBUTE' or 'path.py:ATTRIBUTE'")
    return module, attribute


def load_exploration(spec: str) -> AnyExploration:
    """The :class:`Exploration` named by ``module:ATTRIBUTE`` (module may be a path)."""
    module, attribute = _spec_module(spec)
    found = getattr(import_target(module), attribute, None)
    if not isinstance(found, Exploration):
        raise CheckerError(f"{spec} is not an Exploration")
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


@attrs.frozen
class Target:
    """One thing to check: a lifecycle, and the exploration to drive it with."""

    lifecycle: AnyLifecycle
    exploration: AnyExploration | None
    spec: str | None


def targets(names: Sequence[str], modules: Sequence[str]) -> list[Target]:
    """What ``lifecycles check [NAME ...] [--module M ...]`` checks."""
    found: list[Target] = []
    for target in modules:
        module = import_target(target)
        # A path is recorded absolute so a replay file runs from any directory.
        named = str(Path(target).resolve()) if target.endswith(".py") else target
        given = explorations_in(module, named)
        explored = {id(exploration.lifecycle) for exploration, _ in given}
        found.extend(Target(e.lifecycle, e, spec) for e, spec in given)
        for value in vars(module).values():
            if isinstance(value, Lifecycle) and id(value) not in explored:
                explored.add(id(value))
                declared = find_exploration(value)
                found.append(Target(value, *(declared or (None, None))))
    if not modules or names:
        known = {id(t.lifecycle) for t in found}
        for lifecycle in registered().values():
            if id(lifecycle) not in known:
                found.append(Target(lifecycle, *(find_exploration(lifecycle) or (None, None))))
    if names:
        unknown = sorted(set(names) - {t.lifecycle.name for t in found})
        if unknown:
            raise CheckerError(f"unknown lifecycles {unknown}; known: "
                               f"{sorted({t.lifecycle.name for t in found})}")
        found = [t for t in found if t.lifecycle.name in names]
    return found


# --- the status snapshot ------------------------------------------------------------


def read_snapshot(path: Path) -> dict[str, dict[str, Any]]:
    """The recorded statuses per lifecycle name (empty when the file does not exist)."""
    if not path.is_file():
        return {}
    content = json.loads(path.read_text(encoding="utf-8"))
    lifecycles: dict[str, dict[str, Any]] = content.get("lifecycles", {})
    return lifecycles


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


def write_replay(directory: Path, spec: str, lifecycle: AnyLifecycle, violation: Violation) -> Path:
    """Write a pytest file replaying ``violation``'s trace; fails until it is fixed."""
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
        "from lifecycles.checker import load_exploration\n"
        "from lifecycles.machines.exploration import replay\n\n"
        f"SPEC = {spec!r}\n"
        f"INITIAL = {violation.initial}\n"
        f"STEPS = [\n{steps}]\n\n\n"
        f"def test_{name}_trace_holds_every_invariant() -> None:\n"
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


def check_one(target: Target, snapshot: dict[str, dict[str, Any]], snapshot_path: Path,
              trace_dir: Path, out: TextIO) -> Outcome:
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
    else:
        say(f"  statuses: not recorded in {snapshot_path} (run with --record-statuses)")

    if target.exploration is None:
        outcome.failures.append("no exploration inputs")
        say(f"  FAIL no exploration inputs: declare an Exploration in {lifecycle.module}_inputs")
        return outcome
    result = explore(target.exploration)
    declared = [status.value for status in lifecycle.statuses]
    missing_statuses = [status for status in declared if status not in result.statuses]
    outcome.result = result
    edges_per_second = result.edges / result.seconds if result.seconds else float("inf")
    say(f"  bounds: {target.exploration.bounds}")
    say(f"  abstraction: {target.exploration.abstraction_doc}")
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
            f"{_summary(target.exploration.initial()[violation.initial])}):")
        for number, step in enumerate(violation.trace, 1):
            say(f"    {number}. {step.move}: {step.description}")
        if target.spec is not None:
            outcome.replay_path = write_replay(trace_dir, target.spec, lifecycle, violation)
            say(f"  replay: pytest {outcome.replay_path}")
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


def run_check(names: Sequence[str] = (), modules: Sequence[str] = (), *,
              snapshot_path: Path = Path(SNAPSHOT_DEFAULT), record: bool = False,
              trace_dir: Path = Path(TRACE_DIR_DEFAULT), out: TextIO | None = None) -> int:
    """Check the chosen lifecycles; 0 when all pass, 1 otherwise, 2 when it cannot run."""
    out = out or sys.stdout
    started = time.perf_counter()
    try:
        chosen = targets(names, modules)
        snapshot = read_snapshot(snapshot_path)
    except (CheckerError, ImportError, ValueError) as error:
        print(f"lifecycles check: {error}", file=out)
        return 2
    outcomes = [check_one(t, snapshot, snapshot_path, trace_dir, out) for t in chosen]
    if record:
        failed_otherwise = [o.name for o in outcomes
                            if any(f != "status_removed" for f in o.failures)]
        if failed_otherwise:
            print(f"statuses not recorded: {failed_otherwise} failed their checks", file=out)
        else:
            write_snapshot(snapshot_path, (t.lifecycle for t in chosen))
            print(f"recorded the statuses of {[t.lifecycle.name for t in chosen]} in "
                  f"{snapshot_path}", file=out)
            outcomes = [attrs.evolve(o, failures=[f for f in o.failures if f != "status_removed"])
                        for o in outcomes]
    failed = [o.name for o in outcomes if not o.ok]
    elapsed = time.perf_counter() - started
    print(f"checked {len(outcomes)} lifecycles in {elapsed:.2f} s: "
          + (f"FAILED {failed}" if failed else "all OK"), file=out)
    return 1 if failed else 0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="definition checks and exhaustive bounded exploration of lifecycles",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="lifecycles to check (default: every registered one)")
    parser.add_argument("--module", action="append", default=[], metavar="MODULE",
                        help="also load lifecycles and explorations from this module "
                             "(dotted name or path to a .py file); repeatable")
    parser.add_argument("--statuses", type=Path, default=Path(SNAPSHOT_DEFAULT), metavar="FILE",
                        help=f"the status snapshot to compare with (default {SNAPSHOT_DEFAULT})")
    parser.add_argument("--record-statuses", action="store_true",
                        help="after checking, record the current statuses in the snapshot")
    parser.add_argument("--trace-dir", type=Path, default=Path(TRACE_DIR_DEFAULT),
                        metavar="DIR", help="where replay tests of violations are written "
                                            f"(default {TRACE_DIR_DEFAULT})")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    return run_check(args.names, args.module, snapshot_path=args.statuses,
                     record=args.record_statuses, trace_dir=args.trace_dir)
