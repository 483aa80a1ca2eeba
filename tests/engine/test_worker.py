"""The generic worker on a lifecycle made for these tests (tests/support/tasks.py), on the
memory store and on a SQLite file: claims, handler calls, finishing steps, refusals as
outcomes, batches, concurrency, renewal, graceful stop, reconnection."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.tasks import TASKS, Task, TaskInputs, new_task

from lifecycles._worker import Idle, Worker
from lifecycles._worker_lease import HeldLease, WorkOutcome
from lifecycles.machines._declaration import TransitionRefused
from lifecycles.machines._work import Outcome, Permanent, Raised, Returned
from lifecycles.machines.lease import LostRace
from lifecycles.stores._base import Store, StoreUnavailable
from lifecycles.stores._memory import MemoryStore
from lifecycles.stores.sqlite import SQLiteStore

StoreFactory = Callable[[], Store[Task]]


@pytest.fixture(params=["memory", "sqlite"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory opening the same store again (a new connection each time, on SQLite)."""
    if request.param == "memory":
        shared = MemoryStore(TASKS)
        yield lambda: shared
        return
    path = tmp_path / "tasks.db"
    opened: list[sqlite3.Connection] = []

    def sqlite_store() -> Store[Task]:
        connection = sqlite3.connect(path, check_same_thread=False)
        opened.append(connection)
        return SQLiteStore(TASKS, connection)

    yield sqlite_store
    for connection in opened:
        connection.close()


def filled(open_store: StoreFactory, count: int, **task: Any) -> Store[Task]:
    store = open_store()
    for n in range(count):
        store.insert(new_task(f"task-{n:03d}", **task))
    return store


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def statuses(store: Store[Task]) -> dict[str, str]:
    return {task.task_id: str(task.status) for task in store.scan()}


# -- one pass -------------------------------------------------------------------------


def test_run_once_calls_the_handler_with_the_record_and_its_lease_then_finishes_it(
    open_store: StoreFactory,
) -> None:
    store = filled(open_store, 1)
    seen: list[tuple[Task, HeldLease]] = []
    worker = Worker(TASKS, store, lambda task, lease: seen.append((task, lease)),
                    worker_id="worker-1", lease_seconds=30, clock=Clock(100.0))
    outcome = worker.run_once()
    assert outcome is not None and outcome.refusal is None
    ((task, lease),) = seen
    # The handler saw the record as leased, and the lease's own token and expiry.
    assert (task.status, task.worker_id) == ("running", "worker-1")
    assert (lease.key, lease.token, lease.expires_at, lease.attempt) == (
        "task-000", task.lease_token, 130.0, 1)
    assert lease.token not in repr(lease)  # the fencing token is a credential
    assert (outcome.trigger, outcome.status) == ("succeed", "succeeded")
    assert store.get("task-000") == outcome.record
    assert worker.run_once() is None  # nothing more is due


def test_an_outcome_names_the_trigger_and_changes_the_inputs(open_store: StoreFactory) -> None:
    store = filled(open_store, 1)
    worker = Worker(TASKS, store, lambda task, lease: Outcome(
        "fail", {"error": "provider_declined", "retryable": False}), clock=Clock())
    outcome = worker.run_once()
    assert outcome is not None and (outcome.trigger, outcome.status) == ("fail", "failed")
    stored = store.get("task-000")
    assert stored is not None and (stored.attempts, stored.last_error) == (1, "provider_declined")


def test_an_exception_fails_the_attempt_with_its_code_and_a_retry_after_the_backoff(
    open_store: StoreFactory,
) -> None:
    class ProviderTimeout(Exception):
        pass

    def handler(task: Task, lease: HeldLease) -> None:
        raise ProviderTimeout("secret details never stored")

    store = filled(open_store, 1)
    worker = Worker(TASKS, store, handler, clock=Clock(100.0))
    outcome = worker.run_once()
    assert outcome is not None and isinstance(outcome.result, Raised)
    assert (outcome.trigger, outcome.status) == ("fail", "queued")
    stored = store.get("task-000")
    assert stored is not None
    assert (stored.attempts, stored.available_at, stored.last_error) == (
        1, 101.0, "provider_timeout")
    assert worker.run_once() is None  # not due again before the backoff


