"""A monitor database whose tables lack their keys: refused when it opens, before anything
is changed, on SQLite and PostgreSQL; what the operator reads; the repair the README gives.

The comparison with the reference (which migrates such a file and goes on) is in
test_monitor_differences.py; the tables both accept, and those both refuse, in
test_monitor_compat.py. Here: what only lifecycles does, and PostgreSQL, where the
reference does not run.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.legacy_schema import KEYS, NO_KEYS, build_sqlite, hand_made, sqlite_state
from support.monitor import CAPABILITIES, answer, notification
from support.postgres import Connect, pg_connect, pg_schema

from lifecycles.cli import main
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, InputInvalid, StorageBlocked
from lifecycles.monitor.schema import META, TABLE
from lifecycles.stores import SchemaMismatch

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

CODE = "terminal_processing_monitor."
# The README's repair ("Faults" section): the keys the refusal names, added in place.
REPAIR = [
    f"CREATE UNIQUE INDEX {TABLE}_event_id_key ON {TABLE} (event_id)",
    f"CREATE UNIQUE INDEX {TABLE}_notification_id_key ON {TABLE} (notification_id)",
]


def refusal(opening: Any) -> SchemaMismatch:
    """The store's refusal behind the public ``schema_altered`` of ``opening()``."""
    with pytest.raises(StorageBlocked) as refused:
        opening()
    assert refused.value.code == CODE + "schema_altered"
    assert str(refused.value) == CODE + "schema_altered"  # content-free, as the reference
    cause = refused.value.__cause__
    assert isinstance(cause, SchemaMismatch)
    return cause


# --- SQLite ------------------------------------------------------------------------------


def test_the_refusal_names_each_missing_key_and_the_statement_that_adds_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hand-made.db"
    build_sqlite(path, version=2, keys=NO_KEYS, rows=True)
    cause = refusal(lambda: DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES))
    message = str(cause)
    assert message.startswith(f"{TABLE} does not keep event_id or notification_id unique: ")
    assert "nothing was changed" in message
    assert f"add the keys with {REPAIR[0]} and {REPAIR[1]} " in message


def test_the_cli_prints_the_refusal_on_one_line_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hand-made.db"
    build_sqlite(path, version=2, keys={"event_id"}, rows=True)
    before = sqlite_state(path)
    argv = ["monitor", "health", "--db", str(path), "--capabilities", CAPABILITIES, "--json"]
    assert main(argv) == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "error": CODE + "schema_altered",
        "message": (
            f"refused: {CODE}schema_altered: the database's schema or meta row is not the one "
            f"the monitor wrote ({TABLE} does not keep notification_id unique: no PRIMARY KEY, "
            "UNIQUE constraint or unique index on exactly that, so a duplicate would be "
            f"stored instead of refused; nothing was changed; add the keys with {REPAIR[1]} "
            "(this fails while the table holds duplicates: resolve those first)); do not use "
            "it until it is restored"
        ),
    }
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert sqlite_state(path) == before


def test_adding_the_keys_in_place_lets_the_monitor_open_and_keep_its_guarantees(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hand-made.db"
    build_sqlite(path, version=2, keys=NO_KEYS, rows=True)
    repair = sqlite3.connect(path, isolation_level=None)
    for statement in REPAIR:
        repair.execute(statement)
    repair.close()
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    assert monitor.status("e9", now=10).status == "pending"  # the stored row, kept
    monitor.register(*notification(0), now=10)
    with pytest.raises(InputInvalid) as collision:
        monitor.register(*notification(1, notification_id="n0"), now=10)
    assert collision.value.code == CODE + "idempotency_collision"
    outcome = monitor.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=20)
    assert outcome is not None and (outcome.event_id, outcome.status) == ("e9", "succeeded")


def test_the_repair_fails_while_duplicates_are_stored_and_changes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hand-made.db"
    build_sqlite(path, version=2, keys=NO_KEYS, rows=True)
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute(f"INSERT INTO {TABLE} SELECT * FROM {TABLE}")  # e9 twice
    before = sqlite_state(path)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed"):
        connection.execute(REPAIR[0])
    connection.close()
    assert sqlite_state(path) == before


@pytest.mark.parametrize(
    "not_a_key",
    [
        f"CREATE UNIQUE INDEX partial ON {TABLE} (notification_id) WHERE status = 'pending'",
        f"CREATE UNIQUE INDEX nocase ON {TABLE} (notification_id COLLATE NOCASE)",
        f"CREATE UNIQUE INDEX wider ON {TABLE} (notification_id, site_id)",
        f"CREATE UNIQUE INDEX expression ON {TABLE} (lower(notification_id))",
        f"CREATE INDEX plain ON {TABLE} (notification_id)",
    ],
)
def test_an_index_that_does_not_keep_the_column_unique_is_not_its_key(
    tmp_path: Path, not_a_key: str
) -> None:
    """Each of these leaves two rows with one notification id possible (or, under another
    collation, could not arbitrate the insert): the table still lacks its key."""
    path = tmp_path / "hand-made.db"
    build_sqlite(path, version=1, keys={"event_id"})
    sqlite3.connect(path, isolation_level=None).execute(not_a_key)
    before = sqlite_state(path)
    cause = refusal(lambda: DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES))
    assert str(cause).startswith(f"{TABLE} does not keep notification_id unique")
    assert sqlite_state(path) == before


