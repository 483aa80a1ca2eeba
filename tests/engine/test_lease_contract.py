"""The one leasing contract (``LeasingStore``, machines/lease.py), from a store written to
docs/extending.md §6 alone: a dict-backed :class:`Store` with the storage primitives and
the two lease queries (``due``, ``expired_leases``). It claims, rescues an expired lease,
completes, and runs under :class:`Worker` exactly as the reference store does; a store
missing a query of the contract is refused with ``NotLeasable`` naming it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from support.tasks import TASKS, Task, TaskInputs, new_task

from lifecycles._worker import Worker
from lifecycles._worker_lease import HeldLease
from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row, TransitionRefused
from lifecycles.stores._base import StaleRecord, Store
from lifecycles.stores._memory import MemoryStore

R = TypeVar("R")


class DictStore(Store[R]):
    """What docs/extending.md §6 asks of a store, and nothing more: the storage primitives
    over a dict, a compare-and-set ``put`` on the whole record, and the lease queries
    answered by the protocol's own predicates. No ``glance``, no claim in place: every
    claim takes the one-transaction path (the defaults ``Store`` gives)."""

    def __init__(self, lifecycle: Lifecycle[R, Any]) -> None:
        self.lifecycle = lifecycle
        self.records: dict[str, R] = {}
        self.lock = threading.RLock()
        self.transactions = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.lock:
            self.transactions += 1
            saved = dict(self.records)
            try:
                yield
            except BaseException:
                self.records = saved
                raise

    def get(self, key: str) -> R | None:
        return self.records.get(key)

    def insert(self, record: R) -> R:
        with self.transaction():
            return self.records.setdefault(self.lifecycle.key_of(record),
                                           self.lifecycle.check(record))

    def put(self, before: R, after: R, row: Row) -> None:
        key = self.lifecycle.key_of(before)
        with self.transaction():
            if self.records.get(key) != before:
                raise StaleRecord(f"{key} changed since it was read")
            self.records[key] = after

    def count_by_status(self) -> dict[str, int]:
        counts = {status.value: 0 for status in self.lifecycle.statuses}
        for record in self.records.values():
            counts[str(self.lifecycle.status_of(record))] += 1
        return counts

    def scan(self) -> Iterator[R]:
        return iter([self.records[key] for key in sorted(self.records)])

    def due(self, now: float, limit: int, exclude: frozenset[str] = frozenset()) -> list[R]:
        return lease.due_in_order(self.lifecycle, self.records.values(), now, limit, exclude)

    def expired_leases(self, now: float) -> list[R]:
        return lease.expired_among(self.lifecycle, self.records.values(), now)


def inputs(now: float, worker: str, token: str, seconds: float = 5.0) -> TaskInputs:
    return TaskInputs(now=now, worker_id=worker, lease_token=token, lease_seconds=seconds)


def both(*tasks: Task) -> tuple[DictStore[Task], MemoryStore[Task]]:
    """The store under test and the reference store, holding the same tasks."""
    written, reference = DictStore(TASKS), MemoryStore(TASKS)
    for task in tasks:
        written.insert(task)
        reference.insert(task)
    return written, reference


def test_a_store_written_from_the_docs_claims_rescues_and_completes_like_the_reference() -> None:
    store, reference = both(new_task("t-2", now=1.0), new_task("t-1", now=0.0))
    claims: list[Callable[[Store[Task]], object]] = [
        # The first due in claim order (available_at, then task_id): t-1.
        lambda s: s.claim(inputs(2.0, "w-1", "tok-1")),
        lambda s: s.claim(inputs(2.0, "w-1", "tok-2")),
        lambda s: s.claim(inputs(2.0, "w-1", "tok-3")),  # nothing left due
        # Both leases ran out at 7: rescued (retry after a backoff), not yet due again.
        lambda s: s.claim(inputs(7.5, "w-2", "tok-4")),
        lambda s: s.claim_many(lambda n: inputs(9.0, "w-2", f"tok-b{n}"), 5),
    ]
    for step in claims:
        assert step(store) == step(reference)
        assert list(store.scan()) == list(reference.scan())
    t1 = store.get("t-1")
    assert t1 is not None and (t1.status, t1.attempts, t1.last_error, t1.lease_token) == (
        "running", 1, "lease_expired", "tok-b0")
    # Completion: the holder's step is written compare-and-set; a rescued one is refused.
    with store.transaction():
        done = store.fire(t1, "succeed", inputs(9.5, "w-2", "tok-b0"))
    assert done.status == "succeeded"
    t2 = store.get("t-2")
    assert t2 is not None
    with pytest.raises(TransitionRefused), store.transaction():
        store.fire(t2, "succeed", inputs(9.5, "w-1", "tok-2"))  # tok-2 was rescued
    assert store.count_by_status() == {"queued": 0, "running": 1, "succeeded": 1, "failed": 0}


def test_a_claim_without_a_glance_takes_one_transaction_and_passes_through_the_contract() -> None:
    store = DictStore(TASKS)
    store.insert(new_task("t-1"))
    before = store.transactions
    claimed = store.claim(inputs(0.0, "w-1", "tok-1"))
    assert claimed is not None and claimed.lease_token == "tok-1"
    # The claim transaction and its put's own nested one.
    assert store.transactions - before == 2
    # The pure driver takes the store as the contract, no Store method in between.
    assert lease.claim(store, TASKS, inputs(0.0, "w-2", "tok-2")) is None


def test_the_worker_runs_a_store_written_from_the_docs() -> None:
    store, reference = both(new_task("t-1"), new_task("t-2", now=50.0))
    seen: list[tuple[str, str]] = []

    def handler(task: Task, held: HeldLease) -> None:
        seen.append((task.task_id, held.token))

    outcomes = []
    for target in (store, reference):
        worker = Worker(TASKS, target, handler, worker_id="w-1", lease_seconds=30,
                        clock=lambda: 100.0)
        first, second = worker.run_once(), worker.run_once()
        assert worker.run_once() is None  # nothing more is due
        outcomes.append([(o.trigger, o.status, o.record.task_id) for o in (first, second)
                         if o is not None])
    assert outcomes[0] == outcomes[1] == [("succeed", "succeeded", "t-1"),
                                          ("succeed", "succeeded", "t-2")]
    assert [key for key, _ in seen] == ["t-1", "t-2", "t-1", "t-2"]
    assert store.count_by_status()["succeeded"] == 2


def test_the_worker_finishes_a_task_rescued_from_a_stalled_worker() -> None:
    store = DictStore(TASKS)
    store.insert(new_task("t-1"))
    stalled = store.claim(inputs(0.0, "w-old", "tok-old", seconds=5.0))
    assert stalled is not None and stalled.status == "running"
    worker = Worker(TASKS, store, lambda task, held: None, worker_id="w-new",
                    lease_seconds=30, clock=lambda: 10.0)
    # At 10 the lease (until 5) is rescued, the task is due again at 11.
    assert worker.run_once() is None
    rescued = store.get("t-1")
    assert rescued is not None and (rescued.status, rescued.last_error) == (
        "queued", "lease_expired")
    outcome = worker.run_once(now=11.0)
    assert outcome is not None and (outcome.trigger, outcome.status) == ("succeed", "succeeded")
    # The stalled worker's late completion is refused by the table, nothing written.
    finished = store.get("t-1")
    with pytest.raises(TransitionRefused), store.transaction():
        store.fire(stalled, "succeed", inputs(12.0, "w-old", "tok-old"))
    assert store.get("t-1") == finished


class NoExpiredLeases(DictStore[R]):
    """A store that forgot a query the contract requires."""

    expired_leases = None  # type: ignore[assignment]


class NoQueries(NoExpiredLeases[R]):
    due = None  # type: ignore[assignment]


@pytest.mark.parametrize(("kind", "missing"), [
    (NoExpiredLeases, "expired_leases"),
    (NoQueries, "due, expired_leases"),
])
def test_a_store_missing_a_lease_query_is_refused_naming_it(
    kind: type[DictStore[Task]], missing: str,
) -> None:
    store = kind(TASKS)
    store.insert(new_task("t-1"))
    for call in (lambda: store.claim(inputs(0.0, "w-1", "tok-1")),
                 lambda: store.claim_many(lambda n: inputs(0.0, "w-1", f"tok-{n}"), 2),
                 lambda: store.recover_expired(inputs(0.0, "w-1", "tok-1"))):
        with pytest.raises(lease.NotLeasable, match=f"lacks {missing}$"):
            call()
    assert store.count_by_status()["queued"] == 1  # nothing was leased


def test_the_contract_requires_only_what_the_protocol_calls() -> None:
    # What a store must answer; the rest of the contract has defaults (LeaseDefaults,
    # which Store inherits). Counting and the first-due shortcut are not the protocol's.
    assert set(lease.LEASING_REQUIRED) == {
        "transaction", "get", "put", "put_many", "due", "expired_leases"}
    assert set(lease.LEASING_OPTIONAL) == {
        "glance", "claim_in_place", "claim_many_in_place", "check_schema"}
    assert lease.missing_from_contract(DictStore(TASKS)) == ()
    assert lease.missing_from_contract(object()) == lease.LEASING_REQUIRED + (
        lease.LEASING_OPTIONAL)
    assert isinstance(DictStore(TASKS), lease.LeasingStore)
    assert not isinstance(NoExpiredLeases(TASKS), lease.LeasingStore)
