"""A leased ticket lifecycle whose record carries one field of every kind of rule, for the
framework's tests of rules in SQL (tests/stores/test_rules_in_sql.py, the rules indexes,
the conjunction of invariants).

The tests' tasks (tests/support/tasks.py) have a few plain rules; a store must render
every kind a lifecycle may declare, and agree with Python on each: exact ``str``
identifiers (a subclass is judged by its type, not its claims), patterns, a hex digest,
a set of text values, a set of integers, bounded and non-negative integers, an optional
integer (no boolean), finite times, a length bound, a converter (the status), nullable
fields; invariants with ``if_else``, ``all_of``/``any_of``, ``is_in``, equalities of
conditions and a compiled sub-expression. Some fields are never written by a transition
(the identity: ``queue``, ``digest``, ``kind``, ``max_failures``, ``created_at``), so a
SQLite store keeps two rules indexes, one no UPDATE touches.

A ticket waits (``queued``) until due, is leased to a reviewer (``running``), and is
approved (``done``), rejected (``failed``), or fails an attempt: back to ``waiting`` with
its error while failures remain, ``failed`` otherwise; an expired lease counts as a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import (
    FieldRule,
    InvariantSet,
    expressed,
    finite_time,
    integer_between,
    is_integer,
    matches,
    non_negative_integer,
    one_of,
    step_invariant,
)
from lifecycles.invariants._expressions import (
    Expr,
    Fields,
    Length,
    all_of,
    any_of,
    compiled,
    if_else,
    int_not_bool,
    str_exactly,
)
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, Lease, effect, guard

CODE = "tickets."
STATE_INVALID = CODE + "state_invalid"
T0 = 1_000.0
RETRY_SECONDS = 5.0


class TicketStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"


class Review(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"


KINDS = frozenset({"bug", "chore", "feature"})

# Field rules: one field each, named for what they demand.
token = matches("token_syntax", r"[A-Za-z0-9_.:-]{1,256}").also(str_exactly)
sha256_hex = matches("sha256_syntax", r"[0-9a-f]{64}").also(str_exactly)
error_code = matches("error_code_syntax", r"[a-z][a-z0-9_.-]{0,127}").also(str_exactly)
kind_known = one_of("kind_known", KINDS).also(str_exactly)
ticket_status = one_of("status_declared", set(TicketStatus))
review_declared = one_of("review_declared", set(Review))
count = non_negative_integer("count_non_negative")
failure_bound = integer_between("max_failures_bounds", 1, 20)
time = finite_time("time_finite_non_negative")
optional_integer = FieldRule.expressed(
    "integer_type", is_integer.expression, optional=True,
    meaning="an integer (not a boolean: True is an int in Python, never in a record)")
flag = one_of("flag_bit", {0, 1})


def _token_of_at_most(characters: int) -> Callable[[Expr], Expr]:
    token_syntax = token.expression
    assert token_syntax is not None
    return lambda v: token_syntax & (Length(v) <= characters)


owner_rule = FieldRule.expressed(
    "owner_syntax", _token_of_at_most(64), meaning="a token of at most 64 characters")

_STATUS_OF: dict[str, TicketStatus] = {member.value: member for member in TicketStatus}


def _status(value: object) -> object:
    """Stored statuses are strings; a known one becomes the enum, anything else stays to fail."""
    return _STATUS_OF.get(value, value) if isinstance(value, str) else value


@attrs.frozen(slots=True)
class Ticket:
    """One ticket, field for field, in column order."""

    ticket_id: str = attrs.field(validator=token)
    queue: str = attrs.field(validator=token)
    digest: str = attrs.field(validator=sha256_hex)
    kind: str = attrs.field(validator=kind_known)
    status: TicketStatus = attrs.field(converter=_status, validator=ticket_status)
    attempts: int = attrs.field(validator=count)
    failures: int = attrs.field(validator=count)
    max_failures: int = attrs.field(validator=failure_bound)
    due_at: float = attrs.field(validator=time)
    owner: str | None = attrs.field(validator=owner_rule.allow_none())
    lease_token: str | None = attrs.field(validator=token.allow_none())
    lease_expires_at: float | None = attrs.field(validator=time.allow_none())
    error: str | None = attrs.field(validator=error_code.allow_none())
    review: str | None = attrs.field(validator=review_declared.allow_none())
    score: int | None = attrs.field(validator=optional_integer)
    flagged: int | None = attrs.field(validator=flag.allow_none())
    created_at: float = attrs.field(validator=time)
    updated_at: float = attrs.field(validator=time)


COLUMNS: tuple[str, ...] = tuple(field.name for field in attrs.fields(Ticket))
LEASE_FIELDS = ("owner", "lease_token", "lease_expires_at")


@attrs.frozen
class TicketInputs:
    now: float
    owner: str | None = None
    lease_token: str | None = None
    lease_seconds: float = 30.0
    error: str | None = None
    score: int = 50


def new_ticket(ticket_id: str = "tk-1", *, now: float = T0, max_failures: int = 3,
               kind: str = "bug") -> Ticket:
    """A queued ticket, due at ``now``."""
    return Ticket(ticket_id, "queue-1", "a" * 64, kind, TicketStatus.QUEUED, 0, 0,
                  max_failures, now, None, None, None, None, None, None, None, now, now)


# --- invariants ---------------------------------------------------------------------


@expressed
def failures_within_max(r: Fields[Ticket]) -> Expr:
    """Failures never exceed the ticket's max_failures."""
    return r.failures <= r.max_failures


