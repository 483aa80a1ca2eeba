"""`lifecycles check --mutants`: which mistaken rows would the invariants and the checker
let through? Every table mutant (:mod:`lifecycles.machines._mutants`) is checked as the
lifecycle is: the definition checks, the search with every state and step invariant,
every row fired and status reached, liveness, and the interleaved workers. A mutant the
check fails is *killed*, by the first thing that failed; one it passes *survives*,
unless the exploration declares it equivalent, with a reason. Any survivor fails the
command; so does a declared equivalence that the check now kills (a stale declaration).
The mutation score is killed / (all - declared equivalent).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration
from lifecycles.machines._findings import search_findings
from lifecycles.machines._interleaving import explore_workers
from lifecycles.machines._mutants import KINDS, Mutant, mutants, without_rule

if TYPE_CHECKING:
    from lifecycles._checker_report import Outcome

#: A mutant's search may reach at most this many times the original's states: a mistake
#: that makes the state space explode is reported undecided (a survivor), not run for ever.
GROWTH_BOUND = 20


@attrs.frozen
class Verdict:
    """What the check did to one mutant: ``killed_by`` (``None``: it survived) and the
    shortest trace to the failure, one line a step."""

    name: str
    kind: str
    change: str
    killed_by: str | None
    trace: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # the rules whose violation killed it


def judge(mutant: Mutant, exploration: Exploration[Any], max_states: int) -> Verdict:
    """Check one mutant as ``lifecycles check`` checks a lifecycle."""
    def killed(reason: str, trace: Sequence[str] = (), rules: Sequence[str] = ()) -> Verdict:
        return Verdict(mutant.name, mutant.kind, mutant.change, reason, tuple(trace),
                       tuple(rules))

    if mutant.lifecycle is None:
        return killed(mutant.refusal or "refused by the definition checks")
    explored = attrs.evolve(exploration, lifecycle=mutant.lifecycle, max_states=max_states)
    try:
        result = explore(explored, keep_graph=True, moves_start_as=exploration)
    except Exception as error:  # the declarations' own code raised outside a step
        return killed(f"the exploration raised {type(error).__name__}: {error}")
    if result.violation is not None:
        violation = result.violation
        return killed(f"violation: {violation.message}",
                      [f"{step.move}: {step.description}" for step in violation.trace],
                      violation.rules)
    findings = search_findings(explored, result)
    if findings:
        first = findings[0]
        steps = () if first.state is None or result.graph is None else (
            result.graph.trace_to(first.state)[1])
        return killed(first.message, [f"{step.move}: {step.description}" for step in steps])
    if result.truncated:
        return Verdict(mutant.name, mutant.kind, mutant.change, None,
                       (f"undecided: the search passed {max_states} states",))
    if explored.workers is not None:
        try:
            interleaved = explore_workers(explored)
        except Exception as error:
            return killed(f"the interleaving raised {type(error).__name__}: {error}")
        if interleaved.finding is not None:
            finding = interleaved.finding
            return killed(f"interleaving ({finding.kind}): {finding.message}",
                          [f"{step.actor} {step.description}" for step in finding.trace],
                          finding.rules)
    return Verdict(mutant.name, mutant.kind, mutant.change, None)


# What the forked judges read (a lifecycle's functions need not pickle).
_JUDGED: tuple[Exploration[Any], list[Mutant], int] | None = None


def _judge_at(index: int) -> Verdict:
    assert _JUDGED is not None
    exploration, found, bound = _JUDGED
    return judge(found[index], exploration, bound)


def _judge_without(task: tuple[int, str]) -> Verdict:
    """The mutant at ``task[0]`` judged again without the rule ``task[1]``."""
    assert _JUDGED is not None
    exploration, found, bound = _JUDGED
    mutant = found[task[0]]
    assert mutant.lifecycle is not None
    fewer = attrs.evolve(mutant, lifecycle=without_rule(mutant.lifecycle, task[1]))
    return judge(fewer, exploration, bound)


def _mapped(function: Callable[[Any], Verdict], tasks: list[Any], jobs: int) -> list[Verdict]:
    if jobs < 2 or len(tasks) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [function(task) for task in tasks]
    with multiprocessing.get_context("fork").Pool(min(jobs, len(tasks))) as pool:
        return pool.map(function, tasks, chunksize=max(1, len(tasks) // (4 * jobs)))


def judge_all(exploration: Exploration[Any], jobs: int | None = None) -> list[Verdict]:
    """Every mutant of the exploration's lifecycle, judged; on ``jobs`` processes
    (default: one per core) where ``fork`` is available.

    A ``drop_invariant`` mutant the check passes is judged once more: every other mutant
    its rule killed is checked again without the rule, and the first that then survives
    kills it (the rule is the one check that catches that mistake).
    """
    global _JUDGED
    baseline = explore(exploration).states
    bound = max(1_000, baseline * GROWTH_BOUND)
    found = list(mutants(exploration.lifecycle))
    _JUDGED = (exploration, found, bound)
    try:
        verdicts = _mapped(_judge_at, list(range(len(found))), jobs or os.cpu_count() or 1)
        second: list[tuple[int, str]] = []
        for verdict in verdicts:
            if verdict.kind != "drop_invariant" or verdict.killed_by is not None:
                continue
            rule = verdict.name.partition(" ")[2]
            second += [(at, rule) for at, other in enumerate(verdicts)
                       if other.kind != "drop_invariant" and rule in other.rules]
        again = _mapped(_judge_without, second, jobs or os.cpu_count() or 1)
    finally:
        _JUDGED = None
    alone: dict[str, str] = {}  # rule -> a mutant only it catches
    for (at, rule), verdict in zip(second, again, strict=True):
        if verdict.killed_by is None:
            alone.setdefault(rule, found[at].name)
    return [_second_order(verdict, verdicts, alone) for verdict in verdicts]


def _second_order(verdict: Verdict, verdicts: list[Verdict], alone: dict[str, str]) -> Verdict:
    """A surviving ``drop_invariant`` mutant is killed when its rule is among those that
    caught another mutant: without the rule, that mutant's check reports otherwise."""
    if verdict.kind != "drop_invariant" or verdict.killed_by is not None:
        return verdict
    rule = verdict.name.partition(" ")[2]
    if rule in alone:
        return attrs.evolve(verdict, killed_by=f"needed: without it, {alone[rule]} survives")
    caught = [other.name for other in verdicts
              if other.kind != "drop_invariant" and rule in other.rules]
    if caught:
        return attrs.evolve(verdict, killed_by=f"it catches {caught[0]} (with other rules) "
                            f"and {len(caught) - 1} more")
    return verdict


