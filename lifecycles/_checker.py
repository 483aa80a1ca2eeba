"""`lifecycles check`: definition checks, the status snapshot, and exhaustive bounded exploration.

Which lifecycles: those named (NAME ...), else those the ``--module`` options declare,
else, in a project (the nearest pyproject.toml with a [tool.lifecycles] table, from the
current directory up), those its ``modules`` declare: a project's CI checks its own
lifecycles, not the monitor and outbox lifecycles shipped with lifecycles (name them to
check them too). Outside a project: every installed lifecycle, the shipped ones and those
of the entry-point group ``lifecycles.lifecycles``. A name is looked for among all of
these. For each lifecycle:

1. the definition checks (:mod:`lifecycles.machines._checks`);
2. the status snapshot: every status recorded in the snapshot file (statuses that stored
   records may hold) must still be declared, else ``status_removed`` fails the check;
3. a breadth-first search over the pure machine with the exploration inputs declared
   beside the table (:mod:`lifecycles.machines._exploration`); every invariant is checked
   in every reached state, and every table row and every status must be reached;
4. for a leased lifecycle that declares workers, their interleavings on the lease
   protocol (:mod:`lifecycles.machines._interleaving`): the invariants and the
   protocol's own properties (``--workers N --records M`` change how many);
5. with ``--mutants``, every table mutant (a guard dropped or flipped, a row sent
   elsewhere or deleted, a row out of a final status, an invariant unregistered) checked
   the same way: each must be killed or declared equivalent, with a reason
   (:mod:`lifecycles._checker_mutants`); ``--mutant-traces`` shows how each was killed.

It prints the figures (states, edges, depth, time, states/s, fires per row). A violation
prints the shortest trace and writes it as a pytest file that replays it from any
directory.

The status snapshot: ``--statuses FILE``, else in a project its ``statuses`` setting
(default: lifecycle-statuses.json beside its pyproject.toml), else the first
``lifecycle-statuses.json`` found from the current directory upwards, up to and
including the project root (the first directory holding ``pyproject.toml`` or ``.git``).
When none is found the summary says so in a WARNING (removed statuses cannot be
detected), and ``--record-statuses`` creates it (at the project root, else in the
current directory). A ``--statuses FILE`` that does not exist is an error
(``snapshot_missing``) unless ``--record-statuses`` is given, which creates it.

exit codes:
  0  every check passed
  1  a check failed: an invariant violation (trace and replay file printed), a
     definition check, a recorded status the table no longer declares, a row never
     fired, a status never reached, no exploration inputs, a finding of the
     interleaved workers (trace and replay file printed), a search cut at its
     bounds that no incomplete_ok accepts (search_cut, interleaving_cut), a table
     mutant that survives (with --mutants)
  2  the check could not run; one line on stderr says where and what to do (with
     --json also {"error": CODE, "message": ...} on stdout; --traceback adds the
     Python traceback on stderr):
       module_not_found      a module named (or one it imports) cannot be found, or
                             its .py file does not exist
       module_syntax_error   a module has a syntax error (file:line)
       module_import_failed  importing a module raised an exception (file:line)
       definition_invalid    a lifecycle declaration is invalid, a shipped one's too
                             (file:line of the Lifecycle(...) call); or an
                             exploration the checker cannot run: its lifecycle is
                             not one, workers without a lease, accepted cycles of
                             undeclared triggers (file:line of its assignment)
       check_raised          a guard, effect, invariant or exploration input raised
                             during the exploration (file:line; the trace and replay
                             file are printed on stdout when the step is known)
       unknown_lifecycle     a NAME no loaded module declares
       no_lifecycle          a module named (--module, or the project's modules)
                             declares no lifecycle and no exploration
       duplicate_name        two different lifecycles share a name (both modules
                             named)
       project_invalid       [tool.lifecycles] of the project's pyproject.toml has
                             an unknown key or a value of the wrong type (file and
                             key named), or the file is not valid TOML
       snapshot_invalid      the status snapshot is not JSON of the expected shape
       snapshot_missing      --statuses FILE does not exist (without --record-statuses)
       bound_invalid         a --bound that does not parse, that no lifecycle checked
                             declares, or that its exploration refuses; --workers or
                             --records out of range, or with no lifecycle declaring
                             workers; LIFECYCLES_CHECK_PROCESSES not a whole
                             number of at least 1

With --json, stdout is one JSON object: the error above, or the outcome
{"ok": ..., "lifecycles": [...], "snapshot": ..., "warnings": [...], "seconds": ...}.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs

from lifecycles._checker_mutants import check_mutants
from lifecycles._checker_mutants import figures as mutant_figures
from lifecycles._checker_report import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    Outcome,
    Target,
    check_cut,
)
from lifecycles._checker_workers import bounds_arguments, check_workers, sized
from lifecycles._checker_workers import figures as interleaving_figures
from lifecycles._loading import (
    CheckerError,
    at,
    check_exploration,
    declared_exploration,
    display,
    explorations_in,
    import_target,
    one_line,
    where,
)
from lifecycles._replay import TRACE_DIR_DEFAULT, write_finding_replay, write_replay
from lifecycles._snapshot import (
    SNAPSHOT_DEFAULT,
    SnapshotSearch,
    find_snapshot,
    read_snapshot,
    removed_statuses,
    write_snapshot,
)
from lifecycles.machines._checks import DEFINITION_CHECKS
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import DefinitionError
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration, ExplorationResult, Violation, replay
from lifecycles.machines._findings import search_findings
from lifecycles.machines._liveness import Liveness, liveness
from lifecycles.project import find_project, installed, named_by, on_path, unique

__all__ = [
    "check_one",
    "register",
    "report_error",
    "run_check",
    "targets",
]

AnyLifecycle = Lifecycle[Any, Any]
AnyExploration = Exploration[Any]

def targets(names: Sequence[str], modules: Sequence[str]) -> list[Target]:
    """What ``lifecycles check [NAME ...] [--module M ...]`` checks.

    A module contributes its explorations and the lifecycles it declares, not those it
    merely imports; one that contributes none is ``no_lifecycle``. Without ``--module``
    the project's ``modules`` (``[tool.lifecycles]``, :mod:`lifecycles.project`) are the
    modules; without either, every installed lifecycle is checked. Named lifecycles are
    looked for among all of them, the installed ones too. Two different lifecycles of
    one name are ``duplicate_name``. An exploration the checker cannot run is
    ``definition_invalid`` (:func:`check_exploration`).
    """
    project = find_project()
    if project is not None:
        on_path(project)
    project_modules = list(project.modules if project else ())
    found: list[Target] = []
    explored: set[int] = set()
    for target in modules:
        _module_targets(target, found, explored)
    if not modules or names:  # a name may denote a project's lifecycle
        with named_by(project):
            for target in project_modules:
                _module_targets(target, found, explored)
    if names or not (modules or project_modules):
        for lifecycle in installed():
            if id(lifecycle) not in explored:
                explored.add(id(lifecycle))
                found.append(_declared_target(lifecycle))
    if names:
        unknown = sorted(set(names) - {t.lifecycle.name for t in found})
        if unknown:
            raise CheckerError(
                "unknown_lifecycle",
                f"unknown lifecycles {unknown}; known: "
                f"{sorted({t.lifecycle.name for t in found})}: check the spelling, list its "
                "module in [tool.lifecycles] modules of pyproject.toml, or add --module MODULE")
        found = [t for t in found if t.lifecycle.name in names]
    unique(t.lifecycle for t in found)
    return found


def _module_targets(target: str, found: list[Target], explored: set[int]) -> None:
    """Add to ``found`` the explorations of ``target`` and the lifecycles it declares
    (``explored``: the lifecycles already there, by identity)."""
    module = import_target(target)
    # A path is recorded absolute so a replay file runs from any directory.
    named = str(Path(target).resolve()) if target.endswith(".py") else target
    given = explorations_in(module, named)
    for exploration, spec in given:
        check_exploration(exploration, spec)
    declared = [value for value in vars(module).values()
                if isinstance(value, Lifecycle) and value.module == module.__name__]
    if not given and not declared:
        raise CheckerError("no_lifecycle",
                           f"{display(target)} declares no lifecycle and no exploration: "
                           "check the module named, or remove it")
    mine = [(e, spec) for e, spec in given if id(e.lifecycle) not in explored]
    found.extend(Target(e.lifecycle, e, spec) for e, spec in mine)
    explored.update(id(e.lifecycle) for e, _ in mine)
    for value in declared:
        if id(value) not in explored:
            explored.add(id(value))
            found.append(_declared_target(value))


def _declared_target(lifecycle: AnyLifecycle) -> Target:
    """``lifecycle`` with the exploration declared beside its table, if any."""
    declared = declared_exploration(lifecycle)
    if declared is None:
        return Target(lifecycle, None, None)
    check_exploration(*declared)
    return Target(lifecycle, *declared)


# --- running and reporting -------------------------------------------------------------


def _summary(record: Any) -> str:
    """The record's set fields, on one line."""
    values = attrs.asdict(record, recurse=False)
    return ", ".join(f"{name}={value!s}" for name, value in values.items() if value is not None)


