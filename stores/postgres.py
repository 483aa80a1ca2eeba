"""The PostgreSQL store: one server, workers on many machines.

Construction::

    connection = connect("postgresql://app@db.example/app")        # autocommit, see below
    store = PostgresStore(MONITOR, connection, PostgresMonitorSchema(MONITOR, caps))
    store = PostgresStore(any_lifecycle, connection)   # generic schema from the record
    store = open_monitor_store(connection, caps)       # what the monitor facade calls

The tables live in the connection's ``current_schema()`` (set ``search_path`` to
keep several installations, or parallel tests, apart). The schema is created,
migrated and checked once, when the store is built, under a transaction-level
advisory lock so that workers starting together do not race on ``CREATE TABLE``;
afterwards the store trusts the server's own constraints. PostgreSQL has no schema
version to compare, so each transaction (and each read, through
:meth:`PostgresStore.check_schema`) starts with one probe that reads the columns of
the store's tables from ``pg_attribute`` and, for the monitor, the meta row, and
compares them with what the store writes: a difference is ``schema_altered``.

Claims take the first due record with ``SELECT ... FOR UPDATE SKIP LOCKED``: two
workers never wait on each other and never lease the same record, and expired
leases are locked the same way, so any number of workers may recover them at once.
Every write is a compare-and-set ``UPDATE`` on key, expected status and lease token
(``IS NOT DISTINCT FROM``), generated once per table row from the fields that row
writes. Statements are built from schema declarations with
:class:`psycopg.sql.Identifier` and carry values only as parameters.

Transactions: the store owns the transaction boundaries on the connection it is
given (``BEGIN``/``COMMIT`` through ``connection.transaction()``). A connection that
is already inside a transaction the store did not open is refused
(``transaction_nested``) rather than silently joined. Autocommit connections are the
expected kind; on a non-autocommit connection every read also runs in its own short
transaction so that the connection is never left idle inside one.

Durability: what a transaction wrote is durable when its ``with`` block exits,
to the degree the server's ``synchronous_commit`` makes it (on by default).

Errors: a server that cannot be reached, or a connection that broke, raises
:class:`StoreUnavailable` (``...database_unreachable``); a schema that differs raises
:class:`~lifecycles.stores.base.SchemaMismatch` (``...schema_altered``,
``...legacy_unbound``); :meth:`PostgresStore.driver_error` says what any other
``psycopg`` error means. Codes carry the schema's prefix, so the monitor's errors read
``terminal_processing_monitor.*`` exactly as on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import Enum
from typing import Any, TypeVar

import attrs
import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from lifecycles.invariants.monitor import COLUMNS as MONITOR_COLUMNS
from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.machines.core import Lifecycle, Row
from lifecycles.machines.monitor import MONITOR
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

Codec = Callable[[Any], Any]
Connection = psycopg.Connection[Any]

# How many records one page of :meth:`PostgresStore.scan` reads.
SCAN_PAGE = 500

__all__ = [
    "PostgresMonitorSchema",
    "PostgresSchema",
    "PostgresStore",
    "SchemaMismatch",
    "StoreUnavailable",
    "TransactionNested",
    "connect",
    "open_monitor_store",
]


def connect(dsn: str, **options: Any) -> Connection:
    """An autocommit connection to ``dsn``, the kind the store expects.

    Raises :class:`StoreUnavailable` when the server cannot be reached; ``options``
    go to :func:`psycopg.connect` (``connect_timeout``, ``application_name``, ...).
    """
    try:
        return psycopg.connect(dsn, autocommit=True, **options)
    except psycopg.OperationalError as error:
        raise StoreUnavailable(f"cannot reach the PostgreSQL server: {error}") from error


# --- how fields cross into PostgreSQL --------------------------------------------


def _plain(value: Any) -> Any:
    """Enum members (statuses) are stored as their values, never as their names."""
    return value.value if isinstance(value, Enum) else value


@attrs.frozen
class Column:
    """One column: its name, its PostgreSQL type and how values cross into it."""

    name: str
    sql_type: str
    encode: Codec = _plain
    decode: Codec = as_is


def _column_for(name: str, origins: set[Any], integer_type: str) -> Column:
    """The column a record field gets, from the base types its hint allows.

    Structured values are canonical JSON text, not jsonb: jsonb rewrites numbers (1e308
    comes back as an integer) and so would not return the record that was written.
    """
    if origins & STRUCTURED:
        return Column(name, "text", json_or_none, from_json_or_none)
    if origins == {bool}:
        return Column(name, "boolean")
    if origins and origins <= {int}:
        return Column(name, integer_type)
    if origins and origins <= {int, float}:
        return Column(name, "double precision")
    if origins and all(isinstance(o, type) and issubclass(o, str) for o in origins):
        return Column(name, "text")
    return Column(name, "text", json_or_none, from_json_or_none)  # anything else: as JSON


# --- schemas ---------------------------------------------------------------------


class PostgresSchema:
    """Where one lifecycle's records live in PostgreSQL, and how to create and check it.

    The default derives a table from the record class: one column per field, typed
    from the field's hint (``bigint``, ``double precision``, ``boolean``, ``text``;
    containers as canonical JSON text), the key as primary key, text columns in the
    ``"C"`` collation so that key order is code-point order as in every other store,
    and an index for the lease order. :class:`PostgresMonitorSchema` pins the
    reference monitor's schema instead.
    """

    code_prefix = "lifecycles."
    integer_type = "bigint"

    def __init__(self, lifecycle: Lifecycle[Any, Any], table: str | None = None) -> None:
        self.lifecycle = lifecycle
        self.table = table or f"lifecycle_{lifecycle.name}"
        self.columns: tuple[Column, ...] = tuple(
            _column_for(name, origins, self.integer_type)
            for name, origins in field_origins(lifecycle.record_type).items()
        )
        self.column_names = tuple(column.name for column in self.columns)

    def error(self, name: str) -> str:
        return self.code_prefix + name

    def ensure(self, cursor: psycopg.Cursor[Any]) -> None:
        """Create the schema if absent; refuse a database whose schema differs."""
        key = self.lifecycle.key_field
        definitions = [
            sql.SQL("{} {}{}{}").format(
                sql.Identifier(column.name),
                sql.SQL(column.sql_type),
                sql.SQL(' COLLATE "C"' if column.sql_type == "text" else ""),
                sql.SQL(" PRIMARY KEY" if column.name == key else ""),
            )
            for column in self.columns
        ]
        cursor.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                sql.Identifier(self.table), sql.SQL(", ").join(definitions)
            )
        )
        lease = self.lifecycle.lease
        if lease is not None:
            order = (self.lifecycle.status_field, lease.due_field, *lease.order_by)
            cursor.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                    sql.Identifier(f"{self.table}_due"),
                    sql.Identifier(self.table),
                    sql.SQL(", ").join(map(sql.Identifier, order)),
                )
            )
        self.create_claim_order_index(cursor)
        self.verify(cursor)

    def create_claim_order_index(self, cursor: psycopg.Cursor[Any]) -> None:
        """A partial index of the claimable records in lease order.

        With it a claim walks the index to the first due record instead of sorting every
        due record (the lease-order index alone leaves PostgreSQL a sort per claim).
        """
        lease = self.lifecycle.lease
        if lease is None:
            return
        cursor.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({}) WHERE {}").format(
                sql.Identifier(f"{self.table}_claim_order"),
                sql.Identifier(self.table),
                sql.SQL(", ").join(map(sql.Identifier, lease.order_by)),
                claimable_clause(self.lifecycle),
            )
        )

    def expected_columns(self) -> tuple[tuple[str, str], ...]:
        return tuple((column.name, column.sql_type) for column in self.columns)

    def probe(self, cursor: psycopg.Cursor[Any]) -> None:
        """One cheap query: refuse (``schema_altered``) a table whose columns changed.

        A dropped or renamed table fails the statement itself (``UndefinedTable``),
        which :meth:`PostgresStore.driver_error` reports as ``schema_altered`` too.
        """
        cursor.execute(f"SELECT {_COLUMNS_OF}", (self.table,))
        if _described(cursor.fetchone()) != self.expected_columns():
            raise SchemaMismatch(
                f"the columns of {self.table} changed", code=self.error("schema_altered")
            )

    def verify(self, cursor: psycopg.Cursor[Any]) -> None:
        found = _columns_of(cursor, self.table)
        if found != self.expected_columns():
            raise SchemaMismatch(
                f"{self.table} has columns {found}, expected {self.expected_columns()}",
                code=self.error("schema_altered"),
            )


class PostgresMonitorSchema(PostgresSchema):
    """The reference monitor's schema on PostgreSQL: same tables, columns and rules.

    Same table and column names, the same meta row binding schema version 2 to one
    capabilities hash, the same CHECK constraints; types suited to PostgreSQL
    (``double precision`` times, ``integer`` counters, ``text``). An empty version-1
    database is migrated; a version-1 database holding rows is refused
    (``legacy_unbound``) because nothing says which capabilities wrote them.
    """

    code_prefix = "terminal_processing_monitor."
    integer_type = "integer"
    META = "cms_source_terminal_processing_meta"
    META_COLUMNS = (
        ("singleton", "integer"), ("schema_version", "integer"),
        ("expected_capabilities_sha256", "text"),
    )
    LEGACY_META_COLUMNS = (("singleton", "integer"), ("schema_version", "integer"))
    VERSION = 2

    CREATE_META = """
        CREATE TABLE IF NOT EXISTS cms_source_terminal_processing_meta (
            singleton integer PRIMARY KEY CHECK (singleton = 1),
            schema_version integer NOT NULL CHECK (schema_version = 2),
            expected_capabilities_sha256 text NOT NULL
        )"""
    BIND_META = """
        INSERT INTO cms_source_terminal_processing_meta VALUES (1, %s, %s)
        ON CONFLICT (singleton) DO NOTHING"""
    # Statuses, and the trigger that sets each: pending (register), leased (claim),
    # watching (observe_progress), retry_wait (expire_lease, fail_attempt),
    # succeeded (observe_success), failed (observe_failure, expire_lease, fail_attempt).
    CREATE_TABLE = """
        CREATE TABLE IF NOT EXISTS cms_source_terminal_processing (
            event_id text COLLATE "C" PRIMARY KEY, notification_id text NOT NULL UNIQUE,
            site_id text NOT NULL, terminal_status text NOT NULL,
            notification_sha256 text NOT NULL,
            status text NOT NULL CHECK (status IN (
                'pending','leased','watching','retry_wait','succeeded','failed'
            )), poll_attempts integer NOT NULL CHECK (poll_attempts >= 0),
            failures integer NOT NULL CHECK (failures >= 0),
            max_failures integer NOT NULL CHECK (max_failures BETWEEN 1 AND 20),
            next_poll_at double precision NOT NULL, lease_owner text, lease_token text,
            lease_expires_at double precision, last_error_code text, receiver_status text,
            receiver_attempts integer, receiver_max_attempts integer,
            receiver_next_attempt_at double precision,
            receiver_lease_expires_at double precision,
            receiver_lease_expired integer, receiver_error_code text,
            receiver_processed_at double precision, created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
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
        if self.column_names != MONITOR_COLUMNS:
            raise ValueError("the monitor schema needs the monitor record")

    def ensure(self, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = ANY(%s)",
            ([self.META, self.table],),
        )
        present = {name for (name,) in cursor.fetchall()}
        if len(present) == 1:
            raise SchemaMismatch("half of the schema is missing", code=self.error("schema_altered"))
        if present:
            if self._is_version_1(cursor):
                self._migrate_version_1(cursor)
            else:
                self.verify(cursor)
        cursor.execute(self.CREATE_META)
        cursor.execute(self.BIND_META, (self.VERSION, self.capabilities_sha256))
        cursor.execute(self.CREATE_TABLE)
        cursor.execute(self.CREATE_INDEX)
        self.create_claim_order_index(cursor)
        self.verify(cursor)

    def _is_version_1(self, cursor: psycopg.Cursor[Any]) -> bool:
        if _columns_of(cursor, self.META) != self.LEGACY_META_COLUMNS:
            return False
        if _columns_of(cursor, self.table) != self.expected_columns():
            return False
        cursor.execute("SELECT singleton, schema_version FROM cms_source_terminal_processing_meta")
        return cursor.fetchall() == [(1, 1)]

    def _migrate_version_1(self, cursor: psycopg.Cursor[Any]) -> None:
        """Version 1 had no capabilities binding: bind an empty one, refuse one with rows."""
        cursor.execute("SELECT 1 FROM cms_source_terminal_processing LIMIT 1")
        if cursor.fetchone() is not None:
            raise SchemaMismatch(
                "a version-1 database with rows cannot be bound to capabilities",
                code=self.error("legacy_unbound"),
            )
        cursor.execute("DROP TABLE cms_source_terminal_processing_meta")

    def probe(self, cursor: psycopg.Cursor[Any]) -> None:
        """The meta row and the columns of both tables, in one query, as :meth:`verify`
        compares them: another binding, version or column is ``schema_altered``."""
        cursor.execute(
            f"SELECT m.singleton, m.schema_version, m.expected_capabilities_sha256,"
            f" {_COLUMNS_OF}, {_COLUMNS_OF} FROM cms_source_terminal_processing_meta AS m",
            (self.META, self.table),
        )
        rows = cursor.fetchall()
        if (
            len(rows) != 1
            or tuple(rows[0][:3]) != (1, self.VERSION, self.capabilities_sha256)
            or _described(rows[0][3:4]) != self.META_COLUMNS
            or _described(rows[0][4:5]) != self.expected_columns()
        ):
            raise SchemaMismatch(
                "schema or capabilities binding differs", code=self.error("schema_altered")
            )

    def verify(self, cursor: psycopg.Cursor[Any]) -> None:
        meta_columns = _columns_of(cursor, self.META)
        columns_match = _columns_of(cursor, self.table) == self.expected_columns()
        meta_rows: list[tuple[Any, ...]] = []
        if meta_columns == self.META_COLUMNS:
            cursor.execute(
                "SELECT singleton, schema_version, expected_capabilities_sha256"
                " FROM cms_source_terminal_processing_meta"
            )
            meta_rows = cursor.fetchall()
        if not (columns_match and meta_rows == [(1, self.VERSION, self.capabilities_sha256)]):
            raise SchemaMismatch(
                "schema or capabilities binding differs", code=self.error("schema_altered")
            )


def claimable_clause(lifecycle: Lifecycle[Any, Any]) -> sql.Composable:
    """``status IN ('pending', ...)``: the claimable statuses, from the table.

    Rendered as literals, not parameters, so that the planner can match the partial
    claim-order index; the values are the lifecycle's declared statuses, never input.
    """
    claimable = sorted(status.value for status in lifecycle.claimable)
    return sql.SQL("{} IN ({})").format(
        sql.Identifier(lifecycle.status_field),
        sql.SQL(", ").join(map(sql.Literal, claimable)),
    )


# The columns of one table (a parameter: its name) as an array of "name type", in order,
# from the catalogue itself: information_schema.columns costs about ten times more.
_COLUMNS_OF = (
    "ARRAY(SELECT a.attname || ' ' || format_type(a.atttypid, NULL) FROM pg_attribute AS a"
    " WHERE a.attrelid = quote_ident(%s)::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    " ORDER BY a.attnum)"
)


