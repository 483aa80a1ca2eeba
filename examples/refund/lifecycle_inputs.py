"""Exploration inputs for refunds, beside their table (what `lifecycles check` runs).

Bounds: one refund submitted at t=0 with max_failures 1, 2 or 3; 300 s leases; every
trigger at the record's clock and one second before, at and after its due time and its
lease expiry (never before the clock); the holder, another worker, and the holder's
stale token; failures retryable and not; rescues by another worker with a new token.

Abstraction: every field as it is, except that the due time (in a claimable status:
only a claim reads it, and every row out of a claimable status writes it anew) and the
lease expiry are kept as their offset from the record's clock (``updated_at``, the time
of its last transition), the creation time as before/at/after it, and the worker and
lease token by their presence. Guards only compare ``now`` with the due time and the lease expiry,
and every ``now`` used is placed relative to them; the backoff's jitter depends on the
refund's key and failures, both kept, so the offsets it makes are kept exactly.

Expectations (each move's outcome, as a caller relies on it; the mutants check needs
them where no invariant can tell): the live holder's renewal is accepted; its success
ends ``succeeded``; its failure ends ``retry_wait`` exactly when retryable with failures
left, else ``failed``; a rescue of an expired lease ends ``retry_wait`` while failures
remain, else ``failed``; a cancel ends ``cancelled``.

Interleaved workers (:func:`refund_workers`): 2 workers (up to 3) on 1 refund (up to 2),
max_failures 2; each provider call ends refunded, failing retryably, failing for good,
or renewed (the worker then stalls holding the renewed lease).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from examples.refund.lifecycle import REFUND, Refund, RefundStatus, new_refund
from lifecycles import (
    AcceptedCycle,
    EquivalentMutant,
    ExpectationBroken,
    Exploration,
    Fire,
    Move,
    TransitionRefused,
    Work,
    Workers,
    WorkInputs,
    time_relation,
)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

WORKER = "worker-a"
OTHER = "worker-b"
LEASE_SECONDS = 300.0
RETRYABLE = "provider_unavailable"
FINAL = "account_closed"


def initial_refunds() -> list[Refund]:
    return [new_refund("rf-1", amount_cents=1250, currency="EUR", now=0.0, max_failures=limit)
            for limit in (1, 2, 3)]


def abstraction(r: Refund) -> Hashable:
    clock = r.updated_at
    waiting = r.status in REFUND.claimable  # only a claim reads the due time
    return (
        r.status, r.failures, r.max_failures, r.last_error, r.refund_id,
        r.worker_id is not None, r.lease_token is not None,
        r.available_at - clock if waiting else None,
        None if r.lease_expires_at is None else r.lease_expires_at - clock,
        time_relation(r.created_at, clock),
    )


def _around(r: Refund, mark: float | None) -> list[float]:
    """The mark, one second after and before it, and the clock; never before the clock."""
    times = [] if mark is None else [mark, mark + 1.0, mark - 1.0]
    return list(dict.fromkeys(t for t in [*times, r.updated_at] if t >= r.updated_at))


def held(r: Refund, now: float, **changed: Any) -> WorkInputs:
    """The lease holder's inputs at ``now``."""
    inputs = WorkInputs(now=now, worker_id=r.worker_id, lease_token=r.lease_token,
                        lease_seconds=LEASE_SECONDS)
    return attrs.evolve(inputs, **changed) if changed else inputs


def _expiry(r: Refund) -> float:
    return r.lease_expires_at if r.lease_expires_at is not None else r.updated_at


def claims(r: Refund) -> list[WorkInputs]:
    return [WorkInputs(now=now, worker_id=WORKER, lease_token=f"lease-{r.failures + 1}",
                       lease_seconds=LEASE_SECONDS)
            for now in _around(r, r.available_at)]


def holder_calls(r: Refund, **ending: Any) -> list[WorkInputs]:
    """The holder while live (at the clock, a second before expiry), then refused ones:
    another worker, the holder's stale token, the holder once the lease expired."""
    return [held(r, r.updated_at, **ending), held(r, _expiry(r) - 1.0, **ending),
            held(r, r.updated_at, worker_id=OTHER, **ending),
            held(r, r.updated_at, lease_token="lease-stale", **ending),
            held(r, _expiry(r), **ending)]


def renewals(r: Refund) -> list[WorkInputs]:
    return holder_calls(r)


def successes(r: Refund) -> list[WorkInputs]:
    return holder_calls(r)


