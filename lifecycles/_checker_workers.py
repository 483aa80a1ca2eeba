"""The interleaving part of `lifecycles check`: a leased lifecycle's workers, explored
on the lease protocol (:mod:`lifecycles.machines._interleaving`), the findings printed
with the shortest interleaving and written as a replay test."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from lifecycles._checker_report import check_cut
from lifecycles._loading import CheckerError
from lifecycles._replay import identifier, import_root
from lifecycles.machines._exploration import Exploration
from lifecycles.machines._interleaving import Finding, InterleavingResult, explore_workers

if TYPE_CHECKING:
    from lifecycles._checker_report import Outcome, Target

PROPERTIES = ("at most one live lease per record; no completion from a superseded lease "
              "accepted; no record lost; every record can reach a final status")
"""The lease protocol's own properties, checked besides the invariants."""


def properties(exploration: Exploration[Any]) -> str:
    """:data:`PROPERTIES`, then the whole-store invariants and the external effects'
    rules this exploration's lifecycle and workers declare."""
    extra = [f"whole-store invariant {rule.name}"
             for rule in exploration.lifecycle.invariants.store]
    workers = exploration.workers
    extra += [f"external effect {effect.name} (keyed by {effect.keyed_by}): {effect.meaning}"
              for effect in (workers.effects if workers is not None else ())]
    return "; ".join([PROPERTIES, *extra])


def sized(chosen: list[Target], workers: int | None, records: int | None) -> list[Target]:
    """``chosen`` with ``--workers``/``--records`` applied to every exploration that
    declares workers; ``bound_invalid`` when none does or a number is out of range."""
    if workers is None and records is None:
        return chosen
    if not any(t.exploration is not None and t.exploration.workers for t in chosen):
        raise CheckerError("bound_invalid", "--workers/--records: no lifecycle checked "
                           "declares workers (Exploration(workers=...))")
    resized = []
    for target in chosen:
        exploration = target.exploration
        if exploration is None or exploration.workers is None:
            resized.append(target)
            continue
        try:
            declared = exploration.workers.sized(workers, records)
        except ValueError as error:
            raise CheckerError("bound_invalid", f"--workers/--records: {error} "
                               f"for {target.lifecycle.name}") from error
        resized.append(attrs.evolve(
            target, exploration=attrs.evolve(exploration, workers=declared)))
    return resized


def check_workers(target: Target, exploration: Exploration[Any], trace_dir: Path,
                  say: Callable[[str], None], outcome: Outcome) -> InterleavingResult | None:
    """Explore the declared workers; print the figures, or the finding with its trace
    and replay file. ``None`` when the exploration declares no workers."""
    declared = exploration.workers
    if declared is None:
        return None
    result = explore_workers(exploration, progress=_progress)
    say(f"  interleaved workers: {declared.bounds}")
    say(f"    explored: {result.states} states, {result.steps} steps ({result.refusals} "
        f"refused or nothing due), depth {result.depth}, {result.seconds:.2f} s"
        + (" (stopped at the first finding)" if result.finding
           else " (search cut at its max_states)" if result.truncated else " (complete)"))
    finding = result.finding
    if finding is None:
        say(f"    {properties(exploration)}: "
            + ("not proven (the search was cut)" if result.truncated else "all hold"))
        if result.truncated:
            check_cut("interleaving", result.cut_at, result.states, exploration, outcome, say)
        return result
    outcome.failures.append(f"interleaving: {finding.kind}")
    say(f"  FAIL interleaving ({finding.kind}): {finding.message}")
    say(f"    shortest interleaving (from {declared.bounds.partition(';')[0]}, every worker "
        "idle, every record due at t+0s):")
    for number, step in enumerate(finding.trace, 1):
        say(f"      {number}. {step.actor} {step.description}")
    if not finding.trace:
        say("      (the start: nothing happened yet)")
    path = None
    if target.spec is not None:
        path = write_interleaving_replay(trace_dir, target.spec, exploration, finding,
                                         declared.count, declared.record_count)
        say(f"    replay: pytest {path}")
        outcome.replay_path = outcome.replay_path or path
    outcome.reports.append({
        "failure": f"interleaving: {finding.kind}", "message": finding.message,
        "rules": list(finding.rules),
        "trace": [f"{step.actor} {step.description}" for step in finding.trace],
        "replay": None if path is None else str(path)})
    return result


def _progress(so_far: InterleavingResult) -> None:
    """A line on stderr while a long interleaving search runs (stdout keeps the figures)."""
    records = f"{so_far.records} record{'' if so_far.records == 1 else 's'}"
    print(f"  ... {so_far.lifecycle}, {so_far.workers} workers x {records}: "
          f"{so_far.states:,} states, {so_far.steps:,} steps, depth {so_far.depth}, "
          f"{so_far.seconds:.0f} s", file=sys.stderr, flush=True)


def write_interleaving_replay(directory: Path, spec: str, exploration: Exploration[Any],
                              finding: Finding, workers: int, records: int) -> Path:
    """A pytest file replaying ``finding``'s interleaving; it fails until it is fixed."""
    lifecycle = exploration.lifecycle
    directory.mkdir(parents=True, exist_ok=True)
    name = identifier(lifecycle.name)
    path = directory / f"test_replay_{name}_interleaved.py"
    steps = "".join(f"    ({step.actor!r}, {step.action!r}, {step.choice}),  "
                    f"# {_comment(step.description)}\n" for step in finding.trace)
    path.write_text(
        f'"""Shortest interleaving found by `lifecycles check` in {lifecycle.name} '
        f"(table v{lifecycle.table_version}).\n\n"
        f"{finding.kind}: {finding.message}\n\n"
        "Replays the workers' steps on the memory store: it fails while the finding is\n"
        "there and passes once it is fixed; if the declarations changed since, it fails\n"
        'with TraceMismatch (re-run `lifecycles check`).\n"""\n\n'
        "import sys\n\n"
        "from lifecycles._loading import load_exploration\n"
        "from lifecycles.machines._interleaving import replay_interleaving\n\n"
        f"SPEC = {spec!r}\n"
        f"IMPORT_ROOT = {import_root(spec)!r}\n"
        f"WORKERS = {workers}\n"
        f"RECORDS = {records}\n"
        f"STEPS = [\n{steps}]\n\n\n"
        f"def test_{name}_interleaving_keeps_every_property() -> None:\n"
        "    if IMPORT_ROOT is not None and IMPORT_ROOT not in sys.path:\n"
        "        sys.path.append(IMPORT_ROOT)\n"
        "    replay_interleaving(load_exploration(SPEC), WORKERS, RECORDS, STEPS)\n",
        encoding="utf-8",
    )
    return path


def _comment(text: str) -> str:
    return " ".join(text.split())[:150]


def figures(result: InterleavingResult | None) -> dict[str, Any]:
    """The interleaving's figures for ``--json``."""
    if result is None:
        return {}
    return {"interleaving": {
        "workers": result.workers, "records": result.records, "states": result.states,
        "steps": result.steps, "depth": result.depth,
        "complete": not result.truncated and result.finding is None,
        "finding": None if result.finding is None else result.finding.kind,
    }}


def bounds_arguments(parser: Any) -> None:
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="explore N interleaved workers (default: as declared, 2)")
    parser.add_argument("--records", type=int, default=None, metavar="M",
                        help="on M records (default: as declared, 1; at most 2)")
