"""The SQLite store: the embedded default, one file on disk.

Construction::

    store = SQLiteStore(MONITOR, connection, MonitorSchema(capabilities_sha256))
    store = SQLiteStore(any_lifecycle, connection)      # generic schema from the record

The schema is created, migrated and checked once, when the store is built; after
that the store trusts its own constraints instead of re-reading the catalogue on
every call. What it does read, once per transaction (and once per read through
:meth:`SQLiteStore.check_schema`), is one cheap probe: ``PRAGMA schema_version``,
which every ``CREATE``, ``ALTER`` or ``DROP`` by any connection changes, and, for the
monitor, its meta row, which a plain ``UPDATE`` may change without touching the
catalogue. A changed version makes the store check the whole schema again; a
difference is ``schema_altered``. Every statement is written once, here, from the
lifecycle's table and the schema, with parameters only.

Durability: a transaction commits with ``COMMIT`` on the caller's connection, so
what it wrote is as durable as the connection's ``synchronous`` setting makes it
(SQLite's default, FULL, syncs on commit). Transactions use ``BEGIN IMMEDIATE``, so
two writers on one file serialise instead of failing half-way; a connection that is
already inside a transaction the store did not open is refused
(``transaction_nested``) rather than silently joined.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs

from lifecycles.invariants.monitor import COLUMNS as MONITOR_COLUMNS
from lifecycles.machines.core import Lifecycle, Row
from lifecycles.stores.base import (
    SchemaMismatch,
    StaleRecord,
    Store,
    StoreDamaged,
    StoreError,
    StoreUnavailable,
    TransactionNested,
    UniqueViolation,
)
from lifecycles.stores.codecs import (
    STRUCTURED,
    as_is,
    field_origins,
    from_json_or_none,
    json_or_none,
)

R = TypeVar("R")

Encoder = Callable[[Any], Any]


def _bool_decode(value: Any) -> Any:
    return value if value is None else bool(value)


def _codecs_for(record_type: type) -> dict[str, tuple[Encoder, Encoder]]:
    """How each field crosses into SQLite: natively, as 0/1, or as canonical JSON."""
    codecs: dict[str, tuple[Encoder, Encoder]] = {}
    for name, origins in field_origins(record_type).items():
        if origins & STRUCTURED:
            codecs[name] = (json_or_none, from_json_or_none)
        elif bool in origins:
            codecs[name] = (as_is, _bool_decode)
        else:
            codecs[name] = (as_is, as_is)
    return codecs


class SQLiteSchema:
    """Where one lifecycle's records live in SQLite, and how to create and check it.

    The default derives a table from the record class (one column per field, key
    as primary key, an index for the lease order). Subclasses such as
    :class:`MonitorSchema` pin an exact, pre-existing schema instead.
    """

    table: str
    code_prefix = "lifecycles."

    def __init__(self, lifecycle: Lifecycle[Any, Any], table: str | None = None) -> None:
        self.table = table or f"lifecycle_{lifecycle.name}"
        self.lifecycle = lifecycle
        self.columns: tuple[str, ...] = tuple(f.name for f in attrs.fields(lifecycle.record_type))

    def error(self, name: str) -> str:
        return self.code_prefix + name

    def ensure(self, connection: sqlite3.Connection) -> None:
        """Create the schema if absent; refuse a database whose schema differs."""
        key = self.lifecycle.key_field
        columns = ", ".join(
            f"{name} PRIMARY KEY NOT NULL" if name == key else name for name in self.columns
        )
        connection.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({columns})")
        lease = self.lifecycle.lease
        if lease is not None:
            order = ", ".join((self.lifecycle.status_field, lease.due_field, *lease.order_by))
            connection.execute(
                f"CREATE INDEX IF NOT EXISTS {self.table}_due ON {self.table} ({order})"
            )
        self.verify(connection)

    def verify(self, connection: sqlite3.Connection) -> None:
        found = _column_names(connection, self.table)
        if found != self.columns:
            raise SchemaMismatch(
                f"{self.table} has columns {found}, expected {self.columns}",
                code=self.error("schema_altered"),
            )

    def probe(self, connection: sqlite3.Connection) -> int:
        """The catalogue's version, in one cheap query; a changed version means some
        connection created, altered or dropped something, and :meth:`verify` must run."""
        (version,) = connection.execute("PRAGMA schema_version").fetchone()
        return int(version)


class MonitorSchema(SQLiteSchema):
    """The reference monitor's schema, exactly: a database written by either opens in both.

    Version 2 binds the database to one capabilities hash in the meta row. An
    empty version-1 database is migrated; a version-1 database holding rows is
    refused (``legacy_unbound``) because nothing says which capabilities wrote them.
    """

    code_prefix = "terminal_processing_monitor."
    META = "cms_source_terminal_processing_meta"
    META_COLUMNS = ("singleton", "schema_version", "expected_capabilities_sha256")
    LEGACY_META_COLUMNS = ("singleton", "schema_version")
    VERSION = 2

    CREATE_META = """
        CREATE TABLE IF NOT EXISTS cms_source_terminal_processing_meta (
            singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
            schema_version INTEGER NOT NULL CHECK (schema_version = 2),
            expected_capabilities_sha256 TEXT NOT NULL
        )"""
    # The status CHECK annotates each status with the trigger that sets it.
    CREATE_TABLE = """
        CREATE TABLE IF NOT EXISTS cms_source_terminal_processing (
            event_id TEXT PRIMARY KEY, notification_id TEXT NOT NULL UNIQUE,
            site_id TEXT NOT NULL, terminal_status TEXT NOT NULL,
            notification_sha256 TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN (
                'pending','leased','watching','retry_wait','succeeded','failed'
            )), poll_attempts INTEGER NOT NULL CHECK (poll_attempts >= 0),
            failures INTEGER NOT NULL CHECK (failures >= 0),
            max_failures INTEGER NOT NULL CHECK (max_failures BETWEEN 1 AND 20),
            next_poll_at REAL NOT NULL, lease_owner TEXT, lease_token TEXT,
            lease_expires_at REAL, last_error_code TEXT, receiver_status TEXT,
            receiver_attempts INTEGER, receiver_max_attempts INTEGER,
            receiver_next_attempt_at REAL, receiver_lease_expires_at REAL,
            receiver_lease_expired INTEGER, receiver_error_code TEXT,
            receiver_processed_at REAL, created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            CHECK ((status = 'leased' AND lease_owner IS NOT NULL
                    AND lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)
                   OR (status <> 'leased' AND lease_owner IS NULL
                       AND lease_token IS NULL AND lease_expires_at IS NULL))
        )"""
    CREATE_INDEX = """
        CREATE INDEX IF NOT EXISTS cms_source_terminal_processing_due
        ON cms_source_terminal_processing (status, next_poll_at, created_at, event_id)"""

    def __init__(self, lifecycle: Lifecycle[Any, Any], capabilities_sha256: str) -> None:
        super().__init__(lifecycle, table="cms_source_terminal_processing")
        self.capabilities_sha256 = capabilities_sha256
        if self.columns != MONITOR_COLUMNS:
            raise ValueError("the monitor schema needs the monitor record")

    def ensure(self, connection: sqlite3.Connection) -> None:
        present = {
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                (self.META, self.table),
            )
        }
        if len(present) == 1:
            raise SchemaMismatch("half of the schema is missing", code=self.error("schema_altered"))
        if present:
            meta_columns = _column_names(connection, self.META)
            meta_rows = [tuple(r) for r in connection.execute(f"SELECT * FROM {self.META}")]
            columns_match = _column_names(connection, self.table) == self.columns
            if columns_match and meta_columns == self.LEGACY_META_COLUMNS and meta_rows == [(1, 1)]:
                self._migrate_version_1(connection)
            elif not self._is_current(meta_columns, meta_rows, columns_match):
                raise SchemaMismatch(
                    "schema or capabilities binding differs", code=self.error("schema_altered")
                )
        connection.execute(self.CREATE_META)
        connection.execute(
            f"INSERT OR IGNORE INTO {self.META} VALUES (1, ?, ?)",
            (self.VERSION, self.capabilities_sha256),
        )
        connection.execute(self.CREATE_TABLE)
        connection.execute(self.CREATE_INDEX)
        self.verify(connection)

    def _is_current(
        self, meta_columns: tuple[str, ...], meta_rows: list[tuple[Any, ...]], columns_match: bool
    ) -> bool:
        return (
            columns_match
            and meta_columns == self.META_COLUMNS
            and meta_rows == [(1, self.VERSION, self.capabilities_sha256)]
        )

    def _migrate_version_1(self, connection: sqlite3.Connection) -> None:
        """Version 1 had no capabilities binding: bind an empty one, refuse one with rows."""
        if connection.execute(f"SELECT 1 FROM {self.table} LIMIT 1").fetchone() is not None:
            raise SchemaMismatch(
                "a version-1 database with rows cannot be bound to capabilities",
                code=self.error("legacy_unbound"),
            )
        connection.execute(f"DROP TABLE {self.META}")

    # The catalogue's version and the meta row in one query. LEFT JOIN: an emptied meta
    # table still yields the version; a dropped one, or a missing column, fails the
    # statement (no such table / column), which the store reports as schema_altered.
    PROBE = """
        SELECT v.schema_version, m.singleton, m.schema_version, m.expected_capabilities_sha256
        FROM pragma_schema_version AS v LEFT JOIN cms_source_terminal_processing_meta AS m"""

    def probe(self, connection: sqlite3.Connection) -> int:
        """The catalogue's version; raises ``schema_altered`` when the meta row differs.

        ``UPDATE``/``DELETE`` of the meta row leaves ``schema_version`` unchanged, so
        the row itself is read on every call (one indexed single-row table).
        """
        rows = [tuple(row) for row in connection.execute(self.PROBE)]
        if [row[1:] for row in rows] != [(1, self.VERSION, self.capabilities_sha256)]:
            raise SchemaMismatch(
                "the meta row or capabilities binding changed", code=self.error("schema_altered")
            )
        return int(rows[0][0])

    def verify(self, connection: sqlite3.Connection) -> None:
        meta_columns = _column_names(connection, self.META)
        meta_rows = [
            tuple(r)
            for r in connection.execute(
                f"SELECT singleton, schema_version, expected_capabilities_sha256 FROM {self.META}"
            )
        ]
        columns_match = _column_names(connection, self.table) == self.columns
        if not self._is_current(meta_columns, meta_rows, columns_match):
            raise SchemaMismatch(
                "schema or capabilities binding differs", code=self.error("schema_altered")
            )


# SQLite result codes (and their extended forms) of a database that cannot be used now.
_UNUSABLE = (
    "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_READONLY",
    "SQLITE_FULL", "SQLITE_PERM", "SQLITE_AUTH", "SQLITE_PROTOCOL", "SQLITE_NOLFS",
)


def _column_names(connection: sqlite3.Connection, table: str) -> tuple[str, ...]:
    # PRAGMA arguments cannot be bound; table names come from schema declarations only.
    return tuple(row[1] for row in connection.execute(f"PRAGMA table_info({table})"))


class SQLiteStore(Store[R]):
    """A lifecycle's records in one SQLite table, compare-and-set on every write."""

    def __init__(
        self,
        lifecycle: Lifecycle[R, Any],
        connection: sqlite3.Connection,
        schema: SQLiteSchema | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.connection = connection
        self.schema = schema or SQLiteSchema(lifecycle)
        self._depth = 0
        # The catalogue version the schema was last verified at; None while it is built.
        self._verified_version: int | None = None
        self._codecs = _codecs_for(lifecycle.record_type)
        self._decoders = [
            (name, decode) for name, (_, decode) in self._codecs.items() if decode is not as_is
        ]
        self._prepare_statements()
        with self.transaction():
            self.schema.ensure(connection)
            self._verified_version = self.schema.probe(connection)

    # -- SQL, written once from the table and the schema -----------------------

    def _prepare_statements(self) -> None:
        table, columns = self.schema.table, self.schema.columns
        key, status = self.lifecycle.key_field, self.lifecycle.status_field
        listed = ", ".join(columns)
        self._select = f"SELECT {listed} FROM {table}"
        self._get = f"{self._select} WHERE {key} = ?"
        self._insert = (
            f"INSERT INTO {table} ({listed}) VALUES ({', '.join('?' for _ in columns)})"
        )
        lease = self.lifecycle.lease
        token_clause = f" AND {lease.token_field} IS ?" if lease else ""
        # One compare-and-set UPDATE per table row: it writes exactly the row's fields.
        self._updates: dict[Row, tuple[str, tuple[str, ...]]] = {}
        for row in self.lifecycle.rows:
            fields = self.lifecycle.writes(row)
            assignments = ", ".join(f"{name} = ?" for name in fields)
            self._updates[row] = (
                f"UPDATE {table} SET {assignments} WHERE {key} = ? AND {status} = ?{token_clause}",
                fields,
            )
        self._count_by_status = f"SELECT {status}, count(*) FROM {table} GROUP BY {status}"
        if lease is not None:
            claimable = sorted(s.value for s in self.lifecycle.claimable)
            self._claimable = tuple(claimable)
            marks = ", ".join("?" for _ in claimable)
            self._due_where = f"{status} IN ({marks}) AND {lease.due_field} <= ?"
            self._order = ", ".join(lease.order_by)
            self._expired_where = f"{status} = ? AND {lease.expires_field} <= ?"

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        if self.connection.in_transaction:
            raise TransactionNested(
                "the connection is already in a transaction",
                code=self.schema.error("transaction_nested"),
            )
        self.connection.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            # Under the write lock: the schema cannot change again before the commit.
            self.check_schema()
            yield
            self.connection.commit()
        except BaseException:
            if self.connection.in_transaction:
                self.connection.rollback()
            raise
        finally:
            self._depth = 0

    # -- the schema under the store, and the driver's errors ---------------------------

    def check_schema(self) -> None:
        if self._verified_version is None:  # still being created: ensure() checks it
            return
        version = self.schema.probe(self.connection)
        if version != self._verified_version:
            # Some connection changed the catalogue. Check it all again: an identical
            # schema (a table dropped and recreated as it was, a new index) carries on.
            self.schema.verify(self.connection)
            self._verified_version = version

    def driver_error(self, error: Exception) -> StoreError | None:
        """``sqlite3`` errors by what they mean for the caller.

        ``SQLITE_ERROR`` from a statement the store wrote once and ran before (no such
        table or column) means the schema changed under it; busy, locked, I/O, read-only
        or a closed connection mean the database cannot be used right now; the rest
        (corrupt, not a database, a constraint the rules allow) is damage.
        """
        if not isinstance(error, sqlite3.Error):
            return None
        name = getattr(error, "sqlite_errorname", None) or ""
        if isinstance(error, (sqlite3.ProgrammingError, sqlite3.InterfaceError)) or (
            name.startswith(_UNUSABLE)
        ):
            return StoreUnavailable(str(error), code=self.schema.error("database_unreachable"))
        if isinstance(error, sqlite3.OperationalError) and name in ("SQLITE_ERROR", ""):
            return SchemaMismatch(str(error), code=self.schema.error("schema_altered"))
        return StoreDamaged(str(error), code=self.schema.error("database_integrity"))

    # -- reads ------------------------------------------------------------------------

    def _decode(self, row: Sequence[Any]) -> R:
        values = dict(zip(self.schema.columns, row, strict=True))
        for name, decode in self._decoders:  # only the fields that are not stored natively
            values[name] = decode(values[name])
        return self.admit(values)

    def _encode(self, record: R, fields: Sequence[str]) -> list[Any]:
        values = self.values_of(record)
        return [self._codecs[name][0](values[name]) for name in fields]

    def get(self, key: str) -> R | None:
        row = self.connection.execute(self._get, (key,)).fetchone()
        return None if row is None else self._decode(row)

    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        self._lease()
        where, params = self._due_where, [*self._claimable, now]
        if exclude:
            where += f" AND {self.lifecycle.key_field} NOT IN ({', '.join('?' for _ in exclude)})"
            params.extend(sorted(exclude))
        row = self.connection.execute(
            f"{self._select} WHERE {where} ORDER BY {self._order} LIMIT 1", params
        ).fetchone()
        return None if row is None else self._decode(row)

    def expired_leases(self, now: float) -> list[R]:
        self._lease()
        rows = self.connection.execute(
            f"{self._select} WHERE {self._expired_where}", (str(self.lifecycle.leased), now)
        ).fetchall()
        return [self._decode(row) for row in rows]

    def count_by_status(self) -> dict[str, int]:
        counts = {status.value: 0 for status in self.lifecycle.statuses}
        for status, count in self.connection.execute(self._count_by_status):
            counts[status] = count
        return counts

    def count_due(self, now: float) -> int:
        self._lease()
        (count,) = self.connection.execute(
            f"SELECT count(*) FROM {self.schema.table} WHERE {self._due_where}",
            (*self._claimable, now),
        ).fetchone()
        return int(count)

    def count_expired(self, now: float) -> int:
        self._lease()
        (count,) = self.connection.execute(
            f"SELECT count(*) FROM {self.schema.table} WHERE {self._expired_where}",
            (str(self.lifecycle.leased), now),
        ).fetchone()
        return int(count)

    def scan(self) -> Iterator[R]:
        cursor = self.connection.cursor()
        cursor.row_factory = None  # plain tuples: a caller's sqlite3.Row costs per row here
        cursor.execute(f"{self._select} ORDER BY {self.lifecycle.key_field}")
        for row in cursor:
            yield self._decode(row)

    def integrity_problems(self) -> list[str]:
        rows = [row[0] for row in self.connection.execute("PRAGMA quick_check")]
        return [] if rows == ["ok"] else rows

    # -- writes -------------------------------------------------------------------------

    def insert(self, record: R) -> R:
        self.lifecycle.check(record)
        with self.transaction():
            existing = self.get(self.lifecycle.key_of(record))
            if existing is not None:
                return existing
            try:
                self.connection.execute(self._insert, self._encode(record, self.schema.columns))
            except sqlite3.IntegrityError as error:
                raise UniqueViolation(str(error)) from error
            return record

    def write(self, before: R, after: R, row: Row) -> None:
        self.lifecycle.check(after)
        statement, fields = self._updates[row]
        params = [
            *self._encode(after, fields),
            self.lifecycle.key_of(before),
            str(self.lifecycle.status_of(before)),
        ]
        if self.lifecycle.lease is not None:
            params.append(self.token_of(before))
        with self.transaction():
            if self.connection.execute(statement, params).rowcount != 1:
                raise StaleRecord(f"{self.lifecycle.key_of(before)} changed since it was read")
