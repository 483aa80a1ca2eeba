"""Explore: every abstract state an exploration reaches, searched here or apart.

The front door of the exhaustive search. The breadth-first search itself is
:func:`lifecycles.machines._exploration.search`; :mod:`lifecycles.machines._partition` runs
it apart in several processes when that gives exactly its result. Choosing between the two
sits above both, here, so that neither imports the other's caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from lifecycles.machines._exploration import Exploration, ExplorationResult, search
from lifecycles.machines._partition import explore_apart

__all__ = ["explore"]

R = TypeVar("R")


def explore(
    exploration: Exploration[R], *, keep_records: bool = False, keep_graph: bool = False,
    progress: Callable[[ExplorationResult], None] | None = None,
    moves_start_as: Exploration[R] | None = None, processes: int = 1,
) -> ExplorationResult:
    """Breadth-first search of every abstract state within the declared bounds.

    With ``keep_records`` the result lists the first concrete record reached in each
    state (to compare abstractions, say); with ``keep_graph`` it keeps every edge, for
    the liveness analysis (:mod:`lifecycles.machines._liveness`). ``progress`` is called
    with the figures so far (states, edges, depth, seconds) once the search has run for
    :data:`~lifecycles.machines._exploration.PROGRESS_AFTER` seconds, then about once a
    second. ``moves_start_as``: the exploration whose table says where each move may
    start (default: this one; a table mutant is tried from where the declared table's
    moves start). With ``processes`` above one the initial records may be searched apart,
    in that many processes, when that gives exactly the serial search's result
    (:mod:`lifecycles.machines._partition`).
    """
    options: dict[str, Any] = dict(keep_records=keep_records, keep_graph=keep_graph,
                                   progress=progress, moves_start_as=moves_start_as)
    # Observers (coverage) watch this process's lifecycle: they would not see a fork's.
    apart = (explore_apart(exploration, processes, **options)
             if processes > 1 and not exploration.lifecycle._observers else None)
    if apart is not None:
        return apart
    return search(exploration, **options)[0]
