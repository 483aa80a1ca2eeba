"""What the generic tools ask of the outbox app (:class:`~lifecycles._app_hooks.AppHooks`):
the inputs a replay passes, for ``lifecycles explain``, its clock (ISO timestamps), and
the layout its files store keeps."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from lifecycles._app_hooks import AppHooks
from lifecycles._explain import Assumed, InputsNow
from lifecycles.invariants.outbox import OutboxRecord, intent_digest
from lifecycles.machines.outbox import (
    CONFLICT_REASON,
    OUTBOX,
    OutboxInputs,
    delivery_outcome,
    iso_timestamp,
)
from lifecycles.outbox.facade import OUTBOX_LAYOUT


def outbox_inputs_now(now: str) -> InputsNow:
    """What a replay at ``now`` passes (an attempt, a delivery, a failed delivery as
    :func:`delivery_outcome` words it, a quarantine for a conflicting delivered copy)
    and the very same intent enqueued again."""
    failed = delivery_outcome(Exception(), now)[1]

    def inputs(record: OutboxRecord) -> Mapping[str, Assumed]:
        return {
            "enqueue": Assumed(OutboxInputs(now, intent_digest=intent_digest(record.intent())),
                               "the very same intent enqueued again at now"),
            "attempt": Assumed(OutboxInputs(now), "a replay at now counting an attempt"),
            "deliver": Assumed(OutboxInputs(now), "the deliver callback returning at now"),
            "fail_delivery": Assumed(failed, f"the deliver callback raising at now "
                                             f"(error {failed.error!r})"),
            "quarantine": Assumed(OutboxInputs(now, reason=CONFLICT_REASON),
                                  "a replay at now finding a conflicting delivered copy"),
        }

    return inputs


def shown_now(now: float) -> str:
    """``now`` (UNIX seconds) as the outbox's records write times: an ISO timestamp."""
    return iso_timestamp(datetime.fromtimestamp(now, UTC))


HOOKS = AppHooks(OUTBOX, inputs_now=lambda now: outbox_inputs_now(shown_now(now)),
                 shown_now=shown_now, files_layout=OUTBOX_LAYOUT, kept_in_sql=False)

__all__ = ["HOOKS", "outbox_inputs_now", "shown_now"]
