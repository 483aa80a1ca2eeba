"""Batches on PostgreSQL (lifecycles.stores._postgres_batch): a few statements per batch,
whatever its size, and the answer of the one-record path, record by record.

Each statement is held to the path it replaces on the same data, by Hypothesis, on the
task lifecycle made for these tests (tests/support/tasks.py) and on the monitor (its
exact schema keeps notification_id unique, and its claim guard refuses a record whose
failures are spent, so a batch claim has candidates to pass over):

* ``insert_many`` against ``Store.insert_many``, an ``insert`` each: new, stored and
  repeated keys, and duplicates of another unique value;
* ``claim_many`` (its one statement first) against the protocol in a transaction
  (``lease.claim_in_transaction``): due, not yet due, refused and broken candidates,
  live and expired leases;
* ``put_many`` against the writes back to back: fresh, stale and re-encoded records,
  inside and outside a transaction.

Then: how many statements each sends (counted at the driver: every cursor execution,
every ``COPY``, every transaction begun), rules refused in SQL leaving nothing written,
and the staging table surviving a rolled-back first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.monitor import CAPABILITIES
from support.postgres import connect_in, require_postgres, temporary_schema
from support.tasks import TASKS, Task, TaskInputs, TaskStatus, new_task

from lifecycles._worker_steps import LeaseWork
from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.machines._work import Returned
from lifecycles.machines.monitor import MONITOR, MonitorInputs, new_record
from lifecycles.monitor.schema import MonitorSchema
from lifecycles.stores._base import SchemaMismatch, Store, StoreDamaged, UniqueViolation

require_postgres()

from lifecycles.stores._postgres_batch import batches  # noqa: E402
from lifecycles.stores._sql import SQLStore  # noqa: E402
from lifecycles.stores.postgres import PostgresStore  # noqa: E402 - needs psycopg

pytestmark = pytest.mark.postgres

NOW = 100.0
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- stores, one per lifecycle, emptied before each example ---------------------------


@pytest.fixture(scope="module")
def stores() -> Iterator[Callable[[str], PostgresStore[Any]]]:
    """``stores(name)``: the module's task or monitor store (each in its own schema)."""
    opened: dict[str, PostgresStore[Any]] = {}
    with temporary_schema() as tasks_schema, temporary_schema() as monitor_schema:
        connections = [connect_in(tasks_schema), connect_in(monitor_schema)]
        opened["tasks"] = PostgresStore(TASKS, connections[0])
        opened["monitor"] = PostgresStore(MONITOR, connections[1],
                                          MonitorSchema(CAPABILITIES, MONITOR))
        try:
            yield opened.__getitem__
        finally:
            for connection in connections:
                connection.close()


def emptied(store: PostgresStore[Any]) -> PostgresStore[Any]:
    store.connection.execute(f"DELETE FROM {store.schema.table}")  # the test's own table
    return store


def rows_of(store: PostgresStore[Any]) -> list[tuple[Any, ...]]:
    return store.connection.execute(  # never prepared: a test alters the table
        f"SELECT * FROM {store.schema.table} ORDER BY 1", prepare=False).fetchall()


class Sent:
    """What the store sends, counted at the driver: each statement a cursor runs, each
    ``COPY``, each transaction begun (``BEGIN`` or a savepoint)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy
        transaction = psycopg.Connection.transaction

        def counted_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.sent.append(str(query).split(" ", 1)[0])
            return execute(cursor, query, *args, **kwargs)

        def counted_copy(cursor: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
            self.sent.append("COPY")
            return copy(cursor, statement, *args, **kwargs)

        def counted_transaction(connection: Any, *args: Any, **kwargs: Any) -> Any:
            self.sent.append("BEGIN")
            return transaction(connection, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
        monkeypatch.setattr(psycopg.Cursor, "copy", counted_copy)
        monkeypatch.setattr(psycopg.Connection, "transaction", counted_transaction)

    @contextmanager
    def counting(self) -> Iterator[list[str]]:
        """The statements sent inside the block (the first word of each)."""
        self.sent.clear()
        seen: list[str] = []
        yield seen
        seen.extend(self.sent)


# --- records ------------------------------------------------------------------------


def task(number: int, *, due: float = 50.0, max_attempts: int = 3) -> Task:
    return new_task(f"task-{number}", now=due, max_attempts=max_attempts)


def running_task(number: int, *, due: float, expires: float) -> Task:
    """A task leased before the test's claims, its lease expiring at ``expires``."""
    return attrs.evolve(task(number, due=due), status=TaskStatus.RUNNING, worker_id="w0",
                        lease_token=f"old-{number}", lease_expires_at=expires, updated_at=due)


