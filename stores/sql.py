"""The SQL store base: one store for SQLite and PostgreSQL, its statements derived from the table.

A lifecycle's records live in one table with one column per record field. Every
statement is written once, here, from the lifecycle's table, its lease declaration
and a :class:`SQLSchema`, with parameters for every value: a compare-and-set
``UPDATE`` per table row (writing exactly the fields that row writes), the insert,
the reads, the counts and the lease queries. What differs between databases is a
:class:`Dialect` (placeholders, quoting, null-safe equality, ``SKIP LOCKED``, column
types and codecs, the cheap schema probe) and a few driver hooks on the subclass
(:class:`~lifecycles.stores.sqlite.SQLiteStore`,
:class:`~lifecycles.stores.postgres.PostgresStore`): how to run a statement, how to
open the outermost transaction, what a driver exception means.

The schema object is passed in by the caller. :class:`SQLSchema` derives the table
from the record class; a lifecycle that must keep an exact, pre-existing schema
(the monitor's reference schema, in ``lifecycles/monitor_schema.py``) gives it a
:class:`SchemaBinding`: its own DDL and migration, and a meta table whose rows bind
the database to something (a capabilities hash). This module knows no lifecycle.

The schema is created, migrated and verified once, when the store is built; then
every outermost transaction starts with one cheap probe (and :meth:`check_schema`
runs it for reads made outside one), so a schema or meta row changed by another
connection is refused (``schema_altered``) before anything is read or written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import Enum
from typing import Any, ClassVar, Protocol, TypeVar

import attrs

from lifecycles.machines import lease as lease_protocol
from lifecycles.machines.core import Lifecycle, Row
from lifecycles.stores.base import SchemaMismatch, StaleRecord, Store, StoreError, UniqueViolation
from lifecycles.stores.codecs import (
    STRUCTURED,
    as_is,
    field_origins,
    from_json_or_none,
    json_or_none,
)
from lifecycles.stores.sql_rules import Health, HealthQueries

R = TypeVar("R")

Codec = Callable[[Any], Any]

# How many records one page of :meth:`SQLStore.scan` reads.
SCAN_PAGE = 500


# --- columns -------------------------------------------------------------------------


@attrs.frozen
class Column:
    """One column: its name and its kind (``text``, ``integer``, ``bigint``, ``real``,
    ``boolean``, ``json`` for containers, ``other`` for any other hint); the dialect
    turns the kind into a type name and a codec."""

    name: str
    kind: str


def column_kind(origins: set[Any], integer_kind: str = "bigint") -> str:
    """The kind of column a record field gets, from the base types its hint allows."""
    if origins & STRUCTURED:
        return "json"
    if origins == {bool}:
        return "boolean"
    if origins and origins <= {int}:
        return integer_kind
    if origins and origins <= {int, float}:
        return "real"
    if origins and all(isinstance(o, type) and issubclass(o, str) for o in origins):
        return "text"
    return "other"


def plain(value: Any) -> Any:
    """Enum members (statuses) cross as their values, never as their names."""
    return value.value if isinstance(value, Enum) else value


# --- the schema ----------------------------------------------------------------------


class Catalogue(Protocol):
    """What schema code may ask of the database: statements in the store's dialect."""

    dialect: Dialect

    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (none for DDL)."""
        ...

    def columns_of(self, table: str) -> tuple[object, ...]:
        """The dialect's signature of each column of ``table``, in order (none: no table)."""
        ...

    def tables_present(self, names: Sequence[str]) -> set[str]:
        """Which of ``names`` are tables in the store's schema."""
        ...


class SchemaBinding(Protocol):
    """A lifecycle's own part of its schema, for a store that must keep a legacy one.

    ``prepare`` creates (or migrates, or refuses) the table and the meta table, in
    the catalogue's dialect, before the store adds its indexes and verifies; the
    meta table must then hold exactly ``meta_rows`` under ``meta_columns``, which
    the store's probe compares on every transaction.
    """

    code_prefix: str
    meta_table: str
    meta_columns: tuple[Column, ...]
    meta_rows: list[tuple[Any, ...]]

    def prepare(self, schema: SQLSchema, catalogue: Catalogue) -> None: ...


