"""Document review: a reviewer leases a submitted document and decides before its deadline.

Rules, in prose (the table below is the spec):

* ``submit`` creates a document in ``submitted``, due for review at once, with a
  deadline and a bound on its revisions.
* ``claim`` leases a submitted document to one reviewer until now + lease_seconds,
  while its deadline has not passed.
* While holding a live lease the reviewer decides: ``approve``; ``request_changes`` or
  ``reject``, each with a reason code.
* A lease that outlives its expiry is released by ``release_lease``: back to
  ``submitted`` for another reviewer.
* The author ``resubmit``s the next revision after changes were requested, before the
  deadline and while revisions remain.
* A document still waiting (submitted or changes_requested) when its deadline passes
  is ``expire``d.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from lifecycles import (
    Changes,
    FieldRule,
    FiredBy,
    InvariantSet,
    Lease,
    Lifecycle,
    effect,
    finite_time,
    guard,
    integer_between,
    invariant,
    matches,
    one_of,
    step_invariant,
)

CODE = "document_review."


class ReviewStatus(StrEnum):
    SUBMITTED = "submitted"
    IN_REVIEW = "in_review"
    CHANGES_REQUESTED = "changes_requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


TABLE: list[dict[str, Any]] = [
    {"trigger": "claim", "source": "submitted", "dest": "in_review",
     "conditions": ["before_deadline"], "after": "open_review"},
    {"trigger": "approve", "source": "in_review", "dest": "approved",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "record_approval"},
    {"trigger": "request_changes", "source": "in_review", "dest": "changes_requested",
     "conditions": ["lease_is_held", "lease_is_live", "reason_given"],
     "after": "record_change_request"},
    {"trigger": "reject", "source": "in_review", "dest": "rejected",
     "conditions": ["lease_is_held", "lease_is_live", "reason_given"],
     "after": "record_rejection"},
    {"trigger": "release_lease", "source": "in_review", "dest": "submitted",
     "conditions": ["lease_has_expired"], "after": "drop_lease"},
    {"trigger": "resubmit", "source": "changes_requested", "dest": "submitted",
     "conditions": ["before_deadline", "next_revision", "revisions_remain"],
     "after": "take_revision"},
    {"trigger": "expire", "source": ["submitted", "changes_requested"], "dest": "expired",
     "conditions": ["deadline_passed"], "after": "mark_expired"},
]


# --- the record and its rules ---------------------------------------------------------

token = matches("token_syntax", r"[A-Za-z0-9_.:-]{1,128}")
reason_code = matches("reason_code_syntax", r"[a-z][a-z0-9_.]{0,63}")
time = finite_time("time_finite_non_negative")
DECISIONS = ("approve", "request_changes", "reject")


def _status(value: object) -> object:
    """Stored statuses are strings; a declared one becomes the enum, others stay to fail."""
    return ReviewStatus(value) if isinstance(value, str) and value in set(ReviewStatus) else value


@attrs.frozen
class ReviewRecord:
    """One document under review."""

    doc_id: str = attrs.field(validator=token)
    status: ReviewStatus = attrs.field(converter=_status,
                                       validator=one_of("status_declared", set(ReviewStatus)))
    revision: int = attrs.field(validator=integer_between("revision_bounds", 1, 20))
    max_revisions: int = attrs.field(validator=integer_between("max_revisions_bounds", 1, 20))
    available_at: float = attrs.field(validator=time)
    due_at: float = attrs.field(validator=time)
    reviewer: str | None = attrs.field(validator=token.allow_none())
    lease_token: str | None = attrs.field(validator=token.allow_none())
    lease_expires_at: float | None = attrs.field(validator=time.allow_none())
    decision: str | None = attrs.field(validator=FieldRule(
        "decision_known", lambda v: v in DECISIONS, optional=True,
        meaning="one of: " + ", ".join(DECISIONS)))
    reason: str | None = attrs.field(validator=reason_code.allow_none())
    submitted_at: float = attrs.field(validator=time)
    updated_at: float = attrs.field(validator=time)


@invariant
def lease_fields_iff_in_review(r: ReviewRecord) -> bool:
    """Reviewer, lease token and expiry are all set in review, and all empty otherwise."""
    present = [r.reviewer is not None, r.lease_token is not None, r.lease_expires_at is not None]
    return all(present) if r.status == ReviewStatus.IN_REVIEW else not any(present)


@invariant
def decision_matches_status(r: ReviewRecord) -> bool:
    """approved, changes_requested and rejected carry their decision; other statuses none."""
    expected = {
        ReviewStatus.APPROVED: "approve",
        ReviewStatus.CHANGES_REQUESTED: "request_changes",
        ReviewStatus.REJECTED: "reject",
    }.get(r.status)
    return r.decision == expected


@invariant
def reason_iff_objection_or_expiry(r: ReviewRecord) -> bool:
    """A reason code exists exactly when changes were requested, or rejected, or expired."""
    needs = r.status in (ReviewStatus.CHANGES_REQUESTED, ReviewStatus.REJECTED,
                         ReviewStatus.EXPIRED)
    return needs == (r.reason is not None)


@invariant
def revision_within_bound(r: ReviewRecord) -> bool:
    """The revision never exceeds max_revisions."""
    return r.revision <= r.max_revisions


@invariant
def deadline_after_submission(r: ReviewRecord) -> bool:
    """The deadline lies after the first submission."""
    return r.due_at > r.submitted_at


@invariant
def updated_not_before_submitted(r: ReviewRecord) -> bool:
    """updated_at is never earlier than submitted_at."""
    return r.updated_at >= r.submitted_at


@step_invariant
def revision_never_decreases(before: ReviewRecord, after: ReviewRecord) -> bool:
    """The revision never decreases."""
    return after.revision >= before.revision


REVIEW_INVARIANTS: InvariantSet[ReviewRecord] = InvariantSet(
    CODE + "state_invalid",
    [lease_fields_iff_in_review, decision_matches_status, reason_iff_objection_or_expiry,
     revision_within_bound, deadline_after_submission, updated_not_before_submitted],
    steps=[revision_never_decreases],
)


# --- inputs ----------------------------------------------------------------------------


@attrs.frozen
class ReviewInputs:
    """What one transition reads besides the record."""

    now: float
    reviewer: str | None = None
    lease_token: str | None = None
    lease_seconds: float = 300.0
    reason: str | None = None
    revision: int | None = None


def new_document(doc_id: str, *, now: float, deadline_seconds: float,
                 max_revisions: int = 3) -> ReviewRecord:
    """The record ``submit`` creates: revision 1, available now, due after the deadline."""
    return ReviewRecord(
        doc_id=doc_id, status=ReviewStatus.SUBMITTED, revision=1, max_revisions=max_revisions,
        available_at=now, due_at=now + deadline_seconds, reviewer=None, lease_token=None,
        lease_expires_at=None, decision=None, reason=None, submitted_at=now, updated_at=now,
    )


# --- guards ----------------------------------------------------------------------------

R = ReviewRecord
I = ReviewInputs  # noqa: E741 - short names keep the guards on one line


@guard(CODE + "deadline_passed")
def before_deadline(r: R, i: I) -> bool:
    """The deadline has not come: now < due_at."""
    return i.now < r.due_at


@guard(CODE + "deadline_not_reached")
def deadline_passed(r: R, i: I) -> bool:
    """The deadline has come: now >= due_at."""
    return i.now >= r.due_at


@guard(CODE + "lease_lost")
def lease_is_held(r: R, i: I) -> bool:
    """The caller holds this lease: same reviewer and same lease token."""
    return r.reviewer == i.reviewer and r.lease_token == i.lease_token


@guard(CODE + "lease_expired")
def lease_is_live(r: R, i: I) -> bool:
    """The lease has not expired: now < lease_expires_at."""
    return r.lease_expires_at is not None and i.now < r.lease_expires_at


@guard(CODE + "lease_live")
def lease_has_expired(r: R, i: I) -> bool:
    """The lease's expiry has passed: lease_expires_at <= now."""
    return r.lease_expires_at is not None and r.lease_expires_at <= i.now


