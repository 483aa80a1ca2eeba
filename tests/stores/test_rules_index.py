"""The rules indexes (issue 12): SQLite keeps partial indexes of the rows breaking a rule.

Their ``WHERE`` clauses are the rules with an SQL form, rendered from the declarations
as health renders them: one index for the rules reading a field some transition writes,
one for those reading only fields no transition writes (an UPDATE leaves that one
alone). The engine evaluates them for each row any connection writes (another
program's included), and health counts the broken rows from the indexes instead of
evaluating every rule of every row. A name carries a digest of its rules. Health's
statements are the same with or without them: without them the engine scans and gives
the same answer.

On the tests' tickets (tests/support/rules_lifecycle.py), whose identity fields no
transition writes, in a generic SQLite store. The same indexes under the monitor's
facade and on the reference's table are in tests/monitor/test_monitor_rules_index.py.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.rules_lifecycle import STATE_INVALID, TICKETS, Ticket, new_ticket

from lifecycles.invariants._core import InvariantViolation
from lifecycles.stores._sql_health import HealthQueries
from lifecycles.stores._sql_schema import SQLSchema
from lifecycles.stores.sqlite import SQLiteStore

TABLE = SQLSchema(TICKETS).table
PREFIX = f"{TABLE}_rules_"
NOW = 20.0


def opened(path: Path, tickets: int = 8) -> SQLiteStore[Ticket]:
    """A store at ``path`` with ``tickets`` queued tickets opened at 10, keys t00, t01..."""
    store = SQLiteStore(TICKETS, sqlite3.connect(path))
    for index in range(tickets):
        store.insert(TICKETS.create(new_ticket(f"t{index:02d}", now=10.0)))
    return store


def reopened(path: Path) -> SQLiteStore[Ticket]:
    return SQLiteStore(TICKETS, sqlite3.connect(path))


def queries_of(store: SQLiteStore[Ticket]) -> HealthQueries:
    return store.rule_queries()


def rules_indexes(connection: sqlite3.Connection) -> list[str]:
    return [name for (name,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE ? ORDER BY name",
        (f"{TABLE}%rules%",))]


def indexed_keys(store: SQLiteStore[Ticket]) -> list[str]:
    """The keys the rules indexes hold, each read from its index alone."""
    keys: set[str] = set()
    for name, condition in queries_of(store).rules_indexes.items():
        keys |= {key for (key,) in store.run(
            f"SELECT ticket_id FROM {TABLE} INDEXED BY {name} WHERE {condition}")}
    return sorted(keys)


def write_outside(path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    """Another connection, as another program would: no lifecycles, no checks of ours."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute(statement, params)
    other.close()


