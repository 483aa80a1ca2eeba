"""The rules index (issue 12): SQLite keeps a partial index of the rows breaking some rule.

Its ``WHERE`` is every rule with an SQL form, rendered from the declarations as health
renders them, so the engine evaluates the rules for each row any connection writes (the
reference's included) and health counts the broken rows from the index instead of
evaluating every rule of every row. Its name carries a digest of the rules. Health's
statement is the same with or without it: without it the engine scans and gives the
same answer.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from support.monitor import CAPABILITIES, TABLE, notification, table_dump

from lifecycles.monitor import DurableTerminalProcessingMonitor, StateInvalid
from lifecycles.stores.sql_health import HealthQueries

PREFIX = f"{TABLE}_rules_"


def opened(path: Path, items: int = 8) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(items):
        value, sha = notification(index, event_id=f"e{index:02d}",
                                  notification_id=f"n{index:02d}")
        monitor.register(value, sha, now=10)
    return monitor


def queries_of(monitor: DurableTerminalProcessingMonitor) -> HealthQueries:
    return monitor.store.rule_queries()


def rules_indexes(connection: sqlite3.Connection) -> list[str]:
    return [name for (name,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'cms%rules%'"
        " ORDER BY name")]


def indexed_keys(monitor: DurableTerminalProcessingMonitor) -> list[str]:
    """The keys the rules index holds, read from it alone."""
    queries = queries_of(monitor)
    assert queries.rules_index is not None
    return [key for (key,) in monitor.store.run(
        f"SELECT event_id FROM {TABLE} INDEXED BY {queries.rules_index}"
        f" WHERE {queries.broken_condition} ORDER BY event_id")]


def write_outside(path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    """Another connection, as another program would: no lifecycles, no checks of ours."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute(statement, params)
    other.close()


def plan(monitor: DurableTerminalProcessingMonitor, statement: str) -> list[str]:
    params = (20.0, 20.0) if statement == queries_of(monitor).aggregate else ()  # now, now
    return [row[3] for row in monitor.store.run(f"EXPLAIN QUERY PLAN {statement}", params)]


def test_the_store_keeps_one_rules_index_named_by_a_digest_of_its_rules(
    tmp_path: Path,
) -> None:
    monitor = opened(tmp_path / "monitor.db")
    queries = queries_of(monitor)
    digest = hashlib.sha256(queries.broken_condition.encode()).hexdigest()[:12]
    assert queries.rules_index == PREFIX + digest
    assert rules_indexes(monitor.connection) == [queries.rules_index]
    (created,) = monitor.connection.execute(
        "SELECT sql FROM sqlite_master WHERE name = ?", (queries.rules_index,)
    ).fetchone()
    assert created.endswith(f"WHERE {queries.broken_condition}")
    assert indexed_keys(monitor) == []  # every row lifecycles wrote holds every rule
    assert monitor.store.health(20.0).broken == 0


def test_health_reads_the_broken_rows_and_every_count_from_indexes(tmp_path: Path) -> None:
    monitor = opened(tmp_path / "monitor.db")
    queries = queries_of(monitor)
    for statement in (queries.aggregate, queries.per_rule, queries.broken_rows):
        lines = plan(monitor, statement)
        assert any(f"INDEX {queries.rules_index}" in line for line in lines), lines
        # No statement evaluates the rules over the whole table: each reading of it
        # goes through an index.
        reads = [line for line in lines if TABLE in line]
        assert reads and all("INDEX" in line for line in reads), lines


def test_a_row_another_program_breaks_enters_the_index_and_health_names_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    write_outside(path, f"UPDATE {TABLE} SET site_id = 'a b' WHERE event_id = 'e03'")
    write_outside(path, f"UPDATE {TABLE} SET failures = 99 WHERE event_id = 'e05'")
    assert indexed_keys(monitor) == ["e03", "e05"]
    before = table_dump(monitor.connection)
    with pytest.raises(StateInvalid) as caught:
        monitor.health(now=20)
    assert caught.value.code == "terminal_processing_monitor.state_invalid"
    assert caught.value.event_ids == ("e03", "e05")
    assert caught.value.rules == ("token_syntax", "failures_within_max", "polls_cover_failures")
    assert table_dump(monitor.connection) == before
    # Repaired by the same program: out of the index, and health is whole again.
    write_outside(path, f"UPDATE {TABLE} SET site_id = 'site-3' WHERE event_id = 'e03'")
    write_outside(path, f"DELETE FROM {TABLE} WHERE event_id = 'e05'")
    assert indexed_keys(monitor) == []
    assert monitor.health(now=20).counts["pending"] == 7


def test_without_the_index_health_scans_and_answers_exactly_the_same(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    write_outside(path, f"UPDATE {TABLE} SET terminal_status = 'running' WHERE event_id = 'e01'")
    write_outside(path, f"UPDATE {TABLE} SET updated_at = 1.0 WHERE event_id = 'e06'")
    with_index = monitor.store.health(20.0)
    assert with_index.broken == 2
    queries = queries_of(monitor)
    write_outside(path, f"DROP INDEX {queries.rules_index}")
    assert rules_indexes(monitor.connection) == []
    assert not any(queries.rules_index in line for line in plan(monitor, queries.aggregate))
    assert monitor.store.health(20.0) == with_index
    # The next store to open the file puts it back, with the broken rows in it.
    reopened = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    assert rules_indexes(reopened.connection) == [queries.rules_index]
    assert indexed_keys(reopened) == ["e01", "e06"]
    assert reopened.store.health(20.0) == with_index


def test_an_index_of_other_rules_is_dropped_when_a_store_opens(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    current = queries_of(monitor).rules_index
    # What an earlier version of the rules left: a writer would keep paying for it.
    stale = PREFIX + "0" * 12
    write_outside(path, f"CREATE INDEX {stale} ON {TABLE} (event_id) WHERE failures > 1")
    unrelated = f"{TABLE}_by_site"  # not ours: left alone
    write_outside(path, f"CREATE INDEX {unrelated} ON {TABLE} (site_id)")
    reopened = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    assert rules_indexes(reopened.connection) == [current]
    assert reopened.store.run(
        "SELECT count(*) FROM sqlite_master WHERE name = ?", (unrelated,)
    ) == [(1,)]
    assert reopened.health(now=20).counts["pending"] == 8
