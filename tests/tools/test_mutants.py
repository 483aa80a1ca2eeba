"""`lifecycles check --mutants` (issue 15): table mutants of a lifecycle, each checked as
the lifecycle is; the shipped lifecycles kill every one not declared equivalent, and a
lifecycle whose invariants are weak is told which mistakes would go unnoticed."""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles._checker import run_check
from lifecycles._checker_mutants import judge, judge_all
from lifecycles._checker_report import EXIT_FAILED, EXIT_OK
from lifecycles.invariants._core import InvariantSet
from lifecycles.machines._mutants import KINDS, EquivalentMutant, mutants, redeclared
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # examples/ imports as from a clone's root


def check(*names: str, modules: tuple[str, ...] = (), traces: bool = False
          ) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    mode = "traces" if traces else "report"
    code = run_check(names, modules, as_json=True, out=out, err=err, mutants=mode)
    human = io.StringIO()
    run_check(names, modules, out=human, err=err, mutants=mode)
    return code, json.loads(out.getvalue()), human.getvalue()


def test_every_kind_of_mutant_is_made_with_a_stable_name() -> None:
    made = list(mutants(MONITOR))
    assert {m.kind for m in made} == set(KINDS)
    names = [m.name for m in made]
    assert len(names) == len(set(names))
    assert names == [m.name for m in mutants(MONITOR)]
    assert "drop_guard 2 lease_has_expired" in names
    assert "flip_guard 4 lease_is_live" in names
    assert "redirect 2 failed" in names and "delete_row 6" in names
    assert {"exit_final failed", "exit_final succeeded"} <= set(names)
    assert "drop_invariant lease_ends_by_its_holder_or_by_expiry" in names


def test_a_dropped_guard_is_the_only_change() -> None:
    mutant = next(m for m in mutants(MONITOR) if m.name == "drop_guard 2 lease_has_expired")
    assert mutant.lifecycle is not None
    changed = [(a, b) for a, b in zip(MONITOR.table, mutant.lifecycle.table, strict=True)
               if dict(a) != dict(b)]
    assert changed == [(MONITOR.table[1], {**MONITOR.table[1],
                                           "conditions": ["another_failure_allowed"]})]


@pytest.mark.parametrize("exploration", [MONITOR_EXPLORATION, OUTBOX_EXPLORATION],
                         ids=["monitor", "outbox"])
def test_the_shipped_lifecycles_kill_every_mutant_not_declared_equivalent(
    exploration: Any
) -> None:
    verdicts = judge_all(exploration, jobs=1)
    declared = {e.name for e in exploration.equivalent_mutants}
    survivors = {v.name for v in verdicts if v.killed_by is None}
    assert survivors == declared  # every declaration is still needed, and enough
    assert all(e.reason for e in exploration.equivalent_mutants)


def test_the_live_lease_survivor_of_the_study_is_killed_with_a_trace() -> None:
    """The mutation study's most serious survivor: any worker could expire a live lease."""
    mutant = next(m for m in mutants(MONITOR) if m.name == "drop_guard 3 lease_has_expired")
    verdict = judge(mutant, MONITOR_EXPLORATION, 10_000)
    assert verdict.killed_by is not None
    assert "lease_ends_by_its_holder_or_by_expiry" in verdict.killed_by
    assert verdict.trace and verdict.trace[0].startswith("claim:")


@pytest.mark.parametrize(("name", "rule"), [
    ("drop_guard 1 poll_is_due", "claimed_only_when_due"),
    ("drop_guard 4 lease_is_live", "lease_ends_by_its_holder_or_by_expiry"),
    ("drop_guard 4 lease_is_held", "lease_ends_by_its_holder_or_by_expiry"),
    ("redirect 2 failed", "lost_lease_fails_only_the_last_failure"),
    ("redirect 7 failed", "retryable_failure_retried"),
    ("drop_guard 9 same_registration", "registering_again_changes_nothing"),
    ("delete_row 6", "live_holder_is_never_refused"),
    ("delete_row 9", "live_holder_is_never_refused"),
])
def test_each_strengthening_kills_the_mutants_it_was_made_for(name: str, rule: str) -> None:
    mutant = next(m for m in mutants(MONITOR) if m.name == name)
    verdict = judge(mutant, MONITOR_EXPLORATION, 10_000)
    assert verdict.killed_by is not None and rule in verdict.killed_by, verdict