@expressed
def attempts_cover_failures(r: Fields[Ticket]) -> Expr:
    """Every failure follows an attempt: attempts >= failures."""
    return r.attempts >= r.failures


@expressed
def lease_fields_iff_running(r: Fields[Ticket]) -> Expr:
    """Owner, token and expiry are all set when running, and all empty otherwise."""
    present = [getattr(r, name).is_not_none() for name in LEASE_FIELDS]
    return if_else(r.status == TicketStatus.RUNNING, all_of(*present), ~any_of(*present))


@expressed
def error_iff_waiting_or_failed(r: Fields[Ticket]) -> Expr:
    """An error exists exactly when the status is waiting or failed."""
    waiting = r.status.is_in((TicketStatus.WAITING, TicketStatus.FAILED))
    return waiting == r.error.is_not_none()


@compiled
def score_in_range(score: Expr) -> Expr:
    """A score is an integer from 0 to 100."""
    return int_not_bool(score) & (score >= 0) & (score <= 100)


@expressed
def review_has_a_score(r: Fields[Ticket]) -> Expr:
    """A reviewed ticket has a score from 0 to 100, and a flag."""
    return r.review.is_none() | (
        r.score.is_not_none() & r.flagged.is_not_none() & score_in_range.expression(r.score))


@expressed
def flagged_only_when_rejected(r: Fields[Ticket]) -> Expr:
    """The flag is raised only on a rejected ticket."""
    return (r.flagged != 1) | (r.review == Review.REJECTED)


@expressed
def done_iff_approved(r: Fields[Ticket]) -> Expr:
    """A ticket is done exactly when it was approved."""
    return (r.status == TicketStatus.DONE) == (r.review == Review.APPROVED)


@expressed
def updated_not_before_created(r: Fields[Ticket]) -> Expr:
    """updated_at is never earlier than created_at."""
    return r.updated_at >= r.created_at


@step_invariant
def claim_mints_a_new_token(before: Ticket, after: Ticket) -> bool:
    """A ticket entering running holds a lease token it did not hold before."""
    return (after.status != TicketStatus.RUNNING or before.status == TicketStatus.RUNNING
            or after.lease_token != before.lease_token)


INVARIANTS: InvariantSet[Ticket] = InvariantSet(
    STATE_INVALID,
    [failures_within_max, attempts_cover_failures, lease_fields_iff_running,
     error_iff_waiting_or_failed, review_has_a_score, flagged_only_when_rejected,
     done_iff_approved, updated_not_before_created],
    steps=[claim_mints_a_new_token],
)

