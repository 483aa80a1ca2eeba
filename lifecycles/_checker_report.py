"""What ``lifecycles check`` reports: what it checks, what it found, how it exits.

A module of its own so that the checker's parts (:mod:`lifecycles._checker_workers`,
:mod:`lifecycles._checker_mutants`) fill in one :class:`Outcome` without importing the
command that runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._exploration import Exploration, ExplorationResult

if TYPE_CHECKING:
    from lifecycles._checker_mutants import MutantReport
    from lifecycles.machines._interleaving import InterleavingResult

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_UNAVAILABLE", "Outcome", "Target", "check_cut"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNAVAILABLE = 2


@attrs.frozen
class Target:
    """One thing to check: a lifecycle, and the exploration to drive it with."""

    lifecycle: Lifecycle[Any, Any]
    exploration: Exploration[Any] | None
    spec: str | None


@attrs.define
class Outcome:
    """What checking one lifecycle found."""

    name: str
    failures: list[str] = attrs.field(factory=list)
    result: ExplorationResult | None = None
    replay_path: Path | None = None
    interleaving: InterleavingResult | None = None
    mutants: MutantReport | None = None
    #: Each failure as ``--json`` shows it: what, its trace's steps, its replay file.
    reports: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_cut(search: str, cut_at: str | None, states: int, exploration: Exploration[Any],
              outcome: Outcome, say: Callable[[str], None]) -> None:
    """A search cut at a bound proves nothing past it: ``search_cut`` (exit 1), unless the
    exploration accepts the cut with a reason (``Exploration(incomplete_ok=...)``)."""
    bound = cut_at or "its bounds"
    if exploration.incomplete_ok is not None:
        say(f"  {search} cut at {bound} after {states} states, accepted: "
            f"{exploration.incomplete_ok}")
        return
    outcome.failures.append(f"{search}_cut")
    outcome.reports.append({"failure": f"{search}_cut", "message": f"cut at {bound}",
                            "trace": [], "replay": None})
    say(f"  FAIL {search}_cut: the {search} stopped at {bound} after {states} states, so "
        "nothing past it was checked (liveness, the states not reached, what they would "
        "break). Raise the bound, narrow the inputs or make the abstraction coarser, or "
        "accept the cut with a reason: Exploration(..., incomplete_ok=\"why\") or "
        "`lifecycles check --incomplete-ok REASON`.")