def test_a_permanent_error_fails_the_task_at_once(open_store: StoreFactory) -> None:
    def handler(task: Task, lease: HeldLease) -> None:
        raise Permanent("card closed", code="card_closed")

    store = filled(open_store, 1)
    outcome = Worker(TASKS, store, handler, clock=Clock()).run_once()
    assert outcome is not None and outcome.status == "failed"
    stored = store.get("task-000")
    assert stored is not None and (stored.attempts, stored.last_error) == (1, "card_closed")


def test_a_result_the_handling_does_not_know_fails_as_the_handlers_mistake(
    open_store: StoreFactory,
) -> None:
    store = filled(open_store, 1)
    outcome = Worker(TASKS, store, lambda task, lease: "done!", clock=Clock()).run_once()
    assert outcome is not None and outcome.status == "failed"
    stored = store.get("task-000")
    assert stored is not None and stored.last_error == "handler_result_invalid"


def test_a_keyboard_interrupt_in_the_handler_stops_the_worker_and_writes_nothing(
    open_store: StoreFactory,
) -> None:
    def handler(task: Task, lease: HeldLease) -> None:
        raise KeyboardInterrupt

    store = filled(open_store, 1)
    with pytest.raises(KeyboardInterrupt):
        Worker(TASKS, store, handler, clock=Clock()).run_once()
    stored = store.get("task-000")
    # Left leased, as after a crash: the lease expires and a rescue decides.
    assert stored is not None and stored.status == "running"


# -- refusals are outcomes ---------------------------------------------------------------


def test_a_late_completion_after_a_rescue_is_refused_and_overwrites_nothing(
    open_store: StoreFactory,
) -> None:
    """The stalled-worker case: worker-1's lease expires while its handler runs, worker-2
    rescues the task and leases it again; worker-1's completion is an outcome, refused."""
    store = filled(open_store, 1)
    clock = Clock(100.0)
    rescued: list[WorkOutcome[Task] | None] = []

    def stalls(task: Task, lease: HeldLease) -> None:
        clock.now = 200.0  # far past the 30 s lease
        other = Worker(TASKS, open_store(), lambda task, lease: None, worker_id="worker-2",
                       lease_seconds=30, clock=lambda: 200.0)
        # Rescued (expired: attempt counted, retried after the backoff), then due again.
        assert other.run_once() is None
        clock.now = 202.0
        rescued.append(Worker(TASKS, open_store(), lambda t, lease: Outcome("renew"),
                              worker_id="worker-2", clock=lambda: 202.0).run_once())

    outcome = Worker(TASKS, store, stalls, worker_id="worker-1", lease_seconds=30,
                     clock=clock).run_once()
    assert outcome is not None and outcome.record is None
    assert isinstance(outcome.refusal, (LostRace, TransitionRefused))
    stored = store.get("task-000")
    assert stored is not None
    # worker-2's lease stands, renewed by its own outcome; worker-1 changed nothing.
    assert (stored.status, stored.worker_id, stored.attempts) == ("running", "worker-2", 1)


def test_a_batch_with_one_record_taken_meanwhile_finishes_the_others(
    open_store: StoreFactory,
) -> None:
    store = filled(open_store, 3)
    clock = Clock(100.0)

    def handler(task: Task, lease: HeldLease) -> None:
        if task.task_id == "task-001":  # the lease of this one is rescued meanwhile
            clock.now = 140.0
            with other.transaction():
                current = other.get("task-001")
                assert current is not None
                other.fire(current, "expire", TaskInputs(now=140.0))
            clock.now = 101.0

    other = open_store()
    worker = Worker(TASKS, store, handler, lease_seconds=30, batch_size=3, clock=clock)
    outcomes = worker.run_batch()
    assert [(o.key, o.status, o.refusal is None) for o in outcomes] == [
        ("task-000", "succeeded", True), ("task-001", None, False),
        ("task-002", "succeeded", True)]
    assert statuses(store) == {"task-000": "succeeded", "task-001": "queued",
                               "task-002": "succeeded"}


def test_run_batch_claims_in_one_transaction_and_writes_the_steps_together(
    open_store: StoreFactory,
) -> None:
    store = filled(open_store, 5)
    transactions = 0
    depth = 0
    opened = store.transaction

    @contextmanager
    def counted() -> Iterator[None]:  # outermost transactions only
        nonlocal transactions, depth
        transactions += depth == 0
        depth += 1
        try:
            with opened():
                yield
        finally:
            depth -= 1

    store.transaction = counted  # type: ignore[method-assign]
    outcomes = Worker(TASKS, store, lambda task, lease: None, batch_size=4,
                      clock=Clock()).run_batch()
    assert [o.status for o in outcomes] == ["succeeded"] * 4
    assert transactions == 2  # one claim, one completion
    assert sorted(statuses(store).values()) == ["queued"] + ["succeeded"] * 4


