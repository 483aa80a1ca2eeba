"""What the checker explores beside the task lifecycle (tests/support/tasks.py): one task,
every trigger with the holder's and a stale token before and at the lease's expiry, and
interleaved workers whose calls end as the runtime worker's handling turns a success, a
retryable error and a permanent one into steps."""

from __future__ import annotations

from collections.abc import Hashable

from lifecycles.machines._exploration import (
    AcceptedCycle,
    Exploration,
    time_relation,
    trigger_move,
)
from lifecycles.machines._interleaving import Workers
from lifecycles.machines._work import Permanent, Raised, Returned
from support.tasks import TASKS, Task, TaskInputs, new_task

LEASE_SECONDS = 30.0


def claims(r: Task) -> list[TaskInputs]:
    """A new worker claims at the due time, and a second before it."""
    token = f"lease-{r.attempts + 1}"
    return [TaskInputs(now=at, worker_id="worker-a", lease_token=token,
                       lease_seconds=LEASE_SECONDS)
            for at in (r.available_at, r.available_at - 1.0)]


def held(r: Task) -> list[TaskInputs]:
    """The holder and a stale token, a second before and at the lease's expiry; the
    error retryable or not."""
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.updated_at
    return [TaskInputs(now=at, worker_id=worker, lease_token=token, lease_seconds=LEASE_SECONDS,
                       error="boom", retryable=retryable)
            for at in (expiry - 1.0, expiry)
            for worker, token in ((r.worker_id, r.lease_token), ("worker-b", "lease-stale"))
            for retryable in (True, False)]


def abstraction(r: Task) -> Hashable:
    """The record with its times as before/at/after its last update, tokens by presence."""
    return (r.status, r.attempts, r.max_attempts, r.worker_id is not None,
            r.lease_token is not None, r.last_error,
            time_relation(r.available_at, r.updated_at),
            time_relation(r.lease_expires_at, r.updated_at))


def exploration(lifecycle=TASKS) -> Exploration[Task]:  # type: ignore[no-untyped-def]
    """The task lifecycle's exploration (``lifecycle``: a mutant of it, for tests)."""
    return Exploration(
        lifecycle=lifecycle,
        initial=lambda: [new_task("task-1", now=0.0, max_attempts=2)],
        moves=(trigger_move("claim", claims),
               *(trigger_move(trigger, held) for trigger in ("renew", "succeed", "fail",
                                                             "expire"))),
        abstraction=abstraction,
        abstraction_doc="times before/at/after updated_at; worker and token by presence",
        bounds="one task, max_attempts 2; the holder and a stale token, before and at expiry",
        accepted_cycles=(AcceptedCycle(
            {"renew"}, "a running handler renews its lease for as long as it runs"),),
        lease_inputs=lambda now, token: TaskInputs(now=now, worker_id="worker-a",
                                                  lease_token=token,
                                                  lease_seconds=LEASE_SECONDS),
        workers=Workers.from_handling(
            lifecycle, lambda count: [new_task(f"task-{n}", max_attempts=2)
                                      for n in range(1, count + 1)],
            [("succeeded", Returned(None)), ("a retryable error", Raised(RuntimeError())),
             ("a permanent error", Raised(Permanent()))],
            lease_seconds=LEASE_SECONDS),
    )


EXPLORATION = exploration()