def monitor_record(key: int, notification: int | None = None, *, due: float = 50.0,
                   failures: int = 0) -> Any:
    record = new_record(
        event_id=f"e{key}", notification_id=f"n{key if notification is None else notification}",
        site_id="site-1", terminal_status="published", notification_sha256="a" * 64,
        max_failures=3, now=due)
    return attrs.evolve(record, failures=failures, poll_attempts=failures)


def task_inputs(n: int, *, worker: str = "w1") -> TaskInputs:
    return TaskInputs(now=NOW, worker_id=worker, lease_token=f"t{n}", lease_seconds=30.0)


def monitor_inputs(n: int) -> MonitorInputs:
    return MonitorInputs(now=NOW, worker_id="w1", lease_token=f"t{n}", lease_seconds=30.0)


def answered(entries: Sequence[Any]) -> list[Any]:
    """Entries with each refusal as its type: two refusals of one record are equal."""
    return [type(entry) if isinstance(entry, UniqueViolation) else entry for entry in entries]


def inserted_each(store: Store[Any], records: Sequence[Any]) -> None:
    """``records`` stored by an insert each; one duplicating a stored unique value is
    left out (its entry is the refusal)."""
    Store.insert_many(store, records)


# --- insert_many: the answer of an insert each --------------------------------------------


def insert_both_ways(store: PostgresStore[Any], stored: Sequence[Any],
                     batch: Sequence[Any]) -> None:
    outcomes = []
    for insert_many in (lambda: Store.insert_many(store, batch), lambda: store.insert_many(batch)):
        emptied(store)
        inserted_each(store, stored)
        outcomes.append((answered(insert_many()), list(store.scan())))
    assert outcomes[1] == outcomes[0]


@PROPERTY
@given(stored=st.lists(st.integers(0, 5), max_size=4, unique=True),
       batch=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4)), min_size=1, max_size=12))
def test_insert_many_answers_as_an_insert_each_of_tasks(
    stores: Callable[[str], PostgresStore[Any]], stored: list[int],
    batch: list[tuple[int, int]],
) -> None:
    # Stored records due at 1.0, the batch's at 2.0: an answer tells which one it is.
    insert_both_ways(stores("tasks"), [task(n, due=1.0) for n in stored],
                     [task(n, due=2.0, max_attempts=m) for n, m in batch])


@PROPERTY
@given(stored=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=4),
       batch=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=12))
def test_insert_many_answers_as_an_insert_each_with_unique_notifications(
    stores: Callable[[str], PostgresStore[Any]], stored: list[tuple[int, int]],
    batch: list[tuple[int, int]],
) -> None:
    insert_both_ways(stores("monitor"), [monitor_record(k, n, due=1.0) for k, n in stored],
                     [monitor_record(k, n, due=2.0) for k, n in batch])


# --- claim_many: the protocol's answer ----------------------------------------------------

TASK_KINDS = st.sampled_from(["due", "later", "due-now", "leased", "expired", "succeeded"])


def task_of(number: int, kind: str) -> Task:
    if kind == "leased":
        return running_task(number, due=10.0, expires=NOW + 50)
    if kind == "expired":
        return running_task(number, due=10.0, expires=NOW)  # expiry <= now: expired
    if kind == "succeeded":
        return attrs.evolve(task(number), status=TaskStatus.SUCCEEDED)
    return task(number, due={"due": 50.0 - number, "later": 150.0, "due-now": NOW}[kind])


def claim_both_ways(store: PostgresStore[Any], records: Sequence[Any], limit: int,
                    inputs_for: Callable[[int], Any], sent: Sent) -> list[str]:
    """Claim with the protocol in a transaction, then (the same records again) as the store
    claims; the answers and the records stored after must be equal. What the store sent."""
    outcomes = []
    sent_by_each = []
    for store_claim in (
        lambda: lease.claim_in_transaction(store, store.lifecycle, inputs_for, limit),
        lambda: store.claim_many(inputs_for, limit),
    ):
        emptied(store)
        inserted_each(store, records)
        with sent.counting() as statements:
            granted = store_claim()
        outcomes.append((granted, list(store.scan())))
        sent_by_each.append(statements)
    assert outcomes[1] == outcomes[0]
    return sent_by_each[1]


