"""The checker's search explores exactly what it explored before it was made faster.

The figures below were computed by the search as it stood before the speed work of
issue 13 (item 5): the states, edges, refusals and depth; the coverage (fires per row,
each guard's true/false counts, attempts); a digest of every reached abstract state in
the order found and of every edge (target, triggers fired, whether the record changed);
and the shortest trace of each planted violation. Any change to how the search walks
(deduplication, dispatch, caching) must leave all of them as they are. A change to the
exploration inputs or a table changes them on purpose: re-pin them with
``python -m tests.engine.test_exploration_pinned > tests/engine/exploration_pinned.json``
and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles._loading import load_exploration
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration
from lifecycles.machines._partition import explore_apart
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION
from lifecycles.machines.monitor.inputs import monitor_exploration
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION

ROOT = Path(__file__).resolve().parents[2]


def _explorations() -> dict[str, Exploration[Any]]:
    return {
        "monitor": MONITOR_EXPLORATION,
        "monitor 1..8": monitor_exploration(max_failures=(1, 8)),
        "outbox": OUTBOX_EXPLORATION,
        "monitor defect": load_exploration(
            f"{ROOT / 'examples/monitor_defect.py'}:DEFECT_PUT_BACK"),
        "reused token": load_exploration(
            f"{ROOT / 'examples/defects/reused_token.py'}:EXPLORATION"),
        "trapped status": load_exploration(
            f"{ROOT / 'examples/defects/trapped_status.py'}:EXPLORATION"),
    }


def summary(exploration: Exploration[Any], processes: int = 1) -> dict[str, Any]:
    """What one search explored, in a form that compares exactly (and prints as JSON)."""
    result = explore(exploration, keep_records=True, keep_graph=True, processes=processes)
    assert result.coverage is not None and result.graph is not None
    states = hashlib.sha256()
    for record in result.records:
        states.update(repr(exploration.abstraction(record)).encode() + b"\n")
    edges = hashlib.sha256()
    for index, out in enumerate(result.graph.edges):
        for target, triggers, changed in out:
            edges.update(f"{index} {target} {sorted(triggers)} {changed}\n".encode())
    violation = result.violation
    return {
        "states": result.states, "edges": result.edges, "refusals": result.refusals,
        "depth": result.depth, "truncated": result.truncated,
        "statuses": sorted(result.statuses),
        "attempts": result.coverage.attempts,
        "row_fires": [result.coverage.row_fires[row] for row in exploration.lifecycle.rows],
        "guards": {name: [seen[True], seen[False]]
                   for name, seen in sorted(result.coverage.guard_outcomes.items())},
        "state_digest": states.hexdigest()[:16],
        "edge_digest": edges.hexdigest()[:16],
        "violation": None if violation is None else {
            "kind": violation.kind, "rules": list(violation.rules),
            "initial": violation.initial,
            "trace": [[step.move, step.choice, step.description] for step in violation.trace],
        },
    }


# Computed by the search before the change (commit aa59bd0), unchanged since.
PINNED: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "exploration_pinned.json").read_text())


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_search_explores_exactly_what_it_did(name: str) -> None:
    assert summary(_explorations()[name]) == PINNED[name]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_search_split_by_initial_record_explores_exactly_the_same(name: str) -> None:
    """Searched apart in two processes (or serially, when the parts would meet or a
    violation is found: lifecycles.machines._partition), the result is the pinned one."""
    assert summary(_explorations()[name], processes=2) == PINNED[name]


@pytest.mark.parametrize("name", ["monitor", "monitor 1..8", "outbox"])
def test_a_split_search_gives_every_state_the_serial_trace(name: str) -> None:
    exploration = _explorations()[name]
    apart = explore_apart(exploration, 2, keep_records=True, keep_graph=True, progress=None,
                          moves_start_as=None)
    assert apart is not None, "the parts met: the split was given up"
    serial = explore(exploration, keep_records=True, keep_graph=True)
    assert apart.graph is not None and serial.graph is not None
    assert apart.records == serial.records
    assert apart.graph.edges == serial.graph.edges and apart.graph.final == serial.graph.final
    assert [apart.graph.trace_to(index) for index in range(apart.states)] == [
        serial.graph.trace_to(index) for index in range(serial.states)]
    assert (apart.states, apart.edges, apart.refusals, apart.depth, apart.statuses) == (
        serial.states, serial.edges, serial.refusals, serial.depth, serial.statuses)


def test_parts_that_meet_are_searched_serially() -> None:
    """Two initial records whose states meet (the same record twice): no split."""
    twice = attrs.evolve(MONITOR_EXPLORATION, initial=lambda: [
        *MONITOR_EXPLORATION.initial(), MONITOR_EXPLORATION.initial()[0]])
    assert explore_apart(twice, 2, keep_records=False, keep_graph=False, progress=None,
                         moves_start_as=None) is None
    assert explore(twice, processes=2).states == explore(MONITOR_EXPLORATION).states


@attrs.frozen
class _SameFingerprint:
    """A key whose hash every other key shares: every state collides with the first."""

    key: Hashable

    def __hash__(self) -> int:
        return 0


def test_states_whose_fingerprints_collide_are_told_apart_by_their_keys() -> None:
    exact = explore(MONITOR_EXPLORATION, keep_records=True, keep_graph=True)
    colliding = explore(
        attrs.evolve(MONITOR_EXPLORATION,
                     abstraction=lambda r: _SameFingerprint(MONITOR_EXPLORATION.abstraction(r))),
        keep_records=True, keep_graph=True)
    assert exact.graph is not None and colliding.graph is not None
    assert (colliding.states, colliding.edges, colliding.refusals) == (
        exact.states, exact.edges, exact.refusals)
    assert colliding.records == exact.records
    assert colliding.graph.edges == exact.graph.edges


if __name__ == "__main__":
    print(json.dumps({name: summary(e) for name, e in _explorations().items()}, indent=1))
