"""The worker's batch mode with one synchronous handler at a time: each turn of ``run``
claims a batch in one transaction (one statement on PostgreSQL), calls the handler on its
records one after another in the calling thread, and writes them together.

On the task lifecycle made for these tests (tests/support/tasks.py), on the memory store,
a SQLite file and PostgreSQL, its handling declared without the renewal row: a lifecycle
with one runs its handlers on the worker's pool, so that renewals go on meanwhile.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.postgres import connect_in, require_postgres, temporary_schema
from support.tasks import TASKS, Task, TaskStatus, new_task

from lifecycles._worker import Worker
from lifecycles._worker_lease import HeldLease, WorkOutcome
from lifecycles.stores._base import Store
from lifecycles.stores._memory import MemoryStore
from lifecycles.stores.sqlite import SQLiteStore

assert TASKS.handling is not None
UNRENEWED = attrs.evolve(TASKS.handling, renewal=None)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store[Task]]:
    """A store holding twelve due tasks. Without a server the PostgreSQL case skips from
    support/postgres.py (a skip in the fixture would be reported per test)."""
    with ExitStack() as stack:
        opened: Store[Task]
        if request.param == "memory":
            opened = MemoryStore(TASKS)
        elif request.param == "sqlite":
            connection = stack.enter_context(closing(sqlite3.connect(tmp_path / "t.db")))
            opened = SQLiteStore(TASKS, connection)
        else:
            require_postgres()
            schema = stack.enter_context(temporary_schema())
            from lifecycles.stores.postgres import PostgresStore

            opened = PostgresStore(TASKS, stack.enter_context(connect_in(schema)))
        opened.insert_many([new_task(f"task-{n:02d}", now=float(n)) for n in range(12)])
        yield opened


def claims_of(store: Store[Task]) -> list[int]:
    """Records each batch claim's limit (the store's own claim_many runs as before)."""
    limits: list[int] = []
    claim_many = store.claim_many

    def counted(inputs_for: Callable[[int], Any], limit: int) -> list[Task]:
        limits.append(limit)
        return claim_many(inputs_for, limit)

    store.claim_many = counted  # type: ignore[method-assign]
    return limits


def test_each_turn_claims_a_batch_and_runs_it_in_the_calling_thread(
    store: Store[Task],
) -> None:
    limits = claims_of(store)
    threads: list[int] = []
    outcomes: list[WorkOutcome[Task]] = []

    def handler(task: Task, lease: HeldLease) -> None:
        threads.append(threading.get_ident())

    Worker(TASKS, store, handler, handling=UNRENEWED, batch_size=5, clock=lambda: 100.0,
           on_outcome=outcomes.append).run(until_idle=True, install_signal_handlers=False)
    assert limits == [5, 5, 5, 5]  # 5, 5, 2, then nothing due
    assert threads == [threading.get_ident()] * 12
    assert sorted(o.key for o in outcomes) == [f"task-{n:02d}" for n in range(12)]
    assert {o.status for o in outcomes} == {"succeeded"}
    assert store.count_by_status()["succeeded"] == 12


def test_a_stop_lets_the_batch_in_hand_finish_and_claims_no_more(store: Store[Task]) -> None:
    limits = claims_of(store)
    called: list[str] = []
    worker: Worker[Task, Any]

    def handler(task: Task, lease: HeldLease) -> None:
        called.append(task.task_id)
        if len(called) == 2:
            worker.stop()  # as SIGTERM does: no new claims, the records in hand finish

    worker = Worker(TASKS, store, handler, handling=UNRENEWED, batch_size=5,
                    clock=lambda: 100.0)
    worker.run(install_signal_handlers=False)
    assert limits == [5]
    assert called == [f"task-{n:02d}" for n in range(5)]  # claim order: due time first
    counts = store.count_by_status()
    assert (counts["succeeded"], counts["queued"], counts["running"]) == (5, 7, 0)
    left = [task for task in store.scan() if task.status == TaskStatus.QUEUED]
    assert all(task.lease_token is None for task in left)


def test_with_a_renewal_row_the_handlers_run_on_the_pool(store: Store[Task]) -> None:
    """A handler run in the loop's own thread would hold up its renewals."""
    threads: list[int] = []
    Worker(TASKS, store, lambda task, lease: threads.append(threading.get_ident()),
           batch_size=5, clock=lambda: 100.0).run(until_idle=True,
                                                  install_signal_handlers=False)
    assert len(threads) == 12 and threading.get_ident() not in threads
