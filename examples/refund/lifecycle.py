"""Refunds: a worker leases a submitted refund, asks the payment provider, and the table decides.

Rules, in prose (the table below is the spec):

* ``submit`` creates a refund in ``submitted``, due at once, with a bound on its failures.
* ``claim`` leases a due refund (``submitted`` or ``retry_wait``) to one worker until
  now + lease_seconds, under a new lease token: the fencing token the worker passes on
  to the provider (as its idempotency key), so a stalled worker's late call is refused.
* While its lease is live, the holder ``renew``s it (a long provider call), or
  finishes: ``succeed`` when the provider refunded; ``fail`` when it did not, retried
  after a capped exponential backoff with jitter while the error is retryable and
  failures remain, else ``failed``.
* A lease that outlives its expiry is ``rescue``d by the next claim and counted as a
  failure (``lease_expired``): retried after the same backoff, or ``failed`` once the
  failures are spent.
* An operator may ``cancel`` a refund that is waiting (``submitted`` or ``retry_wait``).

The retry and lease policy is made of building blocks (`Backoff`, `Retry`, `Leasing`):
the two declarations ``LEASE`` and ``RETRY`` below, and the rows that name their guards
and effects. Only ``mark_cancelled`` and the refund's own invariants are written here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from lifecycles import (
    Backoff,
    Changes,
    Expr,
    Fields,
    FiredBy,
    Handling,
    InvariantSet,
    Leasing,
    Lifecycle,
    Retry,
    WorkInputs,
    effect,
    expressed,
    finite_time,
    integer_between,
    matches,
    named_in,
    one_of,
    outcomes,
)

CODE = "refund."


class RefundStatus(StrEnum):
    SUBMITTED = "submitted"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# --- the policy: two declarations, named by the rows below ------------------------------

LEASE = Leasing(owner="worker_id", token="lease_token", expires="lease_expires_at",
                due="available_at", order_by=("available_at", "refund_id"), claim="claim",
                expiry="rescue", updated="updated_at", codes=CODE)
RETRY = Retry(failures="failures", max_failures="max_failures", due="available_at",
              error="last_error", backoff=Backoff(base=30.0, cap=3600.0, jitter=0.2),
              key="refund_id", clears=LEASE.fields, updated="updated_at", codes=CODE)

TABLE: list[dict[str, Any]] = [
    {"trigger": "claim", "source": ["submitted", "retry_wait"], "dest": "leased",
     "conditions": ["is_due"], "after": "take_lease"},
    {"trigger": "renew", "source": "leased", "dest": "=",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "extend_lease"},
    {"trigger": "succeed", "source": "leased", "dest": "succeeded",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "end_lease"},
    {"trigger": "fail", "source": "leased", "dest": "retry_wait",
     "conditions": ["lease_is_held", "lease_is_live", "retry_allowed"],
     "after": "schedule_retry"},
    {"trigger": "fail", "source": "leased", "dest": "failed",
     "conditions": ["lease_is_held", "lease_is_live"], "unless": ["retry_allowed"],
     "after": "give_up"},
    {"trigger": "rescue", "source": "leased", "dest": "retry_wait",
     "conditions": ["lease_has_expired", "failures_remain"], "after": "retry_after_expiry"},
    {"trigger": "rescue", "source": "leased", "dest": "failed",
     "conditions": ["lease_has_expired"], "unless": ["failures_remain"],
     "after": "give_up_after_expiry"},
    {"trigger": "cancel", "source": ["submitted", "retry_wait"], "dest": "cancelled",
     "after": "mark_cancelled"},
]


# --- the record and its rules -----------------------------------------------------------

token = matches("token_syntax", r"[A-Za-z0-9_.:-]{1,128}")
error_code = matches("error_code_syntax", r"[a-z][a-z0-9_.]{0,63}")
time = finite_time("time_finite_non_negative")


def _status(value: object) -> object:
    """Stored statuses are strings; a declared one becomes the enum, others stay to fail."""
    return RefundStatus(value) if isinstance(value, str) and value in set(RefundStatus) else value


@attrs.frozen
class Refund:
    """One refund to pay back through the payment provider."""

    refund_id: str = attrs.field(validator=token)
    amount_cents: int = attrs.field(validator=integer_between("amount_bounds", 1, 10**11))
    currency: str = attrs.field(validator=matches("currency_syntax", r"[A-Z]{3}"))
    status: RefundStatus = attrs.field(converter=_status,
                                       validator=one_of("status_declared", set(RefundStatus)))
    failures: int = attrs.field(validator=integer_between("failures_bounds", 0, 20))
    max_failures: int = attrs.field(validator=integer_between("max_failures_bounds", 1, 20))
    available_at: float = attrs.field(validator=time)
    worker_id: str | None = attrs.field(validator=token.allow_none())
    lease_token: str | None = attrs.field(validator=token.allow_none())
    lease_expires_at: float | None = attrs.field(validator=time.allow_none())
    last_error: str | None = attrs.field(validator=error_code.allow_none())
    created_at: float = attrs.field(validator=time)
    updated_at: float = attrs.field(validator=time)


@expressed
def failures_match_status(r: Fields[Refund]) -> Expr:
    """A submitted refund has never failed; one in retry_wait or failed has failed at least once."""
    return (((r.status != "submitted") | (r.failures == 0))
            & (~r.status.is_in(("retry_wait", "failed")) | (r.failures >= 1)))


@expressed
def updated_not_before_created(r: Fields[Refund]) -> Expr:
    """updated_at is never earlier than created_at."""
    return r.updated_at >= r.created_at


REFUND_INVARIANTS: InvariantSet[Refund] = InvariantSet(
    CODE + "state_invalid",
    [*RETRY.invariants, *LEASE.invariants(TABLE), failures_match_status,
     updated_not_before_created],
    steps=[*LEASE.step_invariants(TABLE), *RETRY.steps],
)


# --- what is the refund's own -----------------------------------------------------------


@effect("updated_at")
def mark_cancelled(r: Refund, i: WorkInputs) -> Changes:
    """The operator cancels the waiting refund: updated_at = now."""
    return {"updated_at": i.now}


def new_refund(refund_id: str, *, amount_cents: int, currency: str, now: float,
               max_failures: int = 5) -> Refund:
    """The record ``submit`` creates: submitted, due now, nothing failed."""
    return Refund(
        refund_id=refund_id, amount_cents=amount_cents, currency=currency,
        status=RefundStatus.SUBMITTED, failures=0, max_failures=max_failures,
        available_at=now, worker_id=None, lease_token=None, lease_expires_at=None,
        last_error=None, created_at=now, updated_at=now,
    )


GUARDS, EFFECTS = named_in(TABLE, LEASE, RETRY, mark_cancelled)

REFUND: Lifecycle[Refund, WorkInputs] = Lifecycle(
    module=__name__,
    declared_in=[".lifecycle_inputs"],  # its exploration, beside this file
    name="refund",
    description="A worker leases a submitted refund and asks the payment provider; "
                "failures are retried with backoff, expired leases rescued.",
    statuses=RefundStatus,
    table=TABLE,
    initial=RefundStatus.SUBMITTED,
    final=[RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.CANCELLED],
    creation="submit",
    guards=GUARDS,
    effects=EFFECTS,
    invariants=REFUND_INVARIANTS,
    record_type=Refund,
    key_field="refund_id",
    not_allowed_code=CODE + "not_allowed",
    lease=LEASE.lease,
    # How a worker runs it (`lifecycles worker refund ...`): the handler returns to succeed
    # and raises to fail (Permanent: not retryable); a long call renews the lease.
    handling=Handling(
        inputs=lambda now, worker_id, token, seconds: WorkInputs(
            now=now, worker_id=worker_id, lease_token=token, lease_seconds=seconds),
        finish=outcomes(success="succeed", failure="fail"),
        renewal="renew", attempt=lambda refund: refund.failures + 1,
    ),
    status_meanings={
        "submitted": "Waiting for its first attempt.",
        "leased": "A worker holds the lease and is asking the payment provider.",
        "retry_wait": "The last attempt failed; retried after the backoff.",
        "succeeded": "The provider refunded the amount. Final.",
        "failed": "The failures are spent, or the error is not retryable. Final.",
        "cancelled": "An operator cancelled it while it was waiting. Final.",
    },
)

# Who fires each trigger. The example has no facade: "the application" is the code that
# uses this lifecycle on a store; the worker is whatever loop claims and completes leases.
FIRED_BY = FiredBy(REFUND, {
    "submit": "The application, for a new refund: `new_refund(...)`, then the store's "
              "insert of `REFUND.create(record)`.",
    "claim": "A worker, through the lease protocol's claim (`store.claim` or "
             "`store.claim_many`), with a new lease token.",
    "rescue": "Every claim, on any worker, before it leases.",
    "renew": "The worker holding the lease, while the provider call runs.",
    "succeed": "The worker holding the lease, once the provider refunded.",
    "fail": "The worker holding the lease, when the provider call failed, with its error "
            "code and whether it is retryable.",
    "cancel": "An operator, through the application, while the refund is waiting.",
})
