"""The SQLite store: the embedded default, one file on disk.

Construction::

    store = SQLiteStore(any_lifecycle, connection)           # table derived from the record
    store = SQLiteStore(lifecycle, connection, schema)       # a schema the caller describes

Everything a SQL store does is written once in :mod:`lifecycles.stores._sql`; this
module holds what only SQLite does: its dialect, how statements run on a
``sqlite3`` connection, its transactions and what its errors mean.

Schema probe: once per transaction (and once per read through
:meth:`SQLiteStore.check_schema`) the store reads ``PRAGMA schema_version``, which
every ``CREATE``, ``ALTER`` or ``DROP`` by any connection changes, joined with the
schema's meta row when it has one (a plain ``UPDATE`` changes that row without
touching the catalogue). A changed version makes the store check the whole schema
again; a difference is ``schema_altered``.

Durability: a transaction commits with ``COMMIT`` on the caller's connection, so
what it wrote is as durable as the connection's ``synchronous`` setting makes it
(SQLite's default, FULL, syncs on commit). Transactions use ``BEGIN IMMEDIATE``, so
two writers on one file serialise instead of failing half-way; a connection that is
already inside a transaction the store did not open is refused
(``transaction_nested``) rather than silently joined.

Failures: every ``sqlite3`` exception becomes a store error
(:meth:`SQLiteStore.driver_error`). A commit that fails (``COMMIT``, or a write
outside a transaction, which is its own commit) is ``database_unreachable`` with
``outcome_unknown`` false, nothing changed, when SQLite says so: the transaction is
still open (another connection's lock kept the commit out; the store rolls it back),
or the error is a lock (``SQLITE_BUSY``, ``SQLITE_LOCKED``: the commit never began) or
a full disk (``SQLITE_FULL``: a write of the commit was refused, and SQLite rolls the
transaction back). An I/O error (``SQLITE_IOERR``) is :class:`CommitUncertain`: a
failed sync can come after the commit record is written, which the next reader of
the journal or log then finds committed.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

from lifecycles.machines._core import Lifecycle
from lifecycles.stores._base import (
    CommitUncertain,
    SchemaMismatch,
    StoreDamaged,
    StoreError,
    StoreUnavailable,
)
from lifecycles.stores._codecs import plain
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_dialect import Codec, Column, Dialect, StoredTable
from lifecycles.stores._sql_schema import SQLSchema

R = TypeVar("R")

__all__ = ["CommitUncertain", "SQLiteDialect", "SQLiteStore", "StoreUnavailable", "connect"]

#: ``synchronous`` settings :func:`connect` accepts, by name (SQLite's own names).
SYNCHRONOUS = ("off", "normal", "full", "extra")
JOURNAL_MODES = ("wal", "delete", "truncate", "persist")


def connect(
    path: str | os.PathLike[str],
    *,
    synchronous: str = "full",
    journal_mode: str = "wal",
    busy_timeout: float = 5.0,
    **options: Any,
) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path``, set up for workers sharing it.

    * ``journal_mode="wal"`` (the default): readers never block the writer nor it them,
      and a commit appends to the write-ahead log instead of rewriting pages twice.
      ``"delete"`` is SQLite's own default (a rollback journal), which the reference
      used; the file works either way, and the mode stays with the file.
    * ``synchronous``: how durable a commit is when the call that made it returns.
      ``"full"`` (the default) syncs the log on every commit: what a call returned
      survives a crash of the process, the OS or the power. ``"normal"`` in WAL mode
      syncs only at checkpoints: a commit survives a crash of the process, but the
      last ones may be lost (never half-written) if the OS or the power fails; it is
      several times faster. ``"off"`` hands durability to the OS and is not advised.
    * ``busy_timeout``: seconds a statement waits for another connection's write lock
      before the store reports ``database_unreachable``.

    ``options`` go to :func:`sqlite3.connect` (``check_same_thread``, say). Raises
    :class:`StoreUnavailable` when the file cannot be opened, ``ValueError`` for a
    setting SQLite does not have.
    """
    if synchronous not in SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}")
    if journal_mode not in JOURNAL_MODES:
        raise ValueError(f"journal_mode must be one of {JOURNAL_MODES}, not {journal_mode!r}")
    if not (isinstance(busy_timeout, (int, float)) and 0 <= busy_timeout <= 3600):
        raise ValueError(f"busy_timeout must be seconds in [0, 3600], not {busy_timeout!r}")
    try:
        connection: sqlite3.Connection = sqlite3.connect(path, timeout=busy_timeout, **options)
        try:
            # Pragmas cannot be bound; every value here is one of the names checked above.
            (mode,) = connection.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()
            connection.execute(f"PRAGMA synchronous = {synchronous}")
        except BaseException:
            connection.close()
            raise
    except sqlite3.Error as error:
        raise StoreUnavailable(f"cannot open the SQLite database {path}: {error}") from error
    if mode != journal_mode:  # an in-memory database keeps "memory", say
        connection.close()
        raise StoreUnavailable(f"{path} cannot use journal_mode={journal_mode} (it is {mode})")
    return connection

