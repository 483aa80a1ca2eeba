"""Run any leased lifecycle as a worker: claim, call the handler, finish the lease.

::

    worker = Worker(REFUND, lambda: SQLiteStore(REFUND, connect("refunds.db")), pay)
    worker.run()          # until SIGTERM / SIGINT or worker.stop()

The worker owns the loop and nothing else: which trigger a handler's result fires is the
lifecycle's :class:`~lifecycles.machines.work.Handling`, declared beside its table, and
every write is the lease protocol's (:mod:`lifecycles.machines.lease`), compare-and-set.

One pass (:meth:`Worker.run_once`, :meth:`Worker.run_batch`, and each turn of
:meth:`Worker.run`):

1. **claim** one record, or up to a batch in one transaction (expired leases rescued
   first), each under a fresh lease token;
2. **call** the handler outside any transaction with the record and its
   :class:`HeldLease` (token, expiry, attempt, and whether the lease was lost). The
   token is the lease's fencing token: pass it on to whatever the handler calls;
3. **finish**: the handling's ``finish`` turns what the handler returned or raised into
   the step that ends the lease, written compare-and-set (a batch's steps together, in
   one transaction). A refusal (another worker rescued the lease, the table refuses the
   row, the record it gives breaks a rule) is the outcome of that record, never a crash.

:meth:`Worker.run` keeps ``concurrency`` handlers running (threads, or coroutines on one
event loop for ``async def`` handlers), writes each finished lease as soon as it can,
batching those that finished together, renews the leases of long handlers, waits with a
jittered backoff when nothing is due (and wakes at once where the store can tell it that
work arrived), reconnects after the store becomes unavailable, and stops gracefully.
What it reports has been committed: an outcome is passed to ``on_outcome`` only once it
is durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import queue
import random
import secrets
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Generic, TypeVar

import attrs

from lifecycles import observe
from lifecycles.invariants.core import InvariantViolation
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines.core import Lifecycle, LifecycleError, TransitionRefused
from lifecycles.machines.lease import LostRace
from lifecycles.machines.work import Handling, Leave, Raised, Result, Returned, Step
from lifecycles.stores.base import Store, StoreUnavailable

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle

__all__ = [
    "Claimed",
    "ExclusiveWork",
    "HeldLease",
    "LeaseLostError",
    "LeaseWork",
    "WorkOutcome",
    "Worker",
    "new_lease_token",
]

Handler = Callable[[Any, "HeldLease"], Any] | Callable[[Any, "HeldLease"], Awaitable[Any]]
"""``handler(record, lease)``: the work itself; ``async def`` handlers run on an event loop."""

#: The refusals a finishing step may meet, each the outcome of its own record.
REFUSALS: tuple[type[BaseException], ...] = (LostRace, TransitionRefused, InvariantViolation)


def new_lease_token() -> str:
    """A fresh, unguessable lease token: the fencing token of one claim."""
    return secrets.token_urlsafe(32)


class LeaseLostError(LifecycleError):
    """The handler's lease was lost (a renewal was refused: another worker rescued it, or it
    expired): stop early, the result will not be recorded."""

    code = "lifecycles.lease_lost"


class HeldLease:
    """What a handler is told about its lease.

    ``token`` is the fencing token: pass it to whatever the handler calls (an idempotency
    or fencing key) so that a call made after the lease was lost can be told apart.
    ``expires_at`` moves later with each renewal. ``lost`` turns true when a renewal is
    refused; a long handler should check it (or call :meth:`raise_if_lost`) before each
    side effect it cannot take back. :meth:`renew` renews the lease now and says whether
    it is still held: call it right before such a side effect (see docs/extending.md,
    "A stalled worker").
    """

    __slots__ = ("_lost", "_renew", "attempt", "expires_at", "key", "token", "worker_id")

    def __init__(self, key: str, token: str, worker_id: str, expires_at: float | None,
                 attempt: int | None) -> None:
        self.key = key
        self.token = token
        self.worker_id = worker_id
        self.expires_at = expires_at
        self.attempt = attempt
        self._lost = threading.Event()
        self._renew: Callable[[], bool] | None = None

    @property
    def lost(self) -> bool:
        """Whether the worker learned that this lease is no longer held."""
        return self._lost.is_set()

    def raise_if_lost(self) -> None:
        """Raise :class:`LeaseLostError` when the lease is known to be lost."""
        if self._lost.is_set():
            raise LeaseLostError(f"the lease on {self.key} was lost")

    def renew(self) -> bool:
        """Fire the lifecycle's renewal row now (a compare-and-set: this worker, this token,
        a live lease) and wait for it: ``True`` when the lease is held for another lease
        length from now, ``False`` (and :attr:`lost`) when it was refused. Requires a
        renewal row (``Handling(renewal=...)``)."""
        if self._lost.is_set():
            return False
        if self._renew is None:
            raise LeaseLostError(f"the lease on {self.key} cannot be renewed: the lifecycle "
                                 "declares no renewal row", code="lifecycles.not_renewable")
        return self._renew()

    def mark_lost(self) -> None:
        self._lost.set()

    def __repr__(self) -> str:  # never the token itself: it is a credential of the lease
        return (f"<HeldLease {self.key} by {self.worker_id} until {self.expires_at}"
                f"{' lost' if self.lost else ''}>")


@attrs.define(eq=False)
class Claimed(Generic[R, I]):
    """A record this worker leased: as it last wrote it (the claim, then each renewal),
    the inputs of its lease, and its :class:`HeldLease`."""

    record: R
    inputs: I
    lease: HeldLease
    lease_seconds: float

    def renew_at(self, fraction: float) -> float | None:
        """When the lease is due for renewal: ``fraction`` of a lease length after it was
        last taken or renewed (``None``: no expiry to renew)."""
        expires = self.lease.expires_at
        return None if expires is None else expires - (1 - fraction) * self.lease_seconds


@attrs.frozen(eq=False, repr=False)
class WorkOutcome(Generic[R]):
    """How one claimed record ended: what the handler gave, the step decided from it, and
    the record as stored after it (``None`` when refused or left), or the ``refusal``."""

    key: str
    claimed: R
    result: Result
    step: Step[Any] | Leave | None
    record: R | None
    refusal: BaseException | None
    handler_seconds: float
    status: str | None = None
    """The record's status after the step; ``None`` when nothing was written."""

    @property
    def trigger(self) -> str | None:
        """The trigger the finishing step fired (its fallback's, when that fired)."""
        return self.step.trigger if isinstance(self.step, Step) else None

    def __repr__(self) -> str:  # records and inputs hold the lease token: never shown
        ended = (f"refused {getattr(self.refusal, 'code', type(self.refusal).__name__)}"
                 if self.refusal is not None else f"-> {self.status}")
        return f"<WorkOutcome {self.key} {self.trigger or 'left'} {ended}>"