# --- guards and effects -----------------------------------------------------------

R, I = Ticket, TicketInputs  # noqa: E741 - short names keep the guards on one line


@guard(CODE + "not_due")
def is_due(r: R, i: I) -> bool:
    """The ticket is due: due_at <= now."""
    return r.due_at <= i.now


@guard(CODE + "failures_spent")
def failures_remain(r: R, i: I) -> bool:
    """Another failure is allowed: failures < max_failures."""
    return r.failures < r.max_failures


@guard(CODE + "lease_lost")
def lease_is_held(r: R, i: I) -> bool:
    """The caller holds the lease: same owner and token."""
    return r.owner == i.owner and r.lease_token == i.lease_token


@guard(CODE + "lease_expired")
def lease_is_live(r: R, i: I) -> bool:
    """The lease has not expired: now < lease_expires_at."""
    return r.lease_expires_at is not None and i.now < r.lease_expires_at


@guard(CODE + "lease_live")
def lease_has_expired(r: R, i: I) -> bool:
    """The lease has expired: lease_expires_at <= now."""
    return r.lease_expires_at is not None and r.lease_expires_at <= i.now


@guard(CODE + "last_failure")
def another_failure_allowed(r: R, i: I) -> bool:
    """This failure is not the last allowed: failures + 1 < max_failures."""
    return r.failures + 1 < r.max_failures


NO_LEASE: dict[str, Any] = {"owner": None, "lease_token": None, "lease_expires_at": None}


@effect(*LEASE_FIELDS, "attempts", "error", "updated_at")
def take_lease(r: R, i: I) -> Changes:
    """Lease the ticket to the reviewer until now + lease_seconds; one more attempt."""
    return {"owner": i.owner, "lease_token": i.lease_token,
            "lease_expires_at": i.now + i.lease_seconds, "attempts": r.attempts + 1,
            "error": None, "updated_at": i.now}


@effect(*LEASE_FIELDS, "review", "score", "flagged", "updated_at")
def record_approval(r: R, i: I) -> Changes:
    """Approved with the inputs' score; the lease ends."""
    return {**NO_LEASE, "review": Review.APPROVED.value, "score": i.score, "flagged": 0,
            "updated_at": i.now}


@effect(*LEASE_FIELDS, "review", "score", "flagged", "error", "updated_at")
def record_rejection(r: R, i: I) -> Changes:
    """Rejected and flagged, with the inputs' score; the lease ends."""
    return {**NO_LEASE, "review": Review.REJECTED.value, "score": i.score, "flagged": 1,
            "error": "review.rejected", "updated_at": i.now}


@effect(*LEASE_FIELDS, "failures", "due_at", "error", "updated_at")
def schedule_retry(r: R, i: I) -> Changes:
    """Count the failure; due again after RETRY_SECONDS, with its error."""
    return {**NO_LEASE, "failures": r.failures + 1, "due_at": i.now + RETRY_SECONDS,
            "error": i.error, "updated_at": i.now}


@effect(*LEASE_FIELDS, "failures", "error", "updated_at")
def give_up(r: R, i: I) -> Changes:
    """Count the failure and fail the ticket with its error."""
    return {**NO_LEASE, "failures": r.failures + 1, "error": i.error, "updated_at": i.now}


@effect(*LEASE_FIELDS, "failures", "due_at", "error", "updated_at")
def retry_after_expiry(r: R, i: I) -> Changes:
    """An expired lease counts as a failure: due again after RETRY_SECONDS."""
    return {**NO_LEASE, "failures": r.failures + 1, "due_at": i.now + RETRY_SECONDS,
            "error": "lease_expired", "updated_at": i.now}


