"""The store contract: what every place records live must guarantee.

A store holds the records of one lifecycle, keyed by the lifecycle's key field.
Stores do I/O and nothing else: which status may follow which, what a transition
writes and what a valid record is all come from the lifecycle, never from here.

Guarantees every implementation documents and the conformance suite checks:

* **Atomicity.** Everything inside one :meth:`Store.transaction` commits together
  or not at all; a reader never sees half of it. Transactions on one store are
  serialisable with respect to each other (SQLite ``BEGIN IMMEDIATE``, PostgreSQL
  row locks, the files store's ``flock``).
* **Durability.** When a transaction's ``with`` block exits normally, what it
  wrote is durable to the degree the store states in its own docstring (the memory
  store: not at all).
* **Validation.** Every record returned by a read has passed its field rules and
  every invariant; a stored record that does not raises
  :class:`~lifecycles.invariants.InvariantViolation` with the lifecycle's code.
  Every write checks the invariants first and writes nothing if one fails.
* **Compare-and-set.** :meth:`Store.write` changes a record only if it is still
  exactly the record the caller read; otherwise it raises :class:`StaleRecord` and
  changes nothing. A worker whose lease was taken over can never overwrite the new
  owner, and a write decided on a record read outside any transaction lands only if
  nothing changed it since.
* **Idempotent creation.** :meth:`Store.insert` of a key that exists writes nothing
  and returns what is stored, so the caller decides whether that is a repeat or a
  collision. :meth:`Store.insert_many` does the same for a batch, in one transaction.
* **Failures have codes.** No exception of a database driver leaves a store's
  operation: each becomes the :class:`StoreError` it means (:meth:`Store.driver_error`).
  A :class:`StoreUnavailable` says whether the failed call's write may have committed
  (``outcome_unknown``): ``False`` when the failure came before the commit was sent,
  so nothing changed; ``True`` (:class:`CommitUncertain`) when it came while the commit
  was on its way, so only a new read tells.

Storage and leasing are separate capabilities. :class:`Store` is storage: get,
insert, write, scan, counts, transaction. A store for a lifecycle that declares a
lease also implements the one leasing contract,
:class:`~lifecycles.machines.lease.LeasingStore`: two queries beside storage, the due
records in claim order (``due``) and the expired leases (``expired_leases``); its
optional shortcuts (``glance``, the claims in place) have defaults here, inherited
from :class:`~lifecycles.machines.lease.LeaseDefaults`. The protocol that drives them
(rescue, claim, pass over) is pure code in :mod:`lifecycles.machines.lease`, so a store
decides nothing about leases and a store for a lifecycle without one implements
neither. The shipped stores also count due records and expired leases
(``count_due``, ``count_expired``, for health and tests) and answer ``next_due``:
conveniences of theirs, not part of the contract.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, TypeVar

import attrs

from lifecycles import observe
from lifecycles.invariants._core import InvariantViolation, build_record
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Lease, LifecycleError, Row
from lifecycles.machines.lease import LeaseDefaults, LeasingStore, LostRace, NotLeasable

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741


class StoreError(LifecycleError):
    """Base of store failures."""

    code = "lifecycles.store_error"


class StaleRecord(StoreError, LostRace):
    """A compare-and-set write found the record changed since it was read."""

    code = "lifecycles.stale_record"


class SchemaMismatch(StoreError):
    """The database's schema is not the one this store writes; nothing was changed."""


class TransactionNested(StoreError):
    """The caller's connection is already inside a transaction the store did not open."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or used right now (a lost server, a closed
    connection, a lock held past the timeout, a full disk, an I/O error).

    ``outcome_unknown`` is ``False`` here: the call failed before anything it wrote was
    committed, and nothing changed (a transaction whose connection breaks is rolled
    back by the server; SQLite rolls back what it could not commit). Where the failure
    came while a commit was on its way, the store raises :class:`CommitUncertain`
    instead.
    """

    code = "lifecycles.database_unreachable"
    #: Whether what the failed call wrote may have been committed all the same.
    outcome_unknown: bool = False


class CommitUncertain(StoreUnavailable):
    """The connection failed while a commit was on its way: after ``COMMIT`` (or a
    statement that commits by itself) was sent and before its answer came back. The
    write may have committed or not; ``outcome_unknown`` is ``True``. Same code as
    :class:`StoreUnavailable`.

    Only reading again, on a working connection, tells which. A write that is
    idempotent (an insert returning what is stored) may simply be retried; a lease
    granted this way is held under the token the caller sent, which
    :meth:`Store.leased_under` finds.
    """

    outcome_unknown = True


class StoreDamaged(StoreError):
    """The storage engine reports damage, or refuses data the store's own rules allow."""

    code = "lifecycles.database_integrity"


class UniqueViolation(StoreError):
    """An insert would duplicate a value the schema keeps unique (besides the key)."""

    code = "lifecycles.unique_violation"


