"""Run any leased lifecycle as a worker: claim, call the handler, finish the lease.

::

    worker = Worker(REFUND, lambda: SQLiteStore(REFUND, connect("refunds.db")), pay)
    worker.run()          # until SIGTERM / SIGINT or worker.stop()

The worker owns the loop and nothing else: which trigger a handler's result fires is the
lifecycle's :class:`~lifecycles.machines._work.Handling`, declared beside its table, and
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
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, Generic, TypeVar

import attrs

from lifecycles._worker_lease import Claimed, HeldLease, WorkOutcome
from lifecycles._worker_steps import LeaseWork
from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import LifecycleError
from lifecycles.machines._work import Handling, Raised, Result, Returned
from lifecycles.stores._base import Store, StoreUnavailable

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle

__all__ = ["Idle", "Worker", "default_worker_id"]

Handler = Callable[[Any, "HeldLease"], Any] | Callable[[Any, "HeldLease"], Awaitable[Any]]
"""``handler(record, lease)``: the work itself; ``async def`` handlers run on an event loop."""


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
