"""Every public operation of a generic SQL store of the tests' tasks
(tests/support/tasks.py), ready to call: the driver-error tests run each against a
database it cannot use (tests/stores/test_driver_errors.py on SQLite,
tests/stores/test_postgres_commit_outcome.py on PostgreSQL). The framework's
counterpart of support.store_operations, which drives the monitor for the app's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lifecycles.stores._sql import SQLStore
from support.tasks import TASKS, Task, TaskInputs, new_task

TABLE = "lifecycle_tasks"  # the table SQLSchema derives for the task record


def record(index: int) -> Task:
    """Task ``t<index>``, queued and due at 10."""
    return new_task(f"t{index}", now=10.0)


def claim_inputs(token: str, now: float = 20.0) -> TaskInputs:
    return TaskInputs(now=now, worker_id="w1", lease_token=token, lease_seconds=30.0)


def failure_inputs() -> TaskInputs:
    """A retryable failure of t0's attempt by its holder (w1, token k0), at 21."""
    return TaskInputs(now=21.0, worker_id="w1", lease_token="k0", error="x.y", retryable=True)


def filled(store: SQLStore[Any]) -> SQLStore[Any]:
    """``store`` with t0..t2 submitted and t0 leased to w1 under ``k0``."""
    for index in range(3):
        store.insert(TASKS.create(record(index)))
    assert store.claim(claim_inputs("k0")) is not None
    return store


def operations(store: SQLStore[Any]) -> dict[str, Callable[[], Any]]:
    """Every public operation of ``store`` (made by :func:`filled`) that runs a statement,
    with valid arguments."""
    leased = store.get("t0")
    assert leased is not None
    expired_input = claim_inputs("k9", now=100.0)
    p = store.dialect.param
    return {
        "get": lambda: store.get("t0"),
        "insert": lambda: store.insert(TASKS.create(record(5))),
        "insert_many": lambda: store.insert_many([TASKS.create(record(6))]),
        "put": lambda: store.put(leased, *reversed(_completion(leased))),
        "put_many": lambda: store.put_many([(leased, *reversed(_completion(leased)))]),
        "write": lambda: store.write(leased, *reversed(_completion(leased))),
        "fire": lambda: store.fire(leased, "fail", failure_inputs()),
        "scan": lambda: list(store.scan()),
        "count_by_status": store.count_by_status,
        "count_due": lambda: store.count_due(20.0),
        "count_expired": lambda: store.count_expired(20.0),
        "health": lambda: store.health(20.0),
        "claim": lambda: store.claim(claim_inputs("k1")),
        "claim_many": lambda: store.claim_many(lambda n: claim_inputs(f"k{n + 2}"), 2),
        "claim_in_place": lambda: store.claim_in_place(claim_inputs("k1")),
        "claim_many_in_place": lambda: store.claim_many_in_place(
            lambda n: claim_inputs(f"k{n + 4}"), 2),
        "recover_expired": lambda: store.recover_expired(expired_input),
        "check_schema": store.check_schema,
        "due": lambda: store.due(20.0, 5),
        "next_due": lambda: store.next_due(20.0),
        "expired_leases": lambda: store.expired_leases(100.0),
        "glance": lambda: store.glance(20.0),
        "leased_under": lambda: store.leased_under({"k0"}, 20.0),
        "integrity_problems": store.integrity_problems,
        "transaction": lambda: store.transaction().__enter__(),
        "database_transaction": lambda: store.database_transaction().__enter__(),
        "run_write_committed": lambda: store.run_write_committed(
            f"DELETE FROM {TABLE} WHERE task_id = {p}", ("none",)),
        "run": lambda: store.run(f"SELECT count(*) FROM {TABLE}"),
        "run_write": lambda: store.run_write(
            f"DELETE FROM {TABLE} WHERE task_id = {p}", ("none",)),
        "columns_of": lambda: store.columns_of(store.schema.table),
        "tables_present": lambda: store.tables_present([store.schema.table]),
        "unique_column_sets": lambda: store.unique_column_sets(store.schema.table),
        "lock_schema": store.lock_schema,
        "locate": store.locate,
        "ensure_rules_indexes": store.ensure_rules_indexes,
    }


#: The names :func:`operations` answers.
OPERATION_NAMES = (
    "get", "insert", "put", "put_many", "write", "fire", "scan", "count_by_status",
    "count_due", "count_expired", "health", "claim", "claim_many", "claim_in_place",
    "claim_many_in_place", "insert_many",
    "recover_expired", "check_schema", "due", "next_due", "expired_leases", "glance",
    "leased_under", "integrity_problems", "transaction", "database_transaction",
    "run_write_committed", "run", "run_write", "columns_of", "tables_present",
    "unique_column_sets", "lock_schema", "locate", "ensure_rules_indexes",
)


def _completion(leased: Task) -> tuple[Any, Task]:
    """(row, after) of a failed attempt on ``leased`` by its holder."""
    inputs = failure_inputs()
    row = TASKS.select_row("fail", leased, inputs)
    return row, TASKS.apply_row(row, leased, inputs)


#: The methods of a SQL store that run no statement of their own.
WITHOUT_STATEMENTS = frozenset({
    "record_from", "values_of", "token_of", "leasing", "rule_queries", "transaction_nested_error",
    "statement_savepoint", "driver_error", "driver_errors", "autocommits",
    "raise_store_error", "unavailable", "commit_may_have_happened",
    "listen",  # on a connection of its own (PostgreSQL)
})


def public_methods(store_type: type) -> set[str]:
    return {name for name in dir(store_type)
            if not name.startswith("_") and callable(getattr(store_type, name))}