Hook = Callable[..., Any]


class LeaseDoubts:
    """The leases this process's workers may hold after a write that failed unconfirmed
    (:class:`~lifecycles.machines.lease.Doubt`), by the store's location and worker id.

    A worker whose connection broke opens a new connection and a new store (and a
    facade, a new monitor); the doubt must outlive both, so it lives here, once per
    process. Thread-safe. A doubt is dropped when the worker's next claim resolves it,
    or unasked once its last lease has expired; while none is pending a claim only finds
    this empty (no query).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._doubts: dict[tuple[str, str], lease_protocol.Doubt] = {}

    def __bool__(self) -> bool:
        return bool(self._doubts)

    def add(self, where: str, worker_id: str, doubt: lease_protocol.Doubt) -> None:
        """Keep ``doubt`` (with any the worker already has: their tokens together)."""
        with self._lock:
            held = self._doubts.get((where, worker_id))
            if held is not None:
                doubt = lease_protocol.Doubt(
                    held.tokens | doubt.tokens, max(held.expires_at, doubt.expires_at),
                    doubt.holder,
                )
            self._doubts[(where, worker_id)] = doubt

    def take(self, where: str, worker_id: str, now: float) -> lease_protocol.Doubt | None:
        """The worker's doubt, removed (the caller resolves it or adds it back); ``None``
        when there is none, or it is spent at ``now``."""
        with self._lock:
            doubt = self._doubts.pop((where, worker_id), None)
        if doubt is None or lease_protocol.doubt_is_spent(doubt, now):
            return None
        return doubt


#: This process's lease doubts (see :class:`LeaseDoubts`).
LEASE_DOUBTS = LeaseDoubts()


class LeaseWork(Generic[R, I]):
    """The worker's three steps over one store, without a loop of its own: what
    :class:`Worker` runs, and what the shipped facades (``run_once``, ``run_many``) run.

    ``fire_again`` and ``read_again`` are :func:`~lifecycles.machines.lease.complete`'s
    hooks (a facade maps their refusals to its own codes); ``refusals`` are the exceptions
    that end one record's step as its outcome instead of failing the call.
    """

    def __init__(
        self,
        lifecycle: Lifecycle[R, I],
        handling: Handling[R, I],
        *,
        fire_again: Hook | None = None,
        read_again: Hook | None = None,
        refusals: tuple[type[BaseException], ...] = REFUSALS,
    ) -> None:
        self.lifecycle = lifecycle
        self.handling = handling
        self.lease = lease_protocol.declared_lease(lifecycle)
        self.fire_again = fire_again
        self.read_again = read_again
        self.refusals = refusals
        self.observer = observe.observer(lifecycle)

    # -- claim ----------------------------------------------------------------------

    def inputs(self, now: float, worker_id: str, token: str, lease_seconds: float) -> I:
        return self.handling.inputs(now, worker_id, token, lease_seconds)

    def held(self, record: R, inputs: I, worker_id: str, lease_seconds: float) -> Claimed[R, I]:
        """``record`` as leased under ``inputs``: its :class:`Claimed`."""
        lease = HeldLease(
            self.lifecycle.key_of(record), getattr(record, self.lease.token_field), worker_id,
            getattr(record, self.lease.expires_field),
            self.handling.attempt(record) if self.handling.attempt else None,
        )
        return Claimed(record, inputs, lease, lease_seconds)

    def claim(self, store: Store[R], worker_id: str, now: float, lease_seconds: float,
              limit: int = 1) -> list[Claimed[R, I]]:
        """Lease up to ``limit`` due records (one: :meth:`Store.claim`, its fast paths; more:
        :meth:`Store.claim_many`, one transaction), each under a fresh token.

        Leases that an earlier write of this worker may have left to it (its commit's
        answer was lost, :data:`LEASE_DOUBTS`) are taken up first, as this claim's result;
        while none is pending in the process, that costs nothing. A claim whose own
        commit is uncertain is remembered the same way, for the next claim."""
        observer = self.observer
        started = time.perf_counter() if observer.collecting() else None
        claimed = self._claim(store, worker_id, now, lease_seconds, limit)
        if started is not None or (claimed and observer.logger.isEnabledFor(logging.DEBUG)):
            observer.claimed(self.lifecycle, worker_id, claimed,
                             None if started is None else time.perf_counter() - started)
        return claimed

    def _claim(self, store: Store[R], worker_id: str, now: float, lease_seconds: float,
               limit: int = 1) -> list[Claimed[R, I]]:
        """:meth:`claim` without reporting it (its signature: benchmarks/bench_observe.py
        binds ``claim`` to it, to measure the cycle without the observe hooks)."""
        resumed = self._resumed(store, worker_id, now, limit) if LEASE_DOUBTS else []
        if len(resumed) == limit:
            return [self.held(record, self.inputs(now, worker_id, getattr(
                record, self.lease.token_field), lease_seconds), worker_id, lease_seconds)
                for record in resumed]
        minted: list[I] = []
        tokens: list[str] = []

        def inputs_for(_: int) -> I:
            tokens.append(new_lease_token())
            minted.append(self.inputs(now, worker_id, tokens[-1], lease_seconds))
            return minted[-1]

        try:
            if limit - len(resumed) == 1:
                record = store.claim(inputs_for(0))
                records = [] if record is None else [record]
            else:
                records = store.claim_many(inputs_for, limit - len(resumed))
        except StoreUnavailable as error:
            if error.outcome_unknown:  # it may have leased records under these tokens
                self.keep_doubt(store, worker_id, tokens, now + lease_seconds)
            self.keep_doubts_of(store, worker_id, resumed)  # taken up again, not finished
            raise
        # The n-th lease granted was granted with the n-th inputs minted (a candidate
        # passed over mints none; one more is minted after the last grant).
        return [
            *(self.held(record, self.inputs(now, worker_id, getattr(
                record, self.lease.token_field), lease_seconds), worker_id, lease_seconds)
              for record in resumed),
            *(self.held(record, inputs, worker_id, lease_seconds)
              for record, inputs in zip(records, minted, strict=False)),
        ]

    # -- doubts: leases a write whose answer was lost may have left to a worker --------

    def _resumed(self, store: Store[R], worker_id: str, now: float, limit: int) -> list[R]:
        """The leases this worker still holds from a write that failed unconfirmed, up to
        ``limit`` (:func:`~lifecycles.machines.lease.resume`)."""
        where = store.location
        doubt = LEASE_DOUBTS.take(where, worker_id, now)
        if doubt is None:
            return []
        try:
            store.check_schema()
            found = store.leased_under(doubt.tokens, now)
        except BaseException:
            LEASE_DOUBTS.add(where, worker_id, doubt)  # still unresolved: asked next time
            raise
        resumed = lease_protocol.resume(self.lifecycle, doubt, found, now, limit)
        if resumed.left is not None:
            LEASE_DOUBTS.add(where, worker_id, resumed.left)
        return resumed.taken

    def keep_doubt(self, store: Store[R], worker_id: str, tokens: Collection[str],
                   expires_at: float) -> None:
        """Leases under ``tokens`` that a failed write may have left to ``worker_id``, until
        ``expires_at`` at the latest: its next claim on this store looks for them."""
        if tokens:
            holder = ((self.handling.holder, worker_id),) if self.handling.holder else ()
            LEASE_DOUBTS.add(store.location, worker_id, lease_protocol.Doubt(
                frozenset(tokens), expires_at, holder))

    def keep_doubts_of(self, store: Store[R], worker_id: str, claimed: Sequence[R]) -> None:
        """The leases of ``claimed`` (records ``worker_id`` leased), whose finishing write
        failed unconfirmed or not at all: still held either way, unless it committed
        unseen (then the doubt resolves to nothing)."""
        held = [(getattr(record, self.lease.token_field),
                 getattr(record, self.lease.expires_field)) for record in claimed]
        held = [(token, expiry) for token, expiry in held
                if token is not None and expiry is not None]
        if held:
            self.keep_doubt(store, worker_id, [token for token, _ in held],
                            max(expiry for _, expiry in held))

    # -- one pass, the handler called in this thread (the facades') -----------------

    def run_once(self, store: Store[R], handler: Callable[[R, HeldLease], Any],
                 worker_id: str, now: float, lease_seconds: float,
                 finish_at: Callable[[], float] | None = None) -> WorkOutcome[R] | None:
        """Claim one due record, call ``handler`` on it here, finish its lease (at
        ``finish_at()``, default ``now``); ``None`` when nothing is due."""
        claimed = self.claim(store, worker_id, now, lease_seconds)
        if not claimed:
            return None
        (item,) = claimed
        self.renewing_here(store, item, finish_at or (lambda: now))
        started = time.perf_counter()
        result = self.call(handler, item)
        return self.finish(store, item, result, finish_at() if finish_at else now,
                           time.perf_counter() - started)

    def run_batch(self, store: Store[R], handler: Callable[[R, HeldLease], Any],
                  worker_id: str, now: float, lease_seconds: float, limit: int,
                  finish_at: Callable[[], float] | None = None) -> list[WorkOutcome[R]]:
        """Claim up to ``limit`` due records in one transaction, call ``handler`` on each
        here, finish them in one transaction; one outcome per record, in claim order."""
        claimed = self.claim(store, worker_id, now, lease_seconds, limit)
        finished = []
        for item in claimed:
            self.renewing_here(store, item, finish_at or (lambda: now))
            started = time.perf_counter()
            finished.append((item, self.call(handler, item), time.perf_counter() - started))
        if not finished:
            return []
        return self.finish_many(store, finished, finish_at() if finish_at else now)

    def renewing_here(self, store: Store[R], claimed: Claimed[R, I],
                      clock: Callable[[], float]) -> None:
        """Let the handler's :meth:`HeldLease.renew` renew on ``store`` from this thread."""
        if self.handling.renewal is not None:
            claimed.lease._renew = lambda: self.renew_or_lose(store, claimed, clock())

    # -- call -----------------------------------------------------------------------

    @staticmethod
    def call(handler: Callable[[R, HeldLease], Any], claimed: Claimed[R, I]) -> Result:
        """Call a synchronous handler; what it returned or raised (an ``Exception``; any
        other ``BaseException`` propagates: it stops the worker)."""
        try:
            return Returned(handler(claimed.record, claimed.lease))
        except Exception as error:
            return Raised(error)

    # -- finish ---------------------------------------------------------------------

    def decide(self, claimed: Claimed[R, I], result: Result, now: float) -> Step[I] | Leave:
        """The handling's step for ``result``, with the lease's inputs at ``now``."""
        lease = claimed.lease
        inputs = self.inputs(now, lease.worker_id, lease.token, claimed.lease_seconds)
        return self.handling.finish(claimed.record, inputs, result)

    def finish(self, store: Store[R], claimed: Claimed[R, I], result: Result, now: float,
               handler_seconds: float = 0.0) -> WorkOutcome[R]:
        """Decide and write one record's step (:func:`~lifecycles.machines.lease.complete`:
        compare-and-set on the record as claimed, else decided again on the record as
        stored); a refusal is the outcome."""
        outcome = self._finish(store, claimed, result, now, handler_seconds)
        self._observe_finished(store, (claimed,), (outcome,))
        return outcome

    def _finish(self, store: Store[R], claimed: Claimed[R, I], result: Result, now: float,
                handler_seconds: float = 0.0) -> WorkOutcome[R]:
        """:meth:`finish` without reporting it (its signature, as for :meth:`_claim`)."""
        step: Step[I] | Leave | None = None
        try:
            step = self.decide(claimed, result, now)
            if isinstance(step, Leave):
                return self._outcome(claimed, result, step, None, step.error, handler_seconds)
            written = lease_protocol.complete(
                store.leasing(), self.lifecycle, claimed.record, step.fire,
                fire_again=self.fire_again, read_again=self.read_again)
        except self.refusals as refusal:
            return self._outcome(claimed, result, step, None, refusal, handler_seconds)
        except StoreUnavailable:
            # The lease may still be held.
            self.keep_doubts_of(store, claimed.lease.worker_id, [claimed.record])
            raise
        return self._outcome(claimed, result, step, written, None, handler_seconds)

    def _observe_finished(self, store: Store[R], claimed: Sequence[Claimed[R, I]],
                          outcomes: Sequence[WorkOutcome[R]]) -> None:
        """Report durable outcomes to the lifecycle's logger and instruments, building
        nothing when neither would record them."""
        observer = self.observer
        logger = observer.logger
        if not (observer.collecting() or logger.isEnabledFor(logging.DEBUG)):
            for outcome in outcomes:  # a plain loop: the common case, nothing refused
                if outcome.refusal is not None and logger.isEnabledFor(
                        logging.INFO if isinstance(outcome.step, Leave) else logging.WARNING):
                    break
            else:
                return
        observer.finished(self.lifecycle, claimed, outcomes,
                          lambda at: self.lease_was_taken(store, claimed[at]))

    def lease_was_taken(self, store: Store[R], claimed: Claimed[R, I]) -> bool:
        """Whether the record of ``claimed`` is no longer leased under its token (another
        worker rescued it, or claimed it since): a refusal that is a lost race. Asked only
        on a refusal that is being logged or counted; a store that cannot answer now
        leaves it a plain refusal."""
        try:
            current = store.get(claimed.lease.key)
        except Exception:
            return False
        return current is None or getattr(current, self.lease.token_field) != claimed.lease.token

    def finish_many(
        self, store: Store[R], finished: Sequence[tuple[Claimed[R, I], Result, float]],
        now: float,
    ) -> list[WorkOutcome[R]]:
        """Decide every record's step first, then write them together (``put_many``): in one
        transaction, or, where the store writes a batch in one statement of its own
        (:attr:`Store.put_many_alone`), without one. A record whose write finds it changed,
        or whose step the table refuses on the record as claimed, is then decided again
        alone on the record as stored, in a transaction. One outcome per record, in order;
        durable on return."""
        try:
            outcomes = self._finish_many(store, finished, now)
        except StoreUnavailable:
            for claimed, _, _ in finished:
                self.keep_doubts_of(store, claimed.lease.worker_id, [claimed.record])
            raise
        self._observe_finished(store, [claimed for claimed, _, _ in finished], outcomes)
        return outcomes

    def _finish_many(
        self, store: Store[R], finished: Sequence[tuple[Claimed[R, I], Result, float]],
        now: float,
    ) -> list[WorkOutcome[R]]:
        outcomes: list[WorkOutcome[R] | None] = [None] * len(finished)
        planned: list[tuple[int, Step[I], lease_protocol.Grant]] = []
        alone: list[tuple[int, Step[I]]] = []
        for at, (claimed, result, seconds) in enumerate(finished):
            step: Step[I] | Leave | None = None
            try:
                step = self.decide(claimed, result, now)
                if isinstance(step, Leave):
                    outcomes[at] = self._outcome(claimed, result, step, None, step.error,
                                                 seconds)
                    continue
                grant = lease_protocol.planned_completion(
                    self.lifecycle, claimed.record, step.fire)
            except self.refusals as refusal:
                outcomes[at] = self._outcome(claimed, result, step, None, refusal, seconds)
                continue
            if grant is None:
                alone.append((at, step))
            else:
                planned.append((at, step, grant))

        def write_planned() -> None:
            written = store.put_many([(g.before, g.after, g.row) for _, _, g in planned])
            for (at, step, grant), done in zip(planned, written, strict=True):
                if done:
                    claimed, result, seconds = finished[at]
                    outcomes[at] = self._outcome(claimed, result, step, grant.after, None,
                                                 seconds)
                else:
                    alone.append((at, step))

        def decide_alone() -> None:
            for at, step in sorted(alone, key=lambda item: item[0]):
                claimed, result, seconds = finished[at]
                try:
                    after = self._complete(store, claimed, step)
                except self.refusals as refusal:
                    outcomes[at] = self._outcome(claimed, result, step, None, refusal, seconds)
                else:
                    outcomes[at] = self._outcome(claimed, result, step, after, None, seconds)

        if store.put_many_alone and planned:
            write_planned()  # one statement, committed: no BEGIN, probe or COMMIT around it
            if alone:
                with store.transaction():
                    decide_alone()
        else:
            with store.transaction():
                if planned:
                    write_planned()
                decide_alone()
        done_all = [outcome for outcome in outcomes if outcome is not None]
        assert len(done_all) == len(finished)  # each record: its outcome or its refusal
        return done_all

    def _complete(self, store: Store[R], claimed: Claimed[R, I], step: Step[I]) -> R:
        return lease_protocol.complete(store.leasing(), self.lifecycle, claimed.record, step.fire,
                                       fire_again=self.fire_again, read_again=self.read_again)

    def renew(self, store: Store[R], claimed: Claimed[R, I], now: float) -> R:
        """Fire the handling's renewal row on the record as last written by this worker:
        a later expiry under the same token. A refusal (the lease was lost) propagates."""
        trigger = self.handling.renewal
        if trigger is None:
            raise ValueError(f"{self.lifecycle.name} declares no renewal row")
        lease = claimed.lease
        inputs = self.inputs(now, lease.worker_id, lease.token, claimed.lease_seconds)
        renewed = lease_protocol.complete(
            store.leasing(), self.lifecycle, claimed.record,
            lambda record, fire: fire(trigger, record, inputs))
        claimed.record = renewed  # the finishing step compares with what was written last
        lease.expires_at = getattr(renewed, self.lease.expires_field)
        return renewed

    def renew_or_lose(self, store: Store[R], claimed: Claimed[R, I], now: float) -> bool:
        """:meth:`renew`, as a handler asks it: ``True`` renewed; ``False`` refused (the
        lease is marked lost) or the store could not be asked (not known to be held)."""
        try:
            self.renew(store, claimed, now)
        except self.refusals as refusal:
            claimed.lease.mark_lost()
            if self.observer.logger.isEnabledFor(logging.WARNING):
                self.observer.renewed(claimed, refusal)
            return False
        except StoreUnavailable as error:
            if self.observer.logger.isEnabledFor(logging.WARNING):
                self.observer.store_error(error, claimed.lease.worker_id, transient=True)
            return False
        if self.observer.logger.isEnabledFor(logging.DEBUG):
            self.observer.renewed(claimed, None)
        return True

    def _outcome(self, claimed: Claimed[R, I], result: Result, step: Step[I] | Leave | None,
                 record: R | None, refusal: BaseException | None,
                 seconds: float) -> WorkOutcome[R]:
        status = None if record is None else str(self.lifecycle.status_of(record))
        return WorkOutcome(claimed.lease.key, claimed.record, result, step, record, refusal,
                           seconds, status)


