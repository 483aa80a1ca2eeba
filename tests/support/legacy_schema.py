"""Monitor databases as a hand-made table or an older tool leaves them: the reference's
column names, with or without their types and keys, under a version-1 or version-2 meta
table, and never the monitor's NOT NULL or CHECK constraints.

The monitor's own DDL keys ``event_id`` (PRIMARY KEY) and ``notification_id`` (UNIQUE),
and the meta table's ``singleton``; each builder leaves out what its caller names, so a
case says exactly what its tables lack. Statements are written in a store's dialect, so
the same cases run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from pathlib import Path
from typing import Any

from lifecycles.invariants.monitor import COLUMNS
from lifecycles.monitor.schema import META, TABLE, MonitorSchema
from lifecycles.stores._sql_dialect import Dialect
from support.monitor import CAPABILITIES, notification

KEYS = frozenset({"event_id", "notification_id"})
NO_KEYS: frozenset[str] = frozenset()


def processing_table(
    dialect: Dialect, *, typed: bool = True, keys: Collection[str] = KEYS,
    extra_column: bool = False,
) -> str:
    """The records' table: the reference's columns in order, typed as the monitor types
    them or not at all, ``keys`` keyed (event_id as PRIMARY KEY, others UNIQUE)."""
    kinds = {column.name: column.kind for column in MonitorSchema(CAPABILITIES).columns}
    parts = []
    for name in COLUMNS:
        part = name + (f" {dialect.type_names[kinds[name]]}" if typed else "")
        if name in keys:
            part += " PRIMARY KEY" if name == "event_id" else " UNIQUE"
        parts.append(part)
    if extra_column:
        parts.append(f"note {dialect.type_names['text']}")
    return f"CREATE TABLE {TABLE} ({', '.join(parts)})"


def meta_table(dialect: Dialect, version: int, *, keyed: bool = True) -> list[str]:
    """A version-1 meta table holding (1, 1), or a version-2 one bound to CAPABILITIES."""
    integer, text = dialect.type_names["integer"], dialect.type_names["text"]
    singleton = f"singleton {integer}" + (" PRIMARY KEY" if keyed else "")
    if version == 1:
        return [f"CREATE TABLE {META} ({singleton}, schema_version {integer})",
                f"INSERT INTO {META} VALUES (1, 1)"]
    return [
        f"CREATE TABLE {META} ({singleton}, schema_version {integer},"
        f" expected_capabilities_sha256 {text})",
        f"INSERT INTO {META} VALUES (1, 2, '{CAPABILITIES}')",
    ]


# A valid pending record, as the reference registers e9 at t=1 (the digest is hex).
STORED_ROW = (
    f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
    " notification_sha256, status, poll_attempts, failures, max_failures, next_poll_at,"
    " created_at, updated_at) VALUES ('e9', 'n9', 'site-1', 'published',"
    f" '{notification(9)[1]}', 'pending', 0, 0, 5, 1.0, 1.0, 1.0)"
)


def hand_made(
    dialect: Dialect, *, version: int = 1, typed: bool = True,
    keys: Collection[str] = KEYS, meta_keyed: bool = True, rows: bool = False,
    extra_column: bool = False,
) -> list[str]:
    """The statements that make one case's database (``rows``: with e9 stored)."""
    return [
        *meta_table(dialect, version, keyed=meta_keyed),
        processing_table(dialect, typed=typed, keys=keys, extra_column=extra_column),
        *([STORED_ROW] if rows else []),
    ]


def build_sqlite(path: Path, **case: Any) -> None:
    """A SQLite file at ``path`` holding one case (see :func:`hand_made`)."""
    from lifecycles.stores.sqlite import SQLiteDialect

    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in hand_made(SQLiteDialect(), **case):
            connection.execute(statement)
    finally:
        connection.close()


def sqlite_state(path: Path) -> tuple[bytes, list[str], list[tuple[Any, ...]]]:
    """What a refusal must leave as it was: the file's bytes, the files beside it (no
    journal or log left behind), and the catalogue read back."""
    connection = sqlite3.connect(path)
    try:
        catalogue = connection.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
        ).fetchall()
    finally:
        connection.close()
    beside = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
    return path.read_bytes(), beside, catalogue