PROCESSES = "LIFECYCLES_CHECK_PROCESSES"
"""Processes the search may use (default: the CPUs this process may run on): initial
records whose states never meet are searched apart (lifecycles.machines._partition), with
exactly the serial result. 1 searches serially: on a machine whose other cores are busy
the split is slower."""


def _processes() -> int:
    """The processes :data:`PROCESSES` allows; ``bound_invalid`` for a value that is not a
    whole number of at least 1 (unset or empty: the CPUs)."""
    declared = os.environ.get(PROCESSES, "").strip()
    if not declared:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if not declared.isdigit() or int(declared) < 1:
        raise CheckerError("bound_invalid", f"{PROCESSES}={declared!r}: write a whole number of "
                           "processes, at least 1 (1 searches on one core), or leave it unset")
    return int(declared)


def _explore(target: Target, exploration: AnyExploration) -> ExplorationResult:
    """:func:`explore`; what escapes it (initial records, choices, the abstraction)
    becomes ``check_raised`` at the user's line."""
    try:
        return explore(exploration, keep_graph=True, progress=_progress,
                       processes=_processes())
    except Exception as error:
        raise CheckerError(
            "check_raised",
            f"{at(where(error))}{one_line(error)} (raised while exploring "
            f"{target.lifecycle.name}, outside any step: its initial records, choices, "
            "descriptions or abstraction); fix the code there (--traceback shows the traceback)",
        ) from error


