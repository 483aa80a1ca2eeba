"""The outbox's exploration inputs, beside its table: what the checker and tests feed it.

Bounds (what ``lifecycles check outbox`` explores, completely):

* two intents, enqueued at one fixed time: a ``complete`` (empty error, reopen false)
  and a ``fail`` (an error, reopen true);
* ``enqueue`` again with the same intent, a different intent, and no digest at all;
* ``attempt`` and ``deliver`` at one later time;
* ``fail_delivery`` with a described error, an empty one, whitespace only, and one
  longer than the 1000-character bound;
* ``quarantine`` with a reason, an empty one, and one longer than the bound.

Abstraction: every field as it is, except ``attempts`` as ``min(attempts, 2)`` (guards
only ask ``attempts >= 1``, no invariant reads it) and ``last_attempt_at`` by its
presence (no guard or invariant compares times). Without the cap, attempt /
fail_delivery would loop forever.

The generated tests' Hypothesis strategies are test code, in
:mod:`lifecycles.outbox.strategies`, named here and imported only when a test draws.
"""

from __future__ import annotations

from collections.abc import Hashable

from lifecycles.invariants.outbox import (
    OUTBOX_VERSION,
    OutboxRecord,
    OutboxStatus,
    entry_id_for,
    intent_digest,
)
from lifecycles.machines._declaration import TransitionRefused
from lifecycles.machines._exploration import (
    AcceptedCycle,
    ExpectationBroken,
    Exploration,
    Fire,
    Move,
    strategy_in,
    trigger_move,
)
from lifecycles.machines._mutants import EquivalentMutant
from lifecycles.machines.outbox import OUTBOX, OutboxInputs

__all__ = [
    "ENQUEUED_AT",
    "EQUIVALENT_MUTANTS",
    "EXPLORATION",
    "LATER",
    "LONG_TEXT",
    "OTHER_DIGEST",
    "STRATEGIES",
    "abstraction",
    "enqueue_inputs",
    "failure_inputs",
    "initial_records",
    "intent_record",
    "quarantine_inputs",
    "timed_inputs",
]

ENQUEUED_AT = "2026-01-01T00:00:00+00:00"
LATER = "2026-01-01T00:05:00+00:00"
OTHER_DIGEST = "0" * 64
LONG_TEXT = "x" * 1500


def intent_record(run_id: str, transaction_id: str, action: str, now: str = ENQUEUED_AT
                  ) -> OutboxRecord:
    """A freshly enqueued record of a ``complete`` or ``fail`` intent."""
    failing = action == "fail"
    return OutboxRecord(
        version=OUTBOX_VERSION, run_id=run_id, transaction_id=transaction_id, action=action,
        result={"rows": 3} if not failing else {}, error="export failed" if failing else "",
        reopen=failing, entry_id=entry_id_for(run_id, transaction_id),
        state=OutboxStatus.PENDING, attempts=0, created_at=now, last_attempt_at=None,
        last_error=None,
    )


def initial_records() -> list[OutboxRecord]:
    return [intent_record("run-1", "tx-1", "complete"), intent_record("run-1", "tx-2", "fail")]


def abstraction(r: OutboxRecord) -> Hashable:
    """See the module docstring: attempts capped at 2, last_attempt_at by presence."""
    return (
        r.entry_id, r.action, r.error, r.reopen, r.state, min(r.attempts, 2),
        r.last_attempt_at is not None, r.last_error,
    )


def enqueue_inputs(r: OutboxRecord) -> list[OutboxInputs]:
    same = intent_digest(r.intent())
    return [OutboxInputs(now=LATER, intent_digest=digest)
            for digest in (same, OTHER_DIGEST, None)]


def _enqueue_again(fire: Fire, record: OutboxRecord, inputs: OutboxInputs) -> OutboxRecord:
    """The very same intent enqueued again is accepted (and changes nothing)."""
    try:
        after: OutboxRecord = fire("enqueue", record, inputs)
    except TransitionRefused as refused:
        if inputs.intent_digest == intent_digest(record.intent()):
            raise ExpectationBroken("same_intent_is_accepted_again",
                                    f"the same intent enqueued again was refused: {refused}"
                                    ) from refused
        raise
    return after


