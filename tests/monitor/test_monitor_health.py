"""Monitor health in the database: what it names when stored rows are broken.

Health checks every rule of every stored row in SQL (lifecycles.stores._sql_rules). When
some row breaks a rule it answers ``state_invalid`` as a read of those rows would: the
first broken event ids in key order (at most five), and the rules reads of them name
(a row's first broken field rule, or else every invariant it breaks), in order of
first appearance; the store's report also counts the rows breaking each rule. Rows are
planted by another connection. A row that breaks the table's own CHECK constraints is
the storage engine's complaint first (``PRAGMA quick_check``: ``database_integrity``),
as in the reference.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, TABLE, pending_items, table_dump

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid, StorageBlocked
from lifecycles.stores.sqlite import SQLiteStore

# event id -> (column, value): each breaks the row in its own way.
PLANTED: dict[str, tuple[str, Any]] = {
    "e02": ("failures", 99),  # failures_within_max, polls_cover_failures
    "e03": ("site_id", "a b"),  # token_syntax
    "e05": ("terminal_status", "running"),  # terminal_status_known
    "e06": ("updated_at", 1.0),  # updated_not_before_created
    "e07": ("poll_attempts", "three"),  # count_non_negative: text in an INTEGER column
    "e08": ("last_error_code", "x.y"),  # error_code_iff_waiting_or_failed
    "e09": ("created_at", float("inf")),  # time_finite_non_negative
}


def opened(path: Path, items: int = 12) -> DurableTerminalProcessingMonitor:
    monitor: DurableTerminalProcessingMonitor = pending_items(path, items)
    return monitor


def plant(path: Path, planted: dict[str, tuple[str, Any]], checks: bool = True) -> None:
    other = sqlite3.connect(path, isolation_level=None)
    if not checks:
        other.execute("PRAGMA ignore_check_constraints = ON")
    for event_id, (column, value) in planted.items():
        other.execute(f"UPDATE {TABLE} SET {column} = ? WHERE event_id = ?", (value, event_id))
    other.close()


def read_rules(monitor: DurableTerminalProcessingMonitor, event_id: str) -> tuple[str, ...]:
    """The rules a read of ``event_id`` names (none: it reads)."""
    try:
        monitor.status(event_id, now=20)
    except StateInvalid as error:
        assert error.event_ids == (event_id,)
        return error.rules
    return ()


def test_health_names_the_first_broken_rows_and_the_rules_their_reads_name(
    tmp_path: Path,
) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    plant(path, PLANTED)
    before = table_dump(monitor.connection)
    named = {key: read_rules(monitor, key) for key in sorted(PLANTED)}
    assert all(named.values())
    first = sorted(PLANTED)[:5]  # health names the first five broken rows, in key order
    with pytest.raises(StateInvalid) as caught:
        monitor.health(now=20)
    assert caught.value.code == "terminal_processing_monitor.state_invalid"
    assert caught.value.event_ids == tuple(first)
    assert caught.value.rules == tuple(dict.fromkeys(r for key in first for r in named[key]))
    assert caught.value.rules == (
        "failures_within_max", "polls_cover_failures", "token_syntax",
        "terminal_status_known", "updated_not_before_created", "count_non_negative",
    )
    assert table_dump(monitor.connection) == before  # health writes nothing


def test_one_broken_row_is_named_exactly_as_its_read(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    for event_id, change in PLANTED.items():
        plant(path, {event_id: change})
        with pytest.raises(StateInvalid) as caught:
            monitor.health(now=20)
        assert (caught.value.event_ids, caught.value.rules) == (
            (event_id,), read_rules(monitor, event_id)
        )
        monitor.connection.execute(f"DELETE FROM {TABLE} WHERE event_id = ?", (event_id,))
        monitor.connection.commit()
    assert monitor.health(now=20).counts["pending"] == 12 - len(PLANTED)


def test_the_store_counts_the_rows_breaking_each_rule(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    plant(path, PLANTED)
    plant(path, {"e10": ("failures", 7), "e11": ("receiver_lease_expired", 1)})
    found = monitor.store.health(20.0)
    assert (found.total, found.broken) == (12, 9)
    assert dict(found.violations) == {
        "failures_within_max": 2, "polls_cover_failures": 2, "token_syntax": 1,
        "terminal_status_known": 1, "updated_not_before_created": 1, "count_non_negative": 1,
        "error_code_iff_waiting_or_failed": 1, "time_finite_non_negative": 1,
        "receiver_lease_expired_only_when_leased": 1,
    }
    assert found.python_only == ()


def test_a_row_breaking_the_tables_own_checks_is_the_engines_complaint_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    plant(path, {"e04": ("status", "Pending")}, checks=False)
    with pytest.raises(StorageBlocked) as caught:
        monitor.health(now=20)
    assert caught.value.code == "terminal_processing_monitor.database_integrity"
    assert monitor.store.health(20.0).integrity  # quick_check's own lines


def test_health_of_valid_rows_is_the_counts_of_the_store(tmp_path: Path) -> None:
    monitor = opened(tmp_path / "monitor.db")
    monitor.claim("w1", now=20, lease_seconds=10)
    monitor.claim("w1", now=20, lease_seconds=100)
    health = monitor.health(now=35)
    store = monitor.store
    assert health.counts == store.count_by_status()
    assert (health.due, health.expired_leases) == (store.count_due(35), store.count_expired(35))
    assert (health.counts["leased"], health.due, health.expired_leases) == (2, 10, 1)


# --- a lifecycle with rules SQL cannot state: health reads every row in Python too ------

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the example imports as a package of the checkout
    sys.path.insert(0, str(ROOT))

from examples.review.lifecycle import REVIEW, new_document  # noqa: E402


def test_rules_without_an_sql_form_are_checked_by_reading_every_row(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "review.db", isolation_level=None)
    store = SQLiteStore(REVIEW, connection)
    for index in range(3):
        store.insert(new_document(f"doc-{index}", now=0.0, deadline_seconds=100.0))
    healthy = store.health(1.0)
    assert (healthy.total, healthy.broken, healthy.counts["submitted"]) == (3, 0, 3)
    # The example declares its invariants and one field rule as Python functions.
    assert set(healthy.python_only) == {
        "decision_known", *(rule.name for rule in REVIEW.invariants)
    }
    assert "token_syntax" not in healthy.python_only  # its expressed rules are in SQL
    connection.execute(f"UPDATE {store.schema.table} SET decision = 'approve'"
                       " WHERE doc_id = 'doc-1'")  # decision_matches_status, Python only
    with pytest.raises(Exception) as caught:
        store.health(1.0)
    assert getattr(caught.value, "rules", None) == ("decision_matches_status",)
    assert getattr(caught.value, "keys", None) == ("doc-1",)


# Each of the table's own CHECK constraints, broken alone on one row (a status that is
# not declared, negative counts, max_failures out of 1..20, lease fields set or missing
# outside or inside a lease). Health skips the engine's re-verification of the
# constraints while the rules' query finds nothing; it must still find each of these
# and answer as the reference does.
CHECK_BREAKERS: dict[str, dict[str, Any]] = {
    "status_declared": {"status": "paused"},
    "poll_attempts_non_negative": {"poll_attempts": -1},
    "failures_non_negative": {"failures": -1},
    "max_failures_at_least_1": {"max_failures": 0},
    "max_failures_at_most_20": {"max_failures": 21},
    "lease_owner_outside_a_lease": {"lease_owner": "w9"},
    "leased_without_a_lease": {"status": "leased"},
}


@pytest.mark.parametrize("breaker", sorted(CHECK_BREAKERS))
def test_each_of_the_tables_checks_broken_is_the_engines_complaint(
    tmp_path: Path, breaker: str
) -> None:
    from support.monitor import reference_monitor

    path = tmp_path / "monitor.db"
    monitor = opened(path, items=3)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA ignore_check_constraints = ON")
    changes = CHECK_BREAKERS[breaker]
    other.execute(
        f"UPDATE {TABLE} SET {', '.join(f'{c} = ?' for c in changes)} WHERE event_id = 'e01'",
        tuple(changes.values()),
    )
    other.close()
    before = table_dump(monitor.connection)
    with pytest.raises(StorageBlocked) as caught:
        monitor.health(now=20)
    assert caught.value.code == "terminal_processing_monitor.database_integrity"
    assert table_dump(monitor.connection) == before
    reference = reference_monitor().DurableTerminalProcessingMonitor(
        sqlite3.connect(path), CAPABILITIES
    )
    with pytest.raises(Exception) as referenced:
        reference.health(now=20)
    assert getattr(referenced.value, "code", None) == caught.value.code


@pytest.mark.parametrize("setting", [0, 1])
def test_health_leaves_the_connections_check_setting_as_it_was(
    tmp_path: Path, setting: int
) -> None:
    monitor = opened(tmp_path / "monitor.db", items=2)
    monitor.connection.execute(f"PRAGMA ignore_check_constraints = {setting}")
    assert monitor.health(now=20).counts["pending"] == 2
    (now_set,) = monitor.connection.execute("PRAGMA ignore_check_constraints").fetchone()
    assert now_set == setting
