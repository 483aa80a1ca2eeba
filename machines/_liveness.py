"""Liveness on the explored graph: every state keeps a way to a final status, and every
cycle that avoids one is declared.

Two findings, each with the shortest trace to the state concerned:

* **stuck states**: reachable states from which no path of the explored graph leads to
  a final status (a status that traps records, a lease never rescued);
* **cycles**: strongly connected sets of non-final states, among the steps that change
  the record (a step that leaves the record as it was, like registering the same
  notification again, is no progress and makes no cycle). A cycle is accepted when
  every trigger whose rows fire inside it is among the triggers of an
  :class:`~lifecycles.machines._exploration.AcceptedCycle` declared beside the table,
  with its reason (the monitor polls for as long as the receiver is unfinished);
  any other cycle is a finding.

Cycles are reported as the search found them, without a fairness filter: a cycle that
only a clock standing still could keep going is reported too, and must be declared or
fixed. That is stricter than model checkers that assume fair time, never looser.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs

from lifecycles.machines._exploration import AcceptedCycle, Graph

__all__ = ["Cycle", "Liveness", "liveness"]


@attrs.frozen
class Cycle:
    """A strongly connected set of non-final states: the first state found in it, how
    many states it holds, the triggers firing inside it, and the declaration accepting
    it (``None``: a finding)."""

    entry: int
    size: int
    triggers: frozenset[str]
    accepted: AcceptedCycle | None


@attrs.frozen
class Liveness:
    """What the analysis found: stuck states (first found first) and every cycle."""

    stuck: tuple[int, ...]
    cycles: tuple[Cycle, ...]

    @property
    def findings(self) -> tuple[Cycle, ...]:
        return tuple(cycle for cycle in self.cycles if cycle.accepted is None)

    @property
    def ok(self) -> bool:
        return not self.stuck and not self.findings


def _can_finish(graph: Graph) -> list[bool]:
    """For each state, whether some path leads from it to a final status."""
    incoming: list[list[int]] = [[] for _ in graph.final]
    for source, edges in enumerate(graph.edges):
        for target, _, _ in edges:
            incoming[target].append(source)
    reached = list(graph.final)
    queue = deque(index for index, final in enumerate(graph.final) if final)
    while queue:
        for source in incoming[queue.popleft()]:
            if not reached[source]:
                reached[source] = True
                queue.append(source)
    return reached


def _components(graph: Graph) -> list[list[int]]:
    """Tarjan's strongly connected components of the non-final states, over the steps
    that change the record; iterative, so deep graphs do not hit the recursion limit."""
    count = len(graph.final)
    successors = [
        [target for target, _, changed in graph.edges[state]
         if changed and not graph.final[target]]
        if not graph.final[state] else []
        for state in range(count)
    ]
    order = [-1] * count
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in range(count):
        if order[root] != -1 or graph.final[root]:
            continue
        work = [(root, 0)]
        while work:
            state, next_edge = work.pop()
            if next_edge == 0:
                order[state] = low[state] = counter
                counter += 1
                stack.append(state)
                on_stack[state] = True
            if next_edge < len(successors[state]):
                work.append((state, next_edge + 1))
                target = successors[state][next_edge]
                if order[target] == -1:
                    work.append((target, 0))
                elif on_stack[target]:
                    low[state] = min(low[state], order[target])
                continue
            if low[state] == order[state]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component.append(member)
                    if member == state:
                        break
                found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[state])
    return found


def liveness(graph: Graph, accepted: Sequence[AcceptedCycle] = ()) -> Liveness:
    """The stuck states and the cycles of ``graph``, each cycle matched with ``accepted``."""
    can_finish = _can_finish(graph)
    stuck = tuple(state for state, ok in enumerate(can_finish) if not ok)
    cycles = []
    for component in _components(graph):
        members = set(component)
        inside = [
            (triggers, changed) for state in component
            for target, triggers, changed in graph.edges[state] if target in members
        ]
        if not any(changed for _, changed in inside):
            continue  # one state, no step that changes it: no cycle
        triggers = frozenset().union(*(t for t, changed in inside if changed))
        declared = next((a for a in accepted if triggers <= a.triggers), None)
        cycles.append(Cycle(component[0], len(component), triggers, declared))
    return Liveness(stuck, tuple(sorted(cycles, key=lambda cycle: cycle.entry)))
