"""What a worker holds: the lease a handler is told about, the claimed record, how each
record ended, and the process's lease doubts.

These are the values passed between the worker's steps (:mod:`lifecycles._worker_steps`),
its loop (:mod:`lifecycles._worker`), the handlers and the observers; none of them does I/O.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._declaration import LifecycleError, TransitionRefused
from lifecycles.machines._work import Leave, Result, Step
from lifecycles.machines.lease import LostRace

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle

__all__ = [
    "LEASE_DOUBTS", "REFUSALS", "Claimed", "HeldLease", "LeaseDoubts", "LeaseLostError",
    "WorkOutcome", "new_lease_token",
]


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
