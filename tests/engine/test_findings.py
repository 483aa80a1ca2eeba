"""search_findings: what `lifecycles check` and its mutants report about a search that
broke no rule, written once (lifecycles.machines._findings)."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs

from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import trigger_move
from lifecycles.machines._findings import search_findings

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.defects.late_completion import Inputs, exploration, leased_jobs


def test_a_sound_search_has_no_findings() -> None:
    declared = exploration(leased_jobs(guarded=True))
    assert search_findings(declared, explore(declared, keep_graph=True)) == []


def test_a_move_no_row_can_take_is_a_finding() -> None:
    declared = exploration(leased_jobs(guarded=True))
    stray = trigger_move("archive", lambda r: [Inputs(now=0.0)])
    widened = attrs.evolve(declared, moves=(*declared.moves, stray))
    (finding,) = search_findings(widened, explore(widened, keep_graph=True))
    assert finding.failure == "a move the table cannot take"
    assert "the move archive fires ['archive']" in finding.message and finding.state is None


def test_rows_and_statuses_never_reached_come_first_and_liveness_needs_a_whole_search() -> None:
    declared = exploration(leased_jobs(guarded=True))
    no_finish = attrs.evolve(declared, moves=tuple(
        move for move in declared.moves if move.name not in ("finish", "fail", "expire")))
    result = explore(no_finish, keep_graph=True)
    failures = [finding.failure for finding in search_findings(no_finish, result)]
    assert failures[:2] == ["rows never fired", "statuses never reached"]
    assert "states that cannot reach a final status" in failures
    stuck = next(f for f in search_findings(no_finish, result) if f.state is not None)
    assert stuck.state is not None and 0 <= stuck.state < result.states
    cut = attrs.evolve(result, truncated=True)
    assert "states that cannot reach a final status" not in [
        finding.failure for finding in search_findings(no_finish, cut)]