@guard(CODE + "reason_invalid")
def reason_given(r: R, i: I) -> bool:
    """The decision comes with a well-formed reason code."""
    return i.reason is not None and reason_code.check(i.reason)


@guard(CODE + "revision_stale")
def next_revision(r: R, i: I) -> bool:
    """The resubmission is exactly the next revision."""
    return i.revision == r.revision + 1


@guard(CODE + "revisions_exhausted")
def revisions_remain(r: R, i: I) -> bool:
    """Another revision stays within max_revisions."""
    return r.revision < r.max_revisions


# --- effects ---------------------------------------------------------------------------

NO_LEASE = {"reviewer": None, "lease_token": None, "lease_expires_at": None}


@effect("reviewer", "lease_token", "lease_expires_at", "updated_at")
def open_review(r: R, i: I) -> Changes:
    """Lease the document to the reviewer until now + lease_seconds."""
    return {"reviewer": i.reviewer, "lease_token": i.lease_token,
            "lease_expires_at": i.now + i.lease_seconds, "updated_at": i.now}


@effect("reviewer", "lease_token", "lease_expires_at", "decision", "updated_at")
def record_approval(r: R, i: I) -> Changes:
    """Record the approval and end the lease."""
    return {**NO_LEASE, "decision": "approve", "updated_at": i.now}