def test_each_lease_of_a_batch_has_its_own_token(open_store: StoreFactory) -> None:
    store = filled(open_store, 3)
    tokens: list[str] = []
    Worker(TASKS, store, lambda task, lease: tokens.append(lease.token), batch_size=3,
           clock=Clock()).run_batch()
    assert len(set(tokens)) == 3


# -- the loop -----------------------------------------------------------------------------


def test_run_drains_every_task_exactly_once_with_concurrent_handlers(
    open_store: StoreFactory,
) -> None:
    store = filled(open_store, 60)
    calls: list[str] = []
    lock = threading.Lock()

    def handler(task: Task, lease: HeldLease) -> None:
        time.sleep(0.001)
        with lock:
            calls.append(task.task_id)

    worker = Worker(TASKS, open_store, handler, concurrency=4, batch_size=8)
    worker.run(until_idle=True, install_signal_handlers=False)
    assert sorted(calls) == [f"task-{n:03d}" for n in range(60)]
    assert set(statuses(store).values()) == {"succeeded"}


def test_run_reports_each_outcome_once_it_is_written(open_store: StoreFactory) -> None:
    store = filled(open_store, 10)
    reported: list[tuple[str, str | None]] = []

    def on_outcome(outcome: WorkOutcome[Task]) -> None:
        stored = store.get(outcome.key)
        assert stored is not None and stored.status == outcome.status  # already durable
        reported.append((outcome.key, outcome.status))

    Worker(TASKS, open_store, lambda task, lease: None, concurrency=3, batch_size=2,
           on_outcome=on_outcome).run(until_idle=True, install_signal_handlers=False)
    assert sorted(reported) == [(f"task-{n:03d}", "succeeded") for n in range(10)]


def test_async_handlers_run_concurrently_on_one_event_loop(open_store: StoreFactory) -> None:
    store = filled(open_store, 8)
    running = 0
    most = 0

    async def handler(task: Task, lease: HeldLease) -> Outcome | None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        running -= 1
        return None

    Worker(TASKS, open_store, handler, concurrency=4, batch_size=4).run(
        until_idle=True, install_signal_handlers=False)
    assert set(statuses(store).values()) == {"succeeded"}
    assert most > 1  # several ran at once, on one loop


def test_a_long_handler_keeps_its_lease_by_renewal(open_store: StoreFactory) -> None:
    store = filled(open_store, 1)
    expiries: list[float | None] = []

    def handler(task: Task, lease: HeldLease) -> None:
        first = lease.expires_at
        time.sleep(1.0)  # past the 0.4 s lease: renewed at each 0.2 s
        expiries.extend([first, lease.expires_at])
        lease.raise_if_lost()

    Worker(TASKS, open_store, handler, lease_seconds=0.4).run(
        until_idle=True, install_signal_handlers=False)
    assert statuses(store) == {"task-000": "succeeded"}
    first, last = expiries
    assert first is not None and last is not None and last > first + 0.5


def test_a_refused_renewal_tells_the_handler_its_lease_is_lost(open_store: StoreFactory) -> None:
    store = filled(open_store, 1)
    told: list[bool] = []
    other = open_store()

    def handler(task: Task, lease: HeldLease) -> None:
        # Another worker takes the lease (as a rescue would) before the first renewal.
        with other.transaction():
            current = other.get(task.task_id)
            assert current is not None
            other.fire(current, "expire", TaskInputs(now=(current.lease_expires_at or 0) + 1))
        deadline = time.monotonic() + 5
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        told.append(lease.lost)

    Worker(TASKS, open_store, handler, lease_seconds=0.4).run(
        until_idle=True, install_signal_handlers=False)
    assert told == [True]
    stored = store.get("task-000")
    assert stored is not None and (stored.status, stored.last_error) == ("queued", "lease_expired")


