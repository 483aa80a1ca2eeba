"""A small leased job, the base of the planted defects beside it: a record, its inputs,
the rows that are right, and a checker exploration for a table built on them.

Each defect module declares one table that gets one thing wrong, and ``lifecycles
check --module examples/defects/<defect>.py`` finds it with a trace. Built only from the
public API, as a lifecycle of your own would be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

import attrs

from lifecycles import (
    Changes,
    Exploration,
    InvariantSet,
    Lifecycle,
    effect,
    guard,
    invariant,
    step_invariant,
    trigger_move,
)

CODE = "jobs."
MAX_FAILURES = 2


class JobStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    PARKED = "parked"
    DONE = "done"


@attrs.frozen
class Job:
    key: str
    status: JobStatus
    failures: int = 0
    lease_token: str | None = None
    """The last lease's token, kept after it ends (for the audit trail)."""


@attrs.frozen
class JobInputs:
    lease_token: str | None = None


@guard(refusal_code=CODE + "failures_spent")
def failures_remain(r: Job, i: JobInputs) -> bool:
    """The job has failed fewer than MAX_FAILURES times."""
    return r.failures < MAX_FAILURES


ENDINGS: list[dict[str, Any]] = [
    {"trigger": "finish", "source": "running", "dest": "done"},
    {"trigger": "close", "source": "idle", "dest": "done"},
]
"""The rows every job table ends with: a run finishes, an idle job is closed."""


@effect("lease_token")
def mint_lease(r: Job, i: JobInputs) -> Changes:
    """Lease the job with the new token."""
    return {"lease_token": i.lease_token}


@effect("failures")
def count_failure(r: Job, i: JobInputs) -> Changes:
    """Count one failure."""
    return {"failures": r.failures + 1}


@invariant
def failures_within_max(r: Job) -> bool:
    """failures never exceeds MAX_FAILURES."""
    return r.failures <= MAX_FAILURES


@step_invariant
def claim_mints_a_new_lease_token(before: Job, after: Job) -> bool:
    """A job entering running holds a lease token it did not hold before."""
    return (after.status != JobStatus.RUNNING or before.status == JobStatus.RUNNING
            or after.lease_token != before.lease_token)


def job_lifecycle(name: str, table: Sequence[Mapping[str, Any]], module: str,
                  **declared: Any) -> Lifecycle[Job, JobInputs]:
    """A job lifecycle with ``table``: its guards and effects are ``failures_remain``,
    ``count_failure`` and those in ``declared`` (``guards``, ``effects``)."""
    return Lifecycle(
        name=name, statuses=JobStatus, table=table, initial=JobStatus.IDLE,
        final=[JobStatus.DONE], creation="create",
        guards=[failures_remain, *declared.get("guards", ())],
        effects=[count_failure, *declared.get("effects", ())],
        invariants=InvariantSet(CODE + "state_invalid", [failures_within_max],
                                steps=[claim_mints_a_new_lease_token]),
        record_type=Job, key_field="key", not_allowed_code=CODE + "not_allowed",
        module=module,
    )


def job_exploration(lifecycle: Lifecycle[Job, JobInputs]) -> Exploration[Job]:
    """Every trigger of ``lifecycle``, a fresh token for each claim, the first job idle."""
    return Exploration(
        lifecycle=lifecycle,
        initial=lambda: [Job("job-1", JobStatus.IDLE)],
        moves=tuple(
            trigger_move(trigger, lambda r: [JobInputs(lease_token=f"lease-{r.failures}")])
            for trigger in lifecycle.triggers
        ),
        abstraction=lambda r: (r.status, r.failures, r.lease_token),
        abstraction_doc="the whole record",
        bounds=f"failures up to {MAX_FAILURES}; one token per claim",
    )
