"""The rules indexes (issue 12): SQLite keeps partial indexes of the rows breaking a rule.

Their ``WHERE`` clauses are the rules with an SQL form, rendered from the declarations
as health renders them: one index for the rules reading a field some transition writes,
one for those reading only fields no transition writes (an UPDATE leaves that one
alone). The engine evaluates them for each row any connection writes (the reference's
included), and health counts the broken rows from the indexes instead of evaluating
every rule of every row. A name carries a digest of its rules. Health's statements are
the same with or without them: without them the engine scans and gives the same answer.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from support.monitor import CAPABILITIES, TABLE, pending_items, table_dump

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid
from lifecycles.stores._sql_health import HealthQueries

PREFIX = f"{TABLE}_rules_"


def opened(path: Path, items: int = 8) -> DurableTerminalProcessingMonitor:
    monitor: DurableTerminalProcessingMonitor = pending_items(path, items)
    return monitor


def queries_of(monitor: DurableTerminalProcessingMonitor) -> HealthQueries:
    return monitor.store.rule_queries()


def rules_indexes(connection: sqlite3.Connection) -> list[str]:
    return [name for (name,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'cms%rules%'"
        " ORDER BY name")]


def indexed_keys(monitor: DurableTerminalProcessingMonitor) -> list[str]:
    """The keys the rules indexes hold, each read from its index alone."""
    keys: set[str] = set()
    for name, condition in queries_of(monitor).rules_indexes.items():
        keys |= {key for (key,) in monitor.store.run(
            f"SELECT event_id FROM {TABLE} INDEXED BY {name} WHERE {condition}")}
    return sorted(keys)


def write_outside(path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    """Another connection, as another program would: no lifecycles, no checks of ours."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute(statement, params)
    other.close()


def plan(monitor: DurableTerminalProcessingMonitor, statement: str) -> list[str]:
    params = (20.0, 20.0) if statement == queries_of(monitor).aggregate else ()  # now, now
    return [row[3] for row in monitor.store.run(f"EXPLAIN QUERY PLAN {statement}", params)]


def test_the_store_keeps_two_rules_indexes_named_by_digests_of_their_rules(
    tmp_path: Path,
) -> None:
    monitor = opened(tmp_path / "monitor.db")
    queries = queries_of(monitor)
    assert len(queries.rules_indexes) == 2
    assert rules_indexes(monitor.connection) == sorted(queries.rules_indexes)
    for name, condition in queries.rules_indexes.items():
        assert name == PREFIX + hashlib.sha256(condition.encode()).hexdigest()[:12]
        (created,) = monitor.connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (name,)
        ).fetchone()
        assert created.endswith(f"WHERE {condition}")
    changing, fixed = queries.rules_indexes.values()
    # Between them, every rule once: the whole condition, split in two.
    inner = [text[len("(CASE WHEN "):-len(" THEN 0 ELSE 1 END) = 1")] for text in (changing, fixed)]
    assert len(inner[0]) + len(" AND ") + len(inner[1]) == len(queries.every_rule)
    for check in [*queries.field_checks, *queries.invariant_checks]:
        assert any(f"({check.sql})" in text for text in inner), check
    # The identity's rules are in the index no UPDATE touches; the lease's in the other.
    assert "notification_sha256" in fixed and "notification_sha256" not in changing
    assert "lease_token" in changing and "lease_token" not in fixed
    assert indexed_keys(monitor) == []  # every row lifecycles wrote holds every rule
    assert monitor.store.health(20.0).broken == 0


def test_no_row_of_the_table_writes_the_identity_rules_index(tmp_path: Path) -> None:
    """SQLite skips a partial index whose columns an UPDATE does not set: no row's UPDATE
    (claims, completions, every other) evaluates the identity's rules, which only an
    insert, or an UPDATE setting an identity column, must."""
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    store = monitor.store
    _, fixed = queries_of(monitor).rules_indexes
    ((page,),) = store.run("SELECT rootpage FROM sqlite_master WHERE name = ?", (fixed,))

    def written_pages(statement: str) -> set[int]:
        program = store.run(f"EXPLAIN {statement}", [None] * statement.count("?"))
        return {row[3] for row in program if row[1] == "OpenWrite"}

    updates = {update.outside for update in store._updates.values()}
    assert len(updates) >= 2  # claims and completions write different fields
    for update in updates:
        assert page not in written_pages(update), update
    assert page in written_pages(f"UPDATE {TABLE} SET site_id = 'x' WHERE event_id = 'e01'")
    # And a row broken in its identity by such an UPDATE is in that index.
    write_outside(path, f"UPDATE {TABLE} SET notification_sha256 = 'A' WHERE event_id = 'e01'")
    assert indexed_keys(monitor) == ["e01"]


def test_health_reads_the_broken_rows_and_every_count_from_indexes(tmp_path: Path) -> None:
    monitor = opened(tmp_path / "monitor.db")
    queries = queries_of(monitor)
    for statement in (queries.aggregate, queries.per_rule, queries.broken_rows):
        lines = plan(monitor, statement)
        for name in queries.rules_indexes:
            assert any(f"INDEX {name}" in line for line in lines), lines
        # No statement evaluates the rules over the whole table: each reading of it
        # goes through an index, or looks a row up by its id.
        reads = [line for line in lines if TABLE in line]
        assert reads and all(
            "INDEX" in line or line.endswith("USING INTEGER PRIMARY KEY (rowid=?)")
            for line in reads), lines


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
    for name in queries.rules_indexes:
        write_outside(path, f"DROP INDEX {name}")
    assert rules_indexes(monitor.connection) == []
    assert not any("_rules_" in line for line in plan(monitor, queries.aggregate))
    assert monitor.store.health(20.0) == with_index
    # The next store to open the file puts them back, with the broken rows in them.
    reopened = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    assert rules_indexes(reopened.connection) == sorted(queries.rules_indexes)
    assert indexed_keys(reopened) == ["e01", "e06"]
    assert reopened.store.health(20.0) == with_index


def test_an_index_of_other_rules_is_dropped_when_a_store_opens(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    current = sorted(queries_of(monitor).rules_indexes)
    # What an earlier version of the rules left: a writer would keep paying for it.
    stale = PREFIX + "0" * 12
    write_outside(path, f"CREATE INDEX {stale} ON {TABLE} (event_id) WHERE failures > 1")
    unrelated = f"{TABLE}_by_site"  # not ours: left alone
    write_outside(path, f"CREATE INDEX {unrelated} ON {TABLE} (site_id)")
    reopened = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    assert rules_indexes(reopened.connection) == current
    assert reopened.store.run(
        "SELECT count(*) FROM sqlite_master WHERE name = ?", (unrelated,)
    ) == [(1,)]
    assert reopened.health(now=20).counts["pending"] == 8


def test_rows_without_a_key_are_each_counted_broken(tmp_path: Path) -> None:
    """The reference's table lets SQLite store NULL in its TEXT primary key: rows another
    program wrote so are each broken (token_syntax), each counted once."""
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    columns = [row[1] for row in monitor.store.run(f"PRAGMA table_info({TABLE})")]
    copied = ", ".join("NULL" if c == "event_id" else
                       "notification_id || ?" if c == "notification_id" else c for c in columns)
    for suffix in ("-a", "-b"):
        write_outside(path, f"INSERT INTO {TABLE} SELECT {copied} FROM {TABLE}"
                            " WHERE event_id = 'e02'", (suffix,))
    found = monitor.store.health(20.0)
    assert (found.total, found.broken) == (10, 2)
    assert dict(found.violations) == {"token_syntax": 2}
