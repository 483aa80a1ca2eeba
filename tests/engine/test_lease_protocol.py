"""The lease protocol's pure functions (machines/lease.py), without any store.

Which records are due or expired, which is claimed first, what a refusal does, and
the three properties the module promises: at most one live lease per record, a
superseded lease's completion is refused, a refused candidate never blocks the
queue. The driver (``claim``) runs here over a tiny in-test answerer, so the
protocol is shown to need nothing but the queries. The records are the tests' leased
tasks (tests/support/tasks.py); a lifecycle without a lease, their deliveries.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
from support.deliveries import DELIVERIES
from support.tasks import BACKOFF_SECONDS, TASKS, TaskInputs, new_task

from lifecycles.machines import lease
from lifecycles.machines._declaration import Row
from lifecycles.stores._base import StaleRecord
from lifecycles.stores._memory import MemoryStore


def record(i: int, *, created: float, max_attempts: int = 3) -> Any:
    """A queued task, due at ``created``."""
    return new_task(f"e{i}", now=created, max_attempts=max_attempts)


def no_attempt_left(i: int, *, created: float) -> Any:
    """A due task with no attempt left: its claim is refused."""
    return attrs.evolve(record(i, created=created, max_attempts=1), attempts=1)


def claim_inputs(now: float, token: str, lease_seconds: float = 30.0) -> TaskInputs:
    return TaskInputs(now=now, worker_id="w-" + token, lease_token=token,
                      lease_seconds=lease_seconds)


def leased(i: int, now: float, token: str) -> Any:
    decision = lease.decide_claim(TASKS, record(i, created=1.0), claim_inputs(now, token))
    assert isinstance(decision, lease.Grant)
    return decision.after


class Answers:
    """The lease queries over a dict, and a log of what the protocol asked and wrote.

    ``glancing``: it answers :meth:`glance` (else ``None``, as a store without one);
    ``races``: that many writes outside a transaction lose a race (``StaleRecord``).
    """

    def __init__(self, records: list[Any], *, glancing: bool = False, races: int = 0,
                 stale: frozenset[str] = frozenset()) -> None:
        self.stale = stale  # keys a batch write finds changed (put_many answers False)
        self.records = {TASKS.key_of(r): r for r in records}
        self.asked: list[frozenset[str]] = []
        self.written: list[str] = []
        self.glancing, self.races = glancing, races
        self.transactions = self.schema_checks = 0
        self._depth = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.transactions += 1
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def claim_in_place(self, inputs: Any) -> object:
        return lease.LEFT_TO_PROTOCOL  # the protocol decides every claim in Python here

    def claim_many_in_place(self, inputs_for: Any, limit: int) -> object:
        return lease.LEFT_TO_PROTOCOL  # and every batch claim

    def glance(self, now: float) -> lease.Glance[Any] | None:
        if not self.glancing:
            return None
        expired = bool(lease.expired_among(TASKS, self.records.values(), now))
        return lease.Glance(expired, lease.first_due(TASKS, self.records.values(), now))

    def check_schema(self) -> None:
        self.schema_checks += 1

    def due(self, now: float, limit: int, exclude: frozenset[str] = frozenset()) -> list[Any]:
        self.asked.append(exclude)
        return lease.due_in_order(TASKS, self.records.values(), now, limit, exclude)

    def expired_leases(self, now: float) -> list[Any]:
        return lease.expired_among(TASKS, self.records.values(), now)

    def put(self, before: Any, after: Any, row: Row) -> None:
        if not self._depth and self.races:
            self.races -= 1
            raise StaleRecord("another worker moved first")
        self.written.append(f"{row.trigger}:{TASKS.key_of(before)}")
        self.records[TASKS.key_of(after)] = after

    def put_many(self, writes: Sequence[tuple[Any, Any, Row]]) -> list[bool]:
        written = []
        for before, after, row in writes:
            if TASKS.key_of(before) in self.stale:
                written.append(False)
                continue
            self.put(before, after, row)
            written.append(True)
        return written


# --- the sets come from the table ---------------------------------------------------


def test_claimable_and_leased_statuses_are_the_lease_triggers_sources_and_dest() -> None:
    assert lease.claimable_statuses(TASKS) == tuple(
        sorted(s.value for s in TASKS.sources("claim"))
    )
    assert lease.leased_status(TASKS) == "running"
    assert "running" not in lease.claimable_statuses(TASKS)  # one live lease per record


def test_a_lifecycle_without_a_lease_is_refused_by_every_lease_function() -> None:
    assert DELIVERIES.lease is None
    for call in (
        lambda: lease.claimable_statuses(DELIVERIES),
        lambda: lease.leased_status(DELIVERIES),
        lambda: lease.decide_claim(DELIVERIES, None, None),
        lambda: MemoryStore(DELIVERIES).claim(None),
    ):
        with pytest.raises(lease.NotLeasable):
            call()


# --- which records ------------------------------------------------------------------


def test_due_means_claimable_and_its_time_has_come() -> None:
    fresh = record(1, created=100.0)  # available_at is its creation time
    assert not lease.is_due(TASKS, fresh, 99.9)
    assert lease.is_due(TASKS, fresh, 100.0)
    assert not lease.is_due(TASKS, leased(1, 100.0, "t1"), 1e9)  # leased: not claimable


def test_expired_means_leased_and_its_expiry_has_come() -> None:
    held = leased(1, 100.0, "t1")  # expires at 130
    assert not lease.is_expired(TASKS, held, 129.9)
    assert lease.is_expired(TASKS, held, 130.0)
    assert not lease.is_expired(TASKS, record(2, created=1.0), 1e9)


def test_the_first_due_record_is_first_in_claim_order_not_key_order() -> None:
    records = [record(1, created=50.0), record(2, created=10.0), record(3, created=30.0)]
    assert TASKS.key_of(lease.first_due(TASKS, records, 100.0)) == "e2"
    assert TASKS.key_of(lease.first_due(TASKS, records, 100.0, frozenset({"e2"}))) == "e3"
    assert lease.first_due(TASKS, records, 5.0) is None
    assert lease.claim_order(TASKS, records[0]) == (50.0, "e1")


# --- what to do ---------------------------------------------------------------------


def test_nothing_due_ends_the_claim() -> None:
    assert lease.decide_claim(TASKS, None, claim_inputs(100.0, "t1")) is None


def test_a_refused_candidate_is_passed_over_and_nothing_is_written() -> None:
    spent = no_attempt_left(1, created=1.0)
    assert lease.decide_claim(TASKS, spent, claim_inputs(100.0, "t1")) == lease.PassOver("e1")


def test_a_grant_carries_the_row_and_the_leased_record() -> None:
    decision = lease.decide_claim(TASKS, record(1, created=1.0), claim_inputs(100.0, "t1"))
    assert isinstance(decision, lease.Grant)
    assert decision.row.trigger == "claim" and str(decision.after.status) == "running"
    assert decision.after.lease_token == "t1" and decision.after.lease_expires_at == 130.0


def test_a_rescue_fires_the_expiry_trigger() -> None:
    grant = lease.rescue(TASKS, leased(1, 100.0, "t1"), claim_inputs(130.0, "t2"))
    assert grant.row.trigger == "expire"
    assert grant.after.lease_token is None and str(grant.after.status) != "running"


# --- the driver and its properties ----------------------------------------------------


def test_a_claim_rescues_first_then_grants_the_first_due() -> None:
    answers = Answers([leased(1, 100.0, "t1"), record(2, created=20.0)])
    granted = lease.claim(answers, TASKS, claim_inputs(200.0, "t2"))
    assert answers.written[0] == "expire:e1"
    assert granted is not None and answers.written[-1] == f"claim:{TASKS.key_of(granted)}"


def test_refused_candidates_never_block_the_queue() -> None:
    refused = [no_attempt_left(i, created=float(i)) for i in range(3)]
    answers = Answers([*refused, record(9, created=50.0)])
    granted = lease.claim(answers, TASKS, claim_inputs(100.0, "t1"))
    assert granted is not None and granted.task_id == "e9"
    # One query per refused record, each excluding those before it; none of them written.
    assert answers.asked == [frozenset(), frozenset({"e0"}), frozenset({"e0", "e1"}),
                             frozenset({"e0", "e1", "e2"})]
    assert answers.written == ["claim:e9"]


def test_only_refused_candidates_end_the_claim_empty_handed() -> None:
    spent = no_attempt_left(1, created=1.0)
    answers = Answers([spent])
    assert lease.claim(answers, TASKS, claim_inputs(100.0, "t1")) is None
    assert answers.written == []


def test_at_most_one_live_lease_per_record() -> None:
    answers = Answers([record(1, created=1.0)])
    assert lease.claim(answers, TASKS, claim_inputs(100.0, "t1")) is not None
    assert lease.claim(answers, TASKS, claim_inputs(100.0, "t2")) is None  # still held


def test_a_superseded_leases_completion_is_refused_by_compare_and_set() -> None:
    store = MemoryStore(TASKS)
    store.insert(record(1, created=1.0))
    first = store.claim(claim_inputs(100.0, "t1"))
    assert first is not None
    # The first worker decides its completion while its lease is live, and is slow to write.
    failed = attrs.evolve(claim_inputs(120.0, "t1"), error="reader_failure", retryable=True)
    completion = TASKS.select_row("fail", first, failed)
    after = TASKS.apply_row(completion, first, failed)
    # t1 expires at 130 and is rescued, due again a backoff later, and claimed again.
    assert store.claim(claim_inputs(130.0, "t2")) is None
    assert store.get("e1").lease_token is None
    second = store.claim(claim_inputs(130.0 + BACKOFF_SECONDS, "t2"))
    assert second is not None and second.lease_token == "t2"
    with pytest.raises(StaleRecord):
        store.write(first, after, completion)
    assert store.get("e1") == second


def test_on_lease_sees_the_grant_and_its_failure_propagates() -> None:
    seen: list[Any] = []
    answers = Answers([record(1, created=1.0)])
    granted = lease.claim(answers, TASKS, claim_inputs(100.0, "t1"), on_lease=seen.append)
    assert seen == [granted]


# --- the glance: a claim without a transaction, when nothing needs rescuing ----------


def test_a_glance_with_nothing_expired_claims_with_one_write_and_no_transaction() -> None:
    answers = Answers([record(2, created=20.0), record(1, created=10.0)], glancing=True)
    granted = lease.claim(answers, TASKS, claim_inputs(100.0, "t1"))
    assert granted is not None and granted.task_id == "e1" and granted.lease_token == "t1"
    assert (answers.written, answers.transactions, answers.asked) == (["claim:e1"], 0, [])


def test_a_glance_that_sees_an_expired_lease_leaves_the_claim_to_the_transaction() -> None:
    answers = Answers([leased(1, 100.0, "t1"), record(2, created=20.0)], glancing=True)
    granted = lease.claim(answers, TASKS, claim_inputs(200.0, "t2"))
    assert answers.transactions == 1
    assert answers.written[0] == "expire:e1"  # rescued first, as the protocol says
    assert granted is not None and answers.written[-1] == f"claim:{granted.task_id}"


def test_a_glance_that_loses_the_race_leaves_the_claim_to_the_transaction() -> None:
    answers = Answers([record(1, created=10.0)], glancing=True, races=1)
    granted = lease.claim(answers, TASKS, claim_inputs(100.0, "t1"))
    assert granted is not None and answers.transactions == 1 and answers.written == ["claim:e1"]


def test_a_glance_at_an_empty_queue_checks_the_schema_and_claims_nothing() -> None:
    answers = Answers([record(1, created=500.0)], glancing=True)  # not yet due
    assert lease.claim(answers, TASKS, claim_inputs(100.0, "t1")) is None
    assert (answers.schema_checks, answers.transactions, answers.written) == (1, 0, [])


def test_a_glance_at_a_refused_candidate_leaves_the_passing_over_to_the_transaction() -> None:
    spent = no_attempt_left(0, created=1.0)
    answers = Answers([spent, record(9, created=50.0)], glancing=True)
    granted = lease.claim(answers, TASKS, claim_inputs(100.0, "t1"))
    assert granted is not None and granted.task_id == "e9" and answers.transactions == 1
    assert answers.asked == [frozenset(), frozenset({"e0"})]


def test_a_claim_with_on_lease_never_glances() -> None:
    answers = Answers([record(1, created=10.0)], glancing=True)
    seen: list[Any] = []
    granted = lease.claim(answers, TASKS, claim_inputs(100.0, "t1"), on_lease=seen.append)
    assert seen == [granted] and answers.transactions == 1


def test_a_batch_claim_whose_record_changed_under_it_is_a_lost_race_granting_nothing() -> None:
    """A grant the store finds changed (its ``put_many`` says so) ends the claim with
    ``LostRace`` before any record is handed out: the store's transaction rolls back the
    batch, so ``on_lease`` never sees a grant that is not written."""
    answers = Answers([record(1, created=1.0), record(2, created=2.0)],
                      stale=frozenset({"e2"}))
    seen: list[Any] = []
    tokens = iter(["t0", "t1", "t2"])
    with pytest.raises(lease.LostRace, match="e2 changed while it was being leased"):
        lease.claim_many(answers, TASKS, lambda n: claim_inputs(100.0, next(tokens)), 2,
                         on_lease=seen.append)
    assert seen == []


def test_claim_many_asks_for_candidates_in_batches_and_passes_over_refused_ones() -> None:
    spent = no_attempt_left(0, created=1.0)
    answers = Answers([spent, record(1, created=2.0), record(2, created=3.0),
                       record(3, created=4.0)])
    tokens = iter(["t0", "t1", "t2"])
    granted = lease.claim_many(answers, TASKS, lambda n: claim_inputs(100.0, next(tokens)), 2)
    assert [r.task_id for r in granted] == ["e1", "e2"]
    assert [r.lease_token for r in granted] == ["t0", "t1"]
    # Two wanted: e0 (refused) and e1 came in one query; one more, e0 left out, in another.
    assert answers.asked == [frozenset(), frozenset({"e0"})]
    assert answers.written == ["claim:e1", "claim:e2"] and answers.transactions == 1