def test_a_key_dropped_under_an_open_monitor_is_schema_altered_writing_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "repaired.db"
    build_sqlite(path, version=2, keys=NO_KEYS, rows=True)
    other = sqlite3.connect(path, isolation_level=None)
    for statement in REPAIR:
        other.execute(statement)
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    other.execute(f"DROP INDEX {TABLE}_notification_id_key")
    before = sqlite_state(path)
    cause = refusal(lambda: monitor.register(*notification(0), now=10))
    assert str(cause).startswith(f"{TABLE} does not keep notification_id unique")
    assert sqlite_state(path) == before


# --- PostgreSQL --------------------------------------------------------------------------


def pg_state(connection: Any) -> list[Any]:
    """Both tables' rows, and every index and constraint in the test's schema."""
    state: list[Any] = []
    for table in (META, TABLE):
        state.append(connection.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall())
    state.append(connection.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        " ORDER BY 1"
    ).fetchall())
    state.append(connection.execute(
        "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint AS c"
        " JOIN pg_namespace AS n ON n.oid = c.connamespace"
        " WHERE n.nspname = current_schema() ORDER BY 1"
    ).fetchall())
    return state


def pg_build(connection: Any, **case: Any) -> None:
    from lifecycles.stores.postgres import PostgresDialect

    for statement in hand_made(PostgresDialect(), **case):
        connection.execute(statement)


@pytest.mark.postgres
@pytest.mark.parametrize("keys", [NO_KEYS, {"event_id"}, {"notification_id"}])
@pytest.mark.parametrize("version", [1, 2])
def test_postgres_refuses_a_table_without_its_keys_before_changing_anything(
    pg_connect: Connect, keys: set[str], version: int
) -> None:
    """The same decision on PostgreSQL: a version-1 table of the monitor's column types
    without its keys used to be migrated (meta table replaced, indexes created) and then
    refused on every register."""
    connection = pg_connect()
    pg_build(connection, version=version, keys=keys, rows=version == 2)
    before = pg_state(connection)
    cause = refusal(lambda: DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES))
    missing = " or ".join(sorted(KEYS - keys))
    assert str(cause).startswith(f"{TABLE} does not keep {missing} unique")
    assert pg_state(connection) == before


@pytest.mark.postgres
def test_postgres_refuses_a_meta_table_without_its_key(pg_connect: Connect) -> None:
    connection = pg_connect()
    pg_build(connection, version=2, meta_keyed=False)
    before = pg_state(connection)
    cause = refusal(lambda: DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES))
    assert str(cause).startswith(f"{META} does not keep singleton unique")
    assert pg_state(connection) == before


@pytest.mark.postgres
@pytest.mark.parametrize(
    "not_a_key",
    [
        f"CREATE UNIQUE INDEX partial ON {TABLE} (notification_id) WHERE status = 'pending'",
        f"CREATE UNIQUE INDEX wider ON {TABLE} (notification_id, site_id)",
        f"CREATE UNIQUE INDEX expression ON {TABLE} (lower(notification_id))",
        f"ALTER TABLE {TABLE} ADD CONSTRAINT deferred UNIQUE (notification_id)"
        " DEFERRABLE INITIALLY DEFERRED",
    ],
)
def test_postgres_counts_only_a_key_that_can_refuse_the_duplicate(
    pg_connect: Connect, not_a_key: str
) -> None:
    """A partial, wider or expression index leaves duplicates possible, and ``ON
    CONFLICT`` cannot use a deferrable constraint: none is the key."""
    connection = pg_connect()
    pg_build(connection, version=1, keys={"event_id"})
    connection.execute(not_a_key)
    before = pg_state(connection)
    cause = refusal(lambda: DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES))
    assert str(cause).startswith(f"{TABLE} does not keep notification_id unique")
    assert pg_state(connection) == before


@pytest.mark.postgres
@pytest.mark.parametrize("repair", ["unique indexes", "unique index with INCLUDE"])
def test_postgres_opens_a_table_with_its_keys_and_no_other_constraints(
    pg_connect: Connect, repair: str
) -> None:
    """Keys added afterwards (the README's repair) are keys; no NOT NULL or CHECK needed:
    the version-1 database is migrated and works, the collision refused."""
    connection = pg_connect()
    pg_build(connection, version=1, keys=NO_KEYS)
    statements = REPAIR if repair == "unique indexes" else [
        REPAIR[0], REPAIR[1].removesuffix(")") + ") INCLUDE (site_id)"
    ]
    for statement in statements:
        connection.execute(statement)
    monitor = DurableTerminalProcessingMonitor(pg_connect(), CAPABILITIES)
    assert connection.execute(f"SELECT * FROM {META}").fetchall() == [(1, 2, CAPABILITIES)]
    monitor.register(*notification(0), now=10)
    assert monitor.register(*notification(0), now=11).status == "pending"  # idempotent
    with pytest.raises(InputInvalid) as collision:
        monitor.register(*notification(1, notification_id="n0"), now=10)
    assert collision.value.code == CODE + "idempotency_collision"
    outcome = monitor.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=20)
    assert outcome is not None and outcome.status == "succeeded"
    assert connection.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (1,)