def failures(r: Refund) -> list[WorkInputs]:
    return [*holder_calls(r, error=RETRYABLE, retryable=True),
            held(r, r.updated_at, error=FINAL, retryable=False)]


def rescues(r: Refund) -> list[WorkInputs]:
    return [WorkInputs(now=now, worker_id=OTHER, lease_token="lease-rescuer",
                       lease_seconds=LEASE_SECONDS)
            for now in _around(r, r.lease_expires_at)]


def cancels(r: Refund) -> list[WorkInputs]:
    return [WorkInputs(now=r.updated_at)]


# --- what each move must end as ---------------------------------------------------------
# Where an invariant can tell a wrong outcome it is left to the invariant: an expectation
# states what no rule of a record can (which of two valid endings a step must take).

Ending = frozenset[str]
RETRIED, GIVEN_UP = RefundStatus.RETRY_WAIT.value, RefundStatus.FAILED.value
COUNTED: Ending = frozenset({RETRIED, GIVEN_UP})
"""Where a counted failure goes: retried or given up (failures_within_max judges which)."""
ANYWHERE: Ending = frozenset(status.value for status in RefundStatus)


def _live_holder(r: Refund, i: WorkInputs) -> bool:
    return (r.status == RefundStatus.LEASED and i.worker_id == r.worker_id
            and i.lease_token == r.lease_token and i.now < _expiry(r))


def _left(r: Refund) -> bool:
    return r.failures + 1 < r.max_failures


def renewed(r: Refund, i: WorkInputs) -> Ending | None:
    """The live holder's renewal is accepted (where it leads, the invariants judge)."""
    return ANYWHERE if _live_holder(r, i) else None


def succeeded(r: Refund, i: WorkInputs) -> Ending | None:
    """The live holder's success ends succeeded."""
    return frozenset({RefundStatus.SUCCEEDED.value}) if _live_holder(r, i) else None


def failed(r: Refund, i: WorkInputs) -> Ending | None:
    """The live holder's failure is counted: retried when retryable with failures left,
    given up when not retryable."""
    if not _live_holder(r, i):
        return None
    if not i.retryable:
        return frozenset({GIVEN_UP})
    return frozenset({RETRIED}) if _left(r) else COUNTED


def rescued(r: Refund, i: WorkInputs) -> Ending | None:
    """An expired lease is counted as a failure: retried while failures remain."""
    if r.status != RefundStatus.LEASED or i.now < _expiry(r):
        return None
    return frozenset({RETRIED}) if _left(r) else COUNTED


def cancelled(r: Refund, i: WorkInputs) -> Ending | None:
    """A waiting refund's cancel ends cancelled."""
    return frozenset({RefundStatus.CANCELLED.value})


def expecting(trigger: str, choices: Callable[[Refund], Sequence[WorkInputs]],
              expected: Callable[[Refund, WorkInputs], Ending | None],
              ) -> Move[Refund, WorkInputs]:
    """A move firing ``trigger`` whose step must be accepted, and end in one of the
    statuses ``expected`` gives, whenever it gives some; otherwise the table decides."""
    rule = f"{trigger}_as_expected"

    def run(fire: Fire, record: Refund, inputs: WorkInputs) -> Refund:
        wanted = expected(record, inputs)
        try:
            after: Refund = fire(trigger, record, inputs)
        except TransitionRefused as refused:
            if wanted is not None:
                raise ExpectationBroken(rule, f"{trigger} was refused ({refused.code}); "
                                        f"{expected.__doc__}") from refused
            raise
        if wanted is not None and after.status not in wanted:
            raise ExpectationBroken(rule, f"{trigger} ended {after.status}; "
                                    f"{expected.__doc__}")
        return after

    return Move(name=trigger, triggers=(trigger,), choices=choices, run=run, describe=describe,
                meaning=f"fire {trigger}; {expected.__doc__}")


def describe(r: Refund, i: WorkInputs) -> str:
    parts = [f"now=clock{i.now - r.updated_at:+g}s"]
    if i.worker_id is not None:
        parts.append(f"by {i.worker_id}/{i.lease_token}")
    if i.error is not None:
        parts.append(f"error={i.error}{' (retryable)' if i.retryable else ''}")
    return " ".join(parts)


def new_refunds() -> SearchStrategy[Refund]:
    """Refunds under a few ids (repeats happen), each with its max_failures."""
    from hypothesis import strategies as st

    return st.builds(
        lambda key, now, limit: new_refund(key, amount_cents=1250, currency="EUR", now=now,
                                           max_failures=limit),
        st.sampled_from(["rf-1", "rf-2", "rf-3"]), st.sampled_from([0.0, 10.0]),
        st.one_of(st.just(3), st.sampled_from([1, 2, 3])),
    )


