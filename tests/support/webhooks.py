"""Webhook deliveries, leased to workers: a correct table and three planted defects.

A delivery waits ``queued`` until due, a worker leases it (``sending``) for
LEASE_SECONDS and either the receiver takes it (``delivered``) or it bounces and is
retried, up to MAX_ATTEMPTS attempts in all, then ``abandoned``. A lease that expires
(the worker died or stalled) is rescued by the next claim, and counts as an attempt.

Each defect is one row changed, as an author would get it wrong:

* ``late_ack``: ``deliver`` forgets the lease guards, so a worker whose lease was
  rescued and given to another still marks the delivery delivered;
* ``stranded``: the expiry row that abandons a delivery is missing, so a lease that
  expires on the last attempt is never rescued: the delivery stays ``sending``;
* ``free_retry``: an expired lease sends the delivery back to ``queued`` without
  counting the attempt, so a worker that keeps dying retries it for ever.

A whole-store invariant is declared on the correct table too: a worker sends at most
one delivery at a time (``one_live_lease_per_worker``); ``batches=True`` lets workers
claim several at once, which breaks it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from enum import StrEnum
from typing import Any

import attrs
from hypothesis import strategies as st

from lifecycles import (
    Changes,
    Exploration,
    InvariantSet,
    Lease,
    Lifecycle,
    StoreInvariant,
    StoreView,
    Work,
    Workers,
    effect,
    guard,
    invariant,
    step_invariant,
    store_invariant,
    time_relation,
    trigger_move,
)

CODE = "webhooks."
MAX_ATTEMPTS = 2
LEASE_SECONDS = 30.0
DEFECTS = ("late_ack", "stranded", "free_retry")


class Sending(StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    DELIVERED = "delivered"
    ABANDONED = "abandoned"


@attrs.frozen
class Delivery:
    delivery_id: str
    status: Sending
    due_at: float
    attempts: int = 0
    lease_token: str | None = None
    lease_expires_at: float | None = None


@attrs.frozen
class Attempt:
    now: float
    lease_token: str | None = None


@guard(refusal_code=CODE + "lease_lost")
def sender_holds_lease(r: Delivery, i: Attempt) -> bool:
    """The caller holds the delivery's current lease."""
    return i.lease_token is not None and i.lease_token == r.lease_token


@guard(refusal_code=CODE + "lease_lost")
def lease_unexpired(r: Delivery, i: Attempt) -> bool:
    """The lease has not expired."""
    return r.lease_expires_at is not None and i.now < r.lease_expires_at


@guard(refusal_code=CODE + "lease_live")
def lease_ran_out(r: Delivery, i: Attempt) -> bool:
    """The lease has expired."""
    return r.lease_expires_at is not None and i.now >= r.lease_expires_at


@guard(refusal_code=CODE + "attempts_spent")
def another_attempt_allowed(r: Delivery, i: Attempt) -> bool:
    """After this attempt, at least one more is allowed."""
    return r.attempts + 1 < MAX_ATTEMPTS


@effect("lease_token", "lease_expires_at")
def lease_to_sender(r: Delivery, i: Attempt) -> Changes:
    """The caller leases the delivery for LEASE_SECONDS."""
    return {"lease_token": i.lease_token, "lease_expires_at": i.now + LEASE_SECONDS}


@effect("attempts", "lease_expires_at", "due_at")
def attempt_spent(r: Delivery, i: Attempt) -> Changes:
    """The attempt is counted; the lease ends; due again now."""
    return {"attempts": r.attempts + 1, "lease_expires_at": None, "due_at": i.now}


@effect("lease_expires_at", "due_at")
def lease_dropped(r: Delivery, i: Attempt) -> Changes:
    """The lease ends; due again now (the attempt is not counted)."""
    return {"lease_expires_at": None, "due_at": i.now}


@effect("lease_expires_at")
def lease_released(r: Delivery, i: Attempt) -> Changes:
    """The lease ends."""
    return {"lease_expires_at": None}


@invariant
def attempts_within_limit(r: Delivery) -> bool:
    """attempts never exceeds MAX_ATTEMPTS."""
    return r.attempts <= MAX_ATTEMPTS


@invariant
def sending_iff_leased(r: Delivery) -> bool:
    """A delivery being sent, and only one, has a lease expiry."""
    return (r.status == Sending.SENDING) == (r.lease_expires_at is not None)


@step_invariant
def each_claim_a_fresh_token(before: Delivery, after: Delivery) -> bool:
    """A delivery entering sending holds a lease token it did not hold before."""
    return (after.status != Sending.SENDING or before.status == Sending.SENDING
            or after.lease_token != before.lease_token)


@store_invariant(reads_workers=True)
def one_live_lease_per_worker(view: StoreView[Delivery]) -> bool:
    """A worker sends at most one delivery at a time."""
    return all(len(leases) <= 1 for leases in view.live_leases_by_worker().values())


_HELD = ["sender_holds_lease", "lease_unexpired"]