def _progress(so_far: ExplorationResult) -> None:
    """A line on stderr while a long search runs (stdout keeps only the figures)."""
    print(f"  ... {so_far.lifecycle}: {so_far.states:,} states, {so_far.edges:,} edges, "
          f"depth {so_far.depth}, {so_far.seconds:.0f} s", file=sys.stderr, flush=True)


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
        f"{at(where(reproduced) if reproduced else None)}{violation.message} (raised by a "
        f"guard, effect, invariant or move while exploring {target.lifecycle.name}, "
        f"{len(steps)} steps from initial record {violation.initial}: trace above{replayed}); "
        "fix the code there (--traceback shows the traceback)",
    )
    failure.__cause__ = reproduced
    return failure


Say = Callable[[str], None]


def check_one(target: Target, snapshot: dict[str, dict[str, Any]], snapshot_path: Path | None,
              trace_dir: Path, out: TextIO, mutants: str | None = None) -> Outcome:
    """Check one lifecycle, printing to ``out``; ``snapshot_path`` is ``None`` when no
    snapshot was found. Raises :class:`CheckerError` (``check_raised``) when user code
    raises during the exploration.

    The steps, in order: the definition checks, the status snapshot, the search (a
    violation ends the check there), what the search covered and found, the interleaved
    workers, and with ``mutants`` the table mutants."""
    lifecycle = target.lifecycle
    outcome = Outcome(lifecycle.name)

    def say(line: str) -> None:
        print(line, file=out)

    say(f"{lifecycle.name} (table v{lifecycle.table_version})")
    _check_definition(lifecycle, outcome, say)
    _check_snapshot(lifecycle, snapshot.get(lifecycle.name), snapshot_path, outcome, say)
    exploration = target.exploration
    if exploration is None:
        outcome.failures.append("no exploration inputs")
        say(f"  FAIL no exploration inputs: declare an Exploration in {lifecycle.module} "
            "or in a module its Lifecycle(declared_in=...) names")
        return outcome
    result = outcome.result = _explore(target, exploration)
    _say_figures(result, exploration, say)
    if result.violation is not None:
        _report_violation(target, exploration, result.violation, trace_dir, outcome, say)
        return outcome
    if result.truncated:
        check_cut("search", result.cut_at, result.states, exploration, outcome, say)
    _say_statuses_reached(lifecycle, result, say)
    _say_coverage(lifecycle, result, say)
    _report_findings(target, result, exploration, trace_dir, outcome, say)
    outcome.interleaving = check_workers(target, exploration, trace_dir, say, outcome)
    if mutants is not None and outcome.ok:  # a failing lifecycle's mutants tell nothing
        outcome.mutants = check_mutants(exploration, say, outcome,
                                        show_traces=mutants == "traces")
    say("  OK" if outcome.ok else f"  FAILED: {'; '.join(outcome.failures)}")
    return outcome


