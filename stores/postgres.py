"""The PostgreSQL store: one server, workers on many machines.

Construction::

    connection = connect("postgresql://app@db.example/app")        # autocommit, see below
    store = PostgresStore(any_lifecycle, connection)         # table derived from the record
    store = PostgresStore(lifecycle, connection, schema)     # a schema the caller describes

Everything a SQL store does is written once in :mod:`lifecycles.stores._sql`; this
module holds what only PostgreSQL does: its dialect (``%s`` markers, quoted
identifiers, ``IS NOT DISTINCT FROM``, ``FOR UPDATE SKIP LOCKED``, column
types), how statements run on a ``psycopg`` connection, its
transactions and what its errors mean.

The tables live in the connection's ``current_schema()`` (set ``search_path`` to
keep several installations, or parallel tests, apart). The schema is created,
migrated and checked once, when the store is built, under a transaction-level
advisory lock so that workers starting together do not race on ``CREATE TABLE``.
PostgreSQL has no schema version to compare, so each transaction (and each read,
through :meth:`~lifecycles.stores._sql.SQLStore.check_schema`) starts with one probe
that reads the columns of the store's tables from ``pg_attribute`` and the schema's
meta row, if it has one: a difference is ``schema_altered``.

Claims take the first due record with ``SELECT ... FOR UPDATE SKIP LOCKED``: two
workers never wait on each other and never lease the same record, and expired
leases are locked the same way, so any number of workers may recover them at once.

Transactions: the store owns the transaction boundaries on the connection it is
given (``BEGIN``/``COMMIT`` through ``connection.transaction()``). A connection that
is already inside a transaction the store did not open is refused
(``transaction_nested``) rather than silently joined. Autocommit connections are the
expected kind; on a non-autocommit connection every read also runs in its own short
transaction so that the connection is never left idle inside one.

Durability: what a transaction wrote is durable when its ``with`` block exits,
to the degree the server's ``synchronous_commit`` makes it (on by default).

Errors: no ``psycopg`` exception leaves the store. A server that cannot be reached,
or a connection that broke, raises :class:`StoreUnavailable`
(``...database_unreachable``); :meth:`PostgresStore.driver_error` says what any other
``psycopg`` error means. Codes carry the schema's prefix.

What a broken connection leaves behind: the server rolls back a transaction whose
connection is lost before its ``COMMIT`` arrives, so a failure before the commit was
sent changed nothing (``outcome_unknown`` false; a connection found closed before a
statement is sent, too). A connection lost after ``COMMIT`` was sent, or during a
statement that commits by itself (an autocommit write: :meth:`PostgresStore.run_write_committed`,
the one-statement claim), and before the answer came, is :class:`CommitUncertain`
(``outcome_unknown`` true): the server may have committed, and only a new read on a
working connection tells. A commit the server answered with an error was rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.rows import tuple_row

import lifecycles.stores._postgres_batch as postgres_batch
import lifecycles.stores._postgres_notify as postgres_notify
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row, TransitionRefused
from lifecycles.stores._base import (
    CommitUncertain,
    SchemaMismatch,
    StoreDamaged,
    StoreError,
    StoreUnavailable,
    TransactionNested,
    UniqueViolation,
)
from lifecycles.stores._postgres_dialect import PostgresDialect
from lifecycles.stores._sql_claim import ClaimInPlace, claim_in_place
from lifecycles.stores._sql_schema import SQLSchema

R = TypeVar("R")

Connection = psycopg.Connection[Any]
TUPLES_OK = ExecStatus.TUPLES_OK

__all__ = [
    "CommitUncertain",
    "PostgresDialect",
    "PostgresStore",
    "SchemaMismatch",
    "TransactionNested",
    "connect",
]


def connect(dsn: str, **options: Any) -> Connection:
    """An autocommit connection to ``dsn``, the kind the store expects.

    Raises :class:`StoreUnavailable` when the server cannot be reached or refuses the
    connection, ``ValueError`` when ``dsn`` or an option is not a valid connection
    string; no ``psycopg`` exception. ``options`` go to :func:`psycopg.connect`
    (``connect_timeout``, ``application_name``, ...).
    """
    try:
        return psycopg.connect(dsn, autocommit=True, **options)
    except psycopg.ProgrammingError as error:  # the connection string itself
        raise ValueError(f"not a valid PostgreSQL connection string: {error}") from error
    except psycopg.Error as error:
        raise StoreUnavailable(f"cannot reach the PostgreSQL server: {error}") from error


_MARKERS = re.compile(r"%(.)", re.DOTALL)


@lru_cache(maxsize=1024)
def numbered_markers(statement: str) -> str | None:
    """``statement`` with psycopg's ``%s`` markers as ``$1``, ``$2``... (and ``%%`` as
    ``%``), run through a raw cursor; ``None`` when it holds another kind of marker.

    psycopg converts a statement's markers on every execution once it is longer than its
    own small cache takes (the whole-record compare-and-set is): that conversion cost
    more worker CPU than the rest of a PostgreSQL run_once (``profile_postgres_cycle.py``).
    """
    pieces: list[str] = []
    count = 0
    last = 0
    for marker in _MARKERS.finditer(statement):
        kind = marker.group(1)
        if kind not in "s%":
            return None
        pieces.append(statement[last:marker.start()])
        if kind == "s":
            count += 1
            pieces.append(f"${count}")
        else:
            pieces.append("%")
        last = marker.end()
    if "%" in statement[last:]:
        return None  # a lone % at the end: psycopg's own error is the clearer one
    pieces.append(statement[last:])
    return "".join(pieces)


def _rows(cursor: Any) -> list[tuple[Any, ...]]:
    # The result's status, not ``cursor.description``: that builds one object per column.
    result = cursor.pgresult
    return cursor.fetchall() if result is not None and result.status == TUPLES_OK else []


class PostgresStore(postgres_batch.BatchingStore[R]):
    """A lifecycle's records in one PostgreSQL table, compare-and-set on every write."""

    dialect = PostgresDialect()
    unique_violations = (psycopg.errors.UniqueViolation,)

    def __init__(
        self,
        lifecycle: Lifecycle[R, Any],
        connection: Connection,
        schema: SQLSchema | None = None,
    ) -> None:
        if not isinstance(connection, psycopg.Connection):  # an AsyncConnection, say
            raise TypeError("connection must be a psycopg.Connection (synchronous)")
        super().__init__(lifecycle, connection, schema)

    @contextmanager
    def database_transaction(self) -> Iterator[None]:
        connection = self.connection
        self._ready()
        committing = False
        try:
            with connection.transaction():
                yield
                committing = True  # the block is done: leaving the with sends COMMIT
        except Exception as error:
            self.raise_store_error(error, committing=committing)
        if connection.broken:  # psycopg ends a block on a broken connection unsent
            raise self.unavailable("the connection broke before the commit was sent")

    def _ready(self) -> None:
        """Refuse a connection that cannot take a statement now, before sending any."""
        state = self.connection.info.transaction_status
        if state == TransactionStatus.UNKNOWN or self.connection.closed:
            raise self.unavailable("the connection is closed or broken")
        if state != TransactionStatus.IDLE:
            raise self.transaction_nested_error()

    def commit_may_have_happened(self, error: Exception) -> bool:
        # The connection was lost with the commit on its way: its answer never came. An
        # error the server sent back (a statement timeout, say) means it rolled back.
        return isinstance(error, psycopg.OperationalError) and (
            self.connection.broken or self.connection.closed
        )

    def autocommits(self) -> bool:
        return bool(self.connection.autocommit)

    _in_place: ClaimInPlace | str | None = None

    def claim_in_place(self, inputs: Any) -> object:
        """The common claim as one statement (:mod:`lifecycles.stores._sql_claim`): on an
        autocommit connection outside any transaction, the record leased; otherwise, or
        when it leased nothing, ``LEFT_TO_PROTOCOL``."""
        if self._in_place is None:
            self._in_place = claim_in_place(self.statements)
        plan = self._in_place
        if isinstance(plan, str) or self._depth or not self.connection.autocommit:
            return lease_protocol.LEFT_TO_PROTOCOL
        params = [*(getattr(inputs, name) for name in plan.inputs), *self._guard_params]
        found = self._claim_rows(plan.statement, params)
        if not found:
            return lease_protocol.LEFT_TO_PROTOCOL
        was_values, written_values = plan.split(found[0])
        was = self._decode(was_values)  # read as any read is: field rules, invariants
        # The table fires its claim on the record as it was (its dispatch, its guards, its
        # invariants; the observers told), and the statement must have written exactly
        # the record that gives.
        lifecycle = self.lifecycle
        try:
            leased = lifecycle.fire(lease_protocol.declared_lease(lifecycle).trigger, was, inputs)
        except TransitionRefused:
            leased = None
        if leased is None or tuple(self._encode(leased, self.schema.column_names)) != (
            written_values
        ):
            raise StoreDamaged(
                f"the claim of {lifecycle.key_of(was)} wrote another record than its row",
                code=self.schema.error("database_integrity"),
            )
        self._remember(leased, written_values)
        return leased

    # -- batches: a few statements each, whatever their size (stores/_postgres_batch.py) --

    put_many_alone = True

    def insert_many(self, records: Sequence[R]) -> list[R | UniqueViolation]:
        """``COPY`` into a staging table, then one ``INSERT ... ON CONFLICT DO NOTHING``
        (:func:`lifecycles.stores._postgres_batch.insert_many`)."""
        return postgres_batch.insert_many(self, records)

    def put_many(self, writes: Sequence[tuple[R, R, Row]]) -> list[bool]:
        """One compare-and-set ``UPDATE`` for the whole batch, inside a transaction or as a
        statement of its own (:func:`lifecycles.stores._postgres_batch.put_many`)."""
        return postgres_batch.put_many(self, writes)

    def claim_many_in_place(self, inputs_for: Callable[[int], Any], limit: int) -> object:
        """The common batch claim as one statement, on an autocommit connection outside any
        transaction (:func:`lifecycles.stores._postgres_batch.claim_many_in_place`)."""
        return postgres_batch.claim_many_in_place(self, inputs_for, limit)

    def _claim_rows(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]] | None:
        """Run a one-statement claim (its own commit, on an autocommit connection): its
        rows, or ``None`` when a rule refused it (the record as it was or as written
        breaks one, or a rule constraint, :mod:`lifecycles.stores.postgres_rules`, refused
        the write): nothing was written, and the protocol reads the records again and
        refuses them as any read does."""
        self._ready()
        try:
            # Prepared at once (planning it costs more than running it), and written with
            # $n markers (too long for psycopg's cache of converted statements).
            with psycopg.RawCursor(self.connection, row_factory=tuple_row) as cursor:
                cursor.execute(statement, params, prepare=True)
                return _rows(cursor)
        except (psycopg.errors.InvalidTextRepresentation, psycopg.errors.CheckViolation):
            return None
        except Exception as error:
            self.raise_store_error(error, committing=True)  # the statement is its commit

    def run_write_committed(self, statement: str, params: Sequence[Any]) -> int:
        if not self.connection.autocommit:
            return super().run_write_committed(statement, params)
        self._ready()
        try:
            with self._cursor(statement, params) as cursor:
                return int(cursor.rowcount)
        except Exception as error:
            self.raise_store_error(error, committing=True)  # the statement is its commit

    def _committed_rows(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one statement that is a transaction of its own, on an autocommit connection
        outside any transaction: its rows. A connection lost while it ran may have
        committed it: :class:`CommitUncertain`."""
        self._ready()
        try:
            with self._cursor(statement, params) as cursor:
                return _rows(cursor)
        except Exception as error:
            self.raise_store_error(error, committing=True)  # the statement is its commit

    def statement_savepoint(self) -> AbstractContextManager[Any]:
        # A failed statement aborts the whole transaction in PostgreSQL; when the
        # caller's transaction holds more work, a savepoint keeps that work usable.
        return self.connection.transaction() if self._depth > 1 else nullcontext()

    _channel: str | None = None

    def _ensure_notifications(self) -> None:
        if self.lifecycle.lease is not None:
            self._channel = postgres_notify.ensure_notify_trigger(self)

    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake()`` whenever a record is written into a claimable status, by any
        writer (:mod:`lifecycles.stores._postgres_notify`), from a connection of its own;
        returns ``stop()``. A store whose role may not create the trigger only polls:
        ``stop`` is then all there is."""
        if self._channel is None:
            return lambda: None
        return postgres_notify.listen(self.connection, self._channel, wake)

    _where: tuple[Any, ...] = ()

    def lock_schema(self) -> None:
        # Workers starting together must not race on CREATE TABLE IF NOT EXISTS. The same
        # statement names the database the store is in, for its location.
        ((_, *where),) = self.run(
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || %s, 0)),"
            " host(inet_server_addr()), inet_server_port(), current_database(),"
            " current_schema()",
            (self.schema.table,),
        )
        self._where = tuple(where)

    def locate(self) -> str:
        # The server as it sees itself (a proxy or another route names it alike); over a
        # Unix socket, which has no address, the socket the client used.
        address, port, database, schema = self._where
        if address is None:
            address, port = self.connection.info.host, self.connection.info.port
        return f"postgresql://{address}:{port}/{database}?schema={schema}#{self.schema.table}"

    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._cursor(statement, params) as cursor:
                return _rows(cursor)
        except Exception as error:
            self.raise_store_error(error)

    def run_write(self, statement: str, params: Sequence[Any]) -> int:
        try:
            with self._cursor(statement, params) as cursor:
                return int(cursor.rowcount)
        except Exception as error:
            self.raise_store_error(error)

    def _cursor(self, statement: str, params: Sequence[Any]) -> Any:
        """A cursor that has run ``statement``: its markers numbered once per statement
        (:func:`numbered_markers`), else converted by psycopg as usual."""
        raw = numbered_markers(statement) if params else None
        cursor: Any = (
            self.connection.cursor(row_factory=tuple_row) if raw is None
            else psycopg.RawCursor(self.connection, row_factory=tuple_row)
        )
        try:
            cursor.execute(statement if raw is None else raw, params or None)
        except BaseException:
            cursor.close()
            raise
        return cursor

    def columns_of(self, table: str) -> tuple[object, ...]:
        rows = self.run(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = %s"
            " ORDER BY ordinal_position",
            (table,),
        )
        return tuple((str(name), str(kind)) for name, kind in rows)

    def tables_present(self, names: Sequence[str]) -> set[str]:
        rows = self.run(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = ANY(%s)",
            (list(names),),
        )
        return {str(name) for (name,) in rows}

    def unique_column_sets(self, table: str) -> set[frozenset[str]]:
        # What ON CONFLICT can infer as its arbiter: unique, valid, not deferred, neither
        # partial nor over an expression; its key columns only (not INCLUDE ones).
        rows = self.run(
            "SELECT array_agg(a.attname::text) FROM pg_index AS i"
            " JOIN pg_class AS c ON c.oid = i.indrelid"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position)"
            " JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.attnum"
            " WHERE n.nspname = current_schema() AND c.relname = %s"
            " AND k.position <= i.indnkeyatts AND i.indisunique AND i.indisvalid"
            " AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL"
            " GROUP BY i.indexrelid",
            (table,),
        )
        return {frozenset(columns) for (columns,) in rows}

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

