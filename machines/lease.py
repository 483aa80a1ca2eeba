"""The lease protocol: which records to rescue, which to claim, what to do when refused.

A lifecycle that declares a :class:`~lifecycles.machines._declaration.Lease` hands its
records to workers. The protocol is decided here, without I/O, by pure functions
over what a store answers; stores only answer queries (:class:`LeasingStore`, the
one contract: "the first due records in claim order, passing over these keys", "the
records whose lease has expired") and write compare-and-set. Every set the protocol uses comes
from the table: the claimable statuses are the sources of the lease trigger, the
leased status its dest.

One claim, in one store transaction:

1. **Rescue.** Every record whose lease has expired at ``now`` (leased status,
   expiry time ``<= now``) fires the lease's expiry trigger. A worker that stalled
   gets its record taken from it; what its row writes (a retry, a failure) is the
   table's decision, not the protocol's.
2. **Claim.** The first due record in claim order (a claimable status, due time
   ``<= now``, ordered by ``lease.order_by``) fires the lease trigger, which writes
   a new lease token and expiry.
3. **Pass over.** When the claim's guards refuse that record (say, its failures are
   spent), it is passed over and the next due record is asked for: a refused
   candidate never blocks the records behind it, and is never written.

Properties (checked by tests/engine/test_lease_protocol.py, on every store by the
conformance suite, and with several interleaved workers by the checker,
:mod:`lifecycles.machines._interleaving`):

* **At most one live lease per record.** Only a claimable record is claimed, and
  the leased status is not claimable; a record leaves the leased status only by a
  row of the table (completion, or rescue once the lease has expired).
* **A superseded lease's completion is refused.** Every write is compare-and-set on
  the key, the status and the lease token the writer read. Once a record is rescued
  and claimed again it carries another token, so the first worker's late write
  matches nothing and is refused (``StaleRecord``), changing nothing.
* **A completion is judged by the table on the record as stored.** The worker's
  finishing step (:func:`complete`) is written compare-and-set over the record as
  claimed; when that record changed meanwhile, the step is fired again on the record
  as it is now, in one transaction, and the table's guards (the lease holder's token,
  the lease still live) are what refuse a worker whose lease was rescued.
* **A refused candidate never blocks the queue.** Passed-over keys are excluded
  from the next query, so each step either grants a lease, passes over one more
  key, or finds nothing due: a claim ends after at most one query per due record.

**Doubts.** A claim whose commit was sent but never answered may have leased a record
to the worker; a completion that failed left it leased. The worker knows the tokens
it sent: kept as a :class:`Doubt`, they let its next claim ask the store for the
records leased under them and take up those it still holds (:func:`resume`), instead
of leasing others and stranding these until their leases expire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import attrs

from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Lease, LifecycleError, Row, TransitionRefused

R = TypeVar("R")

# The lease protocol, for a caller running its own loop (the drop-ins' facades do; the
# Worker does it for everyone else). The other functions here are its parts.
__all__ = [
    "Doubt",
    "Glance",
    "LeaseDefaults",
    "LeasingStore",
    "LostRace",
    "NotLeasable",
    "Resumed",
    "claim",
    "claim_many",
    "complete",
    "due_in_order",
    "expired_among",
    "first_due",
    "is_due",
    "is_expired",
    "is_live_lease",
    "recover_expired",
    "rescue_expired",
    "resume",
]


class NotLeasable(LifecycleError):
    """A lease operation was asked of a lifecycle that declares no lease."""

    code = "lifecycles.not_leasable"


class LostRace(LifecycleError):
    """A compare-and-set write found the record changed since it was read (stores raise
    their ``StaleRecord``, a subclass); nothing was written."""

    code = "lifecycles.stale_record"


@runtime_checkable
class LeasingStore(Protocol[R]):
    """The one leasing contract: what the protocol below asks of a store.

    Required (:data:`LEASING_REQUIRED`): a transaction; the due records in claim order
    (``due``) and the expired leases (``expired_leases``), each validated like any read
    and as the store holds them inside the caller's transaction; a read by key (``get``,
    for a completion decided again on the record as stored); and compare-and-set writes
    (``put``, ``put_many``). Optional (:data:`LEASING_OPTIONAL`): the shortcuts a store
    may offer for the common claim, whose defaults :class:`LeaseDefaults` gives (every
    :class:`~lifecycles.stores._base.Store` inherits them), so a store written to the
    required members alone is a complete implementation once it inherits them.
    ``Store.claim`` refuses a store that lacks a member (:func:`missing_from_contract`)
    with :class:`NotLeasable` naming it.
    """

    def transaction(self) -> AbstractContextManager[None]:
        """One atomic, serialisable unit: a claim's rescues and grants commit together."""
        ...

    def get(self, key: str) -> R | None:
        """The validated record under ``key``, or ``None``."""
        ...

    def due(self, now: float, limit: int, exclude: frozenset[str] = frozenset()) -> list[R]:
        """The first ``limit`` claimable records due at ``now`` in claim order (what
        :func:`due_in_order` answers over records in hand), passing over the keys in
        ``exclude``: the protocol excludes a candidate whose claim guards refuse, so that
        it never blocks the queue."""
        ...

    def expired_leases(self, now: float) -> list[R]:
        """The leased records whose lease has expired at ``now`` (:func:`expired`)."""
        ...

    def put(self, before: R, after: R, row: Row) -> None:
        """Compare-and-set on the whole record: write ``after`` (already checked against
        every invariant) only if the stored record still equals ``before``, else raise
        :class:`LostRace` (a store's ``StaleRecord``) and change nothing. Outside a
        transaction it is a transaction of its own."""
        ...

    def put_many(self, writes: Sequence[tuple[R, R, Row]]) -> list[bool]:
        """:meth:`put` each ``(before, after, row)``, in order; whether each was written."""
        ...

    def glance(self, now: float) -> Glance[R] | None:
        """Optional. Outside any transaction, in one read: whether any lease has expired at
        ``now``, and the first due record; ``None`` (the default) when the store offers no
        such read, and every claim takes a transaction. A store that answers it must make
        :meth:`put` outside a transaction match the whole record, so that a claim decided
        on the glance is written only if nothing changed since."""
        ...

    def claim_in_place(self, inputs: Any) -> object:
        """Optional. The common claim (no lease expired) as one statement of the database,
        its rules checked before it commits: the record leased, or :data:`LEFT_TO_PROTOCOL` (the
        default) when the store cannot or the statement leased nothing."""
        ...

    def claim_many_in_place(self, inputs_for: Callable[[int], Any], limit: int) -> object:
        """Optional. The common batch claim as one statement: the records leased in claim
        order (the ``n``-th under ``inputs_for(n)``; an empty list: nothing due), or
        :data:`LEFT_TO_PROTOCOL` (the default; the protocol then calls ``inputs_for`` again from
        0, and is given the same answers)."""
        ...

    def check_schema(self) -> None:
        """Optional. Raise when the store's schema changed under it (none by default): a
        claim that found nothing due on a glance confirms the schema before answering."""
        ...