def table_dump(connection: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return connection.execute(f"SELECT * FROM {TABLE} ORDER BY ticket_id").fetchall()


def plan(store: SQLiteStore[Ticket], statement: str) -> list[str]:
    params = (NOW, NOW) if statement == queries_of(store).aggregate else ()  # now, now
    return [row[3] for row in store.run(f"EXPLAIN QUERY PLAN {statement}", params)]


def test_the_store_keeps_two_rules_indexes_named_by_digests_of_their_rules(
    tmp_path: Path,
) -> None:
    store = opened(tmp_path / "tickets.db")
    queries = queries_of(store)
    assert len(queries.rules_indexes) == 2
    assert rules_indexes(store.connection) == sorted(queries.rules_indexes)
    for name, condition in queries.rules_indexes.items():
        assert name == PREFIX + hashlib.sha256(condition.encode()).hexdigest()[:12]
        (created,) = store.connection.execute(
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
    assert "digest" in fixed and "digest" not in changing
    assert "lease_token" in changing and "lease_token" not in fixed
    assert indexed_keys(store) == []  # every row lifecycles wrote holds every rule
    assert store.health(NOW).broken == 0


def test_no_row_of_the_table_writes_the_identity_rules_index(tmp_path: Path) -> None:
    """SQLite skips a partial index whose columns an UPDATE does not set: no row's UPDATE
    (claims, completions, every other) evaluates the identity's rules, which only an
    insert, or an UPDATE setting an identity column, must."""
    path = tmp_path / "tickets.db"
    store = opened(path)
    _, fixed = queries_of(store).rules_indexes
    ((page,),) = store.run("SELECT rootpage FROM sqlite_master WHERE name = ?", (fixed,))

    def written_pages(statement: str) -> set[int]:
        program = store.run(f"EXPLAIN {statement}", [None] * statement.count("?"))
        return {row[3] for row in program if row[1] == "OpenWrite"}

    updates = {update.outside for update in store._updates.values()}
    assert len(updates) >= 2  # claims and completions write different fields
    for update in updates:
        assert page not in written_pages(update), update
    assert page in written_pages(f"UPDATE {TABLE} SET queue = 'x' WHERE ticket_id = 't01'")
    # And a row broken in its identity by such an UPDATE is in that index.
    write_outside(path, f"UPDATE {TABLE} SET digest = 'A' WHERE ticket_id = 't01'")
    assert indexed_keys(store) == ["t01"]


def test_health_reads_the_broken_rows_and_every_count_from_indexes(tmp_path: Path) -> None:
    store = opened(tmp_path / "tickets.db")
    queries = queries_of(store)
    for statement in (queries.aggregate, queries.per_rule, queries.broken_rows):
        lines = plan(store, statement)
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
    path = tmp_path / "tickets.db"
    store = opened(path)
    write_outside(path, f"UPDATE {TABLE} SET queue = 'a b' WHERE ticket_id = 't03'")
    write_outside(path, f"UPDATE {TABLE} SET failures = 99 WHERE ticket_id = 't05'")
    assert indexed_keys(store) == ["t03", "t05"]
    before = table_dump(store.connection)
    health = store.health(NOW)
    assert (health.broken, health.broken_keys) == (2, ("t03", "t05"))
    with pytest.raises(InvariantViolation) as caught:
        health.raise_broken()
    assert caught.value.code == STATE_INVALID
    assert caught.value.keys == ("t03", "t05")
    assert caught.value.rules == (
        "token_syntax", "failures_within_max", "attempts_cover_failures")
    assert table_dump(store.connection) == before
    # Repaired by the same program: out of the index, and health is whole again.
    write_outside(path, f"UPDATE {TABLE} SET queue = 'queue-3' WHERE ticket_id = 't03'")
    write_outside(path, f"DELETE FROM {TABLE} WHERE ticket_id = 't05'")
    assert indexed_keys(store) == []
    whole = store.health(NOW)
    whole.raise_broken()
    assert (whole.broken, whole.counts["queued"]) == (0, 7)


def test_without_the_index_health_scans_and_answers_exactly_the_same(tmp_path: Path) -> None:
    path = tmp_path / "tickets.db"
    store = opened(path)
    write_outside(path, f"UPDATE {TABLE} SET kind = 'running' WHERE ticket_id = 't01'")
    write_outside(path, f"UPDATE {TABLE} SET updated_at = 1.0 WHERE ticket_id = 't06'")
    with_index = store.health(NOW)
    assert with_index.broken == 2
    queries = queries_of(store)
    for name in queries.rules_indexes:
        write_outside(path, f"DROP INDEX {name}")
    assert rules_indexes(store.connection) == []
    assert not any("_rules_" in line for line in plan(store, queries.aggregate))
    assert store.health(NOW) == with_index
    # The next store to open the file puts them back, with the broken rows in them.
    again = reopened(path)
    assert rules_indexes(again.connection) == sorted(queries.rules_indexes)
    assert indexed_keys(again) == ["t01", "t06"]
    assert again.health(NOW) == with_index


def test_an_index_of_other_rules_is_dropped_when_a_store_opens(tmp_path: Path) -> None:
    path = tmp_path / "tickets.db"
    store = opened(path)
    current = sorted(queries_of(store).rules_indexes)
    # What an earlier version of the rules left: a writer would keep paying for it.
    stale = PREFIX + "0" * 12
    write_outside(path, f"CREATE INDEX {stale} ON {TABLE} (ticket_id) WHERE failures > 1")
    unrelated = f"{TABLE}_by_queue"  # not ours: left alone
    write_outside(path, f"CREATE INDEX {unrelated} ON {TABLE} (queue)")
    again = reopened(path)
    assert rules_indexes(again.connection) == current
    assert again.run(
        "SELECT count(*) FROM sqlite_master WHERE name = ?", (unrelated,)
    ) == [(1,)]
    assert again.health(NOW).counts["queued"] == 8