@PROPERTY
@given(kinds=st.lists(TASK_KINDS, min_size=1, max_size=8), limit=st.integers(1, 6))
def test_claim_many_answers_as_the_protocol_on_tasks(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch,
    kinds: list[str], limit: int,
) -> None:
    records = [task_of(number, kind) for number, kind in enumerate(kinds)]
    sent = Sent(monkeypatch)
    statements = claim_both_ways(stores("tasks"), records, limit, task_inputs, sent)
    if "expired" not in kinds:  # nothing to rescue: one statement settles it
        assert statements == ["WITH"]
    else:  # the statement leases nothing; the protocol rescues and claims
        assert statements[0] == "WITH" and "BEGIN" in statements


@PROPERTY
@given(candidates=st.lists(st.tuples(st.sampled_from([40.0, NOW, 150.0]), st.sampled_from([0, 3])),
                           min_size=1, max_size=8),
       limit=st.integers(1, 6))
def test_claim_many_passes_over_refused_candidates_as_the_protocol(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch,
    candidates: list[tuple[float, int]], limit: int,
) -> None:
    """The monitor's claim guard refuses a record whose failures are spent (3 of 3): it
    is passed over, never written, and the records behind it are claimed."""
    records = [monitor_record(key, due=due, failures=failures)
               for key, (due, failures) in enumerate(candidates)]
    statements = claim_both_ways(stores("monitor"), records, limit, monitor_inputs,
                                 Sent(monkeypatch))
    assert statements == ["WITH"]


# --- put_many: the writes back to back ----------------------------------------------------

FATES = st.sampled_from(["fresh", "stale", "copy"])
STEPS = st.sampled_from(["succeed", "fail"])


def put_both_ways(store: PostgresStore[Any], plan: Sequence[tuple[str, str]],
                  in_transaction: bool) -> None:
    outcomes = []
    for put_many in (lambda writes: SQLStore.put_many(store, writes), store.put_many):
        emptied(store)
        store.insert_many([task(number) for number in range(len(plan))])
        held = store.claim_many(task_inputs, len(plan))
        assert len(held) == len(plan)
        writes = []
        for record, (fate, trigger) in zip(held, plan, strict=True):
            inputs = task_inputs(int(record.task_id.split("-")[1]))
            if fate == "stale":  # renewed since it was read: the write must be refused
                with store.transaction():
                    store.fire(record, "renew", attrs.evolve(inputs, now=NOW + 1))
            before = attrs.evolve(record) if fate == "copy" else record  # encoded anew
            row = TASKS.select_row(trigger, before, inputs)
            writes.append((before, TASKS.apply_row(row, before, inputs), row))
        if in_transaction:
            with store.transaction():
                written = put_many(writes)
        else:
            written = put_many(writes)
        outcomes.append((written, list(store.scan())))
    assert outcomes[1] == outcomes[0]
    assert outcomes[0][0] == [fate != "stale" for fate, _ in plan]


@PROPERTY
@given(plan=st.lists(st.tuples(FATES, STEPS), min_size=2, max_size=8),
       in_transaction=st.booleans())
def test_put_many_answers_as_the_writes_back_to_back(
    stores: Callable[[str], PostgresStore[Any]], plan: list[tuple[str, str]],
    in_transaction: bool,
) -> None:
    put_both_ways(stores("tasks"), plan, in_transaction)


def test_a_record_written_twice_in_one_batch_is_written_in_turn(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(0), task(1)])
    first, second = store.claim_many(task_inputs, 2)
    renew = TASKS.select_row("renew", first, task_inputs(0))
    renewed = TASKS.apply_row(renew, first, attrs.evolve(task_inputs(0), now=NOW + 1))
    done = TASKS.select_row("succeed", renewed, task_inputs(0))
    finished = TASKS.apply_row(done, renewed, task_inputs(0))
    with store.transaction():
        written = store.put_many([(first, renewed, renew), (renewed, finished, done),
                                  (first, finished, done)])  # the last: stale by then
    assert written == [True, True, False]
    assert store.get("task-0") == finished and store.get("task-1") == second