LEFT_TO_PROTOCOL = object()
"""What a store's claim shortcut (and :func:`claim_at_a_glance`) answers when the full
protocol must decide."""


class LeaseDefaults(Generic[R]):
    """The defaults of :class:`LeasingStore`'s optional members: no glance, no claim in
    place, no schema to check. Inherit it (``Store`` does) and implement the required
    members; override a default to offer a faster claim."""

    def glance(self, now: float) -> Glance[R] | None:
        """None: every claim takes a transaction."""
        return None

    def claim_in_place(self, inputs: Any) -> object:
        """:data:`LEFT_TO_PROTOCOL`: claims are decided in Python."""
        return LEFT_TO_PROTOCOL

    def claim_many_in_place(self, inputs_for: Callable[[int], Any], limit: int) -> object:
        """:data:`LEFT_TO_PROTOCOL`: batch claims are decided in Python."""
        return LEFT_TO_PROTOCOL

    def check_schema(self) -> None:
        """No schema to check."""


def _methods(kind: type) -> tuple[str, ...]:
    return tuple(name for name, value in vars(kind).items()
                 if callable(value) and not name.startswith("_"))


#: The members of :class:`LeasingStore` that :class:`LeaseDefaults` gives defaults for.
LEASING_OPTIONAL: tuple[str, ...] = _methods(LeaseDefaults)
#: The members of :class:`LeasingStore` every leasing store implements itself.
LEASING_REQUIRED: tuple[str, ...] = tuple(
    name for name in _methods(LeasingStore) if name not in LEASING_OPTIONAL)


