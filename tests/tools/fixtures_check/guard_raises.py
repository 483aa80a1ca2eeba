"""A guard that raises once the count reaches 2: `check` reports check_raised there."""

from __future__ import annotations

from fixtures_check.tiny import Amount, Counter, declare, exploration
from lifecycles.machines._declaration import guard


@guard("tiny.too_much")
def room_left(r: Counter, i: Amount) -> bool:
    """Adding keeps the count within its bound (with a defect at 2)."""
    return 1 // (2 - r.count) + r.count + i.amount <= 3  # raises: the line check reports


RAISING = declare("raising", guards=[room_left])
RAISING_EXPLORATION = exploration(RAISING)
