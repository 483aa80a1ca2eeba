"""Every store agrees with every other, record for record, after every step.

One Hypothesis ``RuleBasedStateMachine`` drives the tests' leased tasks
(tests/support/tasks.py) on all stores at once (memory, SQLite and files, PostgreSQL
when ``LIFECYCLES_TEST_POSTGRES_DSN`` names a server, each with the schema or layout it
derives from the record) with the same operations: submit, claim, renew, succeed, fail
an attempt (retryable or not, with an error a record may hold, one it may not, or none),
move the clock so that leases expire, recover expired leases. Each operation must have
the same outcome everywhere (the same new record, or the same refusal code), and after
every step the stores must hold the same records, counts, due and expired numbers.
Lease tokens are injected, so records are compared whole, tokens included.

The monitor's exact production schemas are held to the same agreement in
tests/monitor/test_monitor_store_agreement.py.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support.postgres import DSN, connect_in, create_schema, drop_schema, require_postgres
from support.tasks import TASKS, Task, TaskInputs, new_task

from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines._declaration import TransitionRefused
from lifecycles.stores._base import StaleRecord, Store
from lifecycles.stores._memory import MemoryStore

MAX_TASKS = 5
WORKERS = ("w1", "w2", "w3")
STALE = st.sampled_from([False, False, False, True])  # a stale token one time in four
# An error a failed task may hold, one that breaks error_code_syntax, and none (which a
# task failed for good may not hold: failed_with_an_error).
ERRORS = st.sampled_from(["worker.crashed", "worker.crashed", "Not A Code", None])

Outcome = tuple[str, Any]
Close = Callable[[], None]


@attrs.frozen
class Kind:
    """One kind of store, opened empty for the tasks in a place of its own."""

    name: str
    open: Callable[[], tuple[Store[Task], Close]]
    postgres: bool = False


def _memory() -> tuple[Store[Task], Close]:
    return MemoryStore(TASKS), lambda: None


def _sqlite() -> tuple[Store[Task], Close]:
    from lifecycles.stores.sqlite import SQLiteStore

    directory = tempfile.TemporaryDirectory(prefix="lifecycles-sqlite-")
    connection = sqlite3.connect(Path(directory.name) / "tasks.db")

    def close() -> None:
        connection.close()
        directory.cleanup()

    return SQLiteStore(TASKS, connection), close


def _files() -> tuple[Store[Task], Close]:
    from lifecycles.stores._files import FilesStore

    directory = tempfile.TemporaryDirectory(prefix="lifecycles-files-")
    return FilesStore(TASKS, Path(directory.name) / "tasks"), directory.cleanup


def _postgres() -> tuple[Store[Task], Close]:
    from lifecycles.stores.postgres import PostgresStore

    schema = create_schema()
    connection = connect_in(schema)

    def close() -> None:
        connection.close()
        drop_schema(schema)

    return PostgresStore(TASKS, connection), close


BY_NAME = {kind.name: kind for kind in (
    Kind("memory", _memory), Kind("sqlite", _sqlite), Kind("files", _files),
    Kind("postgres", _postgres, postgres=True),
)}
LOCAL = ("memory", "sqlite", "files")
EVERY = (*LOCAL, "postgres")


def outcome(action: Callable[[], Any]) -> Outcome:
    """What an operation did: its result, or the stable code it was refused with."""
    try:
        return ("done", action())
    except (TransitionRefused, StaleRecord, InvariantViolation) as refusal:
        return ("refused", refusal.code)


class StoresAgree(RuleBasedStateMachine):
    """The same operations on every store; they must never disagree."""

    kinds: Sequence[Kind] = ()

    def __init__(self) -> None:
        super().__init__()
        self.closes: list[Close] = []
        self.stores: list[Store[Task]] = []
        for kind in self.kinds:
            store, close = kind.open()
            self.stores.append(store)
            self.closes.append(close)
        self.now = 1000.0
        self.tasks = 0
        self.tokens = 0

    def teardown(self) -> None:
        for close in self.closes:
            close()

    def same_everywhere(self, act: Callable[[Store[Task]], Any]) -> Outcome:
        outcomes = [outcome(lambda store=store: act(store)) for store in self.stores]
        for kind, seen in zip(self.kinds[1:], outcomes[1:], strict=True):
            assert seen == outcomes[0], f"{kind.name} disagrees with {self.kinds[0].name}"
        return outcomes[0]

    def pick(self, data: st.DataObject) -> str:
        """Mostly a task some worker holds (so renewals and completions land), sometimes
        any task."""
        running = [r.task_id for r in self.stores[0].scan() if r.lease_token is not None]
        anything = [f"t{i}" for i in range(self.tasks)]
        if running and data.draw(st.sampled_from([True, True, True, False]), label="held?"):
            return data.draw(st.sampled_from(running), label="key")
        return data.draw(st.sampled_from(anything), label="key")

    def lease_of(self, key: str, stale: bool, **changes: Any) -> TaskInputs:
        """The holder's inputs for ``key`` now, or a stale token's."""
        record = self.stores[0].get(key)
        owner = record.worker_id if record is not None else None
        token = record.lease_token if record is not None else None
        if stale or token is None:
            return TaskInputs(now=self.now, worker_id=owner or "w1", lease_token="t-stale",
                              **changes)
        return TaskInputs(now=self.now, worker_id=owner, lease_token=token, **changes)

    def fire_on(self, key: str, trigger: str, inputs: TaskInputs) -> None:
        def act(store: Store[Task]) -> Any:
            with store.transaction():
                record = store.get(key)
                assert record is not None
                return store.fire(record, trigger, inputs)

        self.same_everywhere(act)

    # -- rules: the verbs -----------------------------------------------------------

    @precondition(lambda self: self.tasks < MAX_TASKS)
    @rule(max_attempts=st.integers(1, 4))
    def submit(self, max_attempts: int) -> None:
        record = new_task(f"t{self.tasks}", now=self.now, max_attempts=max_attempts)
        self.tasks += 1
        self.same_everywhere(lambda store: store.insert(TASKS.create(record)))

    @rule(worker=st.sampled_from(WORKERS), lease_seconds=st.sampled_from([5.0, 45.0]))
    def claim(self, worker: str, lease_seconds: float) -> None:
        self.tokens += 1
        inputs = TaskInputs(now=self.now, worker_id=worker, lease_token=f"t{self.tokens}",
                            lease_seconds=lease_seconds)
        self.same_everywhere(lambda store: store.claim(inputs))

    @precondition(lambda self: self.tasks > 0)
    @rule(data=st.data(), stale=STALE, lease_seconds=st.sampled_from([5.0, 45.0]))
    def renew(self, data: st.DataObject, stale: bool, lease_seconds: float) -> None:
        key = self.pick(data)
        self.fire_on(key, "renew", self.lease_of(key, stale, lease_seconds=lease_seconds))

    @precondition(lambda self: self.tasks > 0)
    @rule(data=st.data(), stale=STALE)
    def succeed(self, data: st.DataObject, stale: bool) -> None:
        key = self.pick(data)
        self.fire_on(key, "succeed", self.lease_of(key, stale))

    @precondition(lambda self: self.tasks > 0)
    @rule(data=st.data(), retryable=st.booleans(), error=ERRORS, stale=STALE)
    def fail(self, data: st.DataObject, retryable: bool, error: str | None,
             stale: bool) -> None:
        key = self.pick(data)
        self.fire_on(key, "fail", self.lease_of(key, stale, error=error, retryable=retryable))

    @rule(seconds=st.sampled_from([1.0, 6.0, 40.0, 400.0]))
    def move_the_clock(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def recover_expired(self) -> None:
        inputs = TaskInputs(now=self.now)

        def act(store: Store[Task]) -> Any:
            with store.transaction():
                return sorted(store.recover_expired(inputs), key=TASKS.key_of)

        self.same_everywhere(act)

    # -- after every step: the predicates ---------------------------------------------

    @invariant()
    def every_store_holds_the_same_records(self) -> None:
        self.same_everywhere(lambda store: list(store.scan()))

    @invariant()
    def every_store_counts_the_same(self) -> None:
        self.same_everywhere(lambda store: (
            store.count_by_status(), store.count_due(self.now), store.count_expired(self.now)
        ))


def agreement_cases() -> list[Any]:
    cases = [pytest.param(LOCAL, id="-".join(LOCAL))]
    if DSN is None:
        cases.append(pytest.param(EVERY, id="-".join(EVERY) + "-unavailable"))
    else:
        cases = [pytest.param(EVERY, id="-".join(EVERY))]  # a superset of the local run
    return cases


@pytest.mark.parametrize("names", agreement_cases())
def test_every_store_agrees_record_for_record(names: Sequence[str]) -> None:
    if any(BY_NAME[name].postgres for name in names):
        require_postgres()  # skips from the one shared line without a server

    class Machine(StoresAgree):
        kinds = tuple(BY_NAME[name] for name in names)

    run_state_machine_as_test(Machine)