def missing_from_contract(store: object) -> tuple[str, ...]:
    """The members of :class:`LeasingStore` that ``store`` lacks (required first, in the
    contract's order); empty when it implements the contract. The rule of the protocol's
    ``isinstance``: a member is missing when absent or not callable (``None`` blocks one)."""
    return tuple(name for name in LEASING_REQUIRED + LEASING_OPTIONAL
                 if not callable(getattr(store, name, None)))


@attrs.frozen
class Glance(Generic[R]):
    """One read outside any transaction: whether a lease has expired, and the first due
    record (``None``: nothing is due)."""

    expired: bool
    first_due: R | None


def declared_lease(lifecycle: Lifecycle[Any, Any]) -> Lease:
    """The lifecycle's lease; :class:`NotLeasable` when it declares none."""
    if lifecycle.lease is None:
        raise NotLeasable(f"{lifecycle.name} declares no lease")
    return lifecycle.lease


# --- which records: pure predicates, the reference for every store's queries -------


def claimable_statuses(lifecycle: Lifecycle[Any, Any]) -> tuple[str, ...]:
    """The statuses a worker may claim from (the lease trigger's sources), sorted."""
    declared_lease(lifecycle)
    return tuple(sorted(status.value for status in lifecycle.claimable))


def leased_status(lifecycle: Lifecycle[Any, Any]) -> str:
    """The status a claimed record holds (the lease trigger's dest)."""
    declared_lease(lifecycle)
    return str(lifecycle.leased)


def is_due(lifecycle: Lifecycle[R, Any], record: R, now: float) -> bool:
    """A claimable record whose due time has come."""
    lease = declared_lease(lifecycle)
    due = getattr(record, lease.due_field)
    # No time is never due (nor expired), as a NULL compares in the SQL stores.
    return lifecycle.status_of(record) in lifecycle.claimable and due is not None and bool(
        due <= now
    )


def is_expired(lifecycle: Lifecycle[R, Any], record: R, now: float) -> bool:
    """A leased record whose lease has run out (expiry ``<= now``)."""
    lease = declared_lease(lifecycle)
    expiry = getattr(record, lease.expires_field)
    return lifecycle.status_of(record) == lifecycle.leased and expiry is not None and bool(
        expiry <= now
    )


def claim_order(lifecycle: Lifecycle[R, Any], record: R) -> tuple[Any, ...]:
    """The sort key that decides which due record is claimed first."""
    return tuple(getattr(record, name) for name in declared_lease(lifecycle).order_by)


def first_due(
    lifecycle: Lifecycle[R, Any], records: Iterable[R], now: float,
    exclude: frozenset[str] = frozenset(),
) -> R | None:
    """The first due record in claim order, over records in hand."""
    found = due_in_order(lifecycle, records, now, 1, exclude)
    return found[0] if found else None


