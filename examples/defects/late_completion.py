"""Planted defect: a completion that ignores the lease token (found only by interleaving).

A leased job: a worker claims it for 60 s; an expired lease is rescued by the next
claim. ``finish`` here has no guard on the lease (the correct table demands
``holds_lease`` and ``lease_live``), so the finishing step is accepted from whoever
sends it. One record on its own never shows it: every record reached is valid, every
step invariant holds, every state can still finish. Two workers do: worker 1 claims
and stalls, its lease expires, worker 2 rescues and claims the job, and worker 1's late
completion, refused by the compare-and-set on the record it claimed, is then judged
on the record as stored, where nothing refuses it (dbos-transact-py #742):

    lifecycles check --module examples/defects/late_completion.py  # exits 1 with a trace

``leased_jobs(guarded=True)`` is the correct table, which the check passes.
"""

from __future__ import annotations

from collections.abc import Hashable
from enum import StrEnum
from typing import Any

import attrs

from lifecycles import (
    Changes,
    Exploration,
    InvariantSet,
    Lease,
    Lifecycle,
    Work,
    Workers,
    effect,
    guard,
    invariant,
    step_invariant,
    time_relation,
    trigger_move,
)

CODE = "leased_jobs."
MAX_FAILURES = 2
LEASE_SECONDS = 60.0


