"""Which rows of a table fired and which guards were seen true and false: the checker's
coverage, and the generated tests' (:class:`Coverage`, an engine observer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row


@attrs.define
class Coverage:
    """Which rows fired (and how often) and which guards were seen true and false.

    An observer for :meth:`Lifecycle.observing`. On every attempt it evaluates every
    guard of every row the trigger could take from the record's status, so a guard's
    truth table is recorded even when the engine short-circuits; it hands the outcomes to
    the engine, which chooses the row from them instead of running the guards again.
    """

    lifecycle: Lifecycle[Any, Any]
    row_fires: dict[Row, int] = attrs.field(factory=dict)
    guard_outcomes: dict[str, dict[bool, int]] = attrs.field(factory=dict)
    attempts: int = 0
    # Per (trigger, status): each guard of each candidate row, in table order (as
    # Lifecycle.guard_plan lists them), as its counts and its test; found once.
    _plans: dict[tuple[str, str], tuple[tuple[dict[bool, int], Callable[[Any, Any], object]],
                                        ...]] = attrs.field(factory=dict, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        for row in self.lifecycle.rows:
            self.row_fires.setdefault(row, 0)
        for name in self.lifecycle.guards:
            self.guard_outcomes.setdefault(name, {True: 0, False: 0})

    def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                  inputs: Any) -> int | None:
        if lifecycle is not self.lifecycle:
            return None
        self.attempts += 1
        key = (trigger, str(getattr(record, lifecycle.status_field)))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = tuple(
                (self.guard_outcomes.setdefault(name, {True: 0, False: 0}), test)
                for name, test, _ in lifecycle.guard_plan(*key).checks)
        outcomes = 1  # the outcomes as bits after a leading 1 (GuardPlan): an int, no list
        for counts, test in plan:
            outcome = bool(test(record, inputs))
            counts[outcome] += 1
            outcomes += outcomes + outcome
        return outcomes

    def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any, after: Any) -> None:
        if lifecycle is self.lifecycle:
            self.row_fires[row] = self.row_fires.get(row, 0) + 1

    def merge(self, other: Coverage) -> None:
        self.add(other.row_fires, other.attempts, other.guard_outcomes)

    def add(self, row_fires: Mapping[Row, int], attempts: int,
            guard_outcomes: Mapping[str, Mapping[bool, int]]) -> None:
        """Add counts found elsewhere (another coverage, or a search in another process)."""
        for row, count in row_fires.items():
            self.row_fires[row] = self.row_fires.get(row, 0) + count
        for name, outcomes in guard_outcomes.items():
            mine = self.guard_outcomes.setdefault(name, {True: 0, False: 0})
            for outcome, count in outcomes.items():
                mine[outcome] += count
        self.attempts += attempts

    @property
    def unfired_rows(self) -> list[Row]:
        return [row for row in self.lifecycle.rows if self.row_fires.get(row, 0) == 0]

    @property
    def one_sided_guards(self) -> list[str]:
        """Guards seen only true or only false (or never evaluated)."""
        return [
            name for name, seen in self.guard_outcomes.items() if not (seen[True] and seen[False])
        ]

    def report(self) -> str:
        """A small table: one line per row (fires), then the guards' true/false counts."""
        lines = [f"transition coverage of {self.lifecycle.name} ({self.attempts} attempts)"]
        for row in self.lifecycle.rows:
            count = self.row_fires.get(row, 0)
            mark = "" if count else "   <-- never fired"
            lines.append(f"  {count:>8}  {row.source} -> {row.dest}: {row.label}{mark}")
        lines.append("  guards (true / false):")
        for name, seen in self.guard_outcomes.items():
            mark = "" if seen[True] and seen[False] else "   <-- one-sided"
            lines.append(f"  {seen[True]:>8} / {seen[False]:<8} {name}{mark}")
        return "\n".join(lines)
