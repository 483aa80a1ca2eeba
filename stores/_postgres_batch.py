"""Batches on PostgreSQL: a batch of records costs a few statements, whatever its size.

The store's batch methods (:meth:`PostgresStore.insert_many`, ``put_many``,
``claim_many_in_place``) run here the statements of :mod:`lifecycles.stores._sql_batch`,
and give, record by record, the answer of the one-record path:

* :func:`insert_many`: every record checked against every invariant in Python first (a
  broken one raises, naming its key, before anything is sent); then, in one transaction,
  ``COPY`` into the session's staging table and one ``INSERT ... ON CONFLICT DO
  NOTHING`` per run of distinct keys (a key repeated in the batch starts a new run, so
  that its second record meets the first as a later ``insert`` would); then one
  ``SELECT`` of the keys not inserted, read and validated as every read is. A record not
  inserted whose key is stored gets the stored record; one whose key is not stored was
  refused by another unique value: its entry is :class:`UniqueViolation`.
* :func:`put_many`: one compare-and-set ``UPDATE`` for the batch; a record changed since
  it was read is not written and costs nothing else. A batch naming a key twice is
  written record after record instead (the second write must see the first).
* :func:`claim_many_in_place`: the common batch claim as one statement, on an autocommit
  connection outside any transaction. Each grant's record as it was is read as any read
  is, the table fires its claim row on it in Python with that grant's inputs, and the
  statement must have written exactly that record, as for one claim
  (:mod:`lifecycles.stores._sql_claim`). Whenever the statement cannot settle the claim
  (a lease has expired, the schema changed, a rule is broken, the inputs the pick reads
  differ between grants), it writes nothing and the protocol decides in a transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from psycopg.pq import ExecStatus
from psycopg.types.array import ListBinaryDumper

from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._declaration import Row, TransitionRefused
from lifecycles.stores._base import StoreDamaged, UniqueViolation
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_batch import (
    BatchClaim,
    ClaimStatements,
    CompareAndSetStatements,
    InsertStatements,
)

R = TypeVar("R")

__all__ = ["Batches", "BatchingStore", "claim_many_in_place", "insert_many", "put_many"]


class BatchingStore(SQLStore[R], ABC):
    """A SQL store the batch statements run on (PostgreSQL's): besides the store's own
    statements, it runs one that is a transaction of its own and returns its rows."""

    _batches: Batches | None = None  # built on first use (:func:`batches`)

    @abstractmethod
    def _claim_rows(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]] | None:
        """Run a one-statement claim, its own commit: its rows, or ``None`` when a rule
        refused it (nothing was written)."""

    @abstractmethod
    def _committed_rows(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one statement that is a transaction of its own: its rows."""


class BinaryArray(list[Any]):
    """A batch's values of one column, sent as a binary array: psycopg writes the text of
    an array element by element in Python (several microseconds each), the binary form in
    a third of that (registered for this class only, on the store's connection)."""

    __slots__ = ()


def _rows(cursor: Any) -> list[tuple[Any, ...]]:
    result = cursor.pgresult
    return cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []


class Batches:
    """The batch statements of one store, built on first use, and whether the session's
    staging table is known to exist (created once per connection, committed)."""

    def __init__(self, store: BatchingStore[Any]) -> None:
        store.connection.adapters.register_dumper(BinaryArray, ListBinaryDumper)
        self.inserts = InsertStatements.build(store.statements)
        self.writes = CompareAndSetStatements.build(store.statements)
        self.staged = False
        self._store = store
        self._claims: ClaimStatements | str | None = None
        self._claim_statements: dict[tuple[str, ...], BatchClaim] = {}

    def claims(self) -> ClaimStatements | str:
        if self._claims is None:
            self._claims = ClaimStatements.build(self._store.statements)
        return self._claims

    def claim_statement(self, plan: ClaimStatements, types: tuple[str, ...]) -> BatchClaim:
        statement = self._claim_statements.get(types)
        if statement is None:
            statement = self._claim_statements[types] = plan.statement(
                dict(zip(plan.per_grant, types, strict=True)))
        return statement


def batches(store: BatchingStore[Any]) -> Batches:
    """The store's :class:`Batches`, built once."""
    found = store._batches
    if found is None:
        found = store._batches = Batches(store)
    return found


# --- insert ----------------------------------------------------------------------------


def insert_many(store: BatchingStore[R], records: Sequence[R]) -> list[R | UniqueViolation]:
    """:meth:`~lifecycles.stores._base.Store.insert_many`, set-based (module docstring)."""
    batch = list(records)
    lifecycle = store.lifecycle
    keys = [lifecycle.key_of(record) for record in batch]
    for record, key in zip(batch, keys, strict=True):
        try:
            lifecycle.check(record)
        except InvariantViolation as error:
            if not error.keys:
                error.keys = (key,)
            raise
    plan = batches(store)
    outermost = not store._depth
    results: list[R | UniqueViolation] = []
    with store.transaction():
        if batch and not plan.staged:
            store.run(plan.inserts.create_stage)
        start = 0
        for end in _runs_of_distinct(keys):
            run: list[R | UniqueViolation] = _insert_run(
                store, plan.inserts, batch[start:end], keys[start:end])
            results.extend(run)
            start = end
    if outermost and batch:
        plan.staged = True  # committed with the transaction that created it
    return results


def _runs_of_distinct(keys: Sequence[str]) -> list[int]:
    """Where each run of distinct keys ends: a key seen already in the run starts the next."""
    ends: list[int] = []
    seen: set[str] = set()
    for at, key in enumerate(keys):
        if key in seen:
            ends.append(at)
            seen = set()
        seen.add(key)
    return [*ends, len(keys)] if keys else []


def _insert_run(store: BatchingStore[R], statements: InsertStatements, records: list[R],
                keys: list[str]) -> list[R | UniqueViolation]:
    encoded = [store._encode(record, store.schema.column_names) for record in records]
    with store.connection.cursor() as cursor, cursor.copy(statements.copy) as copy:
        for at, values in enumerate(encoded, start=1):
            copy.write_row((at, *values))
    inserted = {key for (key,) in store.run(statements.insert)}
    missing = [key for key in keys if key not in inserted]
    stored = {}
    if missing:
        for row in store.run(statements.existing, [BinaryArray(missing)]):
            record = store._decode(row)
            stored[store.lifecycle.key_of(record)] = record
    results: list[R | UniqueViolation] = []
    for record, key, values in zip(records, keys, encoded, strict=True):
        if key in inserted:
            store._remember(record, values)
            results.append(record)
        elif key in stored:
            results.append(stored[key])
        else:  # skipped, yet its key is free: another unique value is taken
            results.append(UniqueViolation(
                f"{key} holds a value the schema keeps unique that is stored already"))
    return results


# --- compare-and-set -------------------------------------------------------------------


def put_many(store: BatchingStore[R], writes: Sequence[tuple[R, R, Row]]) -> list[bool]:
    """:meth:`~lifecycles.stores._base.Store.put_many` as one statement (module docstring)."""
    key_of = store.lifecycle.key_of
    if len(writes) < 2 or len({key_of(before) for before, _, _ in writes}) < len(writes):
        return SQLStore.put_many(store, writes)  # one write, or one record written twice
    plan = batches(store).writes
    names = store.schema.column_names
    afters: list[list[Any]] = []
    befores: list[list[Any]] = []
    for before, after, row in writes:
        known = store._as_stored.get(id(before))
        stored = known[1] if known is not None and known[0] is before else None
        if stored is None:
            compared = store._encode(before, names)
            stored_after = store._encode(after, names)
        else:
            # As put compares: with the very values the record was read or written as;
            # the fields the row does not write stay exactly as stored.
            compared = list(stored)
            stored_after = list(stored)
            for at, value in zip(store._written_at[row],
                                 store._encode(after, store.lifecycle.writes(row)), strict=True):
                stored_after[at] = value
        afters.append(stored_after)
        befores.append(compared)
    params: list[Any] = [*_columns(afters, plan.types), *_columns(befores, plan.types)]
    if store._depth:
        rows = store.run(plan.inside, params)
    elif store.connection.autocommit:
        rows = store._committed_rows(plan.alone, [*params, *store._guard_params])
    else:
        with store.transaction():
            rows = store.run(plan.inside, params)
    written = {int(at) for (at,) in rows}
    for at, ((_, after, _), values) in enumerate(zip(writes, afters, strict=True), start=1):
        if at in written:
            store._remember(after, values)
    if len(written) < len(writes) and not store._depth:
        store.check_schema()  # an altered schema is refused as such, not as a race
    return [at in written for at in range(1, len(writes) + 1)]


def _columns(rows: list[list[Any]], types: Sequence[str]) -> list[BinaryArray]:
    """The batch's values column by column: one array each, its numbers all floats where
    the column holds floats (an array must hold one type; a time may be an int)."""
    columns = [BinaryArray(values) for values in zip(*rows, strict=True)]
    for at, kind in enumerate(types):
        if kind == "double precision[]":
            columns[at] = BinaryArray(float(v) if type(v) is int else v for v in columns[at])
    return columns


# --- claim -----------------------------------------------------------------------------


def claim_many_in_place(store: BatchingStore[R], inputs_for: Callable[[int], Any],
                        limit: int) -> object:
    """The batch claim as one statement, or ``LEFT_TO_PROTOCOL`` (module docstring)."""
    if limit < 1 or store._depth or not store.connection.autocommit:
        return lease_protocol.LEFT_TO_PROTOCOL
    plan = batches(store)
    claims = plan.claims()
    if isinstance(claims, str):
        return lease_protocol.LEFT_TO_PROTOCOL
    every = [inputs_for(n) for n in range(limit)]
    first = every[0]
    # The pick reads one value of each of these for the whole batch, as the protocol
    # reads the first grant's clock: grants that disagree are the protocol's to decide.
    for name in claims.shared:
        value = getattr(first, name)
        if any(getattr(inputs, name) != value for inputs in every[1:]):
            return lease_protocol.LEFT_TO_PROTOCOL
    types = []
    for name in claims.per_grant:
        kind = _array_kind([getattr(inputs, name) for inputs in every])
        if kind is None:
            return lease_protocol.LEFT_TO_PROTOCOL
        types.append(kind)
    statement = plan.claim_statement(claims, tuple(types))
    guards = store._guard_params
    params = [_bound(claims.value_of(name, first, every, guards, limit))
              for name in statement.binds]
    found = store._claim_rows(statement.statement, params)
    if found is None:  # a rule refused it: nothing was written, the protocol decides
        return lease_protocol.LEFT_TO_PROTOCOL
    expired, schema_as_verified = found[0][0], found[0][1]
    granted = [row for row in found if row[2] is not None]
    if not granted:
        # Nothing due and nothing to rescue, in the schema as verified: the protocol's
        # answer too. Otherwise it decides (it rescues first; it refuses an altered schema).
        return [] if schema_as_verified and not expired else lease_protocol.LEFT_TO_PROTOCOL
    lifecycle = store.lifecycle
    trigger = lease_protocol.declared_lease(lifecycle).trigger
    leased_all = []
    for row in granted:
        number, was_values, written_values = statement.split(row)
        assert number is not None
        was = store._decode(was_values)  # read as any read is: field rules, invariants
        try:
            leased = lifecycle.fire(trigger, was, every[number - 1])
        except TransitionRefused:
            leased = None
        if leased is None or tuple(store._encode(leased, store.schema.column_names)) != (
            written_values
        ):
            raise StoreDamaged(
                f"the claim of {lifecycle.key_of(was)} wrote another record than its row",
                code=store.schema.error("database_integrity"),
            )
        store._remember(leased, written_values)
        leased_all.append(leased)
    return leased_all


def _array_kind(values: list[Any]) -> str | None:
    """The SQL type of an array of one input of every grant, or ``None`` for values no
    one type holds."""
    kinds = {type(value) for value in values if value is not None}
    if not kinds or kinds == {str}:
        return "text"
    if kinds == {bool}:
        return "boolean"
    if kinds == {int}:
        return "bigint"
    if kinds <= {int, float}:
        return "double precision"
    return None


def _bound(value: Any) -> Any:
    """A list as a :class:`BinaryArray`, its numbers all floats when a float is among them
    (one type per array)."""
    if not isinstance(value, list):
        return value
    if any(type(v) is float for v in value):
        return BinaryArray(float(v) if type(v) is int else v for v in value)
    return BinaryArray(value)