_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _bool_decode(value: Any) -> Any:
    return value if value is None else bool(value)


class SQLiteDialect(Dialect):
    """SQLite's ``?`` markers, ``IS`` equality, ``PRAGMA schema_version`` probe; no row locks
    (``BEGIN IMMEDIATE`` already serialises writers on the whole file)."""

    name = "sqlite"
    param = "?"
    glances = True
    indexes_rules = True
    row_id = "rowid"
    write_locked = True  # BEGIN IMMEDIATE
    expiry_index_by_status = True
    # Without statistics the planner cannot choose between walking the claim order and
    # sorting the due records by the data: the store bounds the walk and falls back.
    # The bound costs a skip of that many index entries: about 3 us for 64.
    walk_bound = 64
    infinity = "9e999"
    null_safe_equal = "IS"
    collation = ""
    # For DDL a schema writes itself (the monitor's); derived tables stay untyped.
    type_names: ClassVar[dict[str, str]] = {
        "text": "TEXT", "integer": "INTEGER", "bigint": "INTEGER", "real": "REAL",
        "boolean": "INTEGER", "json": "TEXT", "other": "",
    }

    def quote(self, identifier: str) -> str:
        # Bare, never "double-quoted": SQLite reads a double-quoted name that matches no
        # column as a string literal, which would hide a dropped column from the store.
        if not _PLAIN_IDENTIFIER.match(identifier):
            raise ValueError(f"{identifier!r} is not a plain SQL identifier")
        return identifier

    def column_definition(self, column: Column, key: bool) -> str:
        # Untyped columns (no affinity) keep every value exactly as it was written.
        return f"{self.quote(column.name)} PRIMARY KEY NOT NULL" if key else self.quote(
            column.name
        )

    def signature(self, column: Column) -> object:
        # Declared types are advisory in SQLite; names are what the reference checks too.
        return column.name

    def excluding(self, key: str, keys: list[str]) -> tuple[str, list[Any]]:
        if not keys:
            return "", []
        return f" AND {key} NOT IN ({', '.join('?' for _ in keys)})", list(keys)

    def likely(self, clause: str) -> str:
        # Without it the planner, taking the statuses and the due time for narrow filters,
        # prefers the lease-order index and sorts every due record; likelihood() keeps
        # the clause's text, so the partial claim-order index still matches it.
        return f"likelihood({clause}, 0.99)"

    def due_range_hint(self, schema: StoredTable) -> str:
        return f" INDEXED BY {self.quote(schema.table + '_due')}"

    def probe(self, schema: StoredTable) -> tuple[str, tuple[Any, ...]]:
        binding = schema.binding
        if binding is None:
            return "PRAGMA schema_version", ()
        # LEFT JOIN: an emptied meta table still yields the version; a dropped one, or a
        # missing column, fails the statement, which driver_error reads as schema_altered.
        meta = ", ".join(f"m.{self.quote(column.name)}" for column in binding.meta_columns)
        return (
            f"SELECT v.schema_version, {meta} FROM pragma_schema_version AS v"
            f" LEFT JOIN {self.quote(binding.meta_table)} AS m",
            (),
        )

    def catalogue_guard(self, schema: StoredTable) -> str:
        return "(SELECT schema_version FROM pragma_schema_version) = ?"

    def catalogue_params(self, schema: StoredTable, token: object) -> list[Any]:
        return [token]

    def read_probe(self, schema: StoredTable, rows: list[tuple[Any, ...]]) -> object:
        expected = schema.binding.meta_rows if schema.binding else [()]
        if [tuple(row[1:]) for row in rows] != expected:
            raise schema.mismatch("the meta row or capabilities binding changed")
        return rows[0][0]

    def codec(self, column: Column) -> tuple[Codec, Codec]:
        if column.kind == "boolean":  # stored as 0/1
            return plain, _bool_decode
        return super().codec(column)