def timed_inputs(r: OutboxRecord) -> list[OutboxInputs]:
    return [OutboxInputs(now=LATER)]


def failure_inputs(r: OutboxRecord) -> list[OutboxInputs]:
    return [OutboxInputs(now=LATER, error=error)
            for error in ("receiver timed out", "", "  \n\t ", LONG_TEXT)]


def quarantine_inputs(r: OutboxRecord) -> list[OutboxInputs]:
    return [OutboxInputs(now=LATER, reason=reason)
            for reason in ("record cannot be trusted", "", LONG_TEXT)]


def _describe(r: OutboxRecord, i: OutboxInputs) -> str:
    parts = []
    if i.intent_digest is not None:
        parts.append("same intent" if i.intent_digest == intent_digest(r.intent())
                     else "another intent")
    if i.error is not None:
        parts.append(f"error={i.error[:20]!r}{'...' if len(i.error) > 20 else ''}")
    if i.reason is not None:
        parts.append(f"reason={i.reason[:20]!r}{'...' if len(i.reason) > 20 else ''}")
    return ", ".join(parts) or "no inputs"


STRATEGIES = "lifecycles.outbox.strategies"
"""Where the generated tests' strategies live (test code, imported only when drawn)."""


_INTENT_RULE = (
    "no row of the table can break it: the intent is fixed when it is enqueued and no row "
    "writes it (intent_never_changes); it refuses a malformed intent at enqueue and a "
    "foreign file on every read")

EQUIVALENT_MUTANTS: tuple[EquivalentMutant, ...] = (
    *(EquivalentMutant(f"drop_invariant {name}", _INTENT_RULE) for name in (
        "complete_carries_no_error_or_reopen", "fail_carries_error",
        "intent_within_payload_bound", "entry_id_matches_identity")),
    EquivalentMutant(
        "drop_invariant attempts_never_decrease",
        "only record_attempt writes attempts, adding one: no row choice can lower it"),
    EquivalentMutant(
        "drop_invariant intent_never_changes",
        "no effect of the table writes an intent field: only a wrong effect could"),
)
"""The outbox's table mutants declared equivalent, each with why it is harmless."""


EXPLORATION: Exploration[OutboxRecord] = Exploration(
    lifecycle=OUTBOX,
    initial=initial_records,
    moves=(
        Move(name="enqueue", triggers=("enqueue",), choices=enqueue_inputs,
             run=_enqueue_again, strategy=strategy_in(STRATEGIES, "enqueue_strategy"),
             describe=_describe, meaning="the same identity is enqueued again"),
        trigger_move("attempt", timed_inputs, describe=_describe,
                     meaning="replay counts a delivery attempt"),
        trigger_move("deliver", timed_inputs, describe=_describe,
                     meaning="the deliver callback returned"),
        trigger_move("fail_delivery", failure_inputs,
                     strategy=strategy_in(STRATEGIES, "failure_strategy"),
                     describe=_describe, meaning="the deliver callback raised"),
        trigger_move("quarantine", quarantine_inputs,
                     strategy=strategy_in(STRATEGIES, "quarantine_strategy"),
                     describe=_describe, meaning="the record is set aside"),
    ),
    abstraction=abstraction,
    abstraction_doc="attempts capped at 2; last_attempt_at by presence",
    bounds=(
        "a complete and a fail intent; enqueue same/other/no digest; fail_delivery and "
        "quarantine with a text, empty, blank and over-long description"
    ),
    new_records=strategy_in(STRATEGIES, "new_records"),
    accepted_cycles=(
        AcceptedCycle(
            {"attempt", "fail_delivery"},
            "a pending intent is replayed until it is delivered or quarantined: at-least-"
            "once delivery never gives up on its own, as in the reference"),
    ),
    equivalent_mutants=EQUIVALENT_MUTANTS,
)