__all__ = [
    "CommitUncertain",
    "LeasingStore",
    "NotLeasable",
    "SchemaMismatch",
    "StaleRecord",
    "Store",
    "StoreDamaged",
    "StoreError",
    "StoreUnavailable",
    "TransactionNested",
    "UniqueViolation",
]


class Store(ABC, LeaseDefaults[R]):
    """Records of one lifecycle. Subclasses implement the abstract primitives;
    the transition helpers below are written once on top of them."""

    # What each store class lacks of the leasing contract (every member is looked up;
    # a claim asks once per call, so the answer is kept).
    _leasing_types: ClassVar[dict[type, tuple[str, ...]]] = {}

    lifecycle: Lifecycle[R, Any]

    #: Whether :meth:`put_many` called outside a transaction writes the whole batch in
    #: one statement of its own (PostgreSQL), so that a batch needs no transaction around
    #: it; elsewhere it writes record after record, and a caller batching writes opens one.
    put_many_alone: ClassVar[bool] = False

    #: Optional: called with each newly leased record inside the claim's own
    #: transaction, after the lease is written (an audit trail of lease grants, say,
    #: written on the store's own connection). An exception it raises rolls the claim
    #: back, so a lease is never granted without its record.
    on_lease: Callable[[R], None] | None = None

    # -- primitives ----------------------------------------------------------------

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """One atomic, serialisable unit of reads and writes (see the module docstring)."""

    @abstractmethod
    def get(self, key: str) -> R | None:
        """The validated record under ``key``, or ``None``."""

    @abstractmethod
    def insert(self, record: R) -> R:
        """Store a new record, or return the existing one under its key unchanged."""

    def insert_many(self, records: Sequence[R]) -> list[R | UniqueViolation]:
        """:meth:`insert` each of ``records``, in order, in one transaction: one entry per
        record, what ``insert`` returns for it (the new record, or the one stored under
        its key, a record earlier in the batch included), or the :class:`UniqueViolation`
        ``insert`` would raise for it, which stores nothing for that record and never
        undoes the others. Durable together when the call returns.

        A duplicate of another unique value is the stored data's answer to one record,
        which the caller cannot know beforehand, so it is that record's entry (raise it
        to get ``insert``'s behaviour); anything else ``insert`` raises (a record that
        breaks an invariant, naming its key; the database's failure) raises and writes
        nothing at all.
        """
        results: list[R | UniqueViolation] = []
        with self.transaction():
            for record in records:
                try:
                    results.append(self.insert(record))
                except UniqueViolation as duplicate:
                    results.append(duplicate)
                except InvariantViolation as broken:
                    if not broken.keys:  # which record of the batch, for the caller
                        broken.keys = (str(self.lifecycle.key_of(record)),)
                    raise
        return results

    def write(self, before: R, after: R, row: Row) -> None:
        """Compare-and-set: replace ``before`` by ``after``, writing only ``row``'s fields.

        ``after`` is checked against every invariant first; then :meth:`put` writes it.
        """
        self.lifecycle.check(after)
        self.put(before, after, row)

    @abstractmethod
    def put(self, before: R, after: R, row: Row) -> None:
        """:meth:`write` for an ``after`` that has already passed every invariant (the
        record :meth:`Lifecycle.apply_row` returns): the invariants are checked once
        per write, not again here.

        Compare-and-set on the whole record: the stored record must still equal
        ``before``. Status and lease token alone would not do: a record can leave a
        status and come back to it with the same empty token (watching, leased,
        watching). Outside a transaction ``put`` is a transaction of its own. Raises
        :class:`StaleRecord` and changes nothing otherwise.
        """

    def put_many(self, writes: Sequence[tuple[R, R, Row]]) -> list[bool]:
        """:meth:`put` each ``(before, after, row)`` of ``writes``, in order; whether each
        was written (``False``: its record had changed since it was read, and nothing
        was written for it). A batch (``run_many``, a batch claim) writes this way: a
        store may run the statements back to back, and a stale record costs only its
        own write."""
        written = []
        for before, after, row in writes:
            try:
                self.put(before, after, row)
            except StaleRecord:
                written.append(False)
            else:
                written.append(True)
        return written

    @abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """How many records hold each declared status (zero included)."""

    @abstractmethod
    def scan(self) -> Iterator[R]:
        """Every record in key order, each validated; streams rather than loading all."""

    # -- written once on the primitives -------------------------------------------

    def record_from(self, values: Mapping[str, Any]) -> R:
        """The record stored ``values`` make: built (its field rules), then checked (every
        invariant), as every record is made valid.

        A violation names the stored record's key, so an operator can find the row.
        """
        try:
            record = build_record(self.lifecycle.build, values, self.lifecycle.invariants.code)
            return self.lifecycle.check(record)
        except InvariantViolation as error:
            if not error.keys:
                error.keys = (str(values.get(self.lifecycle.key_field)),)
            raise

    def fire(self, record: R, trigger: str, inputs: Any) -> R:
        """Fire ``trigger`` on ``record`` (already read in this transaction) and write it."""
        row = self.lifecycle.select_row(trigger, record, inputs)
        after = self.lifecycle.apply_row(row, record, inputs)  # checks every invariant
        self.put(record, after, row)
        return after

    def leasing(self) -> LeasingStore[R]:
        """This store as a :class:`~lifecycles.machines.lease.LeasingStore`;
        :class:`NotLeasable` when the lifecycle declares no lease or the store lacks a
        member of the contract (named in the message)."""
        lease_protocol.declared_lease(self.lifecycle)
        kind = type(self)
        missing = self._leasing_types.get(kind)
        if missing is None:
            missing = self._leasing_types[kind] = lease_protocol.missing_from_contract(self)
        if missing:
            raise NotLeasable(f"{kind.__name__} answers no lease queries: it lacks "
                              f"{', '.join(missing)}")
        return self  # type: ignore[return-value]  # checked just above

    def recover_expired(self, inputs: Any) -> list[R]:
        """Fire the lease-expiry trigger on every expired lease; returns the new records
        (:func:`lifecycles.machines.lease.recover_expired`)."""
        grants = lease_protocol.rescue_expired(self.leasing(), self.lifecycle, inputs)
        if grants:
            self._rescued(grants)
        return [grant.after for grant in grants]

    def claim(self, inputs: Any) -> R | None:
        """In one transaction: recover expired leases, then lease the first due record,
        passing over refused ones (:func:`lifecycles.machines.lease.claim`)."""
        return lease_protocol.claim(self.leasing(), self.lifecycle, inputs, self.on_lease,
                                    self._rescued)

    def claim_many(self, inputs_for: Callable[[int], Any], limit: int) -> list[R]:
        """In one transaction: recover expired leases, then lease up to ``limit`` due
        records in claim order (:func:`lifecycles.machines.lease.claim_many`)."""
        return lease_protocol.claim_many(
            self.leasing(), self.lifecycle, inputs_for, limit, self.on_lease, self._rescued
        )

    def _rescued(self, grants: list[lease_protocol.Grant]) -> None:
        """Rescues this store committed, reported to the lifecycle's logger and metrics
        (:mod:`lifecycles.observe`): every store's rescues pass here, as every store's
        claims rescue through the protocol (a one-statement claim never rescues), while
        the checker, which drives the protocol over its own model, reports none."""
        observe.observer(self.lifecycle).rescued(self.lifecycle, grants)

    def leased_under(self, tokens: Collection[str], now: float) -> list[R]:
        """The records leased under one of ``tokens`` whose lease is live at ``now``, in
        claim order: where a worker finds the leases it may hold after a write whose
        outcome it could not learn (:func:`lifecycles.machines.lease.resume`).

        By default a scan of every record (no store answers it often); a SQL store asks
        its leased records, through the lease-expiry index.
        """
        lifecycle = self.lifecycle
        token_field = lease_protocol.declared_lease(lifecycle).token_field
        wanted = set(tokens)
        found = [
            record for record in self.scan()
            if lease_protocol.is_live_lease(lifecycle, record, now)
            and getattr(record, token_field) in wanted
        ]
        return sorted(found, key=lambda record: lease_protocol.claim_order(lifecycle, record))

    @property
    def location(self) -> str:
        """Where the records live, as a name: two stores of one process with the same
        location hold the same records (a worker's doubts are kept by it). By default
        this store object itself; the SQL stores name their database and table."""
        return f"{type(self).__name__}:{id(self):x}"

    def check_schema(self) -> None:
        """Raise :class:`SchemaMismatch` if another connection changed the schema (or the
        binding it holds) since the store verified it; none by default.

        One cheap query. Each outermost :meth:`transaction` of a SQL store runs it
        before anything else; call it before reads made outside a transaction.
        """

    def driver_error(self, error: Exception) -> StoreError | None:
        """What an exception of the store's database driver means, as a store error with
        its code (:class:`SchemaMismatch`, :class:`StoreUnavailable`,
        :class:`StoreDamaged`); ``None`` when ``error`` is not the driver's."""
        return None

    def integrity_problems(self, *, constraints: bool = True) -> list[str]:
        """Problems the storage engine itself reports (SQLite ``quick_check``); none by
        default. ``constraints=False`` leaves out the re-verification of the tables'
        ``CHECK`` constraints, for a caller that checks rules implying them."""
        return []

    def _lease(self) -> Lease:
        return lease_protocol.declared_lease(self.lifecycle)

    def token_of(self, record: R) -> object:
        """The record's lease token (``None`` for lifecycles without leases)."""
        lease = self.lifecycle.lease
        return getattr(record, lease.token_field) if lease else None

    def values_of(self, record: R) -> dict[str, Any]:
        """The record as a field -> value mapping, statuses as plain strings."""
        values = attrs.asdict(record, recurse=False)  # type: ignore[arg-type]
        status = values[self.lifecycle.status_field]
        values[self.lifecycle.status_field] = str(status)
        return values
