"""Liveness on the explored graph (lifecycles.machines._liveness).

Stuck states (no path to a final status) and cycles of non-final states, the latter
accepted only when declared beside the table. Hand-built graphs pin the analysis; the
tests' leased tasks (tests/support/tasks.py) must have no stuck state and only their
declared cycle, and taking the declaration away must turn its cycles into findings (the
shipped lifecycles are held to the same in tests/monitor and tests/outbox).
"""

from __future__ import annotations

import attrs
from support.tasks import TASKS
from support.tasks_inputs import EXPLORATION as TASKS_EXPLORATION

from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import AcceptedCycle, Graph
from lifecycles.machines._liveness import liveness


def graph(final: list[bool], edges: dict[int, list[tuple[int, str, bool]]]) -> Graph:
    return Graph(final=final, edges=[
        [(target, frozenset({trigger}), changed) for target, trigger, changed in edges.get(i, [])]
        for i in range(len(final))
    ])


def test_a_state_without_a_way_to_a_final_status_is_stuck() -> None:
    # 0 -> 1 -> 3 (final); 0 -> 2, and 2 only loops on itself without changing.
    found = liveness(graph([False, False, False, True],
                           {0: [(1, "a", True), (2, "b", True)], 1: [(3, "c", True)],
                            2: [(2, "d", False)]}))
    assert found.stuck == (2,)
    assert found.cycles == ()  # a step that changes nothing is no cycle
    assert not found.ok


def test_a_cycle_of_non_final_states_is_a_finding_unless_declared() -> None:
    # 0 -> 1 -> 2 -> 1 (a cycle of b and c), 2 -> 3 final.
    edges = {0: [(1, "a", True)], 1: [(2, "b", True)], 2: [(1, "c", True), (3, "d", True)]}
    found = liveness(graph([False, False, False, True], edges))
    assert found.stuck == ()
    (cycle,) = found.cycles
    assert (cycle.entry, cycle.size, cycle.triggers) == (1, 2, frozenset({"b", "c"}))
    assert found.findings == (cycle,) and not found.ok
    declared = AcceptedCycle({"b", "c", "x"}, "b and c may go on")
    accepted = liveness(graph([False, False, False, True], edges), [declared])
    assert accepted.ok and accepted.cycles[0].accepted == declared
    narrower = liveness(graph([False, False, False, True], edges), [AcceptedCycle({"b"}, "")])
    assert not narrower.ok


def test_a_self_loop_that_changes_the_record_is_a_cycle() -> None:
    found = liveness(graph([False, True], {0: [(0, "retry", True), (1, "done", True)]}))
    assert [(c.entry, c.size, c.triggers) for c in found.cycles] == [
        (0, 1, frozenset({"retry"}))]


def test_deep_graphs_do_not_hit_the_recursion_limit() -> None:
    length = 20_000
    edges = {i: [(i + 1, "next", True)] for i in range(length - 1)}
    edges[length - 1] = [(0, "again", True)]
    found = liveness(graph([False] * length, edges))
    assert len(found.stuck) == length
    assert [cycle.size for cycle in found.cycles] == [length]


def test_the_tasks_keep_a_way_out_and_declare_their_cycle() -> None:
    result = explore(TASKS_EXPLORATION, keep_graph=True)
    assert result.graph is not None and not result.truncated
    found = liveness(result.graph, TASKS_EXPLORATION.accepted_cycles)
    assert found.ok
    assert found.cycles  # a running task renews its lease for as long as its handler runs
    undeclared = liveness(result.graph, ())
    assert undeclared.findings == tuple(attrs.evolve(c, accepted=None) for c in found.cycles)


def test_every_edge_of_the_graph_is_kept() -> None:
    result = explore(TASKS_EXPLORATION, keep_graph=True)
    assert result.graph is not None
    assert sum(len(edges) for edges in result.graph.edges) == result.edges
    assert len(result.graph.final) == result.states
    initial, steps = result.graph.trace_to(result.states - 1)
    assert initial in range(len(TASKS_EXPLORATION.initial())) and steps  # steps away


def test_the_auditor_page_shows_the_bounds_and_the_accepted_cycles() -> None:
    from lifecycles._diagrams_page import page

    text = page(TASKS, "", svg_name="m.svg", dot_name="m.dot", mermaid_name="m.mmd")
    assert f"within these bounds: {TASKS_EXPLORATION.bounds}" in text
    counted = explore(TASKS_EXPLORATION)
    assert (f"Explored: {counted.states:,} states, {counted.edges:,} edges "
            f"({counted.refusals:,} refused), depth {counted.depth}, complete.") in text
    assert "## Cycles accepted without a final status" in text
    for cycle in TASKS_EXPLORATION.accepted_cycles:
        triggers = ", ".join(f"`{t}`" for t in sorted(cycle.triggers))
        assert f"| {triggers} | {cycle.reason} |" in text