def _check_definition(lifecycle: AnyLifecycle, outcome: Outcome, say: Say) -> None:
    """The definition checks (:mod:`lifecycles.machines._checks`), the first that fails told."""
    try:
        for definition_check in DEFINITION_CHECKS:
            definition_check(lifecycle)
        say(f"  definition checks: {len(DEFINITION_CHECKS)} passed")
    except DefinitionError as error:
        outcome.failures.append(f"definition check {error.check}")
        say(f"  FAIL definition check {error}")


def _check_snapshot(lifecycle: AnyLifecycle, recorded: dict[str, Any] | None,
                    snapshot_path: Path | None, outcome: Outcome, say: Say) -> None:
    """Every status the snapshot records (stored records may hold it) is still declared."""
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


def _say_figures(result: ExplorationResult, exploration: AnyExploration, say: Say) -> None:
    """The bounds, the abstraction, and the search's figures and how it ended."""
    edges_per_second = result.edges / result.seconds if result.seconds else float("inf")
    say(f"  bounds: {exploration.bounds}")
    say(f"  abstraction: {exploration.abstraction_doc}")
    say(f"  explored: {result.states} states, {result.edges} edges ({result.refusals} refused), "
        f"depth {result.depth}, {result.seconds:.2f} s, {result.states_per_second:,.0f} states/s, "
        f"{edges_per_second:,.0f} edges/s"
        + (" (stopped at the first violation)" if result.violation
           else " (search cut at its max_depth/max_states)" if result.truncated
           else " (complete)"))


def _report_violation(target: Target, exploration: AnyExploration, violation: Violation,
                      trace_dir: Path, outcome: Outcome, say: Say) -> None:
    """A violation with its shortest trace and replay file; a step that raised (code, not a
    rule) is ``check_raised`` at its line."""
    outcome.failures.append(f"violation: {violation.message}")
    say(f"  FAIL {violation.message}")
    say(f"  shortest trace (from initial record {violation.initial}: "
        f"{_summary(exploration.initial()[violation.initial])}):")
    for number, step in enumerate(violation.trace, 1):
        say(f"    {number}. {step.move}: {step.description}")
    if target.spec is not None:
        outcome.replay_path = write_replay(trace_dir, target.spec, target.lifecycle, violation)
        say(f"  replay: pytest {outcome.replay_path}")
    outcome.reports.append({
        "failure": "violation", "message": violation.message, "rules": list(violation.rules),
        "trace": [f"{step.move}: {step.description}" for step in violation.trace],
        "replay": None if outcome.replay_path is None else str(outcome.replay_path)})
    if violation.kind == "error":  # code that raised, not a rule that broke
        raise _raised_in_step(target, exploration, violation, outcome.replay_path)


def _say_statuses_reached(lifecycle: AnyLifecycle, result: ExplorationResult, say: Say) -> None:
    declared = [status.value for status in lifecycle.statuses]
    missing_statuses = [status for status in declared if status not in result.statuses]
    say(f"  statuses reached: {len(declared) - len(missing_statuses)}/{len(declared)}"
        + (f", never: {missing_statuses}" if missing_statuses else ""))


def _say_coverage(lifecycle: AnyLifecycle, result: ExplorationResult, say: Say) -> None:
    """How often each row fired, and the guards the search saw only one way."""
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