def due_in_order(
    lifecycle: Lifecycle[R, Any], records: Iterable[R], now: float, limit: int,
    exclude: frozenset[str] = frozenset(),
) -> list[R]:
    """What ``due`` answers, over records in hand: the first ``limit`` due records in
    claim order, passing over the keys in ``exclude``."""
    due = [
        record for record in records
        if is_due(lifecycle, record, now) and lifecycle.key_of(record) not in exclude
    ]
    return sorted(due, key=lambda record: claim_order(lifecycle, record))[:limit]


def expired_among(lifecycle: Lifecycle[R, Any], records: Iterable[R], now: float) -> list[R]:
    """What ``expired_leases`` answers, over records in hand."""
    return [record for record in records if is_expired(lifecycle, record, now)]


# --- what to do with a store's answer: pure decisions ------------------------------


@attrs.frozen
class Grant:
    """Write ``after`` over ``before`` by ``row``: a lease granted, or an expired one rescued."""

    before: Any
    row: Row
    after: Any


@attrs.frozen
class PassOver:
    """The candidate's claim guards refused it: exclude its key and ask again."""

    key: str


def rescue(lifecycle: Lifecycle[R, Any], record: R, inputs: Any) -> Grant:
    """The expiry trigger's row for an expired lease, and the record it writes.

    A refusal (``TransitionRefused``) propagates: an expired lease the table cannot
    end is a broken table, not a record to pass over.
    """
    trigger = declared_lease(lifecycle).expiry_trigger
    row = lifecycle.select_row(trigger, record, inputs)
    return Grant(record, row, lifecycle.apply_row(row, record, inputs))


def decide_claim(
    lifecycle: Lifecycle[R, Any], candidate: R | None, inputs: Any
) -> Grant | PassOver | None:
    """One step of a claim, given the store's answer to "first due record".

    ``None`` when nothing is due (the claim ends empty-handed); :class:`PassOver`
    when the lease trigger's guards refuse the candidate; otherwise the
    :class:`Grant` to write.
    """
    trigger = declared_lease(lifecycle).trigger
    if candidate is None:
        return None
    try:
        row = lifecycle.select_row(trigger, candidate, inputs)
    except TransitionRefused:
        return PassOver(lifecycle.key_of(candidate))
    return Grant(candidate, row, lifecycle.apply_row(row, candidate, inputs))


# --- the protocol, driving a store's queries -----------------------------------------


def recover_expired(store: LeasingStore[R], lifecycle: Lifecycle[R, Any], inputs: Any) -> list[R]:
    """Rescue every expired lease at ``inputs.now``; returns the records written."""
    return [grant.after for grant in rescue_expired(store, lifecycle, inputs)]


def rescue_expired(store: LeasingStore[R], lifecycle: Lifecycle[R, Any], inputs: Any,
                   ) -> list[Grant]:
    """:func:`recover_expired`, returning each rescue's :class:`Grant` (what it ended)."""
    grants = []
    for record in store.expired_leases(inputs.now):
        grant = rescue(lifecycle, record, inputs)
        store.put(grant.before, grant.after, grant.row)
        grants.append(grant)
    return grants


def claim(
    store: LeasingStore[R], lifecycle: Lifecycle[R, Any], inputs: Any,
    on_lease: Callable[[R], None] | None = None,
    on_rescue: Callable[[list[Grant]], None] | None = None,
) -> R | None:
    """Rescue expired leases, then lease the first due record, as if in one transaction.

    First the store's own one-statement claim, where it has one
    (:meth:`~LeasingStore.claim_in_place`), then a glance (:func:`claim_at_a_glance`);
    when neither settles the claim, the whole protocol in one store transaction.
    ``on_lease`` sees the newly leased record inside that transaction (so it always
    takes the transaction); an exception it raises rolls the whole claim back.
    ``on_rescue`` is told the rescues once they are committed (a store's logs and metrics).
    """
    declared_lease(lifecycle)
    if on_lease is None:
        settled = store.claim_in_place(inputs)
        if settled is LEFT_TO_PROTOCOL:
            settled = claim_at_a_glance(store, lifecycle, inputs)
        if settled is not LEFT_TO_PROTOCOL:
            return settled  # type: ignore[return-value]  # a record or None, never LEFT_TO_PROTOCOL
    # The one-transaction protocol is a batch of one.
    granted = claim_in_transaction(store, lifecycle, lambda _: inputs, 1, on_lease, on_rescue)
    return granted[0] if granted else None


