"""A lifecycle without a lease, for the framework's own tests of ExclusiveWork: a message
waits (``pending``), each attempt is counted before it is made, and it ends
``delivered``; a failed attempt leaves it pending with the error."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import InvariantSet, invariant
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect
from lifecycles.machines._work import Raised, Result, Step


class MessageStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"


@attrs.frozen
class Message:
    message_id: str
    status: MessageStatus
    attempts: int = 0
    last_error: str | None = None


@attrs.frozen
class MessageInputs:
    error: str | None = None


@effect("attempts")
def count_attempt(r: Message, i: MessageInputs) -> Changes:
    """One more attempt, counted before it is made."""
    return {"attempts": r.attempts + 1}


@effect("last_error")
def record_error(r: Message, i: MessageInputs) -> Changes:
    """The attempt's error."""
    return {"last_error": i.error}


@invariant
def delivered_without_error(r: Message) -> bool:
    """A delivered message carries no error."""
    return r.status != MessageStatus.DELIVERED or r.last_error is None


TABLE: list[dict[str, Any]] = [
    {"trigger": "attempt", "source": "pending", "dest": "pending", "after": "count_attempt"},
    {"trigger": "deliver", "source": "pending", "dest": "delivered"},
    {"trigger": "fail", "source": "pending", "dest": "pending", "after": "record_error"},
]

DELIVERIES: Lifecycle[Message, MessageInputs] = Lifecycle(
    module=__name__,
    name="deliveries", statuses=MessageStatus, table=TABLE, initial=MessageStatus.PENDING,
    final=[MessageStatus.DELIVERED], creation="send", guards=[],
    effects=[count_attempt, record_error],
    invariants=InvariantSet("deliveries.state_invalid", [delivered_without_error]),
    record_type=Message, key_field="message_id", not_allowed_code="deliveries.not_allowed",
)


def finish_delivery(held: Message, inputs: MessageInputs, result: Result) -> Step[MessageInputs]:
    """Delivered when the handler returned; failed with the error's class name otherwise."""
    if isinstance(result, Raised):
        return Step("fail", MessageInputs(error=type(result.error).__name__))
    return Step("deliver", inputs)