def _report_findings(target: Target, result: ExplorationResult, exploration: AnyExploration,
                     trace_dir: Path, outcome: Outcome, say: Say) -> None:
    """Liveness, then what the search found wanting (rows never fired, statuses never
    reached, cycles without a final status), each with its trace where it has one."""
    found = _liveness_summary(result, exploration, say)
    for finding in search_findings(exploration, result, found):
        outcome.failures.append(finding.failure)
        say(f"  FAIL {finding.message}")
        steps = [] if finding.state is None else _say_trace(result, exploration,
                                                            finding.state, say)
        path = None
        if target.spec is not None:
            path = write_finding_replay(trace_dir, target.spec, target.lifecycle,
                                        finding.failure, finding.message, steps)
            say(f"    replay: pytest {path}")
            outcome.replay_path = outcome.replay_path or path
        outcome.reports.append({"failure": finding.failure, "message": finding.message,
                                "trace": steps, "replay": None if path is None else str(path)})


def _liveness_summary(result: ExplorationResult, exploration: AnyExploration,
                      say: Callable[[str], None]) -> Liveness | None:
    """Print what liveness found (:mod:`lifecycles.machines._liveness`): how many states
    can finish, the cycles without a final status and the declared ones. A search cut
    short proves neither."""
    graph = result.graph
    if graph is None or result.truncated:
        say("  liveness: not checked (the search was cut at its bounds)")
        return None
    found = liveness(graph, exploration.accepted_cycles)
    accepted = [cycle for cycle in found.cycles if cycle.accepted is not None]
    say(f"  liveness: {result.states - len(found.stuck)}/{result.states} states can reach a "
        f"final status; {len(found.cycles)} cycles without one, {len(accepted)} declared")
    for cycle in accepted:
        assert cycle.accepted is not None
        say(f"    accepted: {', '.join(sorted(cycle.triggers))} ({cycle.size} states): "
            f"{cycle.accepted.reason}")
    return found


def _say_trace(result: ExplorationResult, exploration: AnyExploration, state: int,
               say: Callable[[str], None]) -> list[str]:
    """Print the shortest trace to ``state``; its steps as printed."""
    assert result.graph is not None
    initial, steps = result.graph.trace_to(state)
    say(f"    shortest trace (from initial record {initial}: "
        f"{_summary(exploration.initial()[initial])}):")
    shown = [f"{step.move}: {step.description}" for step in steps]
    for number, step in enumerate(shown, 1):
        say(f"      {number}. {step}")
    return shown


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
        "states": result.states, "edges": result.edges, "refusals": result.refusals,
        "depth": result.depth, "seconds": round(result.seconds, 3),
        "states_per_second": round(result.states_per_second) if result.seconds else None,
        "complete": not result.truncated and result.violation is None,
        "cut_at": result.cut_at,
    }
    return {"name": outcome.name, "table_version": target.lifecycle.table_version,
            "ok": outcome.ok, "failures": outcome.failures, **figures,
            **interleaving_figures(outcome.interleaving), **mutant_figures(outcome.mutants),
            "findings": outcome.reports,
            "replay": None if outcome.replay_path is None else str(outcome.replay_path)}


_BOUND = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\d+)\.\.(\d+)\Z")


def parse_bound(text: str) -> tuple[str, tuple[int, int]]:
    """``NAME=LOW..HIGH`` as (name, (low, high)); ``bound_invalid`` otherwise."""
    found = _BOUND.match(text)
    if found is None or int(found[2]) > int(found[3]):
        raise CheckerError("bound_invalid", f"--bound {text}: write NAME=LOW..HIGH with "
                           "LOW <= HIGH, for example max_failures=1..8")
    return found[1], (int(found[2]), int(found[3]))


def rebound(chosen: list[Target], bounds: Sequence[str]) -> list[Target]:
    """``chosen`` with each ``--bound`` applied to the explorations that declare it (a
    rebound exploration writes no replay file: the declared one would not replay it)."""
    requested = dict(parse_bound(text) for text in bounds)
    if not requested:
        return chosen
    declared = {name for t in chosen if t.exploration for name in t.exploration.tunable}
    unknown = sorted(set(requested) - declared)
    if unknown:
        raise CheckerError("bound_invalid", f"no lifecycle checked declares the bound(s) "
                           f"{unknown}; declared: {sorted(declared) or 'none'}")
    widened = []
    for target in chosen:
        exploration = target.exploration
        mine = {k: v for k, v in requested.items() if exploration and k in exploration.tunable}
        if exploration is None or not mine:
            widened.append(target)
            continue
        try:
            if exploration.rebound is None:
                raise ValueError(f"{target.lifecycle.name} declares bounds but no rebound")
            new = exploration.rebound({**exploration.tunable, **mine})
        except ValueError as error:
            raise CheckerError("bound_invalid", f"--bound: {error}") from error
        widened.append(attrs.evolve(target, exploration=new, spec=None))
    return widened