def claim_many(
    store: LeasingStore[R], lifecycle: Lifecycle[R, Any], inputs_for: Callable[[int], Any],
    limit: int, on_lease: Callable[[R], None] | None = None,
    on_rescue: Callable[[list[Grant]], None] | None = None,
) -> list[R]:
    """In one transaction: rescue expired leases, then lease up to ``limit`` due records.

    The protocol of :func:`claim`, repeated: the first due record in claim order,
    passing over refused ones, until ``limit`` are leased or nothing is due.
    ``inputs_for(n)`` gives the inputs of the ``n``-th grant (each lease has its own
    token); ``inputs_for(0)`` also rescues. The leases commit together or not at all.

    First, as :func:`claim` does, the store's own one-statement batch claim where it has
    one (:meth:`~LeasingStore.claim_many_in_place`; never with ``on_lease``). It may ask
    for the inputs of every grant up front; when it leaves the claim unsettled, the
    protocol is given the very inputs it was given (``inputs_for`` is called once per
    ``n``, in order), so the ``n``-th lease granted either way holds ``inputs_for(n)``.
    """
    declared_lease(lifecycle)
    if on_lease is None:
        minted = _Minted(inputs_for)
        settled = store.claim_many_in_place(minted, limit)
        if settled is not LEFT_TO_PROTOCOL:
            return settled  # type: ignore[return-value]  # the records leased
        inputs_for = minted
    return claim_in_transaction(store, lifecycle, inputs_for, limit, on_lease, on_rescue)


def claim_in_transaction(
    store: LeasingStore[R], lifecycle: Lifecycle[R, Any], inputs_for: Callable[[int], Any],
    limit: int, on_lease: Callable[[R], None] | None = None,
    on_rescue: Callable[[list[Grant]], None] | None = None,
) -> list[R]:
    """:func:`claim_many` decided in Python, in one store transaction: rescues, then the
    due records in claim order, passing over refused ones."""
    granted: list[R] = []
    with store.transaction():
        first = inputs_for(0)
        rescues = rescue_expired(store, lifecycle, first)
        passed_over: frozenset[str] = frozenset()
        inputs = first
        while len(granted) < limit:
            # One query for as many candidates as are wanted: a batch costs one walk of
            # the claim order, not one per record; its grants are written together.
            still_wanted = limit - len(granted)
            candidates = store.due(first.now, still_wanted, passed_over)
            grants: list[Grant] = []
            for candidate in candidates:
                decision = decide_claim(lifecycle, candidate, inputs)
                if isinstance(decision, PassOver):
                    passed_over |= {decision.key}
                    continue
                assert decision is not None  # a candidate was given
                grants.append(decision)
                inputs = inputs_for(len(granted) + len(grants))
            written = store.put_many([(grant.before, grant.after, grant.row) for grant in grants])
            if not all(written):  # changed under the claim: the transaction rolls back
                stale = lifecycle.key_of(grants[written.index(False)].before)
                raise LostRace(f"{stale} changed while it was being leased")
            for grant in grants:
                if on_lease is not None:
                    on_lease(grant.after)
                granted.append(grant.after)
            if len(candidates) < still_wanted:
                break  # nothing more is due
    if rescues and on_rescue is not None:  # committed: told once, never rolled back
        on_rescue(rescues)
    return granted