OBJECTION_WRITES = ("reviewer", "lease_token", "lease_expires_at", "decision", "reason",
                    "updated_at")


@effect(*OBJECTION_WRITES)
def record_change_request(r: R, i: I) -> Changes:
    """Record the request for changes with its reason and end the lease."""
    return {**NO_LEASE, "decision": "request_changes", "reason": i.reason, "updated_at": i.now}


@effect(*OBJECTION_WRITES)
def record_rejection(r: R, i: I) -> Changes:
    """Record the rejection with its reason and end the lease."""
    return {**NO_LEASE, "decision": "reject", "reason": i.reason, "updated_at": i.now}


@effect("reviewer", "lease_token", "lease_expires_at", "available_at", "updated_at")
def drop_lease(r: R, i: I) -> Changes:
    """End the expired lease; the document is available again at once."""
    return {**NO_LEASE, "available_at": i.now, "updated_at": i.now}


@effect("revision", "decision", "reason", "available_at", "updated_at")
def take_revision(r: R, i: I) -> Changes:
    """Take the next revision; the decision and reason of the last round are cleared."""
    return {"revision": r.revision + 1, "decision": None, "reason": None,
            "available_at": i.now, "updated_at": i.now}


@effect("decision", "reason", "updated_at")
def mark_expired(r: R, i: I) -> Changes:
    """The deadline passed while waiting: reason deadline_passed, no decision."""
    return {"decision": None, "reason": "deadline_passed", "updated_at": i.now}


REVIEW: Lifecycle[ReviewRecord, ReviewInputs] = Lifecycle(
    module=__name__,
    declared_in=[".lifecycle_inputs"],  # its exploration, beside this file
    name="review",
    description="A reviewer leases a submitted document and decides before its deadline.",
    statuses=ReviewStatus,
    table=TABLE,
    initial=ReviewStatus.SUBMITTED,
    final=[ReviewStatus.APPROVED, ReviewStatus.REJECTED, ReviewStatus.EXPIRED],
    creation="submit",
    guards=[before_deadline, deadline_passed, lease_is_held, lease_is_live, lease_has_expired,
            reason_given, next_revision, revisions_remain],
    effects=[open_review, record_approval, record_change_request, record_rejection,
             drop_lease, take_revision, mark_expired],
    invariants=REVIEW_INVARIANTS,
    record_type=ReviewRecord,
    key_field="doc_id",
    not_allowed_code=CODE + "not_allowed",
    lease=Lease(trigger="claim", token_field="lease_token", expires_field="lease_expires_at",
                due_field="available_at", order_by=("due_at", "doc_id"),
                expiry_trigger="release_lease"),
    status_meanings={
        "submitted": "Waiting for a reviewer.",
        "in_review": "A reviewer holds the lease.",
        "changes_requested": "The author is to resubmit the next revision.",
        "approved": "Approved. Final.",
        "rejected": "Rejected, with a reason. Final.",
        "expired": "The deadline passed while waiting. Final.",
    },
)

# Who fires each trigger. The example has no facade: "the application" is the code that
# uses this lifecycle on a store, and nothing here runs on a timer.
FIRED_BY = FiredBy(REVIEW, {
    "submit": "The application, for a new document: `new_document(...)`, then the store's "
              "insert of `REVIEW.create(record)`.",
    "claim": "A reviewer's worker, through the lease protocol's claim "
             "(`lifecycles.machines.lease.claim` on a store); a document past its "
             "deadline is passed over.",
    "release_lease": "Every claim, on any reviewer's worker.",
    "approve": "The reviewer holding the lease, through the application.",
    "request_changes": "The reviewer holding the lease, through the application, with a "
                       "reason code.",
    "reject": "The reviewer holding the lease, through the application, with a reason code.",
    "resubmit": "The author, through the application, with the next revision number.",
    "expire": "A deadline sweep the application runs: nothing fires it on a timer, so a "
              "document stays waiting past its deadline until the sweep reaches it.",
})