# --- how many statements a batch costs -----------------------------------------------------


@pytest.mark.parametrize("size", [2, 200])
def test_insert_many_costs_the_same_statements_whatever_its_size(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch, size: int,
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(-1)])  # the session's staging table, created once
    sent = Sent(monkeypatch)
    with sent.counting() as new:
        store.insert_many([task(number) for number in range(size)])
    # BEGIN, the schema probe, COPY, the INSERT (emptying the staging table), COMMIT.
    assert new == ["BEGIN", "SELECT", "COPY", "WITH"]
    with sent.counting() as some_stored:  # the stored keys are read back, in one SELECT
        answers = store.insert_many([task(number, due=9.0) for number in range(size * 2)])
    assert some_stored == ["BEGIN", "SELECT", "COPY", "WITH", "SELECT"]
    assert answers == [task(number) for number in range(size)] + [
        task(number, due=9.0) for number in range(size, size * 2)]


@pytest.mark.parametrize("size", [2, 50])
def test_put_many_is_one_statement_inside_a_transaction_and_outside(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch, size: int,
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(number) for number in range(size)])
    held = store.claim_many(task_inputs, size)

    def finishing(records: Sequence[Task], n: int) -> list[tuple[Task, Task, Row]]:
        writes = []
        for record in records:
            inputs = attrs.evolve(task_inputs(0), lease_token=record.lease_token, now=NOW + n)
            row = TASKS.select_row("renew", record, inputs)
            writes.append((record, TASKS.apply_row(row, record, inputs), row))
        return writes

    sent = Sent(monkeypatch)
    writes = finishing(held, 1)
    with sent.counting() as inside, store.transaction():
        assert store.put_many(writes) == [True] * size
    assert inside == ["BEGIN", "SELECT", "UPDATE"]
    renewed = [after for _, after, _ in writes]
    with sent.counting() as outside:
        assert store.put_many(finishing(renewed, 2)) == [True] * size
    assert outside == ["UPDATE"]  # a statement of its own, the schema guards in it


@pytest.mark.parametrize("size", [2, 50])
def test_claim_many_is_one_statement(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch, size: int,
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(number) for number in range(size + 1)])
    sent = Sent(monkeypatch)
    with sent.counting() as claimed:
        granted = store.claim_many(task_inputs, size)
    assert claimed == ["WITH"]
    assert [record.lease_token for record in granted] == [f"t{n}" for n in range(size)]
    # Claim order: the due time (the same for all), then the key, as text.
    assert [record.task_id for record in granted] == sorted(
        f"task-{number}" for number in range(size + 1))[:size]
    with sent.counting() as empty:
        store.claim_many(task_inputs, size)  # the last one
        assert store.claim_many(task_inputs, size) == []
    assert empty == ["WITH", "WITH"]  # nothing due, nothing expired: settled in place