def run_check(names: Sequence[str] = (), modules: Sequence[str] = (), *,
              snapshot_path: Path | None = None, record: bool = False,
              trace_dir: Path = Path(TRACE_DIR_DEFAULT), out: TextIO | None = None,
              err: TextIO | None = None, as_json: bool = False,
              show_traceback: bool = False, bounds: Sequence[str] = (),
              workers: int | None = None, records: int | None = None,
              mutants: str | None = None, incomplete_ok: str | None = None) -> int:
    """Check the chosen lifecycles; 0 when all pass, 1 otherwise, 2 when it cannot run.

    Without ``snapshot_path`` the snapshot is looked for (:func:`find_snapshot`); a
    ``snapshot_path`` that does not exist is read as empty, with the same WARNING.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        return _run(names, modules, snapshot_path, record, trace_dir, out, as_json, bounds,
                    workers, records, mutants, incomplete_ok)
    except CheckerError as error:
        return report_error(error, out=out, err=err, as_json=as_json,
                            show_traceback=show_traceback)


def _run(names: Sequence[str], modules: Sequence[str], snapshot_path: Path | None,
         record: bool, trace_dir: Path, out: TextIO, as_json: bool,
         bounds: Sequence[str] = (), workers: int | None = None,
         records: int | None = None, mutants: str | None = None,
         incomplete_ok: str | None = None) -> int:
    started = time.perf_counter()
    search: SnapshotSearch | None = None
    project = find_project() if snapshot_path is None else None
    if project is not None:  # the project's setting, from any of its directories
        snapshot_path = project.statuses
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
    _processes()  # a wrong setting is refused before any search runs
    chosen = sized(rebound(targets(names, modules), bounds), workers, records)
    if incomplete_ok is not None:
        chosen = [attrs.evolve(t, exploration=attrs.evolve(t.exploration,
                                                           incomplete_ok=incomplete_ok))
                  if t.exploration is not None else t for t in chosen]
    human = io.StringIO() if as_json else out  # --json: one JSON object, nothing else
    outcomes = [check_one(t, snapshot, path, trace_dir, human, mutants) for t in chosen]
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
                        help="lifecycles to check (default: those the --module options "
                             "declare, else the project's modules', else every installed one)")
    parser.add_argument("--module", action="append", default=[], metavar="MODULE",
                        help="also load lifecycles and explorations from this module "
                             "(dotted name or path to a .py file); repeatable")
    parser.add_argument("--statuses", type=Path, default=None, metavar="FILE",
                        help="the status snapshot to compare with (default: the project's "
                             f"statuses setting, else {SNAPSHOT_DEFAULT} in the current "
                             "directory or a parent, up to the project root)")
    parser.add_argument("--record-statuses", action="store_true",
                        help="after checking, record the current statuses in the snapshot")
    parser.add_argument("--trace-dir", type=Path, default=Path(TRACE_DIR_DEFAULT),
                        metavar="DIR", help="where replay tests of violations are written "
                                            f"(default {TRACE_DIR_DEFAULT})")
    parser.add_argument("--bound", action="append", default=[], metavar="NAME=LOW..HIGH",
                        help="explore with a bound changed, for the lifecycles whose "
                             "exploration declares it (the monitor: max_failures=1..8); "
                             "repeatable")
    bounds_arguments(parser)
    parser.add_argument("--mutants", action="store_const", const="report", default=None,
                        help="also check every table mutant of each lifecycle: each must be "
                             "killed or declared equivalent (exit 1 otherwise)")
    parser.add_argument("--mutant-traces", dest="mutants", action="store_const",
                        const="traces", help="--mutants, and say how each mutant was killed")
    parser.add_argument("--incomplete-ok", default=None, metavar="REASON",
                        help="accept a search cut at its bounds, for this reason (exit 0 "
                             "if nothing else fails); without it a cut search is exit 1")
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
                     as_json=args.json, show_traceback=args.traceback, bounds=args.bound,
                     workers=args.workers, records=args.records, mutants=args.mutants,
                     incomplete_ok=args.incomplete_ok)