@effect(*LEASE_FIELDS, "failures", "error", "updated_at")
def give_up_after_expiry(r: R, i: I) -> Changes:
    """An expired lease was the last allowed failure: the ticket fails."""
    return {**NO_LEASE, "failures": r.failures + 1, "error": "lease_expired",
            "updated_at": i.now}


HELD = ["lease_is_held", "lease_is_live"]
TABLE: list[dict[str, Any]] = [
    {"trigger": "claim", "source": ["queued", "waiting"], "dest": "running",
     "conditions": ["is_due", "failures_remain"], "after": "take_lease"},
    {"trigger": "approve", "source": "running", "dest": "done", "conditions": HELD,
     "after": "record_approval"},
    {"trigger": "reject", "source": "running", "dest": "failed", "conditions": HELD,
     "after": "record_rejection"},
    {"trigger": "fail", "source": "running", "dest": "waiting",
     "conditions": [*HELD, "another_failure_allowed"], "after": "schedule_retry"},
    {"trigger": "fail", "source": "running", "dest": "failed", "conditions": HELD,
     "unless": ["another_failure_allowed"], "after": "give_up"},
    {"trigger": "expire", "source": "running", "dest": "waiting",
     "conditions": ["lease_has_expired", "another_failure_allowed"],
     "after": "retry_after_expiry"},
    {"trigger": "expire", "source": "running", "dest": "failed",
     "conditions": ["lease_has_expired"], "unless": ["another_failure_allowed"],
     "after": "give_up_after_expiry"},
]

TICKETS: Lifecycle[Ticket, TicketInputs] = Lifecycle(
    module=__name__,
    name="tickets",
    description="A reviewed ticket whose record carries every kind of rule.",
    statuses=TicketStatus, table=TABLE, initial=TicketStatus.QUEUED,
    final=[TicketStatus.DONE, TicketStatus.FAILED], creation="open",
    guards=[is_due, failures_remain, lease_is_held, lease_is_live, lease_has_expired,
            another_failure_allowed],
    effects=[take_lease, record_approval, record_rejection, schedule_retry, give_up,
             retry_after_expiry, give_up_after_expiry],
    invariants=INVARIANTS, record_type=Ticket, key_field="ticket_id",
    not_allowed_code=CODE + "not_allowed",
    lease=Lease(trigger="claim", token_field="lease_token", expires_field="lease_expires_at",
                due_field="due_at", order_by=("due_at", "ticket_id"), expiry_trigger="expire"),
)

OWNER, TOKEN = "reviewer-1", "token-1"


def held(now: float, **changes: Any) -> TicketInputs:
    """Inputs at ``now`` from the reviewer holding the lease ``TOKEN``."""
    return TicketInputs(now=now, **{"owner": OWNER, "lease_token": TOKEN, **changes})


def tickets_in_every_status() -> list[Ticket]:
    """One valid ticket in each status and a failed one of each way, by real transitions;
    one created later, with one failure allowed, so that columns swapped between them
    break every invariant (updated before created, failures past the maximum)."""
    queued = new_ticket()
    running = TICKETS.fire("claim", queued, held(T0))
    waiting = TICKETS.fire("fail", running, held(T0 + 1, error="reviewer.away"))
    again = TICKETS.fire("claim", waiting, held(T0 + 10, lease_token="token-2"))
    late = TICKETS.fire("claim", new_ticket("tk-2", now=T0 + 50, max_failures=1, kind="chore"),
                        held(T0 + 50))
    return [
        queued, running, waiting, again,
        TICKETS.fire("approve", running, held(T0 + 1, score=90)),
        TICKETS.fire("reject", running, held(T0 + 1, score=0)),
        TICKETS.fire("expire", attrs.evolve(running, attempts=3, failures=2), held(T0 + 30)),
        TICKETS.fire("fail", late, held(T0 + 51, error="reviewer.gone")),
    ]


def plain_row(record: Ticket) -> dict[str, Any]:
    """The record as a row of plain values, as written raw into a table."""
    return {name: (value.value if isinstance(value, StrEnum) else value)
            for name, value in attrs.asdict(record).items()}