def test_stop_lets_the_handlers_in_flight_finish_and_claims_nothing_more(
    open_store: StoreFactory,
) -> None:
    store = filled(open_store, 10)
    both_started = threading.Barrier(3)
    release = threading.Event()

    def handler(task: Task, lease: HeldLease) -> None:
        both_started.wait(5)
        release.wait(5)

    worker = Worker(TASKS, open_store, handler, concurrency=2)
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    both_started.wait(5)
    worker.stop()
    release.set()
    runner.join(10)
    assert not runner.is_alive()
    counts = sorted(statuses(store).values())
    # The two in flight were finished and written; nothing else was claimed.
    assert counts == ["queued"] * 8 + ["succeeded"] * 2


def test_the_loop_opens_the_store_again_after_it_became_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    seeded = SQLiteStore(TASKS, sqlite3.connect(path))
    for n in range(3):
        seeded.insert(new_task(f"task-{n:03d}"))
    opened: list[sqlite3.Connection] = []
    errors: list[BaseException] = []

    def open_store() -> Store[Task]:
        connection = sqlite3.connect(path, check_same_thread=False)
        opened.append(connection)
        return SQLiteStore(TASKS, connection)

    def handler(task: Task, lease: HeldLease) -> None:
        if len(opened) == 1:
            opened[0].close()  # the connection breaks while the handler runs

    worker = Worker(TASKS, open_store, handler, on_error=errors.append,
                    idle=Idle(poll_interval=0.01, first=0.01))
    worker.run(until_idle=True, install_signal_handlers=False)
    assert [type(error) for error in errors] == [StoreUnavailable]
    assert len(opened) == 2
    assert set(statuses(seeded).values()) == {"succeeded"}


def test_results_reach_finish_as_returned_or_raised() -> None:
    """The worker hands ``finish`` exactly what the handler gave."""
    store = MemoryStore(TASKS, [new_task("task-000")])
    seen: list[object] = []
    declared = TASKS.handling
    assert declared is not None

    def finish(held: Task, inputs: TaskInputs, result: Returned | Raised) -> Any:
        seen.append(result)
        return declared.finish(held, inputs, result)

    worker = Worker(TASKS, store, lambda task, lease: 42, clock=Clock(),
                    handling=attrs.evolve(declared, finish=finish))
    worker.run_once()
    assert seen == [Returned(42)]


def test_a_handler_renews_its_lease_before_a_side_effect(open_store: StoreFactory) -> None:
    store = filled(open_store, 1)
    clock = Clock(100.0)
    answers: list[tuple[bool, float | None]] = []

    def handler(task: Task, lease: HeldLease) -> None:
        clock.now = 120.0
        answers.append((lease.renew(), lease.expires_at))

    Worker(TASKS, store, handler, lease_seconds=30, clock=clock).run_once()
    assert answers == [(True, 150.0)]  # held for another lease length from now
    assert statuses(store) == {"task-000": "succeeded"}


def test_a_renewal_asked_after_the_lease_was_rescued_is_refused(
    open_store: StoreFactory,
) -> None:
    """The stalled worker's guard: its renewal right before the side effect says no."""
    store = filled(open_store, 1)
    clock = Clock(100.0)
    answers: list[tuple[bool, bool]] = []

    def handler(task: Task, lease: HeldLease) -> None:
        clock.now = 200.0  # stalled past the lease; another worker rescues it
        assert Worker(TASKS, open_store(), lambda t, lease: None, worker_id="worker-2",
                      clock=lambda: 200.0).run_once() is None
        answers.append((lease.renew(), lease.lost))

    outcome = Worker(TASKS, store, handler, worker_id="worker-1", lease_seconds=30,
                     clock=clock).run_once()
    assert answers == [(False, True)]
    assert outcome is not None and outcome.refusal is not None
    stored = store.get("task-000")
    assert stored is not None and (stored.status, stored.last_error) == ("queued", "lease_expired")


def test_handlers_on_other_threads_renew_through_the_worker(open_store: StoreFactory) -> None:
    store = filled(open_store, 4)
    answers: list[bool] = []
    lock = threading.Lock()

    def handler(task: Task, lease: HeldLease) -> None:
        held = lease.renew()
        with lock:
            answers.append(held)

    Worker(TASKS, open_store, handler, concurrency=4, batch_size=2).run_batch()
    Worker(TASKS, open_store, handler, concurrency=2, batch_size=2).run(
        until_idle=True, install_signal_handlers=False)
    assert answers == [True] * 4
    assert set(statuses(store).values()) == {"succeeded"}
