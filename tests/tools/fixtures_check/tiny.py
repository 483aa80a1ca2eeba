"""Two small lifecycles declared here, and one (the monitor) only imported.

``declare`` builds a counter that ``add``s until it is ``close``d; the other fixtures
reuse its parts to break one thing each.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from enum import StrEnum
from typing import Any

import attrs

from lifecycles.invariants._core import InvariantSet, invariant
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, Guard, effect, guard
from lifecycles.machines._exploration import Exploration, trigger_move
from lifecycles.machines.monitor import MONITOR  # imported, not declared: never checked here

__all__ = ["MONITOR"]


class Status(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


@attrs.frozen
class Counter:
    key: str
    status: Status
    count: int


@attrs.frozen
class Amount:
    amount: int


@invariant
def count_within_bound(r: Counter) -> bool:
    """The count stays between 0 and 3."""
    return 0 <= r.count <= 3


INVARIANTS: InvariantSet[Counter] = InvariantSet("tiny.state_invalid", [count_within_bound])


@guard("tiny.too_much")
def room_left(r: Counter, i: Amount) -> bool:
    """Adding keeps the count within its bound."""
    return r.count + i.amount <= 3


@effect("count")
def add_amount(r: Counter, i: Amount) -> Changes:
    """Add the amount to the count."""
    return {"count": r.count + i.amount}


TABLE: list[dict[str, Any]] = [
    {"trigger": "add", "source": "open", "dest": "open", "conditions": ["room_left"],
     "after": "add_amount"},
    {"trigger": "close", "source": "open", "dest": "closed"},
]


def declare(name: str, guards: Iterable[Guard[Counter, Amount]] = (room_left,)
            ) -> Lifecycle[Counter, Amount]:
    return Lifecycle(
        module=__name__,
        name=name, statuses=Status, table=TABLE, initial=Status.OPEN, final=[Status.CLOSED],
        creation="create", guards=guards, effects=[add_amount], invariants=INVARIANTS,
        record_type=Counter, key_field="key", not_allowed_code="tiny.not_allowed",
    )


def abstraction(r: Counter) -> Hashable:
    return (r.status, r.count)


def exploration(lifecycle: Lifecycle[Counter, Amount]) -> Exploration[Counter]:
    return Exploration(
        lifecycle=lifecycle,
        initial=lambda: [Counter("c-1", Status.OPEN, 0)],
        moves=(trigger_move("add", lambda r: [Amount(1), Amount(2)]),
               trigger_move("close", lambda r: [Amount(0)])),
        abstraction=abstraction, abstraction_doc="every field", bounds="amounts 1 and 2",
    )


TINY = declare("tiny")
TWIN = declare("tiny_twin")
TINY_EXPLORATION = exploration(TINY)  # TWIN's is found beside it: declared in this module
TWIN_EXPLORATION = exploration(TWIN)