class ExclusiveWork(Generic[R, I]):
    """The worker's steps for a lifecycle without a lease, whose records are taken under
    the store's exclusive lock (the outbox's ``flock``, held by the caller for the whole
    pass, handlers included): no other worker can take them meanwhile, so no lease is
    needed to tell their steps apart.

    One pass (:meth:`run`): ``intake`` fired on every record in one transaction (each
    attempt durable before the first handler call), the handler called on each, and
    ``finish``'s step for each written in one transaction after the last call, also when
    a ``BaseException`` that is no ``Exception`` stops the pass (the outcomes so far are
    written, then it propagates; the rest keep their intake). At-least-once: a crash
    before the second transaction repeats the pass's handler calls.
    """

    def __init__(self, lifecycle: Lifecycle[R, I], intake: str,
                 finish: Callable[[R, I, Result], Step[I]]) -> None:
        self.lifecycle = lifecycle
        self.intake = intake
        self.finish = finish

    def run(self, store: Store[R], records: Sequence[R], handler: Callable[[R], Any],
            inputs: I) -> list[WorkOutcome[R]]:
        """``records`` through the pass, with ``inputs`` for the intake and the outcomes;
        one outcome per record the handler was called on, in order."""
        with store.transaction():
            taken = [store.fire(record, self.intake, inputs) for record in records]
        observer = observe.observer(self.lifecycle)
        if observer.wants(logging.DEBUG):
            for before, after in zip(records, taken, strict=True):
                observer.stepped(self.lifecycle, before, after, self.intake, None, None)
        outcomes: list[WorkOutcome[R]] = []

        def fire(trigger: str, record: R, given: Any) -> R:
            return store.fire(record, trigger, given)

        finished: list[tuple[R, Result, float]] = []
        try:
            for record in taken:
                started = time.perf_counter()
                try:
                    result: Result = Returned(handler(record))
                except Exception as error:
                    result = Raised(error)
                finished.append((record, result, time.perf_counter() - started))
        finally:
            with store.transaction():
                for record, result, seconds in finished:
                    step = self.finish(record, inputs, result)
                    after = step.fire(record, fire)
                    outcomes.append(WorkOutcome(
                        self.lifecycle.key_of(record), record, result, step, after, None,
                        seconds, str(self.lifecycle.status_of(after))))
            if observer.wants(logging.DEBUG):  # committed: the transaction above ended
                for outcome in outcomes:
                    raised = outcome.result.error if isinstance(outcome.result, Raised) else None
                    assert outcome.record is not None
                    observer.stepped(self.lifecycle, outcome.claimed, outcome.record,
                                     str(outcome.trigger), outcome.handler_seconds,
                                     None if raised is None else type(raised).__qualname__)
        return outcomes


