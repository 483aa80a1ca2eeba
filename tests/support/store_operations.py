"""Every public operation of a generic SQL store on the monitor's records, ready to call:
the monitor's driver-error tests (tests/monitor/test_monitor_driver_errors.py) run each
against a database it cannot use; tests/support/task_operations.py is the same for the
framework's own tests, on the tasks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lifecycles.machines.monitor import MONITOR, MonitorInputs, new_record
from lifecycles.stores._sql import SQLStore

TABLE = "lifecycle_monitor"  # the table SQLSchema derives for the monitor's record


def record(index: int) -> Any:
    return new_record(
        event_id=f"e{index}", notification_id=f"n{index}", site_id="s",
        terminal_status="published", notification_sha256="a" * 64, max_failures=3, now=10.0,
    )


def claim_inputs(token: str, now: float = 20.0) -> MonitorInputs:
    return MonitorInputs(now=now, worker_id="w1", lease_token=token, lease_seconds=30.0)


def filled(store: SQLStore[Any]) -> SQLStore[Any]:
    """``store`` with e0..e2 registered and e0 leased to w1 under ``t0``."""
    for index in range(3):
        store.insert(MONITOR.create(record(index)))
    assert store.claim(claim_inputs("t0")) is not None
    return store


def operations(store: SQLStore[Any]) -> dict[str, Callable[[], Any]]:
    """Every public operation of ``store`` (made by :func:`filled`) that runs a statement,
    with valid arguments."""
    leased = store.get("e0")
    assert leased is not None
    expired_input = claim_inputs("t9", now=100.0)
    p = store.dialect.param
    return {
        "get": lambda: store.get("e0"),
        "insert": lambda: store.insert(MONITOR.create(record(5))),
        "insert_many": lambda: store.insert_many([MONITOR.create(record(6))]),
        "put": lambda: store.put(leased, *reversed(_completion(leased))),
        "put_many": lambda: store.put_many([(leased, *reversed(_completion(leased)))]),
        "write": lambda: store.write(leased, *reversed(_completion(leased))),
        "fire": lambda: store.fire(leased, "fail_attempt", MonitorInputs(
            now=21.0, worker_id="w1", lease_token="t0", error_code="x.y", retryable=True)),
        "scan": lambda: list(store.scan()),
        "count_by_status": store.count_by_status,
        "count_due": lambda: store.count_due(20.0),
        "count_expired": lambda: store.count_expired(20.0),
        "health": lambda: store.health(20.0),
        "claim": lambda: store.claim(claim_inputs("t1")),
        "claim_many": lambda: store.claim_many(lambda n: claim_inputs(f"t{n + 2}"), 2),
        "claim_in_place": lambda: store.claim_in_place(claim_inputs("t1")),
        "claim_many_in_place": lambda: store.claim_many_in_place(
            lambda n: claim_inputs(f"t{n + 4}"), 2),
        "recover_expired": lambda: store.recover_expired(expired_input),
        "check_schema": store.check_schema,
        "due": lambda: store.due(20.0, 5),
        "next_due": lambda: store.next_due(20.0),
        "expired_leases": lambda: store.expired_leases(100.0),
        "glance": lambda: store.glance(20.0),
        "leased_under": lambda: store.leased_under({"t0"}, 20.0),
        "integrity_problems": store.integrity_problems,
        "transaction": lambda: store.transaction().__enter__(),
        "database_transaction": lambda: store.database_transaction().__enter__(),
        "run_write_committed": lambda: store.run_write_committed(
            f"DELETE FROM {TABLE} WHERE event_id = {p}", ("none",)),
        "run": lambda: store.run(f"SELECT count(*) FROM {TABLE}"),
        "run_write": lambda: store.run_write(
            f"DELETE FROM {TABLE} WHERE event_id = {p}", ("none",)),
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


def _completion(leased: Any) -> tuple[Any, Any]:
    """(row, after) of a failed attempt on ``leased`` by its holder."""
    inputs = MonitorInputs(now=21.0, worker_id="w1", lease_token="t0", error_code="x.y",
                           retryable=True)
    row = MONITOR.select_row("fail_attempt", leased, inputs)
    return row, MONITOR.apply_row(row, leased, inputs)


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
