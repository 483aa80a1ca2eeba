"""Lease renewal in the interleaving: workers renew the leases they hold, the table's
guards must refuse a renewal once the lease was rescued, and a renewal row that forgets
its holder's guard is found with the shortest interleaving."""

from __future__ import annotations

from support.tasks import TABLE, TASKS
from support.tasks_inputs import EXPLORATION, exploration

from lifecycles.machines._interleaving import explore_workers
from lifecycles.machines._mutants import redeclared


def test_the_task_lifecycle_keeps_every_property_with_renewing_workers() -> None:
    for workers, records in ((2, 1), (2, 2), (3, 1)):
        assert EXPLORATION.workers is not None
        result = explore_workers(EXPLORATION, EXPLORATION.workers.sized(workers, records))
        assert result.finding is None and not result.truncated, (workers, records)


def test_a_renewal_without_the_holders_guard_is_found() -> None:
    careless = [dict(row, conditions=["lease_is_live"]) if row["trigger"] == "renew" else row
                for row in TABLE]
    mutant = redeclared(TASKS, table=careless, name="tasks_careless_renewal")
    finding = explore_workers(exploration(mutant)).finding
    assert finding is not None and finding.kind == "superseded_completion"
    last = finding.trace[-1]
    assert (last.action, "renews task-1") == ("renew", last.description[:len("renews task-1")])
    # The shortest way there: a lease rescued (its retry due a second later) and granted
    # to another worker, then renewed by the first under its old token.
    assert finding.message.startswith("a renewal from a superseded lease was accepted")
    assert [(step.actor, step.action) for step in finding.trace] == [
        ("worker-1", "claim"), ("clock", "tick"), ("worker-2", "claim"), ("clock", "tick"),
        ("worker-2", "claim"), ("worker-1", "renew")]