class SQLSchema:
    """Where one lifecycle's records live: a table, one column per record field.

    The default derives everything from the record class and the lease declaration:
    column kinds from field hints, the key as primary key, an index in lease order.
    ``binding`` hands the creation of the table and a meta table to the lifecycle
    (see :class:`SchemaBinding`); error codes then carry its prefix.
    """

    def __init__(
        self,
        lifecycle: Lifecycle[Any, Any],
        table: str | None = None,
        *,
        integer_kind: str = "bigint",
        binding: SchemaBinding | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.table = table or f"lifecycle_{lifecycle.name}"
        self.columns: tuple[Column, ...] = tuple(
            Column(name, column_kind(origins, integer_kind))
            for name, origins in field_origins(lifecycle.record_type).items()
        )
        self.column_names = tuple(column.name for column in self.columns)
        self.binding = binding
        self.code_prefix = binding.code_prefix if binding else "lifecycles."

    def error(self, name: str) -> str:
        """A store error code under this schema's prefix (the monitor keeps its own)."""
        return self.code_prefix + name

    def mismatch(self, message: str) -> SchemaMismatch:
        return SchemaMismatch(message, code=self.error("schema_altered"))

    def ensure(self, catalogue: Catalogue) -> None:
        """Create the schema if absent; refuse a database whose schema differs."""
        dialect = catalogue.dialect
        if self.binding is not None:
            self.binding.prepare(self, catalogue)
        else:
            catalogue.run(dialect.create_table(self))
        for statement in dialect.create_indexes(self):
            catalogue.run(statement)
        self.verify(catalogue)

    def verify(self, catalogue: Catalogue) -> None:
        """The whole check: the table's columns and, with a binding, the meta table and
        its rows; :class:`SchemaMismatch` (``schema_altered``) on any difference."""
        dialect = catalogue.dialect
        expected = tuple(map(dialect.signature, self.columns))
        found = catalogue.columns_of(self.table)
        if found != expected:
            raise self.mismatch(f"{self.table} has columns {found}, expected {expected}")
        binding = self.binding
        if binding is None:
            return
        # The rows are read only under the expected columns: another meta table is
        # refused as such, not by a statement that no longer fits it.
        meta_columns = tuple(map(dialect.signature, binding.meta_columns))
        if catalogue.columns_of(binding.meta_table) != meta_columns or catalogue.run(
            dialect.select_all(binding.meta_table, binding.meta_columns)
        ) != binding.meta_rows:
            raise self.mismatch("schema or capabilities binding differs")


# --- dialects ------------------------------------------------------------------------


class Dialect(ABC):
    """What differs between SQL databases, as text: the store builds every statement
    from these pieces and never writes a database's name."""

    name: ClassVar[str]
    #: The driver's parameter marker.
    param: ClassVar[str]
    #: Equality that holds between two NULLs (lease tokens are NULL when unleased).
    null_safe_equal: ClassVar[str]
    #: Appended to lease queries: rows another worker holds are passed over, not awaited.
    skip_locked: ClassVar[str] = ""
    #: Type name of each column kind ("" leaves a column untyped).
    type_names: ClassVar[dict[str, str]]
    #: Appended to text columns: code-point order, so key order is the same everywhere.
    collation: ClassVar[str] = ""

    @abstractmethod
    def quote(self, identifier: str) -> str:
        """An identifier from a schema declaration, as the database reads it."""

    def literal(self, text: str) -> str:
        """A declared status as an SQL string literal (never input: statuses come from
        the table). Literals, not parameters, so the planner can match partial indexes."""
        return "'" + text.replace("'", "''") + "'"

    @abstractmethod
    def column_definition(self, column: Column, key: bool) -> str:
        """One column of a derived ``CREATE TABLE``."""

    @abstractmethod
    def signature(self, column: Column) -> object:
        """What :meth:`Catalogue.columns_of` reports for ``column`` when it is as declared."""

    @abstractmethod
    def excluding(self, key: str, keys: list[str]) -> tuple[str, list[Any]]:
        """A ``WHERE`` suffix leaving ``keys`` out, and its parameters."""

    @abstractmethod
    def probe(self, schema: SQLSchema) -> tuple[str, tuple[Any, ...]]:
        """One cheap statement whose rows :meth:`read_probe` judges."""

    @abstractmethod
    def read_probe(self, schema: SQLSchema, rows: list[tuple[Any, ...]]) -> object:
        """Raise ``schema_altered`` when the probe shows a change; else a version token:
        when it differs from the last one, the store runs the whole check again."""

    def codec(self, column: Column) -> tuple[Codec, Codec]:
        """How values of ``column`` are encoded into and decoded out of the database."""
        if column.kind == "json":
            return json_or_none, from_json_or_none
        return plain, as_is

    def claim_order_index(self, schema: SQLSchema) -> str | None:
        """A partial index of the claimable records in claim order: a claim walks it to the
        first due record instead of sorting every due one (the lease-order index alone
        leaves a sort per claim). Its ``WHERE`` is the claim's own claimable clause, in
        literals: SQLite's planner matches a partial index only on the same text."""
        lifecycle = schema.lifecycle
        if lifecycle.lease is None:
            return None
        # The due time last: records not yet due are passed over within the index.
        lease = lifecycle.lease
        order = ", ".join(map(self.quote, (*lease.order_by, lease.due_field)))
        return (
            f"CREATE INDEX IF NOT EXISTS {self.quote(schema.table + '_claim_order')}"
            f" ON {self.quote(schema.table)} ({order})"
            f" WHERE {self.claimable_clause(lifecycle)}"
        )

    def create_table(self, schema: SQLSchema) -> str:
        key = schema.lifecycle.key_field
        definitions = ", ".join(
            self.column_definition(column, column.name == key) for column in schema.columns
        )
        return f"CREATE TABLE IF NOT EXISTS {self.quote(schema.table)} ({definitions})"

    def create_indexes(self, schema: SQLSchema) -> list[str]:
        """The lease-order index (status, due time, claim order) and the dialect's own."""
        lifecycle = schema.lifecycle
        if lifecycle.lease is None:
            return []
        lease = lifecycle.lease
        order = ", ".join(
            map(self.quote, (lifecycle.status_field, lease.due_field, *lease.order_by))
        )
        statements = [
            f"CREATE INDEX IF NOT EXISTS {self.quote(schema.table + '_due')}"
            f" ON {self.quote(schema.table)} ({order})"
        ]
        partial = self.claim_order_index(schema)
        return statements if partial is None else [*statements, partial]

    def claimable_clause(self, lifecycle: Lifecycle[Any, Any]) -> str:
        """``status IN ('pending', ...)``: the claimable statuses, from the lease trigger."""
        statuses = ", ".join(map(self.literal, lease_protocol.claimable_statuses(lifecycle)))
        return f"{self.quote(lifecycle.status_field)} IN ({statuses})"

    def likely(self, clause: str) -> str:
        """``clause`` marked as true for most rows, where the planner takes such a hint: the
        claim's filters, so that a claim walks the claim-order index to the first due
        record rather than sorting every due record found through the lease-order index."""
        return clause

    def select_all(self, table: str, columns: Sequence[Column]) -> str:
        listed = ", ".join(self.quote(column.name) for column in columns)
        return f"SELECT {listed} FROM {self.quote(table)}"


# --- the store -----------------------------------------------------------------------


class SQLStore(Store[R], ABC):
    """A lifecycle's records in one SQL table, compare-and-set on every write.

    Answers the lease queries (:class:`~lifecycles.stores.base.LeasingStore`) for
    leased lifecycles; for others they raise ``NotLeasable``. Subclasses supply the
    dialect and the driver hooks below.
    """

    dialect: Dialect
    #: Driver exceptions an insert raises for a duplicate of a unique value.
    unique_violations: ClassVar[tuple[type[Exception], ...]]

    def __init__(
        self, lifecycle: Lifecycle[R, Any], connection: Any, schema: SQLSchema | None
    ) -> None:
        self.lifecycle = lifecycle
        self.connection = connection
        self.schema = schema or SQLSchema(lifecycle)
        if self.schema.lifecycle.record_type is not lifecycle.record_type:
            raise ValueError("the schema describes another record type")
        self._depth = 0
        self._verified = False  # until the schema is ensured: transactions probe after
        self._probe_token: object = None
        codecs = {column.name: self.dialect.codec(column) for column in self.schema.columns}
        self._encoders = {name: encode for name, (encode, _) in codecs.items()}
        # Only the fields not stored natively are decoded: reads pay for nothing else.
        self._decoders = [
            (name, decode) for name, (_, decode) in codecs.items() if decode is not as_is
        ]
        self._probe_statement = self.dialect.probe(self.schema)
        self._prepare_statements()
        with self.transaction():
            self.lock_schema()
            self.schema.ensure(self)
            probed = self.run(*self._probe_statement)
            self._probe_token = self.dialect.read_probe(self.schema, probed)
        self._verified = True

    # -- driver hooks ---------------------------------------------------------------

    @abstractmethod
    def outermost(self) -> AbstractContextManager[None]:
        """Begin the outermost transaction; commit on normal exit, roll back otherwise.
        Refuses (``transaction_nested``) a connection inside a transaction the store did
        not open, and (``database_unreachable``) one that is closed."""

    @abstractmethod
    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows as plain tuples (none for a statement without)."""

    @abstractmethod
    def change(self, statement: str, params: Sequence[Any]) -> int:
        """Run one writing statement; how many rows it changed."""

    @abstractmethod
    def columns_of(self, table: str) -> tuple[object, ...]: ...

    @abstractmethod
    def tables_present(self, names: Sequence[str]) -> set[str]: ...

    def lock_schema(self) -> None:
        """Serialise schema creation between stores opening at once (the transaction
        itself does it where it locks the database)."""

    def autocommits(self) -> bool:
        """Whether a statement outside a store transaction is a transaction of its own."""
        return True

    def driver_errors(self) -> AbstractContextManager[None]:
        """Where a lost connection must become ``database_unreachable`` at once."""
        return nullcontext()

    def statement_savepoint(self) -> AbstractContextManager[None]:
        """Where a failed statement must not abort the caller's wider transaction."""
        return nullcontext()

    # -- SQL, written once from the table and the schema ------------------------------

    def _prepare_statements(self) -> None:
        d, quote, p = self.dialect, self.dialect.quote, self.dialect.param
        lifecycle = self.lifecycle
        table = quote(self.schema.table)
        key, status = quote(lifecycle.key_field), quote(lifecycle.status_field)
        listed = ", ".join(map(quote, self.schema.column_names))
        self._key = key
        self._select = f"SELECT {listed} FROM {table}"
        self._get = f"{self._select} WHERE {key} = {p}"
        # A key already stored is not an error: the stored record is returned instead.
        self._insert = (
            f"INSERT INTO {table} ({listed}) VALUES ({', '.join(p for _ in self.schema.columns)})"
            f" ON CONFLICT ({key}) DO NOTHING"
        )
        self._page = f"{self._select} WHERE {key} > {p} ORDER BY {key} LIMIT {p}"
        self._count_by_status = f"SELECT {status}, count(*) FROM {table} GROUP BY {status}"
        lease = lifecycle.lease
        token = f" AND {quote(lease.token_field)} {d.null_safe_equal} {p}" if lease else ""
        # One compare-and-set UPDATE per table row: it writes exactly the row's fields.
        self._updates: dict[Row, tuple[str, tuple[str, ...]]] = {}
        for row in lifecycle.rows:
            fields = lifecycle.writes(row)
            assignments = ", ".join(f"{quote(name)} = {p}" for name in fields)
            self._updates[row] = (
                f"UPDATE {table} SET {assignments} WHERE {key} = {p} AND {status} = {p}{token}",
                fields,
            )
        if lease is None:
            return
        claimable, due_by = d.claimable_clause(lifecycle), f"{quote(lease.due_field)} <= {p}"
        due = f"{claimable} AND {due_by}"
        expired = (
            f"{status} = {d.literal(lease_protocol.leased_status(lifecycle))}"
            f" AND {quote(lease.expires_field)} <= {p}"
        )
        order = ", ".join(map(quote, lease.order_by))
        # The claim walks the partial claim-order index (its WHERE is `claimable`, as text).
        self._due = (
            f"{self._select} WHERE {d.likely(claimable)} AND {d.likely(due_by)}",
            f" ORDER BY {order} LIMIT 1{d.skip_locked}",
        )
        # Where rows are locked, in claim order: recoveries running at once share the work.
        locked = f" ORDER BY {order}{d.skip_locked}" if d.skip_locked else ""
        self._expired = f"{self._select} WHERE {expired}{locked}"
        self._count_due = f"SELECT count(*) FROM {table} WHERE {due}"
        self._count_expired = f"SELECT count(*) FROM {table} WHERE {expired}"

    # -- transactions and the schema under the store -----------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self.outermost():
            self._depth = 1
            try:
                if self._verified:
                    self._probe()  # before anything else the transaction reads or writes
                yield
            finally:
                self._depth = 0

    def _probe(self) -> None:
        token = self.dialect.read_probe(self.schema, self.run(*self._probe_statement))
        if token != self._probe_token:
            # Some connection changed the catalogue. Check it all again: an identical
            # schema (a table dropped and recreated as it was, a new index) carries on.
            self.schema.verify(self)
            self._probe_token = token

    def _reading(self) -> AbstractContextManager[None]:
        """Reads outside a store transaction: one statement where the connection
        autocommits, else a short transaction of their own (never left open)."""
        if self._depth or self.autocommits():
            return self.driver_errors()
        return self.transaction()

    def check_schema(self) -> None:
        if not self._verified:
            return
        if self._depth or self.autocommits():
            with self.driver_errors():
                self._probe()
        else:
            with self.transaction():  # which probes on entry
                pass

    # -- reads --------------------------------------------------------------------------

    def _fetch(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._reading():
            return self.run(statement, params)

    def _decode(self, row: Sequence[Any]) -> R:
        values = dict(zip(self.schema.column_names, row, strict=True))
        for name, decode in self._decoders:
            values[name] = decode(values[name])
        return self.admit(values)

    def _encode(self, record: R, fields: Sequence[str]) -> list[Any]:
        values = self.values_of(record)
        return [self._encoders[name](values[name]) for name in fields]

    def get(self, key: str) -> R | None:
        rows = self._fetch(self._get, (key,))
        return self._decode(rows[0]) if rows else None

    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        self._lease()
        where, order = self._due
        left_out, params = self.dialect.excluding(self._key, sorted(exclude))
        rows = self._fetch(where + left_out + order, [now, *params])
        return self._decode(rows[0]) if rows else None

    def expired_leases(self, now: float) -> list[R]:
        self._lease()
        return [self._decode(row) for row in self._fetch(self._expired, (now,))]

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
        return int(self._fetch(self._count_expired, (now,))[0][0])

    def scan(self) -> Iterator[R]:
        # Keyset pages: streams without holding a transaction (or a cursor) open.
        after = ""
        at = self.schema.column_names.index(self.lifecycle.key_field)
        while rows := self._fetch(self._page, (after, SCAN_PAGE)):
            for row in rows:
                yield self._decode(row)
            after = rows[-1][at]

    # -- writes -------------------------------------------------------------------------

    def insert(self, record: R) -> R:
        self.lifecycle.check(record)
        key = self.lifecycle.key_of(record)
        with self.transaction():
            try:
                with self.statement_savepoint():
                    inserted = self.change(
                        self._insert, self._encode(record, self.schema.column_names)
                    ) == 1
            except self.unique_violations as error:
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
        with self.transaction():
            if self.change(statement, params) != 1:
                raise StaleRecord(f"{self.lifecycle.key_of(before)} changed since it was read")

    def driver_error(self, error: Exception) -> StoreError | None:  # see the subclasses
        return None

    # -- health: every rule in one statement (lifecycles.stores.sql_rules) --------------

    _health_queries: HealthQueries | None = None

    def health(self, now: float) -> Health:
        """The engine's integrity check, then every field rule and invariant on every
        stored record, the counts per status, the due and the expired records: one
        aggregate statement, its rules rendered from their declarations. A second
        statement names the first broken records only when there are some
        (:meth:`Health.raise_broken`). Reads outside any transaction, like every read."""
        if self._health_queries is None:
            decoded = {name for name, _ in self._decoders}
            self._health_queries = HealthQueries(
                self.lifecycle, self.schema, self.dialect,
                frozenset(self.schema.column_names) - decoded,
            )
        return self._health_queries.run(self, self._fetch, now)
