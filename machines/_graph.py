"""The table as a graph: the one place that walks statuses along rows.

Definition checks (is every status reachable, can every status finish), auditor pages
(the shortest way to each final status, where it can be reached from) and pictures
(the order work flows in, one edge per (source, dest) pair) all read the table through
these functions, so they cannot disagree on what the table allows.

Only the table is walked here. The checker's state-space search
(:func:`lifecycles.machines._exhaustive.explore`) walks records, not statuses, and
keeps its own queue, but it reads its traces back with :func:`trace_back` like
:func:`shortest_paths` does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from lifecycles.machines._declaration import Row

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle

    AnyLifecycle = Lifecycle[Any, Any]

K = TypeVar("K")
E = TypeVar("E")


def trace_back(node: K, parent: Callable[[K], tuple[K, E] | None]) -> tuple[K, list[E]]:
    """Follow ``parent`` links from ``node`` to a root: the root and the edges from it,
    in walking order. ``parent(node)`` is ``(parent node, edge into node)`` or ``None``."""
    edges: list[E] = []
    link = parent(node)
    while link is not None:
        node, edge = link
        edges.append(edge)
        link = parent(node)
    edges.reverse()
    return node, edges


def shortest_paths(lifecycle: AnyLifecycle) -> dict[str, tuple[Row, ...]]:
    """For each status reachable from the initial one, the shortest run of rows to it
    (ties broken by table order), in the order the walk reaches them."""
    start = lifecycle.initial.value
    parents: dict[str, tuple[str, Row] | None] = {start: None}
    queue = deque([start])
    while queue:
        status = queue.popleft()
        for row in lifecycle.rows:
            if row.source == status and row.dest not in parents:
                parents[row.dest] = (status, row)
                queue.append(row.dest)
    return {status: tuple(trace_back(status, parents.__getitem__)[1]) for status in parents}


def reachable_statuses(lifecycle: AnyLifecycle) -> set[str]:
    """Statuses reachable from the initial status through the table's rows."""
    return set(shortest_paths(lifecycle))


def distances_from_initial(lifecycle: AnyLifecycle) -> dict[str, int]:
    """How many transitions each status is from the initial status (unreachable: absent)."""
    return {status: len(path) for status, path in shortest_paths(lifecycle).items()}


def statuses_reaching(lifecycle: AnyLifecycle, targets: Iterable[str]) -> set[str]:
    """Statuses from which some row sequence leads to one of ``targets`` (targets excluded
    unless they reach each other)."""
    found: set[str] = set()
    frontier = list(targets)
    while frontier:
        status = frontier.pop()
        for row in lifecycle.rows:
            if row.dest == status and row.source not in found:
                found.add(row.source)
                frontier.append(row.source)
    return found


def statuses_in_flow_order(lifecycle: AnyLifecycle) -> list[str]:
    """Statuses in the order work reaches them: breadth-first from the initial status,
    ties in declaration order; final statuses last; unreachable ones after that."""
    declared = [status.value for status in lifecycle.statuses]
    depth = distances_from_initial(lifecycle)
    finals = {status.value for status in lifecycle.final}

    def order(name: str) -> tuple[int, int, int]:
        return (name in finals, depth.get(name, len(declared)), declared.index(name))

    return sorted(declared, key=order)


def rows_in_machine_order(lifecycle: AnyLifecycle) -> list[Row]:
    """The rows in the order a ``transitions`` machine lists them: trigger by trigger
    (table order), each trigger's rows by source (first appearance), then table order."""
    sources_of: dict[str, list[str]] = {}
    for row in lifecycle.rows:
        sources = sources_of.setdefault(row.trigger, [])
        if row.source not in sources:
            sources.append(row.source)
    triggers = list(sources_of)
    return sorted(
        lifecycle.rows,
        key=lambda row: (triggers.index(row.trigger), sources_of[row.trigger].index(row.source)),
    )


def edges_by_source(lifecycle: AnyLifecycle) -> list[tuple[str, str, list[str]]]:
    """(source, dest, labels) per pair, grouped by source, from
    :func:`rows_in_machine_order`: the order the ``transitions`` Mermaid engine draws
    edges in (the committed Mermaid diagrams were first drawn by it and keep it)."""
    by_source: dict[str, dict[str, list[str]]] = {}
    for row in rows_in_machine_order(lifecycle):
        by_source.setdefault(row.source, {}).setdefault(row.dest, []).append(row.label)
    return [
        (source, dest, labels) for source, dests in by_source.items()
        for dest, labels in dests.items()
    ]
