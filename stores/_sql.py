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
(:mod:`lifecycles.stores._sql_schema`) derives the table from the record class; a
lifecycle that must keep an exact, pre-existing schema (the monitor's) gives it a
:class:`SchemaBinding`: its own DDL and migration, and a meta table whose rows bind the
database to something (a capabilities hash). This module knows no lifecycle.

The schema is created, migrated and verified once, when the store is built; then
every outermost transaction starts with one cheap probe (and :meth:`check_schema`
runs it for reads made outside one), so a schema or meta row changed by another
connection is refused (``schema_altered``) before anything is read or written.

No driver exception leaves the store, the constructor included: every statement it
runs (:meth:`SQLStore.run`, :meth:`SQLStore.run_write`, the transactions' ``BEGIN`` and
``COMMIT``) turns one into the store error it means (:meth:`SQLStore.driver_error`,
the subclasses' reading of their driver). A failure while a commit was on its way
(``COMMIT``, or a statement that commits by itself, :meth:`SQLStore.run_write_committed`) is a
:class:`~lifecycles.stores._base.CommitUncertain` where the dialect cannot rule out
that the commit happened (:meth:`SQLStore.commit_may_have_happened`), and a plain
``StoreUnavailable`` (nothing changed) where it can.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import Any, ClassVar, NamedTuple, NoReturn, TypeVar

from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.stores._base import (
    CommitUncertain,
    StaleRecord,
    Store,
    StoreDamaged,
    StoreError,
    StoreUnavailable,
    TransactionNested,
    UniqueViolation,
)
from lifecycles.stores._codecs import as_is, fields_encoder
from lifecycles.stores._sql_dialect import Dialect
from lifecycles.stores._sql_health import Health, HealthQueries
from lifecycles.stores._sql_lease import SORTED_AT_MOST, LeaseStatements, excluding
from lifecycles.stores._sql_schema import (
    SchemaBinding,
    SQLSchema,
    column_kind,
)
from lifecycles.stores._sql_statements import TableStatements

R = TypeVar("R")

__all__ = ["SCAN_PAGE", "SQLStore", "SchemaBinding", "column_kind"]

# How many records one page of :meth:`SQLStore.scan` reads.
SCAN_PAGE = 500
# How many records a store keeps the stored values of (then it starts again empty).
AS_STORED_LIMIT = 4096


# --- the store -----------------------------------------------------------------------

# Reads where no transaction need be opened: every statement translates its own errors.
_AS_IT_IS = nullcontext()


class _StoreErrors:
    """Turns a driver exception raised inside it into the store error it means (reusable:
    it holds no state of its own)."""

    __slots__ = ("store",)

    def __init__(self, store: SQLStore[Any]) -> None:
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            meant = self.store.driver_error(error)
            if meant is not None:
                raise meant from error


class _Write(NamedTuple):
    """One planned compare-and-set: its statement inside a transaction, its parameters,
    and what the store needs to remember the row written (a tuple: one per write)."""

    statement: str
    params: list[Any]
    row: Row
    stored: Sequence[Any] | None  # the replaced record's column values, where known
    written: list[Any]  # the values of the row's fields, encoded
    keyed: bool = False  # by the key alone: the record cannot have changed (see put)


class SQLStore(Store[R], ABC):
    """A lifecycle's records in one SQL table, compare-and-set on every write.

    Implements the leasing contract (:class:`~lifecycles.machines.lease.LeasingStore`)
    for leased lifecycles, its glance included, and counts due records and expired
    leases (``count_due``, ``count_expired``: health's figures, beside the contract); for
    other lifecycles these raise ``NotLeasable``. Subclasses supply the dialect and the
    driver hooks below.
    """

    dialect: Dialect
    #: Every statement the store runs, written once when it is built.
    statements: TableStatements
    #: Driver exceptions an insert raises for a duplicate of a unique value.
    unique_violations: ClassVar[tuple[type[Exception], ...]]
    _location: str = ""

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
        # Records read or written lately, by identity, with their column values as stored
        # and the write-locked transaction that read or wrote them (None: none).
        self._as_stored: dict[int, tuple[R, Sequence[Any], int | None]] = {}
        self._transactions = 0  # outermost transactions begun, numbering them
        self._locked: int | None = None  # the write-locked one open now, if any
        # Only the fields not stored natively are decoded: reads pay for nothing else.
        self._decoders = [
            (name, decode) for name, (_, decode) in codecs.items() if decode is not as_is
        ]
        self._prepare_statements()
        self._probe_statement = self.statements.probe
        self._store_errors = _StoreErrors(self)
        with self.transaction():
            self.lock_schema()
            self._location = self.locate()
            self.schema.ensure(self)
            self.ensure_rules_indexes()
            self._ensure_notifications()
            probed = self.run(*self._probe_statement)
            self._remember_probe(self.dialect.read_probe(self.schema, probed))
        self._verified = True

    # -- driver hooks ---------------------------------------------------------------
    # Each raises store errors only: a driver exception becomes what driver_error says.

    @abstractmethod
    def database_transaction(self) -> AbstractContextManager[None]:
        """Begin the database's transaction, the outermost one (a store transaction inside
        it only counts its depth); commit on normal exit, roll back otherwise.
        Refuses (``transaction_nested``) a connection inside a transaction the store did
        not open, and (``database_unreachable``) one that is closed. A failed commit is
        :meth:`raise_store_error` ``(committing=True)``."""

    @abstractmethod
    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows as plain tuples (none for a statement without)."""

    @abstractmethod
    def run_write(self, statement: str, params: Sequence[Any]) -> int:
        """Run one writing statement; how many rows it changed."""

    def locate(self) -> str:
        """The store's :attr:`location`, asked once inside the constructor's transaction;
        by default the connection object (the subclasses name the database)."""
        return f"{self.dialect.name}:{id(self.connection):x}#{self.schema.table}"

    @property
    def location(self) -> str:
        return self._location

    def commit_may_have_happened(self, error: Exception) -> bool:
        """Whether a commit that failed with ``error`` (a driver exception meaning
        ``database_unreachable``) may have committed all the same. ``True`` unless the
        dialect knows better: honest, since a commit whose answer never came is unknown."""
        return True

    def raise_store_error(self, error: Exception, *, committing: bool = False) -> NoReturn:
        """Raise what ``error`` means for the store's caller: the store error
        :meth:`driver_error` makes of a driver exception (chained to it), or ``error``
        itself. ``committing``: it came while a commit was on its way; then
        ``database_unreachable`` is a :class:`CommitUncertain` where the commit may have
        happened (:meth:`commit_may_have_happened`)."""
        meant = self.driver_error(error)
        if meant is None:
            raise error
        if committing and isinstance(meant, StoreUnavailable) and (
            self.commit_may_have_happened(error)
        ):
            raise CommitUncertain(str(error), code=meant.code) from error
        raise meant from error

    def unavailable(self, why: str) -> StoreUnavailable:
        """``database_unreachable`` for a connection found unusable before anything was
        sent: certainly nothing changed."""
        return StoreUnavailable(why, code=self.schema.error("database_unreachable"))

    @abstractmethod
    def columns_of(self, table: str) -> tuple[object, ...]: ...

    @abstractmethod
    def tables_present(self, names: Sequence[str]) -> set[str]: ...

    @abstractmethod
    def unique_column_sets(self, table: str) -> set[frozenset[str]]: ...

    def run_write_committed(self, statement: str, params: Sequence[Any]) -> int:
        """Run one writing statement as a transaction of its own, committed when it returns;
        how many rows it changed. A driver that autocommits one statement saves the
        ``BEGIN``, the probe and the ``COMMIT`` of this default; its failure is then
        :meth:`raise_store_error` ``(committing=True)``: the statement is its own commit."""
        with self.transaction():
            return self.run_write(statement, params)

    def transaction_nested_error(self) -> TransactionNested:
        """The refusal of a connection already inside a transaction the store did not open:
        silently joining it would make the store's commit the caller's."""
        return TransactionNested(
            "the connection is already in a transaction",
            code=self.schema.error("transaction_nested"),
        )

    def ensure_rules_indexes(self) -> None:
        """Create the rules indexes where the dialect keeps them (see the subclasses)."""

    def _ensure_notifications(self) -> None:
        """Create what tells listening workers that work arrived, where the dialect can
        (PostgreSQL's notify triggers, :mod:`lifecycles.stores._postgres_notify`)."""

    def lock_schema(self) -> None:
        """Serialise schema creation between stores opening at once (the transaction
        itself does it where it locks the database)."""

    def autocommits(self) -> bool:
        """Whether a statement outside a store transaction is a transaction of its own."""
        return True

    def driver_errors(self) -> AbstractContextManager[None]:
        """A block in which a driver exception (a caller's own statement on the store's
        connection, say) becomes the store error it means."""
        return self._store_errors

    def statement_savepoint(self) -> AbstractContextManager[None]:
        """Where a failed statement must not abort the caller's wider transaction."""
        return nullcontext()

    # -- SQL, written once from the table and the schema ------------------------------

    def _prepare_statements(self) -> None:
        """The store's statements (:class:`TableStatements`), and the names it reads them
        by on its hot paths."""
        statements = self.statements = TableStatements(self.lifecycle, self.schema, self.dialect)
        self._key, self._key_at = statements.key, statements.key_at
        self._select, self._get = statements.select, statements.get
        self._updates = statements.updates
        self._written_at = statements.written_at
        self._compared, self._compared_at = statements.compared, statements.compared_at
        self._leasing = statements.leasing

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
        # The block's own driver exceptions (an on_lease hook's statement, say) too.
        with self._store_errors, self.database_transaction():
            self._depth = 1
            self._transactions += 1
            if self.dialect.write_locked:
                self._locked = self._transactions
            try:
                if self._verified:
                    self._probe()  # before anything else the transaction reads or writes
                yield
            finally:
                self._depth = 0
                self._locked = None

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
            *self.dialect.catalogue_params(self.schema, token), *self.statements.meta_params,
        ]

    def _reading(self) -> AbstractContextManager[None]:
        """Reads outside a store transaction: one statement where the connection
        autocommits, else a short transaction of their own (never left open)."""
        if self._depth or self.autocommits():
            return _AS_IT_IS
        return self.transaction()

    def check_schema(self) -> None:
        if not self._verified:
            return
        if self._depth or self.autocommits():
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
        record = self.record_from(values)
        self._remember(record, row)
        return record

    def _encode(self, record: R, fields: tuple[str, ...]) -> list[Any]:
        """``fields`` of ``record``, each through its column's encoder (statuses, enums
        and structured values become what the column holds)."""
        encoder = self._field_encoders.get(fields)
        if encoder is None:
            encoder = self._field_encoders[fields] = fields_encoder(
                fields, [self._encoders[name] for name in fields])
        return encoder(record)

    def _remember(self, record: R, stored: Sequence[Any]) -> None:
        """``record`` was read from, or written as, the column values ``stored``: a write
        replacing it compares the row with those very values (another program may spell
        a JSON column otherwise than its encoding does, and it is still the row read)."""
        if len(self._as_stored) >= AS_STORED_LIMIT:
            self._as_stored.clear()
        self._as_stored[id(record)] = (record, stored, self._locked)

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
        rows = self._fetch(excluding(leasing.due, left_out), [now, *params, limit])
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
        query = leasing.due_range if count <= SORTED_AT_MOST else leasing.due_walk_all
        return self._fetch(excluding(query, left_out), [now, *params, limit])

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

    def leased_under(self, tokens: Collection[str], now: float) -> list[R]:
        """One statement over the leased records (the lease-expiry index): those whose
        lease is live at ``now`` and whose token is one of ``tokens``, in claim order."""
        if not tokens:
            return []
        self._lease_statements()  # NotLeasable for a lifecycle without a lease
        statement = self.statements.live_leases_under(len(tokens))
        return [self._decode(row) for row in self._fetch(statement, [now, *sorted(tokens)])]

    def count_by_status(self) -> dict[str, int]:
        counts = {status.value: 0 for status in self.lifecycle.statuses}
        for status, count in self._fetch(self.statements.count_by_status, ()):
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
        while rows := self._fetch(self.statements.page, (after, SCAN_PAGE)):
            for row in rows:
                yield self._decode(row)
            after = rows[-1][at]

    # -- writes -------------------------------------------------------------------------

    def insert(self, record: R) -> R:
        self.lifecycle.check(record)
        key = self.lifecycle.key_of(record)
        with self.transaction():
            stored = self._encode(record, self.schema.column_names)
            try:
                with self.statement_savepoint():
                    inserted = self.run_write(self.statements.insert, stored) == 1
            except StoreDamaged as error:
                # change translated the driver's exception; its cause tells a duplicate.
                if isinstance(error.__cause__, self.unique_violations):
                    raise UniqueViolation(str(error.__cause__)) from error.__cause__
                raise
            if inserted:
                self._remember(record, stored)
                return record
            existing = self.get(key)
            if existing is None:  # deleted between the two statements: not by this store
                raise StaleRecord(f"{key} vanished while it was being inserted")
            return existing

    def put(self, before: R, after: R, row: Row) -> None:
        """Compare-and-set on the whole record as read: with the column values it was read
        from or written as, where the store still knows them (:meth:`_remember`), else
        with ``before`` encoded. Inside a transaction one statement (the transaction
        probed the schema); outside one, a statement that is a transaction of its own and
        also matches the schema as verified.

        A record read (or written) in this same transaction, where the dialect's
        transactions hold the write lock from their start (SQLite's ``BEGIN
        IMMEDIATE``), is written by its key alone: no other connection can have changed
        it since, so the comparison could only succeed (a claim leasing the due records
        it has just read, under the lock, is the common case).
        """
        write = self._planned(before, after, row)
        if self._depth:
            changed = self.run_write(write.statement, write.params)
        else:
            outside = self._updates[row].outside
            changed = self.run_write_committed(outside, [*write.params, *self._guard_params])
            if changed == 0:
                self.check_schema()  # an altered schema is refused as such, not as a race
        if changed != 1:
            raise StaleRecord(f"{self.lifecycle.key_of(before)} changed since it was read")
        self._wrote(after, write)

    def put_many(self, writes: Sequence[tuple[R, R, Row]]) -> list[bool]:
        """Inside a transaction, every statement back to back once all are encoded (the
        engine's caches stay warm between them: a batch's writes cost about a third
        less than with the work of each record in between); outside one, each ``put``."""
        if not self._depth:
            return super().put_many(writes)
        planned = [self._planned(before, after, row) for before, after, row in writes]
        if self._locked is not None:
            planned = self._verified_under_lock(planned)
        run_write = self.run_write
        changed = [run_write(write.statement, write.params) for write in planned]
        for (_, after, _), write, count in zip(writes, planned, changed, strict=True):
            if count == 1:
                self._wrote(after, write)
        return [count == 1 for count in changed]

    def _verified_under_lock(self, planned: list[_Write]) -> list[_Write]:
        """Under the transaction's write lock, the records a batch read earlier are read
        again, all in one statement, and compared in Python with the values they were
        read or written as: each still equal is written by its key alone (nothing can
        change it before the commit), the same compare-and-set as :meth:`put`'s at a
        fraction of its cost (one comparison of every column per record, in the
        statement, costs a third of a write). Python's equality of two values read from
        one column implies the engine's, so a record found changed, or told apart by
        Python alone, keeps its compare-and-set."""
        known = [(at, write.stored) for at, write in enumerate(planned)
                 if write.stored is not None and not write.keyed]
        if len(known) < 2:
            return planned  # one statement either way
        key_at = self._key_at
        keys = [stored[key_at] for _, stored in known]
        current = {row[key_at]: row for row in self.run(self.statements.reread(len(keys)), keys)}
        checked = list(planned)
        for at, stored in known:
            if current.get(stored[key_at]) == tuple(stored):
                write = planned[at]
                checked[at] = write._replace(
                    statement=self._updates[write.row].keyed,
                    params=[*write.written, stored[key_at]], keyed=True)
        return checked

    def _planned(self, before: R, after: R, row: Row) -> _Write:
        """The statement (for inside a transaction) and the parameters writing ``after``
        over ``before`` by ``row`` (see :meth:`put`)."""
        update = self._updates[row]
        written = self._encode(after, update.fields)
        known = self._as_stored.get(id(before))
        stored: Sequence[Any] | None = None
        if known is not None and known[0] is before:
            stored = known[1]
            if self._locked is not None and known[2] == self._locked:
                key = stored[self._key_at]
                return _Write(update.keyed, [*written, key], row, stored, written, keyed=True)
        compared = (self._encode(before, self._compared) if stored is None else
                    [stored[at] for at in self._compared_at])
        return _Write(update.inside, [*written, *compared], row, stored, written)

    def _wrote(self, after: R, write: _Write) -> None:
        """``after`` is stored now: remember its column values where the write's record's
        were known (the rest of the row is as it was)."""
        if write.stored is not None:
            now_stored = list(write.stored)
            for at, value in zip(self._written_at[write.row], write.written, strict=True):
                now_stored[at] = value
            self._remember(after, now_stored)

    def driver_error(self, error: Exception) -> StoreError | None:  # see the subclasses
        return None

    # -- health: every rule in one statement (lifecycles.stores._sql_rules) --------------

    def health(self, now: float) -> Health:
        """The engine's integrity check, then every field rule and invariant on every
        stored record, the counts per status, the due and the expired records: one
        aggregate statement, its rules rendered from their declarations. A second
        statement names the first broken records only when there are some
        (:meth:`Health.raise_broken`). Reads outside any transaction, like every read."""
        return self.rule_queries().run(self, self._fetch, now)

    def rule_queries(self) -> HealthQueries:
        """Every rule of the lifecycle in SQL, for this table (built once)."""
        return self.statements.health
