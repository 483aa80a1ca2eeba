"""Exploration inputs for document review, beside its table (what `lifecycles check` runs).

Bounds: one document submitted at t=0 with a 1000 s deadline and max_revisions 1 or 2;
300 s leases; every trigger at the record's clock and one second before, at and after
its deadline and its lease expiry; decisions by the lease holder, by another reviewer,
and after the lease expired; reasons well-formed, missing and malformed; resubmission
of the next, the same and a skipped revision.

Abstraction: every field as it is, except that the deadline and the lease expiry are
kept as their offset from the record's clock (``updated_at``, the time of its last
transition), the submission and availability times as before/at/after the clock, and
the reviewer and lease token by their presence. Guards only compare ``now`` with the
deadline and the lease expiry, and every ``now`` used is placed relative to them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import attrs

from examples.review.lifecycle import REVIEW, ReviewInputs, ReviewRecord, new_document
from lifecycles import Exploration, time_relation, trigger_move

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

REVIEWER = "reviewer-a"
OTHER = "reviewer-b"


def initial_documents() -> list[ReviewRecord]:
    return [new_document("doc-1", now=0.0, deadline_seconds=1000.0, max_revisions=limit)
            for limit in (1, 2)]


def abstraction(r: ReviewRecord) -> Hashable:
    clock = r.updated_at
    return (
        r.status, r.revision, r.max_revisions, r.decision, r.reason,
        r.reviewer is not None, r.lease_token is not None,
        r.due_at - clock, None if r.lease_expires_at is None else r.lease_expires_at - clock,
        time_relation(r.available_at, clock), time_relation(r.submitted_at, clock),
    )


def _around(r: ReviewRecord, mark: float | None) -> list[float]:
    """The mark, one second after and before it, and the clock; never before the clock."""
    times = [] if mark is None else [mark, mark + 1.0, mark - 1.0]
    return list(dict.fromkeys(t for t in [*times, r.updated_at] if t >= r.updated_at))


def claims(r: ReviewRecord) -> list[ReviewInputs]:
    return [ReviewInputs(now=now, reviewer=REVIEWER, lease_token=f"lease-{now:g}")
            for now in [r.updated_at, *_around(r, r.due_at)]]


def decisions(r: ReviewRecord, reasons: tuple[str | None, ...]) -> list[ReviewInputs]:
    held = ReviewInputs(now=r.updated_at, reviewer=r.reviewer, lease_token=r.lease_token)
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.updated_at
    return [
        *(attrs.evolve(held, reason=reason, now=now)
          for now in (r.updated_at, expiry - 1.0) for reason in reasons),
        attrs.evolve(held, reviewer=OTHER, reason=reasons[0]),
        attrs.evolve(held, now=expiry, reason=reasons[0]),
    ]


def approvals(r: ReviewRecord) -> list[ReviewInputs]:
    return decisions(r, (None,))


def objections(r: ReviewRecord) -> list[ReviewInputs]:
    return decisions(r, ("needs_sources", None, "Not A Code!"))


def releases(r: ReviewRecord) -> list[ReviewInputs]:
    return [ReviewInputs(now=now) for now in _around(r, r.lease_expires_at)]


def resubmissions(r: ReviewRecord) -> list[ReviewInputs]:
    return [ReviewInputs(now=now, revision=revision)
            for now in [r.updated_at, *_around(r, r.due_at)]
            for revision in (r.revision + 1, r.revision, r.revision + 2)]


def expiries(r: ReviewRecord) -> list[ReviewInputs]:
    # The clock first: generated tests favour the first choice, and an early expiry
    # would end most documents before anything else happened to them.
    return [ReviewInputs(now=now)
            for now in dict.fromkeys([r.updated_at, *_around(r, r.due_at)])]


def describe(r: ReviewRecord, i: ReviewInputs) -> str:
    parts = [f"now=clock{i.now - r.updated_at:+g}s"]
    if i.reviewer is not None:
        parts.append(f"by {i.reviewer}")
    if i.reason is not None:
        parts.append(f"reason={i.reason!r}")
    if i.revision is not None:
        parts.append(f"revision={i.revision}")
    return " ".join(parts)


def new_documents() -> SearchStrategy[ReviewRecord]:
    """Documents under a few ids (repeats happen), short and long deadlines."""
    from hypothesis import strategies as st

    return st.builds(
        lambda doc, now, deadline, limit: new_document(
            doc, now=now, deadline_seconds=deadline, max_revisions=limit),
        st.sampled_from(["doc-1", "doc-2", "doc-3"]), st.sampled_from([0.0, 10.0]),
        st.sampled_from([1000.0, 50.0]), st.one_of(st.just(3), st.sampled_from([1, 2, 3])),
    )


EXPLORATION: Exploration[ReviewRecord] = Exploration(
    lifecycle=REVIEW,
    initial=initial_documents,
    moves=(
        trigger_move("claim", claims, describe=describe),
        trigger_move("approve", approvals, describe=describe),
        trigger_move("request_changes", objections, describe=describe),
        trigger_move("reject", objections, describe=describe),
        trigger_move("release_lease", releases, describe=describe),
        trigger_move("resubmit", resubmissions, describe=describe),
        trigger_move("expire", expiries, describe=describe),
    ),
    abstraction=abstraction,
    abstraction_doc="deadline and lease expiry as offsets from updated_at; other times "
                    "before/at/after it; reviewer and token by presence",
    bounds="one document, 1000 s deadline, max_revisions 1..2, 300 s leases; holder, "
           "other reviewer, expired lease; good, missing and malformed reasons",
    new_records=new_documents,
    lease_inputs=lambda now, token: ReviewInputs(now=now, reviewer=REVIEWER, lease_token=token),
)
