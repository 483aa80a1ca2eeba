"""Interleaved workers (lifecycles.machines._interleaving): the lease protocol explored
with several workers on the memory store, and each of its properties shown to fail on
a table that gets it wrong. On the tests' leased tasks (tests/support/tasks.py) and the
leased jobs of examples/defects; the monitor's own interleavings are tested in
tests/engine/test_interleaving_on_the_monitor.py."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.tasks_inputs import EXPLORATION as TASKS_EXPLORATION

from lifecycles.invariants._core import InvariantSet
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration, TraceMismatch
from lifecycles.machines._interleaving import (
    InterleavingViolation,
    explore_workers,
    replay_interleaving,
)
from lifecycles.machines._liveness import liveness
from lifecycles.machines._mutants import redeclared

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # examples/ imports as from a clone's root

from examples.defects import late_completion as jobs  # noqa: E402
from examples.defects.late_completion import EXPLORATION as LATE  # noqa: E402
from examples.defects.late_completion import exploration as job_exploration  # noqa: E402
from examples.defects.late_completion import leased_jobs  # noqa: E402


def variant(lifecycle: Lifecycle[Any, Any], table: Sequence[Mapping[str, Any]],
            **changed: Any) -> Lifecycle[Any, Any]:
    """``lifecycle`` declared again with another table (and other declarations)."""
    return redeclared(lifecycle, table=table, **changed)


@pytest.mark.parametrize(("workers", "records"), [(1, 1), (2, 1), (3, 1), (2, 2)])
def test_the_tasks_keep_every_property_with_interleaved_workers(
    workers: int, records: int
) -> None:
    declared = TASKS_EXPLORATION.workers
    assert declared is not None
    result = explore_workers(TASKS_EXPLORATION, declared.sized(workers, records))
    assert result.finding is None
    assert not result.truncated
    assert (result.workers, result.records) == (workers, records)
    # Late completions and empty claims were tried and refused, not missing.
    assert result.refusals > 0 and result.steps > result.states > 10


def test_more_workers_reach_more_worlds() -> None:
    declared = TASKS_EXPLORATION.workers
    assert declared is not None
    sizes = [explore_workers(TASKS_EXPLORATION, declared.sized(n, 1)).states
             for n in (1, 2, 3)]
    assert sizes[0] < sizes[1] < sizes[2]


def test_the_late_completion_defect_is_found_with_the_shortest_interleaving() -> None:
    finding = explore_workers(LATE).finding
    assert finding is not None
    assert finding.kind == "superseded_completion"
    assert [(s.actor, s.action, s.choice) for s in finding.trace] == [
        ("worker-1", "claim", 0), ("clock", "tick", 0), ("worker-2", "claim", 0),
        ("worker-1", "complete", 0),
    ]
    assert "expire job-1 running -> idle, then claim job-1 idle -> running" in (
        finding.trace[2].description)
    assert "worker-1 held job-1 under lease-1" in finding.message


def test_the_correct_leased_job_table_keeps_every_property() -> None:
    result = explore_workers(job_exploration(leased_jobs(guarded=True)))
    assert result.finding is None and not result.truncated


def test_the_late_completion_replays_and_the_fixed_table_does_not() -> None:
    finding = explore_workers(LATE).finding
    assert finding is not None
    steps = [(s.actor, s.action, s.choice) for s in finding.trace]
    with pytest.raises(InterleavingViolation, match="superseded lease was accepted"):
        replay_interleaving(LATE, 2, 1, steps)
    fixed = job_exploration(leased_jobs(guarded=True))
    world = replay_interleaving(fixed, 2, 1, steps)  # refused: every property holds
    assert [str(r.status) for r in world.records] == ["running"]
    assert world.workers[0] == () and len(world.workers[1]) == 1


def test_a_replay_step_that_is_not_possible_is_a_trace_mismatch() -> None:
    with pytest.raises(TraceMismatch, match="step 1"):
        replay_interleaving(LATE, 2, 1, [("worker-1", "complete", 0)])
    with pytest.raises(TraceMismatch, match="step 2"):
        replay_interleaving(LATE, 2, 1, [("worker-1", "claim", 0), ("worker-3", "claim", 0)])


def _never_expiring(exploration: Exploration[Any]) -> Exploration[Any]:
    """The leased job whose leases never expire: a stopped worker's job is never rescued
    (oban #862), while one record alone can always finish."""
    lifecycle = exploration.lifecycle

    @jobs.effect("lease_token")
    def lease_for_ever(r: jobs.LeasedJob, i: jobs.Inputs) -> dict[str, Any]:
        """Lease the job, with no expiry (the defect)."""
        return {"lease_token": i.lease_token}

    @jobs.guard(refusal_code="leased_jobs.lease_lost")
    def lease_not_over(r: jobs.LeasedJob, i: jobs.Inputs) -> bool:
        """The lease has no expiry, or has not expired."""
        return r.lease_expires_at is None or i.now < r.lease_expires_at

    table = []
    for row in lifecycle.table:
        row = dict(row)
        if row["trigger"] == "claim":
            row["after"] = "lease_for_ever"
        row["conditions"] = [
            "lease_not_over" if name == "lease_live" else name
            for name in row.get("conditions", ())]
        table.append(row)
    declared = lifecycle.invariants
    invariants = InvariantSet(declared.code, [
        rule for rule in declared.invariants if rule.name != "running_iff_lease_expiry"
    ], steps=declared.steps)
    mutant = variant(
        lifecycle, table, invariants=invariants,
        effects=[*(e for e in lifecycle.effects.values() if e.name != "grant_lease"),
                 lease_for_ever],
        guards=[*(g for g in lifecycle.guards.values() if g.name != "lease_live"),
                lease_not_over])
    return attrs.evolve(exploration, lifecycle=mutant)


def test_a_lease_never_rescued_is_found_by_the_liveness_of_the_interleaving() -> None:
    orphaned = _never_expiring(job_exploration(leased_jobs(guarded=True)))
    alone = explore(orphaned, keep_graph=True)  # one record alone always finishes
    assert alone.violation is None and alone.graph is not None
    assert liveness(alone.graph, ()).ok
    result = explore_workers(orphaned)
    assert result.finding is not None
    assert result.finding.kind == "no_way_to_final"
    assert "job-1 can never reach a final status" in result.finding.message
    assert [(s.actor, s.action) for s in result.finding.trace] == [
        ("worker-1", "claim"), ("worker-1", "stop")]
    steps = [(s.actor, s.action, s.choice) for s in result.finding.trace]
    with pytest.raises(InterleavingViolation, match="can never reach a final status"):
        replay_interleaving(orphaned, 2, 1, steps)


def test_two_workers_holding_one_live_lease_are_found() -> None:
    """A claim that reuses the token it finds: two workers then hold the same live
    lease (the step invariant would say so first; without it the protocol does)."""
    lifecycle = leased_jobs(guarded=True)

    @jobs.effect("lease_token", "lease_expires_at")
    def reuse_token(r: jobs.LeasedJob, i: jobs.Inputs) -> dict[str, Any]:
        """Lease the job under its old token when it has one (the defect)."""
        return {"lease_token": r.lease_token or i.lease_token,
                "lease_expires_at": i.now + jobs.LEASE_SECONDS}

    table = [dict(row, after="reuse_token") if row["trigger"] == "claim" else row
             for row in lifecycle.table]
    invariants = InvariantSet(lifecycle.invariants.code, lifecycle.invariants.invariants)
    kept = [e for e in lifecycle.effects.values() if e.name != "grant_lease"]
    mutant = variant(lifecycle, table, effects=[*kept, reuse_token],
                     invariants=invariants)
    finding = explore_workers(job_exploration(mutant)).finding
    assert finding is not None
    assert finding.kind == "two_live_leases"
    assert "worker-1 and worker-2 both hold the live lease lease-1 of job-1" in finding.message


def test_sizes_outside_the_declared_bounds_are_refused() -> None:
    declared = TASKS_EXPLORATION.workers
    assert declared is not None
    for workers, records in [(0, 1), (4, 1), (2, 3), (2, 0)]:
        with pytest.raises(ValueError, match="is not within"):
            declared.sized(workers, records)


def test_a_lifecycle_without_workers_cannot_be_interleaved() -> None:
    with pytest.raises(ValueError, match="declares no workers"):
        explore_workers(attrs.evolve(TASKS_EXPLORATION, workers=None))


def test_a_worker_may_lease_every_record_in_one_batch_and_complete_each() -> None:
    """claim_many, as run_many does it: one step leases both records, each under a token
    of its own; the worker then completes them one step each, in either order."""
    declared = TASKS_EXPLORATION.workers
    assert declared is not None and declared.batches
    world = replay_interleaving(TASKS_EXPLORATION, 1, 2, [("worker-1", "claim_many", 0)])
    hand = world.workers[0]
    assert [str(held.record.status) for held in hand] == ["running", "running"]
    assert len({held.token for held in hand}) == 2
    assert {held.token for held in hand} == {r.lease_token for r in world.records}
    ways = len(declared.work(hand[0].record, declared.inputs(world.now, "worker-1",
                                                             hand[0].token)))
    # The second record's first way ends first, then the first record's first way.
    world = replay_interleaving(TASKS_EXPLORATION, 1, 2, [
        ("worker-1", "claim_many", 0), ("worker-1", "complete", ways),
        ("worker-1", "complete", 0)])
    assert world.workers[0] == ()
    assert "running" not in [str(record.status) for record in world.records]


def test_batches_reach_worlds_single_claims_do_not() -> None:
    declared = TASKS_EXPLORATION.workers
    assert declared is not None
    with_batches = explore_workers(TASKS_EXPLORATION, declared.sized(1, 2))
    without = explore_workers(TASKS_EXPLORATION,
                              attrs.evolve(declared.sized(1, 2), batches=False))
    assert with_batches.finding is None and without.finding is None
    assert with_batches.states > without.states
    assert "claim_many" in declared.sized(2, 2).bounds
    assert "claim_many" not in declared.sized(2, 1).bounds  # one record: a batch is a claim


def test_a_late_completion_of_a_batched_lease_is_found() -> None:
    """The late-completion defect with two jobs: the search also tries it through a
    batch, and the first finding is still the shortest interleaving."""
    declared = LATE.workers
    assert declared is not None
    finding = explore_workers(LATE, declared.sized(2, 2)).finding
    assert finding is not None and finding.kind == "superseded_completion"
    steps = [(s.actor, s.action, s.choice) for s in finding.trace]
    assert len(steps) == 4 and steps[-1][1] == "complete"
    batched = [("worker-1", "claim_many", 0), ("clock", "tick", 0),
               ("worker-2", "claim_many", 0), ("worker-1", "complete", 0)]
    with pytest.raises(InterleavingViolation, match="superseded lease was accepted"):
        replay_interleaving(LATE, 2, 2, batched)
