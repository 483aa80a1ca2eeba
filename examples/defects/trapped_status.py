"""Planted defect: a status that traps records (found by the liveness check).

A job that fails ``MAX_FAILURES`` times is parked, to be resumed by ``resume``; but
``resume`` demands failures left, and failures never go down, so no parked job ever
leaves. Every status has an exit row, so no definition check objects; the explored
graph shows the parked states with no way to ``done``:

    lifecycles check --module examples/defects/trapped_status.py   # exits 1 with a trace
"""

from __future__ import annotations

from examples.defects._jobs import (
    ENDINGS,
    MAX_FAILURES,
    Job,
    JobInputs,
    job_exploration,
    job_lifecycle,
    mint_lease,
)
from lifecycles import guard


@guard(refusal_code="jobs.failures_spent")
def another_failure_allowed(r: Job, i: JobInputs) -> bool:
    """One more failure stays below MAX_FAILURES."""
    return r.failures + 1 < MAX_FAILURES


TRAPPED_STATUS = job_lifecycle(
    "jobs_trapped_status",
    [
        {"trigger": "claim", "source": "idle", "dest": "running",
         "conditions": ["failures_remain"], "after": "mint_lease"},
        {"trigger": "fail", "source": "running", "dest": "idle",
         "conditions": ["another_failure_allowed"], "after": "count_failure"},
        {"trigger": "fail", "source": "running", "dest": "parked", "after": "count_failure"},
        {"trigger": "resume", "source": "parked", "dest": "idle",
         "conditions": ["failures_remain"]},
        *ENDINGS,
    ],
    __name__, guards=[another_failure_allowed], effects=[mint_lease],
)

EXPLORATION = job_exploration(TRAPPED_STATUS)