def test_a_workers_batch_completion_is_one_statement_and_a_stale_record_is_decided_alone(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker writes a finished batch with put_many outside any transaction (one
    statement, its schema guards in it); only a record found changed takes a transaction,
    where the table decides again on the record as stored."""
    store = emptied(stores("tasks"))
    store.insert_many([task(number) for number in range(4)])
    work: LeaseWork[Task, TaskInputs] = LeaseWork(TASKS, TASKS.handling)
    claimed = work.claim(store, "w1", NOW, 30.0, limit=4)
    sent = Sent(monkeypatch)
    with sent.counting() as statements:
        outcomes = work.finish_many(store, [(c, Returned(None), 0.0) for c in claimed[:2]],
                                    NOW + 1)
    assert statements == ["UPDATE"]
    assert [o.status for o in outcomes] == ["succeeded", "succeeded"]
    # Renewed by its holder since it was claimed: stale as claimed, still held.
    stale = claimed[2]
    with store.transaction():
        store.fire(stale.record, "renew", attrs.evolve(stale.inputs, now=NOW + 1))
    with sent.counting() as statements:
        outcomes = work.finish_many(store, [(c, Returned(None), 0.0) for c in claimed[2:]],
                                    NOW + 2)
    assert statements[0] == "UPDATE" and statements.count("BEGIN") == 1
    assert [o.status for o in outcomes] == ["succeeded", "succeeded"]
    assert store.count_by_status()["succeeded"] == 4


# --- rules refused in SQL: nothing written ------------------------------------------------


def test_a_record_broken_behind_the_stores_back_is_refused_and_nothing_is_claimed(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(0), task(1), task(2)])
    # A queued task holding a worker breaks lease_fields_iff_running.
    store.connection.execute(
        f"UPDATE {store.schema.table} SET worker_id = 'w9' WHERE task_id = 'task-1'")
    before = rows_of(store)
    assert store.claim_many_in_place(task_inputs, 3) is lease.LEFT_TO_PROTOCOL
    assert rows_of(store) == before
    with pytest.raises(InvariantViolation) as refused:  # the protocol reads it: refused
        store.claim_many(task_inputs, 3)
    assert refused.value.code == "tasks.state_invalid"
    assert rows_of(store) == before


def test_a_record_as_written_breaking_a_rule_is_never_committed(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    """A worker id its token rule refuses (a caller would be refused by the field rule in
    Python first; the store is called directly): the check of the records as written
    fails the statement before it commits."""
    store = emptied(stores("tasks"))
    store.insert_many([task(0), task(1)])
    before = rows_of(store)
    assert store.claim_many_in_place(lambda n: task_inputs(n, worker="w 1"), 2) is (
        lease.LEFT_TO_PROTOCOL)
    assert rows_of(store) == before


def test_the_statement_must_write_what_the_table_says(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(0), task(1)])
    plan = batches(store)
    claims = plan.claims()
    assert not isinstance(claims, str)
    types = ("text", "text", "double precision")  # worker_id, lease_token, lease_seconds
    assert claims.per_grant == ("worker_id", "lease_token", "lease_seconds")
    statement = plan.claim_statement(claims, types)
    # A lease twice as long as the table's effect grants.
    tampered = statement.statement.replace('"lease_expires_at" = ($', '"lease_expires_at" = 2 * ($')
    assert tampered != statement.statement
    plan._claim_statements[types] = attrs.evolve(statement, statement=tampered)
    try:
        with pytest.raises(StoreDamaged) as damaged:
            store.claim_many(task_inputs, 2)
    finally:
        plan._claim_statements.clear()
    assert damaged.value.code == store.schema.error("database_integrity")


def test_a_batch_claim_left_to_the_protocol_grants_the_inputs_first_minted(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    """An expired lease: the statement, given every grant's inputs, leases nothing, and
    the protocol rescues and claims with those very inputs, asking for none again (a
    worker pairs the n-th record leased with the n-th inputs it minted)."""
    store = emptied(stores("tasks"))
    store.insert_many([running_task(0, due=10.0, expires=NOW), task(1), task(2)])
    minted: list[TaskInputs] = []

    def fresh_inputs(n: int) -> TaskInputs:
        minted.append(task_inputs(len(minted) + 100))  # a new token at every call
        return minted[-1]

    granted = store.claim_many(fresh_inputs, 3)
    assert len(minted) == 3  # once per grant, for the statement; the protocol reused them
    assert [record.task_id for record in granted] == ["task-1", "task-2"]
    assert [record.lease_token for record in granted] == [i.lease_token for i in minted[:2]]
    rescued = store.get("task-0")  # rescued first: queued again, after a backoff
    assert rescued is not None and (rescued.status, rescued.attempts) == (TaskStatus.QUEUED, 1)


def test_grants_reading_different_clocks_are_left_to_the_protocol(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(0), task(1)])
    before = rows_of(store)
    assert store.claim_many_in_place(
        lambda n: attrs.evolve(task_inputs(n), now=NOW + n), 2) is lease.LEFT_TO_PROTOCOL
    assert rows_of(store) == before


def test_a_changed_binding_leases_nothing_and_is_refused() -> None:
    """Another program rebinds the monitor's database (its meta row): the statement's
    schema guard leases nothing, and the protocol's probe refuses the claim."""
    with temporary_schema() as schema, connect_in(schema) as connection, connect_in(
            schema) as other:
        store = PostgresStore(MONITOR, connection, MonitorSchema(CAPABILITIES, MONITOR))
        store.insert_many([monitor_record(0), monitor_record(1)])
        other.execute("UPDATE cms_source_terminal_processing_meta"
                      " SET expected_capabilities_sha256 = %s", ("e" * 64,))
        before = rows_of(store)
        assert store.claim_many_in_place(monitor_inputs, 2) is lease.LEFT_TO_PROTOCOL
        assert rows_of(store) == before
        with pytest.raises(SchemaMismatch) as altered:
            store.claim_many(monitor_inputs, 2)
        assert altered.value.code == "terminal_processing_monitor.schema_altered"
        assert rows_of(store) == before


def test_an_invalid_record_sends_nothing(
    stores: Callable[[str], PostgresStore[Any]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = emptied(stores("tasks"))
    broken = attrs.evolve(task(1), worker_id="w1")  # queued, yet held by a worker
    sent = Sent(monkeypatch)
    with sent.counting() as statements, pytest.raises(InvariantViolation) as refused:
        store.insert_many([task(0), broken, task(2)])
    assert (refused.value.code, refused.value.keys) == ("tasks.state_invalid", ("task-1",))
    assert statements == [] and rows_of(store) == []


def test_put_many_outside_a_transaction_refuses_an_altered_schema(
    stores: Callable[[str], PostgresStore[Any]], pg_other: Any,
) -> None:
    store = emptied(stores("tasks"))
    store.insert_many([task(0), task(1)])
    held = store.claim_many(task_inputs, 2)
    writes = []
    for record in held:
        inputs = attrs.evolve(task_inputs(0), lease_token=record.lease_token)
        row = TASKS.select_row("succeed", record, inputs)
        writes.append((record, TASKS.apply_row(row, record, inputs), row))
    pg_other(store).execute(f"ALTER TABLE {store.schema.table} ADD COLUMN extra text")
    try:
        before = rows_of(store)
        with pytest.raises(SchemaMismatch) as altered:
            store.put_many(writes)
        assert altered.value.code == store.schema.error("schema_altered")
        assert rows_of(store) == before
    finally:
        pg_other(store).execute(f"ALTER TABLE {store.schema.table} DROP COLUMN extra")


@pytest.fixture
def pg_other() -> Iterator[Callable[[PostgresStore[Any]], Any]]:
    """Another connection into a store's schema: another program."""
    opened: list[Any] = []

    def other(store: PostgresStore[Any]) -> Any:
        ((schema,),) = store.connection.execute("SELECT current_schema()").fetchall()
        connection = connect_in(str(schema))
        opened.append(connection)
        return connection

    yield other
    for connection in opened:
        connection.close()


# --- the staging table ---------------------------------------------------------------


def test_a_staging_table_created_by_a_rolled_back_batch_is_created_again() -> None:
    with temporary_schema() as schema, connect_in(schema) as connection:
        store = PostgresStore(TASKS, connection)
        with pytest.raises(RuntimeError, match="abandon"), store.transaction():
            store.insert_many([task(0)])  # creates the session's staging table
            raise RuntimeError("abandon the transaction")  # ... and undoes it
        assert store.scan is not None and list(store.scan()) == []
        assert store.insert_many([task(0), task(1)]) == [task(0), task(1)]
        with store.transaction():  # two batches in one transaction: each starts clean
            assert store.insert_many([task(2)]) == [task(2)]
            assert store.insert_many([task(3), task(0)]) == [task(3), task(0)]
        assert [record.task_id for record in store.scan()] == [
            "task-0", "task-1", "task-2", "task-3"]


def test_batches_inside_a_transaction_commit_or_roll_back_with_it(
    stores: Callable[[str], PostgresStore[Any]],
) -> None:
    store = emptied(stores("tasks"))
    with pytest.raises(RuntimeError, match="abandon"), store.transaction():
        assert store.insert_many([task(0), task(1)]) == [task(0), task(1)]
        raise RuntimeError("abandon the transaction")
    assert rows_of(store) == []
    with store.transaction():  # two batches in one transaction: the second sees the first
        assert store.insert_many([task(2)]) == [task(2)]
        assert store.insert_many([task(3), task(2, due=9.0)]) == [task(3), task(2)]
    assert [record.task_id for record in store.scan()] == ["task-2", "task-3"]


def test_every_lifecycle_of_a_batch_claim_has_one_form() -> None:
    """The shipped and test lifecycles the batch claim runs in place on."""
    leased: list[Lifecycle[Any, Any]] = [TASKS, MONITOR]
    with temporary_schema() as schema, connect_in(schema) as connection:
        for lifecycle in leased:
            store = PostgresStore(lifecycle, connection)
            assert not isinstance(batches(store).claims(), str), lifecycle.name
