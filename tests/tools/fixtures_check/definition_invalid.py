"""A table whose row leads to a status the enum does not declare: refused at import."""

from __future__ import annotations

from fixtures_check.tiny import INVARIANTS, TABLE, Counter, Status, add_amount, room_left
from lifecycles.machines._core import Lifecycle

BROKEN = Lifecycle(  # the declaration check reports
    module=__name__,
    name="broken", statuses=Status, initial=Status.OPEN, final=[Status.CLOSED],
    table=[*TABLE, {"trigger": "archive", "source": "closed", "dest": "archived"}],
    creation="create", guards=[room_left], effects=[add_amount], invariants=INVARIANTS,
    record_type=Counter, key_field="key", not_allowed_code="tiny.not_allowed",
)