def test_a_rule_that_alone_catches_a_mistake_is_needed() -> None:
    verdicts = {v.name: v for v in judge_all(MONITOR_EXPLORATION, jobs=1)}
    needed = verdicts["drop_invariant lease_ends_by_its_holder_or_by_expiry"]
    assert needed.killed_by is not None and needed.killed_by.startswith("needed: without it")


def test_a_weak_lifecycle_is_told_which_mistakes_go_unnoticed() -> None:
    """Without its lease step invariant, the monitor lets a live lease be expired."""
    declared = MONITOR.invariants
    weaker = InvariantSet(declared.code, declared.invariants, steps=[
        s for s in declared.steps if s.name != "lease_ends_by_its_holder_or_by_expiry"])
    lifecycle = redeclared(MONITOR, invariants=weaker)
    verdicts = judge_all(attrs.evolve(MONITOR_EXPLORATION, lifecycle=lifecycle), jobs=1)
    survivors = {v.name for v in verdicts if v.killed_by is None}
    assert {"drop_guard 2 lease_has_expired", "drop_guard 3 lease_has_expired",
            "drop_guard 5 lease_is_live"} <= survivors


def test_the_command_reports_the_score_and_passes_on_the_shipped_lifecycles() -> None:
    code, outcome, human = check("monitor", "outbox")
    assert code == EXIT_OK, human
    for entry in outcome["lifecycles"]:
        figures = entry["mutants"]
        assert figures["survived"] == [] and figures["score"] == 1.0
        assert figures["killed"] + len(figures["equivalent"]) == figures["total"]
    assert "mutation score 100.0%" in human
    kinds = Counter(line.split(":")[0].strip() for line in human.splitlines()
                    if line.startswith("    ") and "killed" in line and "/" in line)
    assert set(kinds) >= set(KINDS)


def test_survivors_fail_the_command_with_their_names() -> None:
    code, outcome, human = check(modules=("examples/review/lifecycle.py",))
    assert code == EXIT_FAILED
    (review,) = outcome["lifecycles"]
    assert "mutants survive" in review["failures"]
    assert "drop_guard 2 lease_is_held" in review["mutants"]["survived"]
    assert "SURVIVED drop_guard 2 lease_is_held: row 2 (approve from in_review)" in human


def test_a_stale_or_unknown_equivalence_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycles._checker_mutants import check_mutants
    from lifecycles._checker_report import Outcome

    stale = attrs.evolve(OUTBOX_EXPLORATION, equivalent_mutants=(
        *OUTBOX_EXPLORATION.equivalent_mutants,
        EquivalentMutant("delete_row 4", "claimed harmless, but it is not"),
        EquivalentMutant("drop_guard 99 nothing", "no such mutant"),
    ))
    said: list[str] = []
    outcome = Outcome("outbox")
    report = check_mutants(stale, said.append, outcome, jobs=1)
    assert [v.name for v in report.stale] == ["delete_row 4"]
    assert report.unknown == ["drop_guard 99 nothing"]
    # Nothing survives: the failure says what is wrong, not "mutants survive".
    assert outcome.failures == ["equivalent mutants declared wrongly"]
    assert any("delete_row 4 is declared equivalent but the check kills it" in s for s in said)
    # A declaration that names no mutant excuses nothing: the score stays a fraction.
    assert report.excused == len(OUTBOX_EXPLORATION.equivalent_mutants)
    assert report.score == report.killed / (len(report.verdicts) - report.excused) <= 1.0
    assert not any("mutation score 10" in s and "100.0%" not in s for s in said)


def test_traces_say_how_each_mutant_was_killed() -> None:
    code, _, human = check("outbox", traces=True)
    assert code == EXIT_OK
    assert "killed redirect 4 pending: row 4 (deliver from pending) sent to pending" in human
    assert "        1. " in human  # a trace step under a killed mutant