def _described(row: Sequence[Any] | None) -> tuple[tuple[str, str], ...]:
    """An array of ``_COLUMNS_OF`` (the first value of ``row``) as (name, type) pairs."""
    if row is None:
        return ()
    return tuple(
        (name, kind) for name, _, kind in (str(item).partition(" ") for item in row[0])
    )


def _columns_of(cursor: psycopg.Cursor[Any], table: str) -> tuple[tuple[str, str], ...]:
    """(name, type) of each column of ``table`` in the current schema, in order."""
    cursor.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s"
        " ORDER BY ordinal_position",
        (table,),
    )
    return tuple((str(name), str(kind)) for name, kind in cursor.fetchall())


# --- the store -------------------------------------------------------------------


class PostgresStore(Store[R]):
    """A lifecycle's records in one PostgreSQL table, compare-and-set on every write."""

    def __init__(
        self,
        lifecycle: Lifecycle[R, Any],
        connection: Connection,
        schema: PostgresSchema | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.connection = connection
        self.schema = schema or PostgresSchema(lifecycle)
        self._depth = 0
        self._verified = False  # until ensure() ran: transactions probe the schema after
        self._columns = {column.name: column for column in self.schema.columns}
        with self._connection_errors():  # rendering identifiers asks the connection
            self._prepare_statements()
        with self.transaction(), self._cursor() as cursor:
            # Workers starting together must not race on CREATE TABLE IF NOT EXISTS.
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || %s, 0))",
                (self.schema.table,),
            )
            self.schema.ensure(cursor)
        self._verified = True

    # -- SQL, written once from the table and the schema -----------------------------

    def _prepare_statements(self) -> None:
        table = sql.Identifier(self.schema.table)
        key = sql.Identifier(self.lifecycle.key_field)
        status = sql.Identifier(self.lifecycle.status_field)
        listed = sql.SQL(", ").join(map(sql.Identifier, self.schema.column_names))
        select = sql.SQL("SELECT {} FROM {}").format(listed, table)

        def render(statement: sql.Composable) -> str:
            return statement.as_string(self.connection)

        self._get = render(sql.SQL("{} WHERE {} = %s").format(select, key))
        self._insert = render(
            sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO NOTHING").format(
                table, listed,
                sql.SQL(", ").join(sql.Placeholder() for _ in self.schema.columns), key,
            )
        )
        self._page = render(
            sql.SQL("{} WHERE {} > %s ORDER BY {} LIMIT %s").format(select, key, key)
        )
        self._count_by_status = render(
            sql.SQL("SELECT {}, count(*) FROM {} GROUP BY {}").format(status, table, status)
        )
        lease = self.lifecycle.lease
        token_clause: sql.Composable = sql.SQL("")
        if lease is not None:
            token_clause = sql.SQL(" AND {} IS NOT DISTINCT FROM %s").format(
                sql.Identifier(lease.token_field)
            )
        # One compare-and-set UPDATE per table row: it writes exactly the row's fields.
        self._updates: dict[Row, tuple[str, tuple[str, ...]]] = {}
        for row in self.lifecycle.rows:
            fields = self.lifecycle.writes(row)
            assignments = sql.SQL(", ").join(
                sql.SQL("{} = %s").format(sql.Identifier(name)) for name in fields
            )
            self._updates[row] = (
                render(
                    sql.SQL("UPDATE {} SET {} WHERE {} = %s AND {} = %s{}").format(
                        table, assignments, key, status, token_clause
                    )
                ),
                fields,
            )
        if lease is not None:
            self._leased = str(self.lifecycle.leased)
            due = sql.SQL("{} AND {} <= %s").format(
                claimable_clause(self.lifecycle), sql.Identifier(lease.due_field)
            )
            expired = sql.SQL("{} = %s AND {} <= %s").format(
                status, sql.Identifier(lease.expires_field)
            )
            order = sql.SQL(", ").join(map(sql.Identifier, lease.order_by))
            # SKIP LOCKED: a record another worker is claiming or recovering right now
            # is passed over, never waited for and never taken twice.
            self._next_due = render(
                sql.SQL(
                    "{} WHERE {} AND NOT ({} = ANY(%s)) ORDER BY {} LIMIT 1"
                    " FOR UPDATE SKIP LOCKED"
                ).format(select, due, key, order)
            )
            self._expired = render(
                sql.SQL("{} WHERE {} ORDER BY {} FOR UPDATE SKIP LOCKED").format(
                    select, expired, order
                )
            )
            self._count_due = render(sql.SQL("SELECT count(*) FROM {} WHERE {}").format(
                table, due
            ))
            self._count_expired = render(sql.SQL("SELECT count(*) FROM {} WHERE {}").format(
                table, expired
            ))

    # -- transactions and errors --------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self._connection_errors():
            state = self.connection.info.transaction_status
            if state == TransactionStatus.UNKNOWN or self.connection.closed:
                raise StoreUnavailable(
                    "the connection is closed or broken",
                    code=self.schema.error("database_unreachable"),
                )
            if state != TransactionStatus.IDLE:
                raise TransactionNested(
                    "the connection is already in a transaction",
                    code=self.schema.error("transaction_nested"),
                )
            with self.connection.transaction():
                self._depth = 1
                try:
                    if self._verified:
                        self._probe()  # before anything else the transaction reads or writes
                    yield
                finally:
                    self._depth = 0

    @contextmanager
    def _connection_errors(self) -> Iterator[None]:
        """A lost server becomes :class:`StoreUnavailable`; every other error passes."""
        try:
            yield
        except psycopg.OperationalError as error:
            if self.connection.closed or self.connection.broken:
                raise StoreUnavailable(
                    f"the PostgreSQL connection failed: {error}",
                    code=self.schema.error("database_unreachable"),
                ) from error
            raise

    def _probe(self) -> None:
        with self._cursor() as cursor:
            self.schema.probe(cursor)

    def check_schema(self) -> None:
        if not self._verified:
            return
        if self._depth or self.connection.autocommit:
            with self._connection_errors():
                self._probe()
        else:
            with self.transaction():  # which probes on entry
                pass

    def driver_error(self, error: Exception) -> StoreError | None:
        """``psycopg`` errors by what they mean for the caller.

        A lost or refused connection (and missing privileges) means the database cannot
        be used now; a statement the store wrote once and ran before failing to fit
        (undefined table or column, a type mismatch: SQLSTATE class 42) means the schema
        changed under it; data or integrity errors are damage.
        """
        if not isinstance(error, psycopg.Error):
            return None
        if isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError,
                              psycopg.errors.InsufficientPrivilege)):
            return StoreUnavailable(str(error), code=self.schema.error("database_unreachable"))
        if isinstance(error, (psycopg.ProgrammingError, psycopg.NotSupportedError)):
            return SchemaMismatch(str(error), code=self.schema.error("schema_altered"))
        return StoreDamaged(str(error), code=self.schema.error("database_integrity"))

    def _reading(self) -> AbstractContextManager[None]:
        """Reads outside a store transaction: one statement on an autocommit connection,
        else a short transaction of their own (never leave the connection inside one)."""
        if self._depth or self.connection.autocommit:
            return self._connection_errors()
        return self.transaction()

    def _cursor(self) -> psycopg.Cursor[tuple[Any, ...]]:
        return self.connection.cursor(row_factory=tuple_row)

    def _fetch(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._reading(), self._cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall()

    # -- reads ----------------------------------------------------------------------------

    def _decode(self, row: Sequence[Any]) -> R:
        values = {
            column.name: column.decode(value)
            for column, value in zip(self.schema.columns, row, strict=True)
        }
        return self.admit(values)

    def _encode(self, record: R, fields: Sequence[str]) -> list[Any]:
        values = self.values_of(record)
        return [self._columns[name].encode(values[name]) for name in fields]

    def get(self, key: str) -> R | None:
        rows = self._fetch(self._get, (key,))
        return self._decode(rows[0]) if rows else None

    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        self._lease()
        rows = self._fetch(self._next_due, (now, sorted(exclude)))
        return self._decode(rows[0]) if rows else None

    def expired_leases(self, now: float) -> list[R]:
        self._lease()
        return [self._decode(row) for row in self._fetch(self._expired, (self._leased, now))]

    def count_by_status(self) -> dict[str, int]:
        counts = {status.value: 0 for status in self.lifecycle.statuses}
        for status, count in self._fetch(self._count_by_status, ()):
            counts[status] = int(count)
        return counts

    def count_due(self, now: float) -> int:
        self._lease()
        return int(self._fetch(self._count_due, (now,))[0][0])

    def count_expired(self, now: float) -> int:
        self._lease()
        return int(self._fetch(self._count_expired, (self._leased, now))[0][0])

    def scan(self) -> Iterator[R]:
        # Keyset pages: streams without holding a transaction (or a cursor) open.
        after = ""
        while rows := self._fetch(self._page, (after, SCAN_PAGE)):
            for row in rows:
                yield self._decode(row)
            after = rows[-1][self.schema.column_names.index(self.lifecycle.key_field)]

    # -- writes ---------------------------------------------------------------------------

    def insert(self, record: R) -> R:
        self.lifecycle.check(record)
        key = self.lifecycle.key_of(record)
        with self.transaction():
            nested = self._depth > 1
            # A failed statement aborts the whole transaction in PostgreSQL; when the
            # caller's transaction holds more work, a savepoint keeps that work usable.
            savepoint = self.connection.transaction() if nested else nullcontext()
            try:
                with savepoint, self._cursor() as cursor:
                    cursor.execute(self._insert, self._encode(record, self.schema.column_names))
                    inserted = cursor.rowcount == 1
            except psycopg.errors.UniqueViolation as error:
                raise UniqueViolation(str(error)) from error
            if inserted:
                return record
            existing = self.get(key)
            if existing is None:  # deleted between the two statements: not by this store
                raise StaleRecord(f"{key} vanished while it was being inserted")
            return existing

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
        with self.transaction(), self._cursor() as cursor:
            cursor.execute(statement, params)
            if cursor.rowcount != 1:
                raise StaleRecord(f"{self.lifecycle.key_of(before)} changed since it was read")


def open_monitor_store(connection: Connection, capabilities_sha256: str) -> PostgresStore[
    MonitorRecord
]:
    """The monitor's store on ``connection``: what ``DurableTerminalProcessingMonitor`` uses."""
    if not isinstance(connection, psycopg.Connection):  # an AsyncConnection, say
        raise TypeError("connection must be a psycopg.Connection (synchronous)")
    return PostgresStore(MONITOR, connection, PostgresMonitorSchema(MONITOR, capabilities_sha256))
