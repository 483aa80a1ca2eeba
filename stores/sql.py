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

The schema object is passed in by the caller. :class:`SQLSchema`
(:mod:`lifecycles.stores.sql_schema`) derives the table from the record class; a
lifecycle that must keep an exact, pre-existing schema (the monitor's) gives it a
:class:`SchemaBinding`: its own DDL and migration, and a meta table whose rows bind the
database to something (a capabilities hash). This module knows no lifecycle.

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
from operator import attrgetter
from typing import Any, ClassVar, TypeVar

from lifecycles.machines import lease as lease_protocol
from lifecycles.machines.core import Lifecycle, Row
from lifecycles.stores.base import (
    StaleRecord,
    Store,
    StoreError,
    TransactionNested,
    UniqueViolation,
)
from lifecycles.stores.codecs import as_is, from_json_or_none, json_or_none, plain
from lifecycles.stores.sql_health import Health, HealthQueries
from lifecycles.stores.sql_lease import SORTED_AT_MOST, LeaseStatements
from lifecycles.stores.sql_schema import (
    Catalogue,
    Column,
    SchemaBinding,
    SQLSchema,
    column_kind,
)

R = TypeVar("R")

Codec = Callable[[Any], Any]

__all__ = [
    "SCAN_PAGE", "Catalogue", "Codec", "Column", "Dialect", "SQLSchema", "SQLStore",
    "SchemaBinding", "column_kind", "plain",
]

# How many records one page of :meth:`SQLStore.scan` reads.
SCAN_PAGE = 500


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
    #: A number above every number a column holds (the bound of an empty walk).
    infinity: ClassVar[str] = "'Infinity'::float8"
    #: How many records a claim's walk of the claim order reads before it asks the range
    #: of due times instead (``SQLStore.due``); 0: the walk is not bounded.
    walk_bound: ClassVar[int] = 0
    #: Whether a claim may first glance outside a transaction (see ``SQLStore.glance``):
    #: where writers serialise on the whole database anyway, a lost race is rare and
    #: cheap; where workers claim side by side with row locks, the transaction is better.
    glances: ClassVar[bool] = False
    #: Whether the store keeps partial indexes of the rows breaking a rule, and what
    #: names a row in any table then (``HealthQueries.rules_indexes``).
    indexes_rules: ClassVar[bool] = False
    row_id: ClassVar[str] = ""

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

    @abstractmethod
    def catalogue_guard(self, schema: SQLSchema) -> str:
        """A condition that holds exactly while the probe would still answer the token
        :meth:`catalogue_params` binds and find the schema as verified: written into a
        statement that runs outside a transaction, so it changes nothing in an altered
        database."""

    @abstractmethod
    def catalogue_params(self, schema: SQLSchema, token: object) -> list[Any]:
        """The parameters of :meth:`catalogue_guard` for the probe's last ``token``."""

    def meta_guard(self, schema: SQLSchema) -> tuple[str, list[Any]]:
        """A condition that holds exactly while the meta table holds the binding's rows."""
        binding = schema.binding
        if binding is None:
            return "", []
        table = self.quote(binding.meta_table)
        clauses = [f"(SELECT count(*) FROM {table}) = {len(binding.meta_rows)}"]
        params: list[Any] = []
        for row in binding.meta_rows:
            match = " AND ".join(
                f"{self.quote(column.name)} {self.null_safe_equal} {self.param}"
                for column in binding.meta_columns
            )
            clauses.append(f"EXISTS (SELECT 1 FROM {table} WHERE {match})")
            params.extend(row)
        return " AND ".join(clauses), params

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

    def due_range_hint(self, schema: SQLSchema) -> str:
        """Appended to the table in the due-time range query: the lease-order index, where
        the planner needs telling."""
        return ""

    def likely(self, clause: str) -> str:
        """``clause`` marked as true for most rows, where the planner takes such a hint: a
        claim then walks the claim-order index instead of sorting every due record."""
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
        self._guard_params: list[Any] = []
        codecs = {column.name: self.dialect.codec(column) for column in self.schema.columns}
        self._encoders = {name: encode for name, (encode, _) in codecs.items()}
        self._field_encoders: dict[tuple[str, ...], Callable[[R], list[Any]]] = {}
        # Only the fields not stored natively are decoded: reads pay for nothing else.
        self._decoders = [
            (name, decode) for name, (_, decode) in codecs.items() if decode is not as_is
        ]
        self._probe_statement = self.dialect.probe(self.schema)
        self._prepare_statements()
        with self.transaction():
            self.lock_schema()
            self.schema.ensure(self)
            self.ensure_rules_indexes()
            probed = self.run(*self._probe_statement)
            self._remember_probe(self.dialect.read_probe(self.schema, probed))
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

    def alone(self, statement: str, params: Sequence[Any]) -> int:
        """Run one writing statement as a transaction of its own, committed when it returns;
        how many rows it changed. A driver that autocommits one statement saves the
        ``BEGIN``, the probe and the ``COMMIT`` of this default."""
        with self.transaction():
            return self.change(statement, params)

    def nested(self) -> TransactionNested:
        """The refusal of a connection already inside a transaction the store did not open:
        silently joining it would make the store's commit the caller's."""
        return TransactionNested(
            "the connection is already in a transaction",
            code=self.schema.error("transaction_nested"),
        )

    def ensure_rules_indexes(self) -> None:
        """Create the rules indexes where the dialect keeps them (see the subclasses)."""

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
        self._key_at = self.schema.column_names.index(lifecycle.key_field)
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
        # Compare-and-set on the whole record: a record can leave a status and come back
        # with the same empty token (watching, leased, watching), so nothing less proves
        # that it is still the one the caller read. The key first, as plain equality: the
        # lookup goes through the primary key.
        self._compared = (lifecycle.key_field, *(
            name for name in self.schema.column_names if name != lifecycle.key_field))
        whole = " AND ".join([f"{key} = {p}", *(
            f"{quote(name)} {d.null_safe_equal} {p}" for name in self._compared[1:])])
        meta, self._meta_params = d.meta_guard(self.schema)
        # Outside a transaction the statement is one of its own: it also checks the schema
        # as verified, which a transaction's probe checks otherwise (see ``put``).
        unprobed = f" AND {d.catalogue_guard(self.schema)}" + (f" AND {meta}" if meta else "")
        # One UPDATE per table row: it writes exactly the row's fields.
        self._updates: dict[Row, tuple[str, str, tuple[str, ...]]] = {}
        for row in lifecycle.rows:
            fields = lifecycle.writes(row)
            assignments = ", ".join(f"{quote(name)} = {p}" for name in fields)
            update = f"UPDATE {table} SET {assignments} WHERE {whole}"
            self._updates[row] = (update, update + unprobed, fields)
        self._leasing = (
            None if lease is None else LeaseStatements.build(d, self.schema, self._select)
        )

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
            self._remember_probe(token)

    def _remember_probe(self, token: object) -> None:
        """The probe's answer, and the parameters a write outside a transaction binds to
        say "the schema is still as it was verified" (computed once per answer)."""
        self._probe_token = token
        self._guard_params = [
            *self.dialect.catalogue_params(self.schema, token), *self._meta_params,
        ]

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

    def _encode(self, record: R, fields: tuple[str, ...]) -> list[Any]:
        """``fields`` of ``record``, each through its column's encoder (statuses, enums
        and structured values become what the column holds)."""
        encoder = self._field_encoders.get(fields)
        if encoder is None:
            encoder = self._field_encoders[fields] = self._encoder_of(fields)
        return encoder(record)

    def _encoder_of(self, fields: tuple[str, ...]) -> Callable[[R], list[Any]]:
        # One attrgetter per field list: a statement's parameters cost no dict per write.
        read = attrgetter(*fields)
        encoders = [self._encoders[name] for name in fields]
        if len(fields) == 1:
            (encode,) = encoders
            return lambda record: [encode(read(record))]
        if all(encode is plain for encode in encoders):  # plain's test, without a call each
            return lambda record: [
                value.value if isinstance(value, Enum) else value for value in read(record)
            ]
        return lambda record: [
            encode(value) for encode, value in zip(encoders, read(record), strict=True)
        ]

    def get(self, key: str) -> R | None:
        rows = self._fetch(self._get, (key,))
        return self._decode(rows[0]) if rows else None

    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        found = self.due(now, 1, exclude)
        return found[0] if found else None

    def due(self, now: float, limit: int, exclude: frozenset[str] = frozenset()) -> list[R]:
        """The claim-order walk, bounded where the dialect bounds it: when the first
        records in claim order hold ``limit`` due ones, they are the answer (every due
        record after them comes later in claim order); otherwise ``_beyond_the_walk``.
        So a claim costs neither a walk past every waiting record (many items watched,
        few due) nor a sort of every due one (a backlog, where the first records are
        due)."""
        leasing = self._lease_statements()
        left_out, params = self.dialect.excluding(self._key, sorted(exclude))
        where, order = leasing.due
        rows = self._fetch(where + left_out + order, [now, *params, limit])
        if leasing.bounded and len(rows) < limit:
            rows = self._beyond_the_walk(now, limit, left_out, params)
        return [self._decode(row) for row in rows]

    def _beyond_the_walk(
        self, now: float, limit: int, left_out: str, params: list[Any],
        count: int | None = None,
    ) -> list[tuple[Any, ...]]:
        """The first ``limit`` due records when the bounded walk did not hold them: the
        due-time range, sorted, when at most ``SORTED_AT_MOST`` records are due (a
        steady state: many waiting, few due); the whole walk of the claim order when
        more are due (a backlog draining: the next due record is near the walk's start).
        The one case that stays slow is both at once, many due records far behind many
        waiting ones: a claim order over due records is two-dimensional, and no single
        index orders it."""
        leasing = self._lease_statements()
        if count is None:
            ((count,),) = self._fetch(leasing.count_due_capped, [now])
        where, order = leasing.due_range if count <= SORTED_AT_MOST else leasing.due_walk_all
        return self._fetch(where + left_out + order, [now, *params, limit])

    def glance(self, now: float) -> lease_protocol.Glance[R] | None:
        """One statement outside any transaction, where the dialect :attr:`~Dialect.glances`
        and no transaction is open (inside one, the protocol's own queries are as cheap):
        whether a lease has expired, the first due record in the bounded walk and, where
        the walk is bounded, how many records are due (capped) for looking beyond it."""
        leasing = self._lease_statements()
        if not self.dialect.glances or self._depth or not self._verified:
            return None
        counting = [now] if leasing.bounded else []
        ((expired, due_count, *first),) = self._fetch(leasing.glance, (now, *counting, now, 1))
        if first[self._key_at] is not None:
            return lease_protocol.Glance(bool(expired), self._decode(first))
        if not leasing.bounded or not due_count:
            return lease_protocol.Glance(bool(expired), None)
        rows = self._beyond_the_walk(now, 1, "", [], due_count)
        return lease_protocol.Glance(bool(expired), self._decode(rows[0]) if rows else None)

    def expired_leases(self, now: float) -> list[R]:
        expired = self._lease_statements().expired
        return [self._decode(row) for row in self._fetch(expired, (now,))]

    def count_by_status(self) -> dict[str, int]:
        counts = {status.value: 0 for status in self.lifecycle.statuses}
        for status, count in self._fetch(self._count_by_status, ()):
            counts[status] = int(count)
        return counts

    def count_due(self, now: float) -> int:
        return int(self._fetch(self._lease_statements().count_due, (now,))[0][0])

    def count_expired(self, now: float) -> int:
        return int(self._fetch(self._lease_statements().count_expired, (now,))[0][0])

    def _lease_statements(self) -> LeaseStatements:
        self._lease()  # NotLeasable for a lifecycle without a lease
        assert self._leasing is not None
        return self._leasing

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

    def put(self, before: R, after: R, row: Row) -> None:
        """Compare-and-set on the whole record as read. Inside a transaction one statement
        (the transaction probed the schema); outside one, a statement that is a
        transaction of its own and also matches the schema as verified."""
        in_transaction, alone, fields = self._updates[row]
        params = [*self._encode(after, fields), *self._encode(before, self._compared)]
        if self._depth:
            changed = self.change(in_transaction, params)
        else:
            changed = self.alone(alone, [*params, *self._guard_params])
            if changed == 0:
                self.check_schema()  # an altered schema is refused as such, not as a race
        if changed != 1:
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
        return self.rule_queries().run(self, self._fetch, now)

    def rule_queries(self) -> HealthQueries:
        """Every rule of the lifecycle in SQL, for this table (built once)."""
        if self._health_queries is None:
            decoded = {name for name, _ in self._decoders}
            self._health_queries = HealthQueries(
                self.lifecycle, self.schema, self.dialect,
                frozenset(self.schema.column_names) - decoded,
            )
        return self._health_queries
