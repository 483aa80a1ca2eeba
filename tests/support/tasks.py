"""A leased task lifecycle made for the framework's own tests: the worker, the lease
protocol and the stores are tested on it, not through the shipped monitor and outbox.

A task waits (``queued``) until it is due, is leased to a worker (``running``) while an
attempt is left, and ends ``succeeded`` or, once its attempts are spent or a failure is
permanent, ``failed``; a failed attempt or an expired lease puts it back in the queue with
a backoff. A running task's lease may be renewed by its holder. Its invariants are
expressions, so that a SQL store can check them on its side too (PostgreSQL's claims,
batch claims and health).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import (
    InvariantSet,
    expressed,
    finite_time,
    integer_between,
    matches,
    non_negative_integer,
    one_of,
    step_invariant,
)
from lifecycles.invariants._expressions import Expr, Fields, all_of, any_of, if_else
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, Lease, effect, guard
from lifecycles.machines._work import Handling, outcomes

CODE = "tasks."
BACKOFF_SECONDS = 1.0


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


token = matches("token_syntax", r"[A-Za-z0-9_.:-]{1,128}")
error_code = matches("error_code_syntax", r"[a-z][a-z0-9_.]{0,63}")
time = finite_time("time_finite_non_negative")


def _status(value: object) -> object:
    return TaskStatus(value) if isinstance(value, str) and value in set(TaskStatus) else value


@attrs.frozen
class Task:
    task_id: str = attrs.field(validator=token)
    status: TaskStatus = attrs.field(converter=_status,
                                     validator=one_of("status_declared", set(TaskStatus)))
    attempts: int = attrs.field(validator=non_negative_integer("attempts_non_negative"))
    max_attempts: int = attrs.field(validator=integer_between("max_attempts_bounds", 1, 10))
    available_at: float = attrs.field(validator=time)
    worker_id: str | None = attrs.field(validator=token.allow_none())
    lease_token: str | None = attrs.field(validator=token.allow_none())
    lease_expires_at: float | None = attrs.field(validator=time.allow_none())
    last_error: str | None = attrs.field(validator=error_code.allow_none())
    updated_at: float = attrs.field(validator=time)


@attrs.frozen
class TaskInputs:
    now: float
    worker_id: str | None = None
    lease_token: str | None = None
    lease_seconds: float = 30.0
    error: str | None = None
    retryable: bool = True


def new_task(task_id: str, *, now: float = 0.0, max_attempts: int = 3) -> Task:
    """A queued task, due at ``now``."""
    return Task(task_id, TaskStatus.QUEUED, 0, max_attempts, now, None, None, None, None, now)


R, I = Task, TaskInputs  # noqa: E741 - short names keep the guards on one line


@guard(CODE + "not_due")
def is_due(r: R, i: I) -> bool:
    """The task is due: available_at <= now."""
    return r.available_at <= i.now


@guard(CODE + "no_attempt_left")
def an_attempt_is_left(r: R, i: I) -> bool:
    """An attempt is left: attempts < max_attempts. A queued task may have none left
    when its max_attempts was lowered by hand; a claim passes it over, so the tests of
    the lease protocol have a due candidate whose claim is refused."""
    return r.attempts < r.max_attempts


@guard(CODE + "lease_lost")
def lease_is_held(r: R, i: I) -> bool:
    """The caller holds the lease: same worker and token."""
    return r.worker_id == i.worker_id and r.lease_token == i.lease_token


@guard(CODE + "lease_expired")
def lease_is_live(r: R, i: I) -> bool:
    """The lease has not expired: now < lease_expires_at."""
    return r.lease_expires_at is not None and i.now < r.lease_expires_at


@guard(CODE + "lease_live")
def lease_has_expired(r: R, i: I) -> bool:
    """The lease has expired: lease_expires_at <= now."""
    return r.lease_expires_at is not None and r.lease_expires_at <= i.now


@guard(CODE + "attempts_spent")
def attempts_remain(r: R, i: I) -> bool:
    """Another attempt is allowed after this one: attempts + 1 < max_attempts."""
    return r.attempts + 1 < r.max_attempts


@guard(CODE + "not_retryable")
def retry_allowed(r: R, i: I) -> bool:
    """The failure may be retried and attempts remain."""
    return i.retryable and r.attempts + 1 < r.max_attempts


NO_LEASE: dict[str, Any] = {"worker_id": None, "lease_token": None, "lease_expires_at": None}
LEASE_FIELDS = ("worker_id", "lease_token", "lease_expires_at")


@effect(*LEASE_FIELDS, "updated_at")
def take_lease(r: R, i: I) -> Changes:
    """Lease the task to the worker until now + lease_seconds."""
    return {"worker_id": i.worker_id, "lease_token": i.lease_token,
            "lease_expires_at": i.now + i.lease_seconds, "updated_at": i.now}


@effect("lease_expires_at", "updated_at")
def extend_lease(r: R, i: I) -> Changes:
    """Renew the lease until now + lease_seconds, never shorter than it was."""
    assert r.lease_expires_at is not None
    return {"lease_expires_at": max(r.lease_expires_at, i.now + i.lease_seconds),
            "updated_at": i.now}


@effect(*LEASE_FIELDS, "last_error", "updated_at")
def end_lease(r: R, i: I) -> Changes:
    """End the lease: the work is done."""
    return {**NO_LEASE, "last_error": None, "updated_at": i.now}


@effect(*LEASE_FIELDS, "attempts", "available_at", "last_error", "updated_at")
def schedule_retry(r: R, i: I) -> Changes:
    """Count the attempt; due again after BACKOFF_SECONDS, with its error."""
    return {**NO_LEASE, "attempts": r.attempts + 1, "available_at": i.now + BACKOFF_SECONDS,
            "last_error": i.error, "updated_at": i.now}


@effect(*LEASE_FIELDS, "attempts", "last_error", "updated_at")
def give_up(r: R, i: I) -> Changes:
    """Count the attempt and fail the task with its error."""
    return {**NO_LEASE, "attempts": r.attempts + 1, "last_error": i.error, "updated_at": i.now}


@effect(*LEASE_FIELDS, "attempts", "available_at", "last_error", "updated_at")
def retry_after_expiry(r: R, i: I) -> Changes:
    """An expired lease counts as a failed attempt: due again after BACKOFF_SECONDS."""
    return {**NO_LEASE, "attempts": r.attempts + 1, "available_at": i.now + BACKOFF_SECONDS,
            "last_error": "lease_expired", "updated_at": i.now}


@effect(*LEASE_FIELDS, "attempts", "last_error", "updated_at")
def give_up_after_expiry(r: R, i: I) -> Changes:
    """An expired lease was the last attempt: the task fails."""
    return {**NO_LEASE, "attempts": r.attempts + 1, "last_error": "lease_expired",
            "updated_at": i.now}


@expressed
def lease_fields_iff_running(r: Fields[Task]) -> Expr:
    """Worker, token and expiry are set exactly while running."""
    present = [getattr(r, name).is_not_none() for name in LEASE_FIELDS]
    return if_else(r.status == TaskStatus.RUNNING, all_of(*present), ~any_of(*present))


@expressed
def attempts_within_max(r: Fields[Task]) -> Expr:
    """attempts never exceeds max_attempts."""
    return r.attempts <= r.max_attempts


@expressed
def failed_with_an_error(r: Fields[Task]) -> Expr:
    """A failed task carries the error that failed it."""
    return (r.status != TaskStatus.FAILED) | r.last_error.is_not_none()


@step_invariant
def claim_mints_a_new_token(before: R, after: R) -> bool:
    """A task entering running holds a lease token it did not hold before."""
    return (after.status != TaskStatus.RUNNING or before.status == TaskStatus.RUNNING
            or after.lease_token != before.lease_token)


@step_invariant
def renewal_keeps_the_token(before: R, after: R) -> bool:
    """A running task that stays running keeps its holder and token."""
    return not (before.status == after.status == TaskStatus.RUNNING) or (
        before.lease_token == after.lease_token and before.worker_id == after.worker_id)


TABLE: list[dict[str, Any]] = [
    {"trigger": "claim", "source": "queued", "dest": "running",
     "conditions": ["is_due", "an_attempt_is_left"], "after": "take_lease"},
    {"trigger": "renew", "source": "running", "dest": "running",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "extend_lease"},
    {"trigger": "succeed", "source": "running", "dest": "succeeded",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "end_lease"},
    {"trigger": "fail", "source": "running", "dest": "queued",
     "conditions": ["lease_is_held", "lease_is_live", "retry_allowed"], "after": "schedule_retry"},
    {"trigger": "fail", "source": "running", "dest": "failed",
     "conditions": ["lease_is_held", "lease_is_live"], "unless": ["retry_allowed"],
     "after": "give_up"},
    {"trigger": "expire", "source": "running", "dest": "queued",
     "conditions": ["lease_has_expired", "attempts_remain"], "after": "retry_after_expiry"},
    {"trigger": "expire", "source": "running", "dest": "failed",
     "conditions": ["lease_has_expired"], "unless": ["attempts_remain"],
     "after": "give_up_after_expiry"},
]

TASKS: Lifecycle[Task, TaskInputs] = Lifecycle(
    module=__name__,
    declared_in=[".tasks_inputs"],
    name="tasks",
    description="A task leased to a worker, retried with a backoff, renewed while it runs.",
    statuses=TaskStatus, table=TABLE, initial=TaskStatus.QUEUED,
    final=[TaskStatus.SUCCEEDED, TaskStatus.FAILED], creation="submit",
    guards=[is_due, an_attempt_is_left, lease_is_held, lease_is_live, lease_has_expired,
            attempts_remain, retry_allowed],
    effects=[take_lease, extend_lease, end_lease, schedule_retry, give_up, retry_after_expiry,
             give_up_after_expiry],
    invariants=InvariantSet(CODE + "state_invalid",
                            [lease_fields_iff_running, attempts_within_max, failed_with_an_error],
                            steps=[claim_mints_a_new_token, renewal_keeps_the_token]),
    record_type=Task, key_field="task_id", not_allowed_code=CODE + "not_allowed",
    lease=Lease(trigger="claim", token_field="lease_token", expires_field="lease_expires_at",
                due_field="available_at", order_by=("available_at", "task_id"),
                expiry_trigger="expire"),
    handling=Handling(
        inputs=lambda now, worker_id, token, seconds: TaskInputs(
            now=now, worker_id=worker_id, lease_token=token, lease_seconds=seconds),
        finish=outcomes(success="succeed", failure="fail"),
        renewal="renew", attempt=lambda task: task.attempts + 1,
    ),
)