class _Minted:
    """``inputs_for``, called once per grant number, in order, and remembered: a batch
    claim tried in place and then by the protocol hands both the same inputs."""

    __slots__ = ("_inputs_for", "_minted")

    def __init__(self, inputs_for: Callable[[int], Any]) -> None:
        self._inputs_for = inputs_for
        self._minted: list[Any] = []

    def __call__(self, n: int) -> Any:
        while len(self._minted) <= n:
            self._minted.append(self._inputs_for(len(self._minted)))
        return self._minted[n]


def claim_at_a_glance(store: LeasingStore[R], lifecycle: Lifecycle[R, Any], inputs: Any) -> object:
    """The common claim without a transaction: one read, one compare-and-set write.

    The store's :meth:`~LeasingStore.glance` says whether any lease has expired and
    which record is first due. When none has expired there is nothing to rescue, so
    the claim is the first due record's lease grant, written by a compare-and-set on
    the whole record as read: it succeeds only if nothing changed in between, which
    makes it the same as the one-transaction protocol. Nothing due: ``None``, once the
    schema is confirmed. Anything else (an expired lease, a refused or invalid
    candidate, a lost race, a store that answers no glance) is :data:`LEFT_TO_PROTOCOL`.
    """
    try:
        seen = store.glance(inputs.now)
    except InvariantViolation:
        return LEFT_TO_PROTOCOL  # the protocol reads it again, after its own schema check
    if seen is None or seen.expired:
        return LEFT_TO_PROTOCOL
    decision = decide_claim(lifecycle, seen.first_due, inputs)
    if decision is None:
        store.check_schema()  # an empty queue in an altered database is still refused
        return None
    if isinstance(decision, PassOver):
        return LEFT_TO_PROTOCOL
    try:
        store.put(decision.before, decision.after, decision.row)
    except LostRace:
        return LEFT_TO_PROTOCOL  # another writer moved first: the full protocol decides
    return decision.after


# --- completing a lease --------------------------------------------------------------

StepOn = Callable[[R, Callable[[str, R, Any], R]], R]
"""``step(record, fire)``: a worker's finishing step, firing its trigger(s) on ``record``
through ``fire(trigger, record, inputs)``."""


def complete(
    store: LeasingStore[R], lifecycle: Lifecycle[R, Any], held: R, step: StepOn[R],
    *, fire_again: Callable[[str, R, Any], R] | None = None,
    read_again: Callable[[str], R] | None = None,
) -> R:
    """Finish the work of a leased record: ``step`` fired on ``held`` (the record as claimed).

    First without a transaction, compare-and-set on the whole record as claimed: it
    succeeds only if nothing changed since the claim. When the record changed, or the
    table refuses the step on it, the step is fired again in one transaction on the
    record as stored now (``read_again``, default ``store.get``; ``fire_again``, default
    the table's row written by ``store.put``, as ``Store.fire`` does), so the table's
    guards decide: a worker whose lease was rescued and granted to another must be
    refused there (``lifecycles check`` explores exactly
    this with interleaved workers, :mod:`lifecycles.machines._interleaving`). Refusals
    propagate; nothing is written by a refused step.
    """
    def fire(trigger: str, record: R, inputs: Any) -> R:
        row = lifecycle.select_row(trigger, record, inputs)
        after = lifecycle.apply_row(row, record, inputs)  # checks every invariant
        store.put(record, after, row)
        return after

    try:
        return step(held, fire)
    except (LostRace, TransitionRefused):
        pass  # changed since the claim, or refused on it: decide on the record as stored
    key = lifecycle.key_of(held)
    with store.transaction():
        if read_again is not None:
            current = read_again(key)
        else:
            found = store.get(key)
            if found is None:
                raise LostRace(f"{key} is no longer stored")
            current = found
        return step(current, fire_again or fire)