# --- interleaved workers ----------------------------------------------------------------


def _worker_inputs(now: float, worker: str, token: str) -> WorkInputs:
    return WorkInputs(now=now, worker_id=worker, lease_token=token, lease_seconds=LEASE_SECONDS)


def provider_calls(record: Refund, inputs: WorkInputs) -> list[Work[Refund]]:
    """How the provider call of a worker holding ``record`` can end."""
    def firing(label: str, trigger: str, **ending: Any) -> Work[Refund]:
        finishing = attrs.evolve(inputs, **ending) if ending else inputs
        return Work(label, lambda on, fire: fire(trigger, on, finishing))

    return [firing("refunded", "succeed"),
            firing("failed, retryable", "fail", error=RETRYABLE, retryable=True),
            firing("failed for good", "fail", error=FINAL, retryable=False),
            firing("renewed, then stalled", "renew")]


def refund_workers(max_failures: int = 2) -> Workers[Refund]:
    """The refund's interleaved workers (see the module docstring)."""
    return Workers(
        records=lambda count: [
            new_refund(f"rf-{n}", amount_cents=1250, currency="EUR", now=0.0,
                       max_failures=max_failures) for n in range(1, count + 1)],
        inputs=_worker_inputs, work=provider_calls,
        calls="refunded, failed retryably, failed for good, or renewed (then stalled)",
    )


EQUIVALENT_MUTANTS: tuple[EquivalentMutant, ...] = (
    EquivalentMutant(
        "drop_guard 5 retry_allowed",
        "rows are tried in table order: row 4 takes every failure retry_allowed admits, so "
        "row 5's `unless` only makes the row read complete on its own"),
    EquivalentMutant(
        "drop_guard 7 failures_remain",
        "rows are tried in table order: row 6 takes every expiry failures_remain admits, so "
        "row 7's `unless` only makes the row read complete on its own"),
    EquivalentMutant(
        "redirect 2 leased",
        "row 2's dest is `=`, the status it fires from, leased: sent to leased it is the "
        "same row"),
    EquivalentMutant(
        "drop_invariant error_iff_failures",
        "rows choose where a record goes, and every effect that counts a failure records an "
        "error in the same write (none resets failures), so no table mutant breaks it; it "
        "refuses a failure reported without an error code, and a stored row that breaks it"),
    EquivalentMutant(
        "drop_invariant updated_not_before_created",
        "every effect sets updated_at to now and none writes created_at, so no table mutant "
        "breaks it; it refuses a time going backwards and a stored row that breaks it"),
    EquivalentMutant(
        "drop_invariant claim_mints_a_new_token",
        "the only claim row writes the claimer's token through take_lease, and every row "
        "out of leased clears it: only a wrong effect breaks it"),
    EquivalentMutant(
        "drop_invariant renewal_keeps_the_lease",
        "the only row from leased to leased is the renewal, whose extend_lease keeps the "
        "owner and token and takes the later expiry (max): only a wrong effect breaks it"),
    EquivalentMutant(
        "drop_invariant failures_never_decrease",
        "no effect of the table lowers failures: every one keeps it or adds one, so no row "
        "choice can lower it"),
)

EXPLORATION: Exploration[Refund] = Exploration(
    lifecycle=REFUND,
    initial=initial_refunds,
    moves=(
        expecting("claim", claims, lambda r, i: None),
        expecting("renew", renewals, renewed),
        expecting("succeed", successes, succeeded),
        expecting("fail", failures, failed),
        expecting("rescue", rescues, rescued),
        expecting("cancel", cancels, cancelled),
    ),
    abstraction=abstraction,
    abstraction_doc="due time (while claimable) and lease expiry as offsets from "
                    "updated_at; creation before/at/after it; worker and token by presence",
    bounds="one refund, max_failures 1..3, 300 s leases; the holder, another worker, a "
           "stale token, an expired lease; retryable and final errors",
    new_records=new_refunds,
    lease_inputs=lambda now, token: _worker_inputs(now, WORKER, token),
    accepted_cycles=(AcceptedCycle({"renew"}, "a worker renews its lease for as long as "
                                              "its provider call runs"),),
    workers=refund_workers(),
    equivalent_mutants=EQUIVALENT_MUTANTS,
)
