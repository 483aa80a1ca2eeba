"""The SQL files beside the diagrams list what the stores really execute.

``diagrams/monitor.sqlite.sql`` is rendered from the builders the store runs; here a real
SQLite store of the monitor (its own schema, as the facade opens it) is traced while it
creates its schema, registers, claims, writes, scans, counts, recovers and checks its
health, and every statement the driver was given must be one of the file's blocks, its
parameters bound. What is left out is what the file does not claim to list: the
transaction statements, and the driver hooks' catalogue reads (``PRAGMA``,
``sqlite_master``), written in :mod:`lifecycles.stores.sqlite` itself.

On PostgreSQL the store's statements are caught as it hands them to psycopg, and each
must be one of ``diagrams/monitor.postgres.sql``'s blocks, character for character.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.store_operations import filled, operations

from lifecycles.diagrams import generate
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.schema import open_monitor_store

COMMITTED = Path(__file__).resolve().parents[2] / "diagrams"

# What SQLite writes for a bound value in a traced statement (sqlite3_expanded_sql).
_VALUE = r"(?:NULL|-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?|'(?:[^']|'')*'|X'[0-9A-Fa-f]*')"
_NOT_LISTED = re.compile(
    r"(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b|PRAGMA\b|SELECT name FROM sqlite_master ",
    re.IGNORECASE,
)
# The store's operations traced (one write of the leased record: the others would find it
# changed), then the recovery of the leases claimed meanwhile, once expired.
TRACED = (
    "get", "insert", "put", "scan", "count_by_status",
    "count_due", "count_expired", "health", "claim", "claim_many", "recover_expired",
    "check_schema", "due", "next_due", "expired_leases", "glance", "leased_under",
)


def blocks(text: str) -> dict[str, str]:
    """The ``-- name:`` blocks of a rendered file: name, then the statement (the lines
    after its comments)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("-- name: "):
            name = line.removeprefix("-- name: ")
            assert name not in found, f"two blocks are named {name}"
            current = found[name] = []
        elif current is not None and not line.startswith("--") and line:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def bound(statement: str) -> re.Pattern[str]:
    """``statement`` with each ``?`` marker standing for any value bound to it (or for
    itself: a ``?`` in a literal, such as a GLOB pattern, is no marker)."""
    return re.compile(re.escape(statement).replace(r"\?", rf"(?:{_VALUE}|\?)"), re.DOTALL)


def traced_monitor_store() -> tuple[list[str], Any]:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    executed: list[str] = []
    connection.set_trace_callback(executed.append)
    store = open_monitor_store(connection, "c" * 64)
    return executed, store


def test_the_committed_file_is_the_rendered_one() -> None:
    rendered = generate({"monitor": MONITOR}, graphviz=None).files
    for name in ("monitor.sqlite.sql", "monitor.postgres.sql"):
        assert (COMMITTED / name).read_bytes() == rendered[name], (
            f"run `lifecycles diagrams`: {name} drifted")


def test_every_statement_a_sqlite_store_runs_is_in_the_file() -> None:
    listed = blocks((COMMITTED / "monitor.sqlite.sql").read_text())
    patterns = {name: bound(statement) for name, statement in listed.items()}
    executed, store = traced_monitor_store()
    ran = operations(filled(store))
    for name in TRACED:
        ran[name]()
    used: set[str] = set()
    unlisted = []
    for statement in executed:
        # "-- ": what SQLite runs inside a statement (its schema reads), traced indented.
        if statement.startswith("-- ") or _NOT_LISTED.match(statement.strip()):
            continue
        matches = [name for name, pattern in patterns.items() if pattern.fullmatch(statement)]
        if matches:
            used.update(matches)
        else:
            unlisted.append(statement)
    assert not unlisted, "statements the store ran that the file does not list:\n" + (
        "\n".join(unlisted))
    # The trace covered the file's kinds of statement, not a corner of it.
    for name in ("create_table_cms_source_terminal_processing", "bind_meta", "read_meta",
                 "probe_schema", "insert", "get", "claim_due", "expired_leases", "health",
                 "count_by_status", "scan_page", "glance", "live_leases_under"):
        assert name in used, f"{name} was never run"
    assert any(name.startswith("update_claim_from_") for name in used)
    assert any(name.startswith("update_fail_attempt_from_") for name in used)


@pytest.mark.parametrize("name", ["monitor.sqlite.sql", "monitor.postgres.sql"])
def test_blocks_are_named_and_say_what_they_do(name: str) -> None:
    text = (COMMITTED / name).read_text()
    lines = text.splitlines()
    starts = [at for at, line in enumerate(lines) if line.startswith("-- name: ")]
    assert len(starts) > 40
    for at in starts:
        assert lines[at + 1].startswith("-- ") and len(lines[at + 1]) > 10, lines[at]
        assert lines[at + 2] and not lines[at + 2].startswith("--"), lines[at]


# --- PostgreSQL: the statements as the store hands them to psycopg ---------------------

# The driver hooks' own statements, written in lifecycles.stores.postgres: the catalogue
# reads, the schema lock, the notify trigger's creation.
_NOT_LISTED_POSTGRES = re.compile(
    r"SELECT pg_advisory_xact_lock|SELECT current_schema\(\)|CREATE (OR REPLACE )?FUNCTION"
    r"|CREATE (OR REPLACE )?TRIGGER|.*\b(information_schema|pg_catalog|pg_class|pg_index|pg_trigger"
    r"|pg_constraint|pg_attribute|pg_namespace)\b",
    re.DOTALL,
)


def test_every_statement_a_postgres_store_runs_is_in_the_file() -> None:
    from support.postgres import connect_in, temporary_schema

    from lifecycles.monitor.schema import MonitorSchema
    from lifecycles.stores.postgres import PostgresStore

    executed: list[str] = []

    class Traced(PostgresStore[Any]):
        def _cursor(self, statement: str, params: Any) -> Any:
            executed.append(statement)
            return super()._cursor(statement, params)

        def _claim_rows(self, statement: str, params: Any) -> Any:
            executed.append(statement)
            return super()._claim_rows(statement, params)

    listed = set(blocks((COMMITTED / "monitor.postgres.sql").read_text()).values())
    with temporary_schema() as schema, connect_in(schema) as connection:
        store = Traced(MONITOR, connection, MonitorSchema("c" * 64))
        ran = operations(filled(store))
        for name in (*TRACED, "claim_in_place", "claim_many_in_place", "insert_many"):
            ran[name]()
    unlisted = [statement for statement in executed
                if statement not in listed and not _NOT_LISTED_POSTGRES.match(statement)]
    assert not unlisted, "statements the store ran that the file does not list:\n" + (
        "\n".join(statement[:300] for statement in unlisted))
    assert len(set(executed) & listed) > 20
