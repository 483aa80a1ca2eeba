"""The worker's steps over one store, without a loop of their own.

:class:`LeaseWork` claims, calls the handler and finishes the lease, for a leased
lifecycle: what :class:`~lifecycles._worker.Worker` runs, and what the shipped facades
(``run_once``, ``run_many``) run. :class:`ExclusiveWork` does the same for a lifecycle
without a lease, whose records are taken under the store's exclusive lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Generic, TypeVar

from lifecycles import observe
from lifecycles._worker_lease import (
    LEASE_DOUBTS,
    REFUSALS,
    Claimed,
    HeldLease,
    WorkOutcome,
    new_lease_token,
)
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._work import Handling, Leave, Raised, Result, Returned, Step
from lifecycles.stores._base import Store, StoreUnavailable

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle

__all__ = ["ExclusiveWork", "LeaseWork"]


Hook = Callable[..., Any]
"""A hook of :func:`~lifecycles.machines.lease.complete`: ``fire_again``, ``read_again``."""


class LeaseWork(Generic[R, I]):
    """The worker's three steps over one store, without a loop of its own: what
    :class:`~lifecycles._worker.Worker` runs, and what the shipped facades (``run_once``,
    ``run_many``) run.

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
