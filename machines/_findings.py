"""What a search that broke no rule still found wrong: the checks `lifecycles check` makes
on the explored graph, written once for the check itself and for the table mutants
(:mod:`lifecycles._checker_mutants`), in the order they are reported.

* a row that never fired, a status never reached (the inputs are too narrow, or the
  table has dead parts);
* a move of the exploration whose triggers no row of the table has (it can never run);
* states that can never reach a final status, and cycles without one that are not
  declared (:mod:`lifecycles.machines._liveness`), checked only on a complete search.
"""

from __future__ import annotations

from typing import Any

import attrs

from lifecycles.machines._exploration import Exploration, ExplorationResult
from lifecycles.machines._liveness import Liveness, liveness

__all__ = ["SearchFinding", "search_findings"]


@attrs.frozen
class SearchFinding:
    """One thing wrong: ``failure`` names it in the outcome, ``message`` says it, and
    ``state`` (when there is one) is the explored state its shortest trace leads to."""

    failure: str
    message: str
    state: int | None = None


def search_findings(exploration: Exploration[Any], result: ExplorationResult,
                    found: Liveness | None = None) -> list[SearchFinding]:
    """Everything wrong with a search ``result`` that broke no rule. ``found``: its
    liveness when the caller has it already (default: computed here, on a complete
    search)."""
    lifecycle = exploration.lifecycle
    findings = []
    coverage = result.coverage
    if coverage is not None and coverage.unfired_rows:
        findings.append(SearchFinding(
            "rows never fired",
            f"rows never fired: {[row.label for row in coverage.unfired_rows]}"))
    never = [s.value for s in lifecycle.statuses if s.value not in result.statuses]
    if never:
        findings.append(SearchFinding("statuses never reached",
                                      f"statuses never reached: {never}"))
    triggers = set(lifecycle.triggers)
    for move in exploration.moves:
        if not triggers & set(move.triggers):
            findings.append(SearchFinding(
                "a move the table cannot take",
                f"the move {move.name} fires {list(move.triggers)}, which no row of the "
                "table has"))
    graph = result.graph
    if graph is None or result.truncated:
        return findings  # a search cut short proves nothing about liveness
    found = found or liveness(graph, exploration.accepted_cycles)
    if found.stuck:
        findings.append(SearchFinding(
            "states that cannot reach a final status",
            f"{len(found.stuck)} reachable states can never reach a final status (a status "
            "that traps records, or a lease never rescued); the first found:",
            found.stuck[0]))
    # One finding per kind of cycle (the triggers it is made of): the same cycle reached
    # after other steps is the same mistake, shown once, with the shortest trace to it.
    kinds: dict[frozenset[str], list[Any]] = {}
    for cycle in found.findings:
        kinds.setdefault(frozenset(cycle.triggers), []).append(cycle)
    for made_of, cycles in kinds.items():
        first = min(cycles, key=lambda cycle: cycle.entry)  # states are numbered breadth-first
        also = (f" ({len(cycles)} such cycles, {sum(cycle.size for cycle in cycles)} states in "
                "all, reached by other paths)" if len(cycles) > 1 else "")
        findings.append(SearchFinding(
            "a cycle without a final status",
            f"a cycle of {first.size} states never reaches a final status, made of "
            f"{', '.join(sorted(made_of))}{also}; declare it beside the table "
            "(Exploration(accepted_cycles=...)) with the reason it is intended, or fix it:",
            first.entry))
    return findings