# --- the loop --------------------------------------------------------------------------


def default_worker_id() -> str:
    """``host:pid``, unique among live workers on one machine."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}"


@attrs.frozen
class Idle:
    """How long to wait when nothing is due: ``first``, doubling with each claim in a row
    that finds nothing, up to ``poll_interval``, each wait shortened by up to ``jitter`` of
    itself (workers that found the queue empty together do not all ask again together).
    A worker polls at least once every ``poll_interval``; where the store notifies it
    (PostgreSQL), it wakes at once instead."""

    poll_interval: float = 1.0
    first: float = 0.05
    jitter: float = 0.2

    def delay(self, empty_claims: int, draw: Callable[[], float] = random.random) -> float:
        base = min(self.poll_interval, self.first * 2 ** min(empty_claims, 30))
        return float(base * (1 - self.jitter * draw()))


class _Requests:
    """Calls that must run on the thread owning the store, asked from handler threads:
    :meth:`ask` waits for the answer; the owner runs what is asked in :meth:`serve`."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._asked: queue.SimpleQueue[tuple[Callable[[], bool],
                                             concurrent.futures.Future[bool]]] = queue.SimpleQueue()
        self._wake = wake

    def ask(self, call: Callable[[], bool]) -> bool:
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._asked.put((call, answer))
        self._wake()
        return answer.result()

    def serve(self) -> None:
        while True:
            try:
                call, answer = self._asked.get_nowait()
            except queue.Empty:
                return
            try:
                answer.set_result(call())
            except BaseException as error:  # the asker sees it; the owner goes on
                answer.set_exception(error)


