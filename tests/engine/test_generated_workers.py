"""The generated tests with workers find what the checker finds between workers.

Three defects of leased work that generated tests without workers pass in any profile
(tests/support/webhooks.py plants each in one row of a webhook table): a rescued
worker's late acknowledgement accepted, a lease never rescued on the last attempt, and
an expiry that retries without counting. The tests built by ``build_state_machine``
find each in the ``ci`` profile, on the memory store and on SQLite, with the readable
steps; the correct table passes. A whole-store invariant (one live lease per worker)
is found broken when the workers may claim in batches.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from lifecycles import (
    MemoryStore,
    SQLiteStore,
    StoreView,
    at_most_per,
    explore_workers,
    store_invariant,
    unique_across,
)
from lifecycles.testing import StepFailed, build_state_machine
from tests.support.webhooks import Attempt, Delivery, Sending, exploration, webhooks

FOUND_AS = {
    "late_ack": "superseded_completion: a completion from a superseded lease was accepted",
    # The protocol refuses to pass over a lease the table cannot end: the claim fails.
    "stranded": "claim raised TransitionRefused: expire from sending",
    "free_retry": "is back in a state it held",
}


def run_generated(defect: str | None, store: str, tmp_path: Path, batches: bool = False,
                  workers: int | None = None) -> str | None:
    """Run the generated test of the webhook table with ``defect`` under the ``ci``
    profile on ``store``: the failures' messages, or ``None`` when it passed."""
    return run_ci(exploration(webhooks(defect, batches=batches), batches), store, tmp_path,
                  workers)


def run_ci(declared: Any, store: str, tmp_path: Path, workers: int | None = None
           ) -> str | None:
    """Run the generated test of the exploration ``declared`` under the ``ci`` profile on
    ``store`` (``memory`` or ``sqlite``): the failures' messages, or ``None``."""
    lifecycle = declared.lifecycle
    numbers = iter(range(10**6))

    def fresh_store() -> Any:
        if store == "memory":
            return MemoryStore(lifecycle)
        connection = sqlite3.connect(tmp_path / f"{lifecycle.name}-{next(numbers)}.db")
        connection.execute("PRAGMA synchronous = OFF")
        return SQLiteStore(lifecycle, connection)

    machine = build_state_machine(declared, fresh_store, record_coverage=False,
                                  lease_protocol=store != "memory", workers=workers)
    case = machine.TestCase("runTest")
    case.settings = settings(settings.get_profile("ci"), print_blob=False,
                             phases=case.settings.phases)
    try:
        case.runTest()
    except StepFailed as failure:
        return str(failure)
    except ExceptionGroup as failures:  # Hypothesis found several distinct ones
        steps, rest = failures.split(StepFailed)
        if rest is not None:
            raise
        assert steps is not None
        return "\n".join(map(str, steps.exceptions))
    return None


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("defect", sorted(FOUND_AS))
def test_the_generated_tests_find_each_defect_of_leased_work(
        defect: str, store: str, tmp_path: Path) -> None:
    message = run_generated(defect, store, tmp_path)
    assert message is not None, f"{defect} passed on {store}"
    assert FOUND_AS[defect] in message
    assert "steps of this example:\n  1. create hook-" in message


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_the_correct_table_passes_with_workers(store: str, tmp_path: Path) -> None:
    assert run_generated(None, store, tmp_path) is None


@pytest.mark.parametrize("defect", ["late_ack", "stranded"])
def test_without_workers_the_generated_tests_miss_the_lease_defects(
        defect: str, tmp_path: Path) -> None:
    # Why the workers are there: the moves alone never lose a lease to a rescue, and
    # nothing looks past an example's last step.
    assert run_generated(defect, "memory", tmp_path, workers=0) is None


def test_the_path_watch_finds_an_uncounted_retry_even_without_workers(tmp_path: Path) -> None:
    message = run_generated("free_retry", "memory", tmp_path, workers=0)
    assert message is not None and FOUND_AS["free_retry"] in message
    assert "through claim, expire: a cycle without a final status" in message


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_whole_store_invariant_broken_by_batch_claims_is_found(
        store: str, tmp_path: Path) -> None:
    message = run_generated(None, store, tmp_path, batches=True)
    assert message is not None
    assert "breaks one_live_lease_per_worker" in message
    assert "claims up to" in message  # the batch claim that broke it, in the steps


def test_the_interleaving_finds_the_same_whole_store_invariant_with_a_trace() -> None:
    declared = exploration(webhooks(batches=True), batches=True)
    assert declared.workers is not None
    result = explore_workers(declared, declared.workers.sized(2, 2))
    assert result.finding is not None
    assert result.finding.kind == "store_invariant"
    assert result.finding.rules == ("one_live_lease_per_worker",)
    assert "worker-1 holds hook-1 under lease-1; worker-1 holds hook-2 under lease-2" \
        in result.finding.message
    last = result.finding.trace[-1]
    assert (last.actor, last.action) == ("worker-1", "claim_many")
    assert "holds hook-1 under lease-1; holds hook-2 under lease-2" in last.description


def test_without_batches_the_interleaving_keeps_one_live_lease_per_worker() -> None:
    declared = exploration(webhooks())
    assert declared.workers is not None
    result = explore_workers(declared, declared.workers.sized(2, 2))
    assert result.finding is None and not result.truncated, result.finding


def test_health_counts_the_whole_store_invariants_in_sql_and_in_python(tmp_path: Path) -> None:
    @store_invariant
    def at_most_three_queued(view: StoreView[Delivery]) -> bool:
        """At most three deliveries wait at once."""
        return sum(view.status_of(r) == "queued" for r in view.records) <= 3

    lifecycle = webhooks(name="webhooks_counted", store_rules=[
        at_most_per("one_lease_per_due_time", 1, "due_at", statuses=["sending"]),
        unique_across("tokens_unique", "lease_token"), at_most_three_queued])
    store = SQLiteStore(lifecycle, sqlite3.connect(tmp_path / "counted.db"))
    for n in range(1, 6):
        store.insert(Delivery(f"hook-{n}", Sending.QUEUED, due_at=0.0))
    health = store.health(now=0.0)
    assert health.store_violations == {"at_most_three_queued": 1}
    assert "at_most_three_queued" in health.python_only
    assert "one_live_lease_per_worker" not in health.python_only  # about workers: not asked
    for n, token in ((1, "t-1"), (2, "t-1"), (3, "t-2")):
        claimed = store.get(f"hook-{n}")
        assert claimed is not None
        store.fire(claimed, "claim", Attempt(0.0, token))
    health = store.health(now=0.0)
    # hook-1 and hook-2 share a token; the three sending share a due time.
    assert health.store_violations == {"one_lease_per_due_time": 1, "tokens_unique": 1}
    assert health.broken == 0  # no record breaks a rule of its own
    assert health.counts["sending"] == 3


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_the_generated_tests_find_an_unkeyed_provider_call_and_pass_the_keyed_one(
        store: str, tmp_path: Path) -> None:
    from examples.defects.unkeyed_refund import EXPLORATION, KEYED_EXPLORATION

    found = run_ci(EXPLORATION, store, tmp_path)
    assert found is not None and "external_effect" in found
    assert "calls pay for refund-1" in found
    assert run_ci(KEYED_EXPLORATION, store, tmp_path) is None