@attrs.frozen
class MutantReport:
    """The verdicts, split by what they mean for the command."""

    verdicts: tuple[Verdict, ...]
    equivalent: dict[str, str]  # name -> reason, as declared

    @property
    def survivors(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.killed_by is None and v.name not in self.equivalent]

    @property
    def stale(self) -> list[Verdict]:
        """Declared equivalent, yet killed: the declaration no longer holds."""
        return [v for v in self.verdicts if v.killed_by is not None and v.name in self.equivalent]

    @property
    def unknown(self) -> list[str]:
        """Declared equivalent mutants that no longer exist."""
        names = {v.name for v in self.verdicts}
        return sorted(name for name in self.equivalent if name not in names)

    @property
    def killed(self) -> int:
        return sum(v.killed_by is not None for v in self.verdicts)

    @property
    def excused(self) -> int:
        """Mutants that exist, survive, and are declared equivalent: left out of the score.

        A declaration naming no mutant excuses nothing (it is reported as ``unknown``), so
        the score can never exceed 100%.
        """
        return sum(v.killed_by is None and v.name in self.equivalent for v in self.verdicts)

    @property
    def score(self) -> float:
        judged = len(self.verdicts) - self.excused
        return self.killed / judged if judged else 1.0

    @property
    def ok(self) -> bool:
        return not self.survivors and not self.stale and not self.unknown


def check_mutants(exploration: Exploration[Any], say: Callable[[str], None], outcome: Outcome,
                  show_traces: bool = False, jobs: int | None = None) -> MutantReport:
    """Judge every mutant, print the report, and fail ``outcome`` on any survivor."""
    report = MutantReport(
        tuple(judge_all(exploration, jobs)),
        {declared.name: declared.reason for declared in exploration.equivalent_mutants},
    )
    kinds = Counter(v.kind for v in report.verdicts)
    say(f"  mutants: {len(report.verdicts)} ("
        + ", ".join(f"{kind} {kinds[kind]}" for kind in KINDS if kinds[kind])
        + f"); killed {report.killed}, declared equivalent {report.excused}, "
        f"survived {len(report.survivors)}; mutation score {report.score:.1%}")
    for kind in KINDS:
        mine = [v for v in report.verdicts if v.kind == kind]
        if not mine:
            continue
        say(f"    {kind}: {sum(v.killed_by is not None for v in mine)}/{len(mine)} killed")
        for verdict in mine:
            if verdict.killed_by is None and verdict.name in report.equivalent:
                say(f"      equivalent {verdict.name}: {report.equivalent[verdict.name]}")
            elif verdict.killed_by is None:
                say(f"      SURVIVED {verdict.name}: {verdict.change}"
                    + (f" ({verdict.trace[0]})" if verdict.trace else ""))
            elif show_traces:
                say(f"      killed {verdict.name}: {verdict.change}: {verdict.killed_by}")
                for number, line in enumerate(verdict.trace, 1):
                    say(f"        {number}. {line}")
    for verdict in report.stale:
        say(f"  FAIL {verdict.name} is declared equivalent but the check kills it "
            f"({verdict.killed_by}): remove the declaration")
    for name in report.unknown:
        say(f"  FAIL {name} is declared equivalent but no such mutant exists")
    if report.survivors:
        say(f"  FAIL {len(report.survivors)} mutants survive: the invariants and the "
            "exploration let these mistakes through; strengthen them, or declare a mutant "
            "equivalent (Exploration(equivalent_mutants=...)) with the reason it is harmless")
    if report.survivors:
        outcome.failures.append("mutants survive")
    if report.stale or report.unknown:
        outcome.failures.append("equivalent mutants declared wrongly")
    return report


def figures(report: MutantReport | None) -> dict[str, Any]:
    """The mutants' figures for ``--json``."""
    if report is None:
        return {}
    return {"mutants": {
        "total": len(report.verdicts), "killed": report.killed,
        "equivalent": sorted(report.equivalent), "score": round(report.score, 4),
        "survived": [v.name for v in report.survivors],
        "stale": [v.name for v in report.stale], "unknown": report.unknown,
    }}
