"""Planted defect: a claim that reuses the old lease token (found by a step invariant).

The job keeps its last lease token after the lease ends. ``claim`` here writes the
token it finds when there is one (``keep_or_mint_lease``), so a job claimed again runs
under its previous lease: the late completion of the first worker would be taken for
the second's. No state invariant can see it, the step invariant
``claim_mints_a_new_lease_token`` does:

    lifecycles check --module examples/defects/reused_token.py     # exits 1 with a trace
"""

from __future__ import annotations

from examples.defects._jobs import ENDINGS, Job, JobInputs, job_exploration, job_lifecycle
from lifecycles import Changes, effect


@effect("lease_token")
def keep_or_mint_lease(r: Job, i: JobInputs) -> Changes:
    """Lease the job, under its old token when it has one (the defect)."""
    return {"lease_token": r.lease_token or i.lease_token}


REUSED_TOKEN = job_lifecycle(
    "jobs_reused_token",
    [
        {"trigger": "claim", "source": "idle", "dest": "running",
         "conditions": ["failures_remain"], "after": "keep_or_mint_lease"},
        {"trigger": "fail", "source": "running", "dest": "idle", "after": "count_failure",
         "conditions": ["failures_remain"]},
        {"trigger": "fail", "source": "running", "dest": "parked", "after": "count_failure"},
        {"trigger": "close", "source": "parked", "dest": "done"},
        *ENDINGS,
    ],
    __name__, effects=[keep_or_mint_lease],
)

EXPLORATION = job_exploration(REUSED_TOKEN)