@attrs.define(eq=False)
class _Running(Generic[R, I]):
    """A handler call in flight: its claim, when it started, and its future."""

    claimed: Claimed[R, I]
    started: float
    future: concurrent.futures.Future[Any]


class Worker(Generic[R, I]):
    """Runs a leased lifecycle's records through ``handler`` (see the module docstring).

    ``stores`` opens a store: a callable (called again after the store became unavailable,
    and once for each process), or one store (then the worker cannot reconnect).
    ``handling`` defaults to the one declared on the lifecycle (``lifecycle.handling``).
    ``concurrency`` handlers run at once; ``batch_size`` records are claimed in one
    transaction when that many handlers are free (1: one at a time). With one
    synchronous handler at a time (``concurrency=1``) and ``batch_size`` above 1, each
    turn claims a batch, calls the handler on its records one after another in this
    thread and writes them together (:meth:`run_batch`): the lease must then cover the
    whole batch, as no renewal runs inside it, and a stop waits for the batch to end.
    ``lease_seconds`` is each lease's length: choose it well above the slowest handler,
    or declare a renewal row. ``clock`` gives ``now`` (UNIX seconds); ``on_outcome`` sees
    each durable outcome, ``on_error`` each store error the loop met (it then waits and
    tries again; an unavailable store is opened anew).
    """

    def __init__(
        self,
        lifecycle: Lifecycle[R, I],
        stores: Callable[[], Store[R]] | Store[R],
        handler: Handler,
        *,
        handling: Handling[R, I] | None = None,
        worker_id: str | None = None,
        lease_seconds: float = 60.0,
        concurrency: int = 1,
        batch_size: int = 1,
        idle: Idle = Idle(),
        clock: Callable[[], float] = time.time,
        on_outcome: Callable[[WorkOutcome[R]], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        stop_timeout: float | None = None,
    ) -> None:
        declared = handling or getattr(lifecycle, "handling", None)
        if declared is None:
            raise ValueError(f"{lifecycle.name} declares no Handling: pass handling=")
        if not callable(handler):
            raise TypeError("handler must be callable: handler(record, lease)")
        if not (isinstance(concurrency, int) and 1 <= concurrency <= 1000):
            raise ValueError(f"concurrency must be an integer in 1..1000, not {concurrency!r}")
        if not (isinstance(batch_size, int) and 1 <= batch_size <= 1000):
            raise ValueError(f"batch_size must be an integer in 1..1000, not {batch_size!r}")
        if not (isinstance(lease_seconds, (int, float)) and 0 < lease_seconds <= 86_400):
            raise ValueError(f"lease_seconds must be in (0, 86400], not {lease_seconds!r}")
        self.lifecycle = lifecycle
        self.work: LeaseWork[R, I] = LeaseWork(lifecycle, declared)
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None))  # noqa: B004 - an object with async __call__
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = float(lease_seconds)
        self.concurrency = concurrency
        self.batch_size = batch_size
        # One synchronous handler at a time: each turn of the loop is a run_batch (one
        # record, or a batch), its handlers called one after another in this thread (no
        # pool: a thread hand-off per record costs more than a no-op handler's step).
        # Not with a renewal row: a handler run in this thread would hold up the renewals.
        self._batches_in_this_thread = (concurrency == 1 and not self.is_async
                                        and declared.renewal is None)
        self.idle = idle
        self.clock = clock
        self.on_outcome = on_outcome
        self.on_error = on_error
        self.stop_timeout = lease_seconds if stop_timeout is None else stop_timeout
        self._open = stores if callable(stores) and not isinstance(stores, Store) else None
        self._store: Store[R] | None = stores if isinstance(stores, Store) else None
        self._stopping = threading.Event()
        self._halt = threading.Event()
        self._wake = threading.Event()
        # Renewals a handler asks for (lease.renew()), served by the thread owning the store.
        self._requests = _Requests(self._wake.set)

    # -- one pass, for scripts and tests ---------------------------------------------

    @property
    def store(self) -> Store[R]:
        """The store in use, opened on first use."""
        if self._store is None:
            assert self._open is not None
            self._store = self._open()
        return self._store

    def run_once(self, *, now: float | None = None) -> WorkOutcome[R] | None:
        """Claim one due record, run the handler on it, finish its lease; ``None`` when
        nothing is due. ``now`` (default: the clock) is the time of the claim and of the
        finishing step. Store errors propagate; refusals are the outcome."""
        moment = self.clock() if now is None else now
        claimed = self.work.claim(self.store, self.worker_id, moment, self.lease_seconds)
        if not claimed:
            return None
        (outcome,) = self._handle_now(claimed, now)
        return outcome

    def run_batch(self, limit: int | None = None, *, now: float | None = None,
                  ) -> list[WorkOutcome[R]]:
        """Claim up to ``limit`` (default ``batch_size``) due records in one transaction, run
        the handler on each (``concurrency`` at a time), finish them in one transaction."""
        count = self.batch_size if limit is None else limit
        if not (isinstance(count, int) and 1 <= count <= 1000):
            raise ValueError(f"limit must be an integer in 1..1000, not {count!r}")
        moment = self.clock() if now is None else now
        claimed = self.work.claim(self.store, self.worker_id, moment, self.lease_seconds,
                                  limit=count)
        return self._handle_now(claimed, now) if claimed else []

    def _handle_now(self, claimed: list[Claimed[R, I]], now: float | None,
                    ) -> list[WorkOutcome[R]]:
        def clock() -> float:
            return self.clock() if now is None else now

        finished = []
        renewing = self.work.handling.renewal is not None
        if self.is_async or (self.concurrency > 1 and len(claimed) > 1):
            with self._executor() as submit:
                running = []
                for item in claimed:
                    if renewing:  # asked from the handler's thread, served from this one
                        item.lease._renew = partial(self._requests.ask, partial(
                            self._renew_held, item, clock))
                    future = submit(item)
                    future.add_done_callback(lambda _: self._wake.set())
                    running.append((item, self.clock(), future))
                while not all(future.done() for _, _, future in running):
                    self._requests.serve()
                    self._wake.wait(1.0)
                    self._wake.clear()
                for item, started, future in running:
                    finished.append((item, _result_of(future), self.clock() - started))
        else:  # one at a time, in this thread: no pool to start for it
            for item in claimed:
                if renewing:
                    item.lease._renew = partial(self._renew_held, item, clock)
                started = self.clock()
                finished.append((item, self.work.call(self.handler, item), self.clock() - started))
        moment = self.clock() if now is None else now
        if len(finished) == 1:
            item, result, seconds = finished[0]
            outcomes = [self.work.finish(self.store, item, result, moment, seconds)]
        else:
            outcomes = self.work.finish_many(self.store, finished, moment)
        for outcome in outcomes:
            self._report(outcome)
        return outcomes

    def _renew_held(self, claimed: Claimed[R, I], clock: Callable[[], float]) -> bool:
        """A renewal a handler asked for (:meth:`HeldLease.renew`), on the store's thread."""
        return self.work.renew_or_lose(self.store, claimed, clock())

    # -- the loop ----------------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; :meth:`run` returns once the handlers in flight have finished and
        their leases are written (at most ``stop_timeout`` seconds; the leases of those
        still running are left to expire). ``now=True``: return without waiting for them."""
        self._stopping.set()
        if now:
            self._halt.set()
        self._wake.set()

    def wake(self) -> None:
        """Claim again at once (work arrived); a store's listener calls it."""
        self._wake.set()

    def run(self, *, install_signal_handlers: bool = True, until_idle: bool = False) -> None:
        """Claim and run records until :meth:`stop` (or SIGTERM / SIGINT: the first stops
        gracefully, a second at once). ``until_idle``: return once a claim finds nothing
        due and no handler is running (a drain)."""
        restore = self._install_signals() if install_signal_handlers else None
        try:
            with self._executor() as submit, self._listening():
                self._loop(submit, until_idle)
        finally:
            if restore is not None:
                restore()

    def _loop(self, submit: Callable[[Claimed[R, I]], concurrent.futures.Future[Any]],
              until_idle: bool) -> None:
        running: dict[str, _Running[R, I]] = {}
        empty = 0  # claims in a row that found nothing due
        failures = 0  # store errors in a row
        deadline: float | None = None  # when a graceful stop gives up waiting
        while True:
            if self._halt.is_set():
                return
            if self._stopping.is_set() and deadline is None:
                deadline = time.monotonic() + self.stop_timeout
            try:
                self._write_finished(running)
                self._renew_due(running)
                wait = None
                if not self._stopping.is_set() and len(running) < self.concurrency:
                    if self._batches_in_this_thread:
                        if self.run_batch():  # written and reported when it returns
                            empty = 0
                            continue
                    else:
                        free = self.concurrency - len(running)
                        claimed = self.work.claim(
                            self.store, self.worker_id, self.clock(), self.lease_seconds,
                            limit=min(free, self.batch_size))
                        for item in claimed:
                            self._start(item, submit, running)
                        if claimed:
                            empty = 0
                            continue
                    if until_idle and not running:
                        return
                    wait = self.idle.delay(empty)
                    empty += 1
                failures = 0
            except StoreUnavailable as error:
                failures += 1
                self._failed(error)
                self._drop_store()
                wait = self.idle.delay(failures)
            except (LifecycleError, InvariantViolation) as error:
                # A damaged record or database, an altered schema: nothing this worker
                # can mend. It keeps the store and asks again after a pause.
                failures += 1
                self._failed(error)
                wait = self.idle.delay(failures)
            if self._stopping.is_set():
                if not running or (deadline is not None and time.monotonic() >= deadline):
                    return
                wait = 0.05 if wait is None else min(wait, 0.05)
            wait = self._until_next_renewal(running, wait)
            self._wake.wait(wait)
            self._wake.clear()

    def _start(self, claimed: Claimed[R, I],
               submit: Callable[[Claimed[R, I]], concurrent.futures.Future[Any]],
               running: dict[str, _Running[R, I]]) -> None:
        started = self.clock()
        if self.work.handling.renewal is not None:
            claimed.lease._renew = partial(self._requests.ask, partial(
                self._renew_held, claimed, self.clock))
        future = submit(claimed)
        future.add_done_callback(lambda _: self._wake.set())
        running[claimed.lease.key] = _Running(claimed, started, future)

    def _write_finished(self, running: dict[str, _Running[R, I]]) -> None:
        """Write every lease whose handler has finished, together; report each once durable."""
        done = [item for item in running.values() if item.future.done()]
        if not done:
            return
        finished = [(item.claimed, _result_of(item.future), self.clock() - item.started)
                    for item in done]
        now = self.clock()
        if len(finished) == 1:
            claimed, result, seconds = finished[0]
            outcomes = [self.work.finish(self.store, claimed, result, now, seconds)]
        else:
            outcomes = self.work.finish_many(self.store, finished, now)
        for item, outcome in zip(done, outcomes, strict=True):
            del running[item.claimed.lease.key]
            self._report(outcome)

    def _renew_due(self, running: dict[str, _Running[R, I]]) -> None:
        """Serve the renewals handlers asked for, then renew every lease that is due."""
        self._requests.serve()
        fraction = self.work.handling.renew_at
        if self.work.handling.renewal is None:
            return
        now = self.clock()
        for item in running.values():
            claimed = item.claimed
            due = claimed.renew_at(fraction)
            if due is None or due > now or item.future.done() or claimed.lease.lost:
                continue
            self.work.renew_or_lose(self.store, claimed, now)

    def _until_next_renewal(self, running: dict[str, _Running[R, I]],
                            wait: float | None) -> float | None:
        fraction = self.work.handling.renew_at
        upcoming = [due for item in running.values()
                    if self.work.handling.renewal is not None and not item.claimed.lease.lost
                    and (due := item.claimed.renew_at(fraction)) is not None]
        if not upcoming:
            return wait
        until = max(0.0, min(upcoming) - self.clock())
        return until if wait is None else min(wait, until)

    def _report(self, outcome: WorkOutcome[R]) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _failed(self, error: BaseException) -> None:
        observer = self.work.observer
        # Unavailable: WARNING, the loop reconnects; anything else it cannot mend: ERROR.
        transient = isinstance(error, StoreUnavailable)
        if observer.logger.isEnabledFor(logging.WARNING if transient else logging.ERROR):
            observer.store_error(error, self.worker_id, transient=transient)
        if self.on_error is not None:
            self.on_error(error)

    def _drop_store(self) -> None:
        if self._open is None:
            return  # one store given: it is all there is; keep asking it
        store, self._store = self._store, None
        connection = getattr(store, "connection", None)
        close = getattr(connection, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                close()

    # -- where handlers run --------------------------------------------------------------

    @contextmanager
    def _executor(self) -> Iterator[Callable[[Claimed[R, I]], concurrent.futures.Future[Any]]]:
        """``submit(claimed)``: the handler's call as a future, on a thread pool of
        ``concurrency`` threads, or on one event loop for an ``async def`` handler."""
        if self.is_async:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="lifecycles-handlers",
                                      daemon=True)
            thread.start()
            try:
                yield lambda claimed: asyncio.run_coroutine_threadsafe(
                    _call_async(self.handler, claimed), loop)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=5)
            return
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.concurrency, thread_name_prefix="lifecycles-handler")
        try:
            yield lambda claimed: pool.submit(self.work.call, self.handler, claimed)
        finally:
            pool.shutdown(wait=not self._halt.is_set(), cancel_futures=True)

    @contextmanager
    def _listening(self) -> Iterator[None]:
        """Wake on the store's notifications where it has them (``store.listen(wake)``)."""
        listen = getattr(self.store, "listen", None)
        stop_listening = listen(self.wake) if callable(listen) else None
        try:
            yield
        finally:
            if callable(stop_listening):
                stop_listening()

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        def on_signal(signum: int, frame: object) -> None:
            self.stop(now=self._stopping.is_set())  # the second signal: at once

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore


async def _call_async(handler: Callable[..., Awaitable[Any]], claimed: Claimed[Any, Any],
                      ) -> Result:
    try:
        return Returned(await handler(claimed.record, claimed.lease))
    except Exception as error:
        return Raised(error)


def _result_of(future: concurrent.futures.Future[Any]) -> Result:
    """The handler's :data:`Result`; a ``BaseException`` it raised that is no ``Exception``
    (``KeyboardInterrupt``, ``SystemExit``) stops the worker from here."""
    result = future.result()
    assert isinstance(result, (Returned, Raised))
    return result
