"""Hypothesis strategies for the outbox's generated tests, for users writing tests too.

The outbox's exploration (:mod:`lifecycles.machines.outbox.inputs`, beside its table)
lists the finite inputs ``lifecycles check`` explores and names these strategies for
the generated stateful tests: :func:`enqueue_strategy` (the same, another or no
intent digest), :func:`failure_strategy` and :func:`quarantine_strategy` (the listed
texts or any text up to 40 characters), and :func:`new_records` (intents under a few
identities, so repeated enqueues happen).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lifecycles.invariants.outbox import OutboxRecord
from lifecycles.machines.outbox import OutboxInputs
from lifecycles.machines.outbox.inputs import (
    LATER,
    enqueue_inputs,
    failure_inputs,
    intent_record,
    quarantine_inputs,
)

__all__ = [
    "enqueue_strategy",
    "failure_strategy",
    "new_records",
    "quarantine_strategy",
]

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy



def _text_strategy(r: OutboxRecord, field: str, listed: list[OutboxInputs]
                   ) -> SearchStrategy[OutboxInputs]:
    from hypothesis import strategies as st

    return st.one_of(
        st.sampled_from(listed),
        st.text(max_size=40).map(lambda text: OutboxInputs(now=LATER, **{field: text})),
    )


def enqueue_strategy(r: OutboxRecord) -> SearchStrategy[OutboxInputs]:
    from hypothesis import strategies as st

    return st.sampled_from(enqueue_inputs(r))


def failure_strategy(r: OutboxRecord) -> SearchStrategy[OutboxInputs]:
    return _text_strategy(r, "error", failure_inputs(r))


def quarantine_strategy(r: OutboxRecord) -> SearchStrategy[OutboxInputs]:
    return _text_strategy(r, "reason", quarantine_inputs(r))


def new_records() -> SearchStrategy[OutboxRecord]:
    """Intents under a few identities (so repeated enqueues happen), either action."""
    from hypothesis import strategies as st

    return st.builds(intent_record, st.just("run-1"), st.sampled_from(["tx-1", "tx-2", "tx-3"]),
                     st.sampled_from(["complete", "fail"]))