class Status(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@attrs.frozen
class LeasedJob:
    key: str
    status: Status
    due_at: float
    failures: int = 0
    lease_token: str | None = None
    lease_expires_at: float | None = None


@attrs.frozen
class Inputs:
    now: float
    lease_token: str | None = None


@guard(refusal_code=CODE + "lease_lost")
def holds_lease(r: LeasedJob, i: Inputs) -> bool:
    """The caller holds the job's current lease."""
    return i.lease_token is not None and i.lease_token == r.lease_token


@guard(refusal_code=CODE + "lease_lost")
def lease_live(r: LeasedJob, i: Inputs) -> bool:
    """The lease has not expired."""
    return r.lease_expires_at is not None and i.now < r.lease_expires_at


@guard(refusal_code=CODE + "lease_live")
def lease_expired(r: LeasedJob, i: Inputs) -> bool:
    """The lease has expired."""
    return r.lease_expires_at is not None and i.now >= r.lease_expires_at


@guard(refusal_code=CODE + "failures_spent")
def retry_left(r: LeasedJob, i: Inputs) -> bool:
    """After one more failure, the job may still be retried."""
    return r.failures + 1 < MAX_FAILURES


@effect("lease_token", "lease_expires_at")
def grant_lease(r: LeasedJob, i: Inputs) -> Changes:
    """Lease the job to the caller for LEASE_SECONDS."""
    return {"lease_token": i.lease_token, "lease_expires_at": i.now + LEASE_SECONDS}


@effect("failures", "lease_expires_at", "due_at")
def count_failure(r: LeasedJob, i: Inputs) -> Changes:
    """Count a failure; the lease ends; due again now."""
    return {"failures": r.failures + 1, "lease_expires_at": None, "due_at": i.now}


@effect("lease_expires_at")
def end_lease(r: LeasedJob, i: Inputs) -> Changes:
    """The lease ends."""
    return {"lease_expires_at": None}


@invariant
def failures_within_max(r: LeasedJob) -> bool:
    """failures never exceeds MAX_FAILURES."""
    return r.failures <= MAX_FAILURES


@invariant
def running_iff_lease_expiry(r: LeasedJob) -> bool:
    """A running job, and only a running one, has a lease expiry."""
    return (r.status == Status.RUNNING) == (r.lease_expires_at is not None)


@step_invariant
def claim_mints_a_new_lease_token(before: LeasedJob, after: LeasedJob) -> bool:
    """A job entering running holds a lease token it did not hold before."""
    return (after.status != Status.RUNNING or before.status == Status.RUNNING
            or after.lease_token != before.lease_token)


def leased_jobs(guarded: bool) -> Lifecycle[LeasedJob, Inputs]:
    """The leased job table; ``guarded=False`` drops the lease guards of ``finish``."""
    on_lease = ["holds_lease", "lease_live"]
    return Lifecycle(
        name="leased_jobs" if guarded else "leased_jobs_late_completion",
        statuses=Status, initial=Status.IDLE, final=[Status.DONE, Status.FAILED],
        creation="create",
        table=[
            {"trigger": "claim", "source": "idle", "dest": "running", "after": "grant_lease"},
            {"trigger": "expire", "source": "running", "dest": "idle",
             "conditions": ["lease_expired", "retry_left"], "after": "count_failure"},
            {"trigger": "expire", "source": "running", "dest": "failed",
             "conditions": ["lease_expired"], "after": "count_failure"},
            {"trigger": "finish", "source": "running", "dest": "done", "after": "end_lease",
             **({"conditions": on_lease} if guarded else {})},
            {"trigger": "fail", "source": "running", "dest": "idle",
             "conditions": [*on_lease, "retry_left"], "after": "count_failure"},
            {"trigger": "fail", "source": "running", "dest": "failed",
             "conditions": on_lease, "after": "count_failure"},
        ],
        guards=[holds_lease, lease_live, lease_expired, retry_left],
        effects=[grant_lease, count_failure, end_lease],
        invariants=InvariantSet(CODE + "state_invalid",
                                [failures_within_max, running_iff_lease_expiry],
                                steps=[claim_mints_a_new_lease_token]),
        record_type=LeasedJob, key_field="key", not_allowed_code=CODE + "not_allowed",
        module=__name__,
        lease=Lease(trigger="claim", token_field="lease_token",
                    expires_field="lease_expires_at", due_field="due_at",
                    order_by=("due_at", "key"), expiry_trigger="expire"),
    )


def _held(r: LeasedJob) -> list[Inputs]:
    """The holder, then a stale token, at the clock and at the expiry."""
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.due_at
    return [Inputs(now=now, lease_token=token)
            for now in (expiry - 1.0, expiry) for token in (r.lease_token, "lease-stale")]


def _abstraction(r: LeasedJob) -> Hashable:
    return (r.status, r.failures, r.lease_token is not None,
            time_relation(r.lease_expires_at, r.due_at))


def _workers() -> Workers[LeasedJob]:
    def work(held: LeasedJob, inputs: Inputs) -> list[Work[LeasedJob]]:
        def firing(trigger: str) -> Work[LeasedJob]:
            return Work(trigger, lambda record, fire: fire(trigger, record, inputs))
        return [firing("finish"), firing("fail")]

    return Workers(
        records=lambda count: [LeasedJob(f"job-{n}", Status.IDLE, due_at=0.0)
                               for n in range(1, count + 1)],
        inputs=lambda now, worker, token: Inputs(now=now, lease_token=token),
        work=work, calls="finished or failed",
    )


def exploration(lifecycle: Lifecycle[LeasedJob, Any]) -> Exploration[LeasedJob]:
    """One job, every trigger, then two workers on it."""
    claims = trigger_move(
        "claim", lambda r: [Inputs(now=r.due_at, lease_token=f"lease-{r.failures + 1}")])
    return Exploration(
        lifecycle=lifecycle,
        initial=lambda: [LeasedJob("job-1", Status.IDLE, due_at=0.0)],
        moves=(claims, *(trigger_move(trigger, _held) for trigger in ("expire", "finish", "fail"))),
        abstraction=_abstraction,
        abstraction_doc="status, failures, token by presence, lease expiry against the due time",
        bounds=f"failures up to {MAX_FAILURES}; the holder and a stale token, before and at expiry",
        workers=_workers(),
    )


LATE_COMPLETION = leased_jobs(guarded=False)
EXPLORATION = exploration(LATE_COMPLETION)
