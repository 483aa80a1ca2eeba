"""The generic worker on a real PostgreSQL server: concurrent drains, and idle workers
woken at once by the table's notify trigger (LISTEN/NOTIFY) rather than by polling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.postgres import connect_in, pg_schema, require_postgres, temporary_schema
from support.tasks import TASKS, Task, new_task

from lifecycles._worker import Idle, Worker
from lifecycles._worker_lease import HeldLease
from lifecycles.stores._base import Store, StoreUnavailable

__all__ = ["pg_schema"]  # a fixture, used by name

require_postgres()

from lifecycles.stores._postgres_notify import channel_of  # noqa: E402
from lifecycles.stores.postgres import PostgresStore  # noqa: E402 - needs psycopg


@pytest.fixture
def open_store() -> Iterator[Callable[[], Store[Task]]]:
    with temporary_schema() as schema:
        opened: list[Any] = []

        def opener() -> Store[Task]:
            connection = connect_in(schema)
            opened.append(connection)
            return PostgresStore(TASKS, connection)

        yield opener
        for connection in opened:
            connection.close()


def test_four_threads_drain_every_task_once(open_store: Callable[[], Store[Task]]) -> None:
    store = open_store()
    for n in range(80):
        store.insert(new_task(f"task-{n:03d}"))
    calls: list[str] = []
    lock = threading.Lock()

    def handler(task: Task, lease: HeldLease) -> None:
        with lock:
            calls.append(task.task_id)

    workers = [Worker(TASKS, open_store, handler, worker_id=f"w{n}", batch_size=5)
               for n in range(4)]
    threads = [threading.Thread(target=w.run, kwargs={"until_idle": True,
                                                      "install_signal_handlers": False})
               for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(calls) == [f"task-{n:03d}" for n in range(80)]
    assert store.count_by_status()["succeeded"] == 80


def test_an_idle_worker_is_woken_by_a_registration_long_before_its_poll(
    open_store: Callable[[], Store[Task]],
) -> None:
    store = open_store()
    started = threading.Event()
    worker = Worker(TASKS, open_store, lambda task, lease: started.set(),
                    idle=Idle(poll_interval=60.0, first=60.0))  # polling alone: a minute
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        time.sleep(0.5)  # the worker has found nothing and is waiting
        store.insert(new_task("task-late", now=time.time()))
        assert started.wait(20), "the notification did not wake the worker"
    finally:
        worker.stop()
        runner.join(10)
    assert store.count_by_status()["succeeded"] == 1


def test_the_trigger_notifies_claimable_writes_only(
    open_store: Callable[[], Store[Task]],
) -> None:
    store = open_store()
    assert isinstance(store, PostgresStore)
    ((schema,),) = store.run("SELECT current_schema()")
    listener = open_store()
    assert isinstance(listener, PostgresStore)
    listener.connection.execute(f'LISTEN "{channel_of(schema, store.schema.table)}"')

    def notified() -> int:
        return sum(1 for _ in listener.connection.notifies(timeout=0.3))

    store.insert(new_task("task-1"))
    assert notified() == 1  # a new, claimable task
    claimed = store.claim(TASKS.handling.inputs(0.0, "w", "token-1", 30.0))  # type: ignore[union-attr]
    assert claimed is not None and notified() == 0  # a claim leaves the claimable statuses
    # The trigger is made once: a second store on the table keeps it, without DDL.
    again = open_store()
    assert isinstance(again, PostgresStore)
    ((triggers,),) = again.run(
        "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'lc_notify_%'"
        " AND tgrelid = 'lifecycle_tasks'::regclass")
    assert triggers == 2


def test_a_role_that_may_not_create_the_trigger_still_works_by_polling() -> None:
    """A worker's role that owns the table but not the trigger's function (made by
    another role) cannot make the trigger: it polls instead, and works."""
    import secrets

    import psycopg

    dsn = require_postgres()
    role = f"lc_{secrets.token_hex(4)}"
    with temporary_schema() as schema, psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            owner = connect_in(schema)
            PostgresStore(TASKS, owner)  # the table, its trigger and its function
            owner.execute("DROP TRIGGER lc_notify_insert ON lifecycle_tasks")
            owner.execute(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
            owner.execute(f"ALTER TABLE lifecycle_tasks OWNER TO {role}")
            owner.close()
            worker_connection = connect_in(schema, user=role)
            store = PostgresStore(TASKS, worker_connection)  # no error: polling only
            assert store.run("SELECT count(*) FROM pg_trigger WHERE tgname = "
                             "'lc_notify_insert' AND tgrelid = 'lifecycle_tasks'::regclass"
                             ) == [(0,)]
            stop = store.listen(lambda: None)
            stop()
            store.insert(new_task("task-1"))
            done = Worker(TASKS, store, lambda task, lease: None, clock=lambda: 1.0).run_once()
            assert done is not None and done.status == "succeeded"
            worker_connection.close()
        finally:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@pytest.fixture
def pg(pg_schema: str) -> Iterator[Any]:
    from support.pg_proxy import proxied_connections

    yield from proxied_connections(pg_schema)


def test_a_worker_whose_claim_answer_was_lost_takes_that_lease_up_again(pg: Any) -> None:
    """The generic worker on a lifecycle without a holder field (tests/support/tasks.py):
    its claim's commit reached the server and the answer was cut; the worker opens the
    store again and its next pass runs that very lease, not another task, stranding none."""
    from support.pg_proxy import Cut, commit_of

    seed = PostgresStore(TASKS, pg.direct())
    for n in range(2):
        seed.insert(new_task(f"task-{n}"))
    ran: list[tuple[str, str]] = []
    worker = Worker(TASKS, lambda: PostgresStore(TASKS, pg.through()),
                    lambda task, lease: ran.append((task.task_id, lease.token)),
                    worker_id="worker-1", clock=lambda: 5.0)
    assert worker.store is not None  # opened, its schema checked, before the cut is armed
    pg.proxy.arm(commit_of("claimed AS (UPDATE"), Cut.AFTER_REPLY)
    with pytest.raises(StoreUnavailable) as lost:
        worker.run_once()
    assert lost.value.outcome_unknown is True
    leased = {task.task_id: task for task in seed.scan() if task.status == "running"}
    assert list(leased) == ["task-0"]
    worker._drop_store()  # what the loop does after StoreUnavailable
    outcome = worker.run_once()
    assert outcome is not None and outcome.status == "succeeded"
    assert ran == [("task-0", leased["task-0"].lease_token)]  # that very lease
    assert seed.count_by_status()["queued"] == 1  # task-1 untouched, nothing stranded


def test_a_worker_whose_completion_never_reached_the_server_runs_that_lease_again(
    pg: Any,
) -> None:
    """The completion was sent and cut before the server read it: the lease is still the
    worker's. Its next pass takes it up again (the handler runs again: at-least-once) and
    finishes it, before any other task."""
    from support.pg_proxy import Cut, commit_of

    seed = PostgresStore(TASKS, pg.direct())
    for n in range(2):
        seed.insert(new_task(f"task-{n}"))
    ran: list[tuple[str, str]] = []
    worker = Worker(TASKS, lambda: PostgresStore(TASKS, pg.through()),
                    lambda task, lease: ran.append((task.task_id, lease.token)),
                    worker_id="worker-1", clock=lambda: 5.0)
    assert worker.store is not None
    writes = commit_of('UPDATE "lifecycle_tasks" SET')
    pg.proxy.arm(lambda exchange: writes(exchange) and not exchange.runs("claimed AS ("),
                 Cut.BEFORE_FORWARD)  # the completion, not the one-statement claim
    with pytest.raises(StoreUnavailable):
        worker.run_once()
    worker._drop_store()
    outcome = worker.run_once()
    assert outcome is not None and (outcome.key, outcome.status) == ("task-0", "succeeded")
    (first, token), again = ran
    assert again == (first, token) == ("task-0", token)  # the same lease, run again
    assert seed.count_by_status() == {"queued": 1, "running": 0, "succeeded": 1, "failed": 0}