# SQLite result codes (and their extended forms) of a database that cannot be used now.
_UNUSABLE = (
    "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_READONLY",
    "SQLITE_FULL", "SQLITE_PERM", "SQLITE_AUTH", "SQLITE_PROTOCOL", "SQLITE_NOLFS",
)


class SQLiteStore(SQLStore[R]):
    """A lifecycle's records in one SQLite table, compare-and-set on every write."""

    dialect = SQLiteDialect()
    # Any constraint the insert breaks besides the key (a duplicate notification id,
    # say): the key itself is absorbed by ON CONFLICT DO NOTHING.
    unique_violations = (sqlite3.IntegrityError,)

    def __init__(
        self,
        lifecycle: Lifecycle[R, Any],
        connection: sqlite3.Connection,
        schema: SQLSchema | None = None,
    ) -> None:
        super().__init__(lifecycle, connection, schema)

    @contextmanager
    def database_transaction(self) -> Iterator[None]:
        connection = self.connection
        try:
            if connection.in_transaction:  # a closed connection raises here
                raise self.transaction_nested_error()
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            self.raise_store_error(error)
        try:
            # Under the write lock: the schema cannot change again before the commit.
            yield
        except BaseException:
            self._roll_back()
            raise
        try:
            connection.commit()
        except sqlite3.Error as error:
            # Still open: the commit was kept out (a reader's lock, say) and nothing is
            # committed. The transaction ends here either way, as the contract says.
            kept_out = self._still_open()
            self._roll_back()
            self.raise_store_error(error, committing=not kept_out)

    def _still_open(self) -> bool:
        try:
            return bool(self.connection.in_transaction)
        except sqlite3.Error:  # closed: sqlite3 rolled back what was open
            return False

    def _roll_back(self) -> None:
        try:
            if self.connection.in_transaction:
                self.connection.rollback()
        except sqlite3.Error as error:  # the exception being handled stays its context
            self.raise_store_error(error)

    def commit_may_have_happened(self, error: Exception) -> bool:
        # Only a failed write or sync of the journal or log can follow the commit record
        # (a lock, a full disk, a closed connection: nothing of the commit was written).
        name = getattr(error, "sqlite_errorname", None) or ""
        return name.startswith("SQLITE_IOERR")

    def run_write_committed(self, statement: str, params: Sequence[Any]) -> int:
        # SQLite runs a statement outside a transaction as a transaction of its own;
        # sqlite3 would open one implicitly before an UPDATE, so it is told not to, for
        # this statement only (no transaction is open: setting the level commits none).
        connection = self.connection
        try:
            if connection.in_transaction:  # a closed connection raises here
                raise self.transaction_nested_error()
            level = connection.isolation_level
        except sqlite3.Error as error:
            self.raise_store_error(error)
        connection.isolation_level = None
        try:
            return int(connection.execute(statement, params).rowcount)
        except sqlite3.Error as error:
            self.raise_store_error(error, committing=True)  # the statement is its commit
        finally:
            connection.isolation_level = level

    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            cursor = self.connection.cursor()
            cursor.row_factory = None  # plain tuples: a caller's sqlite3.Row costs per row
            rows: list[tuple[Any, ...]] = cursor.execute(statement, params).fetchall()
        except sqlite3.Error as error:
            self.raise_store_error(error)
        return rows

    def run_write(self, statement: str, params: Sequence[Any]) -> int:
        implicit = False
        try:
            # Outside a store transaction sqlite3 opens one of its own before the write;
            # a failed write would leave it open, and every later transaction nested.
            implicit = not self._depth and not self.connection.in_transaction
            return int(self.connection.execute(statement, params).rowcount)
        except sqlite3.Error as error:
            if implicit:
                self._roll_back()
            self.raise_store_error(error)

    def locate(self) -> str:
        # The main database's file as SQLite resolved it; an in-memory one is its connection.
        files = {name: file for _, name, file in self.run("PRAGMA database_list")}
        where = files.get("main") or f":memory:{id(self.connection):x}"
        return f"sqlite:{where}#{self.schema.table}"

    def columns_of(self, table: str) -> tuple[object, ...]:
        # PRAGMA arguments cannot be bound; table names come from schema declarations.
        return tuple(row[1] for row in self.run(f"PRAGMA table_info({self.dialect.quote(table)})"))

    def tables_present(self, names: Sequence[str]) -> set[str]:
        marks = ", ".join("?" for _ in names)
        return {
            name for (name,) in self.run(
                f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
                tuple(names),
            )
        }

    def unique_column_sets(self, table: str) -> set[frozenset[str]]:
        quoted = self.dialect.quote(table)
        found: set[frozenset[str]] = set()
        indexes = self.run(f"PRAGMA index_list({quoted})")  # seq, name, unique, origin, partial
        for _, name, unique, _, partial in indexes:
            if not unique or partial:
                continue
            keyed = [row for row in self.run(f"PRAGMA index_xinfo({self.dialect.quote(name)})")
                     if row[5]]  # seqno, cid, name, desc, coll, key
            # An expression (no column name) or another collation keys other values.
            if all(column is not None and coll == "BINARY" for _, _, column, _, coll, _ in keyed):
                found.add(frozenset(column for _, _, column, _, _, _ in keyed))
        if not any(origin == "pk" for _, _, _, origin, _ in indexes):
            # INTEGER PRIMARY KEY is the rowid itself: unique without an index.
            key = frozenset(row[1] for row in self.run(f"PRAGMA table_info({quoted})") if row[5])
            if key:
                found.add(key)
        return found

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

    def ensure_rules_indexes(self) -> None:
        """The partial indexes of the broken rows (``HealthQueries.rules_indexes``), and
        none of earlier rules: each costs writers an evaluation of its rules."""
        queries = self.rule_queries()
        prefix = f"{self.schema.table}_rules_"
        for (name,) in self.run(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
            " AND substr(name, 1, ?) = ?", (self.schema.table, len(prefix), prefix),
        ):
            if name not in queries.rules_indexes:
                self.run(f"DROP INDEX {self.dialect.quote(name)}")
        for statement in queries.create_rules_indexes:
            self.run(statement)

    def integrity_problems(self, *, constraints: bool = True) -> list[str]:
        if constraints:
            rows = [row[0] for row in self.run("PRAGMA quick_check")]
        else:
            # quick_check re-evaluates every CHECK constraint on every row (three
            # quarters of its time on the monitor's table) unless told to ignore them;
            # the setting is this connection's, and is put back as it was.
            (was,), *_ = self.run("PRAGMA ignore_check_constraints")
            self.run("PRAGMA ignore_check_constraints = ON")
            try:
                rows = [row[0] for row in self.run("PRAGMA quick_check")]
            finally:
                self.run(f"PRAGMA ignore_check_constraints = {'ON' if was else 'OFF'}")
        return [] if rows == ["ok"] else rows

