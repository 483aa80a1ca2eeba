"""The monitor with interleaved workers: it keeps every property of the lease protocol,
and a completion without the holder's token is found, by its lease step invariant or,
without that, by the protocol's own property. The interleaving search itself is tested
in tests/engine/test_interleaving.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from lifecycles.invariants import InvariantSet
from lifecycles.machines import Lifecycle, explore_workers
from lifecycles.machines._mutants import redeclared
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION


def variant(lifecycle: Lifecycle[Any, Any], table: Sequence[Mapping[str, Any]],
            **changed: Any) -> Lifecycle[Any, Any]:
    """``lifecycle`` declared again with another table (and other declarations)."""
    return redeclared(lifecycle, table=table, **changed)


def without_guard(table: Sequence[Mapping[str, Any]], trigger: str, guard: str
                  ) -> list[dict[str, Any]]:
    """``table`` with ``guard`` dropped from every row of ``trigger``."""
    rows = []
    for row in table:
        row = dict(row)
        if row["trigger"] == trigger and guard in row.get("conditions", ()):
            row["conditions"] = [name for name in row["conditions"] if name != guard]
        rows.append(row)
    return rows


@pytest.mark.parametrize(("workers", "records"), [(1, 1), (2, 1), (3, 1), (2, 2)])
def test_the_monitor_keeps_every_property_with_interleaved_workers(
    workers: int, records: int
) -> None:
    declared = MONITOR_EXPLORATION.workers
    assert declared is not None
    result = explore_workers(MONITOR_EXPLORATION, declared.sized(workers, records))
    assert result.finding is None
    assert not result.truncated
    assert (result.workers, result.records) == (workers, records)
    # Late completions and empty claims were tried and refused, not missing.
    assert result.refusals > 0 and result.steps > result.states > 10


@pytest.mark.parametrize("completion", ["observe_progress", "observe_success",
                                        "observe_failure", "fail_attempt"])
def test_a_monitor_completion_without_the_holders_token_is_found(completion: str) -> None:
    table = without_guard(MONITOR.table, completion, "lease_is_held")
    mutant = attrs.evolve(MONITOR_EXPLORATION, lifecycle=variant(MONITOR, table))
    finding = explore_workers(mutant).finding
    assert finding is not None
    # The lease step invariant refuses the late completion first...
    assert finding.kind == "invariant"
    assert "lease_ends_by_its_holder_or_by_expiry" in finding.rules
    steps = [(step.actor, step.action) for step in finding.trace]
    # Claimed, lost to the clock and another worker, completed late.
    assert steps[0][1] == "claim" and ("clock", "tick") in steps
    assert steps[-1][1] == "complete"
    assert steps[-1][0] != [actor for actor, action in steps if action == "claim"][-1]


def test_without_the_lease_step_invariant_the_protocol_property_finds_it() -> None:
    table = without_guard(MONITOR.table, "observe_success", "lease_is_held")
    declared = MONITOR.invariants
    steps = [s for s in declared.steps if s.name != "lease_ends_by_its_holder_or_by_expiry"]
    weaker = variant(MONITOR, table, invariants=InvariantSet(
        declared.code, declared.invariants, steps=steps))
    finding = explore_workers(attrs.evolve(MONITOR_EXPLORATION, lifecycle=weaker)).finding
    assert finding is not None and finding.kind == "superseded_completion"
