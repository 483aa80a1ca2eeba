"""Planted defect: a provider call that is not idempotent (found by the external-effect check).

A refund is leased to a worker, which asks the payment provider to pay it and then
writes ``refunded``. The table is right, every record it can reach is valid, and every
step the store accepts is the holder's: the mistake is outside the store. The call to
the provider carries no idempotency key (``keyed_by="none"``), so a worker that stalls
past its lease still pays when it wakes, after another worker rescued the refund and
paid it: paid twice, though ``refunded`` once. Declared as an
:class:`~lifecycles.ExternalEffect` of the workers, the interleaving keeps a ghost
ledger of the payments and checks "refunded exactly when paid once" on every final
record:

    lifecycles check --module examples/defects/unkeyed_refund.py  # exits 1 with a trace

``KEYED_REFUND`` keys the call by the refund (the provider pays a key once), which the
check passes.
"""

from __future__ import annotations

from collections.abc import Hashable
from enum import StrEnum
from typing import Any

import attrs

from lifecycles import (
    AcceptedCycle,
    Changes,
    Exploration,
    ExternalEffect,
    InvariantSet,
    Lease,
    Lifecycle,
    Work,
    Workers,
    effect,
    guard,
    invariant,
    time_relation,
    trigger_move,
)

CODE = "refunds."
LEASE_SECONDS = 30.0


class Refund(StrEnum):
    REQUESTED = "requested"
    PAYING = "paying"
    REFUNDED = "refunded"


@attrs.frozen
class RefundRecord:
    refund_id: str
    status: Refund
    due_at: float
    lease_token: str | None = None
    lease_expires_at: float | None = None


@attrs.frozen
class PayInputs:
    now: float
    lease_token: str | None = None


@guard(refusal_code=CODE + "lease_lost")
def payer_holds_lease(r: RefundRecord, i: PayInputs) -> bool:
    """The caller holds the refund's current lease, and it has not expired."""
    return (i.lease_token is not None and i.lease_token == r.lease_token
            and r.lease_expires_at is not None and i.now < r.lease_expires_at)


@guard(refusal_code=CODE + "lease_live")
def payer_lease_expired(r: RefundRecord, i: PayInputs) -> bool:
    """The lease has expired."""
    return r.lease_expires_at is not None and i.now >= r.lease_expires_at


@effect("lease_token", "lease_expires_at")
def lease_refund(r: RefundRecord, i: PayInputs) -> Changes:
    """The caller leases the refund for LEASE_SECONDS."""
    return {"lease_token": i.lease_token, "lease_expires_at": i.now + LEASE_SECONDS}


@effect("lease_expires_at", "due_at")
def release_refund(r: RefundRecord, i: PayInputs) -> Changes:
    """The lease ends; due again now."""
    return {"lease_expires_at": None, "due_at": i.now}


@effect("lease_expires_at")
def close_refund(r: RefundRecord, i: PayInputs) -> Changes:
    """The lease ends."""
    return {"lease_expires_at": None}


@invariant
def paying_iff_leased(r: RefundRecord) -> bool:
    """A refund being paid, and only one, has a lease expiry."""
    return (r.status == Refund.PAYING) == (r.lease_expires_at is not None)


def refund_lifecycle(name: str) -> Lifecycle[RefundRecord, PayInputs]:
    """The refund table (right in both variants: the defect is the provider's call)."""
    return Lifecycle(
        name=name, statuses=Refund, initial=Refund.REQUESTED, final=[Refund.REFUNDED],
        creation="create",
        table=[
            {"trigger": "claim", "source": "requested", "dest": "paying",
             "after": "lease_refund"},
            {"trigger": "expire", "source": "paying", "dest": "requested",
             "conditions": ["payer_lease_expired"], "after": "release_refund"},
            {"trigger": "record_payment", "source": "paying", "dest": "refunded",
             "conditions": ["payer_holds_lease"], "after": "close_refund"},
        ],
        guards=[payer_holds_lease, payer_lease_expired],
        effects=[lease_refund, release_refund, close_refund],
        invariants=InvariantSet(CODE + "state_invalid", [paying_iff_leased]),
        record_type=RefundRecord, key_field="refund_id", not_allowed_code=CODE + "not_allowed",
        module=__name__,
        lease=Lease(trigger="claim", token_field="lease_token",
                    expires_field="lease_expires_at", due_field="due_at",
                    order_by=("due_at", "refund_id"), expiry_trigger="expire"),
    )


def paid_once_iff_refunded(record: RefundRecord, paid: int) -> bool:
    return paid == (1 if record.status == Refund.REFUNDED else 0)


def _workers(keyed_by: str) -> Workers[RefundRecord]:
    def work(held: RefundRecord, inputs: PayInputs) -> list[Work[RefundRecord]]:
        def pay(record: RefundRecord, fire: Any) -> RefundRecord:
            paid: RefundRecord = fire("record_payment", record, inputs)
            return paid
        return [Work("paid", pay, calls="pay")]

    return Workers(
        records=lambda count: [RefundRecord(f"refund-{n}", Refund.REQUESTED, due_at=0.0)
                               for n in range(1, count + 1)],
        inputs=lambda now, worker, token: PayInputs(now, token),
        work=work, calls="paid by the provider",
        effects=(ExternalEffect("pay", keyed_by, paid_once_iff_refunded,
                                "refunded exactly when paid once"),),
    )


def _held(r: RefundRecord) -> list[PayInputs]:
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.due_at
    return [PayInputs(now, token) for now in (expiry - 1.0, expiry)
            for token in (r.lease_token, "stale-token")]


def _abstraction(r: RefundRecord) -> Hashable:
    return (r.status, r.lease_token is not None, time_relation(r.lease_expires_at, r.due_at))


def exploration(lifecycle: Lifecycle[RefundRecord, Any], keyed_by: str
                ) -> Exploration[RefundRecord]:
    """One refund, every trigger, then two workers paying it through the provider."""
    claims = trigger_move("claim", lambda r: [PayInputs(r.due_at, "lease-1")])
    return Exploration(
        lifecycle=lifecycle,
        initial=lambda: [RefundRecord("refund-1", Refund.REQUESTED, due_at=0.0)],
        moves=(claims, *(trigger_move(t, _held) for t in ("expire", "record_payment"))),
        abstraction=_abstraction,
        abstraction_doc="status, token by presence, lease expiry against the due time",
        bounds="the holder and a stale token, before and at expiry",
        accepted_cycles=(AcceptedCycle({"claim", "expire"},
                                       "a refund whose worker dies is retried until paid"),),
        workers=_workers(keyed_by),
    )


UNKEYED_REFUND = refund_lifecycle("unkeyed_refund")
EXPLORATION = exploration(UNKEYED_REFUND, "none")
KEYED_REFUND = refund_lifecycle("keyed_refund")
KEYED_EXPLORATION = exploration(KEYED_REFUND, "record")
