"""The rules indexes (issue 12) under the monitor's facade and on the reference's table.

The indexes themselves (two, named by digests of their rules, the identity's untouched by
any UPDATE, read by health, dropped and made again) are tested on the tests' tickets in
tests/stores/test_rules_index.py. Here: a row another program breaks is refused by the
facade's health with ``state_invalid``, naming the event ids and the rules; and the
reference's table, whose TEXT primary key SQLite lets hold NULL, has each such row
counted broken once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.monitor import TABLE, pending_items, table_dump

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid


def opened(path: Path, items: int = 8) -> DurableTerminalProcessingMonitor:
    monitor: DurableTerminalProcessingMonitor = pending_items(path, items)
    return monitor


def queries_of(monitor: DurableTerminalProcessingMonitor) -> Any:
    return monitor.store.rule_queries()


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