def table(defect: str | None = None) -> list[dict[str, Any]]:
    """The delivery table, with ``defect`` (one of :data:`DEFECTS`) planted."""
    expiry_retry = (
        {"trigger": "expire", "source": "sending", "dest": "queued",
         "conditions": ["lease_ran_out"], "after": "lease_dropped"}
        if defect == "free_retry" else
        {"trigger": "expire", "source": "sending", "dest": "queued",
         "conditions": ["lease_ran_out", "another_attempt_allowed"], "after": "attempt_spent"})
    rows: list[dict[str, Any]] = [
        {"trigger": "claim", "source": "queued", "dest": "sending", "after": "lease_to_sender"},
        expiry_retry,
        {"trigger": "expire", "source": "sending", "dest": "abandoned",
         "conditions": ["lease_ran_out"], "after": "attempt_spent"},
        {"trigger": "deliver", "source": "sending", "dest": "delivered",
         "after": "lease_released", **({} if defect == "late_ack" else {"conditions": _HELD})},
        {"trigger": "bounce", "source": "sending", "dest": "queued",
         "conditions": [*_HELD, "another_attempt_allowed"], "after": "attempt_spent"},
        {"trigger": "bounce", "source": "sending", "dest": "abandoned",
         "conditions": _HELD, "after": "attempt_spent"},
    ]
    if defect in ("stranded", "free_retry"):
        # No expiry row abandons: a lease expiring on the last attempt sticks (stranded);
        # an uncounted expiry never reaches the last attempt (free_retry would shadow it).
        del rows[2]
    return rows


def webhooks(defect: str | None = None, batches: bool = False,
             store_rules: Sequence[StoreInvariant[Delivery]] = (), name: str | None = None,
             ) -> Lifecycle[Delivery, Attempt]:
    """The webhook lifecycle, correct or with ``defect`` planted; ``store_rules``: more
    whole-store invariants."""
    if defect is not None and defect not in DEFECTS:
        raise ValueError(f"no defect {defect!r}")
    rows = table(defect)
    effects = [lease_to_sender, attempt_spent, lease_dropped, lease_released]
    return Lifecycle(
        name=name or ("webhooks" + (f"_{defect}" if defect else "")
                      + ("_batched" if batches else "")),
        statuses=Sending, initial=Sending.QUEUED,
        final=[Sending.DELIVERED, Sending.ABANDONED], creation="create", table=rows,
        guards=[sender_holds_lease, lease_unexpired, lease_ran_out, another_attempt_allowed],
        effects=[e for e in effects if any(row.get("after") == e.name for row in rows)],
        invariants=InvariantSet(CODE + "state_invalid", [attempts_within_limit, sending_iff_leased],
                                steps=[each_claim_a_fresh_token],
                                store=[one_live_lease_per_worker, *store_rules]),
        record_type=Delivery, key_field="delivery_id", not_allowed_code=CODE + "not_allowed",
        module=__name__,
        lease=Lease(trigger="claim", token_field="lease_token",
                    expires_field="lease_expires_at", due_field="due_at",
                    order_by=("due_at", "delivery_id"), expiry_trigger="expire"),
    )


def _as_held(r: Delivery) -> list[Attempt]:
    """The holder, then a stale token, a second before the expiry and at it."""
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.due_at
    return [Attempt(now, token) for now in (expiry - 1.0, expiry)
            for token in (r.lease_token, "stale-token")]


def _abstraction(r: Delivery) -> Hashable:
    return (r.status, r.attempts, r.lease_token is not None,
            time_relation(r.lease_expires_at, r.due_at))


def _workers(batches: bool) -> Workers[Delivery]:
    def work(held: Delivery, inputs: Attempt) -> list[Work[Delivery]]:
        def ending(trigger: str) -> Work[Delivery]:
            return Work(trigger, lambda record, fire: fire(trigger, record, inputs))
        return [ending("deliver"), ending("bounce")]

    return Workers(
        records=lambda count: [Delivery(f"hook-{n}", Sending.QUEUED, due_at=0.0)
                               for n in range(1, count + 1)],
        inputs=lambda now, worker, token: Attempt(now, token),
        work=work, calls="delivered or bounced", batches=batches,
        record_count=2 if batches else 1,  # a batch needs two
    )


def new_deliveries(due_times: Sequence[float] = (0.0, 10.0)) -> st.SearchStrategy[Delivery]:
    """Queued deliveries, due at the start or a little later."""
    return st.builds(Delivery, delivery_id=st.sampled_from([f"hook-{n}" for n in range(1, 7)]),
                     status=st.just(Sending.QUEUED), due_at=st.sampled_from(list(due_times)))


def exploration(lifecycle: Lifecycle[Delivery, Attempt], batches: bool = False
                ) -> Exploration[Delivery]:
    """Every trigger on one delivery, and two workers on the lease protocol."""
    claims = trigger_move("claim", lambda r: [Attempt(r.due_at, f"lease-{r.attempts + 1}")])
    return Exploration(
        lifecycle=lifecycle,
        initial=lambda: [Delivery("hook-1", Sending.QUEUED, due_at=0.0)],
        # Batched, the workers make every claim (a move's single claims would take the
        # records a batch needs).
        moves=(*(() if batches else (claims,)),
               *(trigger_move(t, _as_held) for t in ("expire", "deliver", "bounce"))),
        abstraction=_abstraction,
        abstraction_doc="status, attempts, token by presence, lease expiry against due time",
        bounds=f"attempts up to {MAX_ATTEMPTS}; the holder and a stale token",
        # Batches are of records due together.
        new_records=lambda: new_deliveries((0.0,) if batches else (0.0, 10.0)),
        workers=_workers(batches),
    )