def planned_completion(lifecycle: Lifecycle[R, Any], held: R, step: StepOn[R]) -> Grant | None:
    """What :func:`complete` first writes, decided without writing: ``step`` fired on
    ``held`` by the table alone, as the :class:`Grant` of its one write (a batch writes
    many together with ``put_many``). ``None`` when the table refuses the step on
    ``held`` (then :func:`complete` decides on the record as stored); other refusals
    propagate. A step that fires more than one row is not planned: ``None`` too."""
    fired: list[Grant] = []

    def fire(trigger: str, record: R, inputs: Any) -> R:
        row = lifecycle.select_row(trigger, record, inputs)
        after = lifecycle.apply_row(row, record, inputs)  # checks every invariant
        fired.append(Grant(record, row, after))
        return after

    try:
        step(held, fire)
    except TransitionRefused:
        return None
    return fired[0] if len(fired) == 1 else None


# --- doubts: leases a worker may hold after a write it could not confirm --------------


@attrs.frozen
class Doubt:
    """Leases a worker may hold although the write that granted them (a claim) or was to
    end them (a completion) failed unconfirmed: its connection broke while the commit was
    on its way (the claim may have leased, the completion may not have finished), or
    before it (the completion's lease is still held).

    ``tokens``: the lease tokens of that write (a batch has several); ``expires_at``: when
    the last of those leases runs out at the latest, when the doubt is spent unasked;
    ``holder``: the fields, with their values, that name the worker in a record leased to
    it (the monitor's ``lease_owner``). Without the doubt such a lease would strand its
    record until it expires; with it, the worker's next claim takes it up again
    (:func:`resume`).
    """

    tokens: frozenset[str]
    expires_at: float
    holder: tuple[tuple[str, object], ...] = ()


def doubt_is_spent(doubt: Doubt, now: float) -> bool:
    """Every lease the doubt names has run out at ``now``: nothing is left to resume."""
    return doubt.expires_at <= now


def is_live_lease(lifecycle: Lifecycle[R, Any], record: R, now: float) -> bool:
    """A leased record whose lease runs beyond ``now`` (what a holder may still act on)."""
    lease = declared_lease(lifecycle)
    expiry = getattr(record, lease.expires_field)
    return lifecycle.status_of(record) == lifecycle.leased and expiry is not None and bool(
        expiry > now
    )


def holds(lifecycle: Lifecycle[R, Any], record: R, doubt: Doubt, now: float) -> bool:
    """The doubt's worker still holds ``record``: leased under one of the doubt's tokens,
    to its holder, the lease live at ``now``."""
    token = getattr(record, declared_lease(lifecycle).token_field)
    return (
        is_live_lease(lifecycle, record, now)
        and token in doubt.tokens
        and all(getattr(record, name) == value for name, value in doubt.holder)
    )


@attrs.frozen
class Resumed(Generic[R]):
    """What a doubt resolved to: the leases taken up again (a claim's result), and the
    doubt left for the next call (``None``: settled)."""

    taken: list[R]
    left: Doubt | None


def resume(
    lifecycle: Lifecycle[R, Any], doubt: Doubt, found: Iterable[R], now: float, limit: int
) -> Resumed[R]:
    """A worker's doubt, given what the store found leased under its tokens
    (``leased_under(doubt.tokens, now)``).

    The records the worker still holds (:func:`holds`) are its leases: the first
    ``limit`` in claim order are taken up again, as the claim's result, instead of
    leasing other records and stranding these until they expire (their work is done
    again: at-least-once, as after a crash); the rest stay in doubt for the next call.
    Every other token is settled: its claim never committed, its completion did, or its
    lease ran out, so nothing of it is left to take up.
    """
    held = sorted(
        (record for record in found if holds(lifecycle, record, doubt, now)),
        key=lambda record: claim_order(lifecycle, record),
    )
    taken, rest = held[:limit], held[limit:]
    if not rest:
        return Resumed(taken, None)
    lease = declared_lease(lifecycle)
    return Resumed(taken, Doubt(
        frozenset(getattr(record, lease.token_field) for record in rest),
        max(getattr(record, lease.expires_field) for record in rest),
        doubt.holder,
    ))
