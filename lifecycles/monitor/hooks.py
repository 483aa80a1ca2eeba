"""What the generic tools ask of the monitor app (:class:`~lifecycles._app_hooks.AppHooks`):
the inputs its facade passes, for ``lifecycles explain``, and the schema the operator
commands open its database with (the monitor's binding is the capabilities the database
holds, so the meta row is read, never written)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from lifecycles._app_hooks import AppHooks
from lifecycles._explain import NEW_TOKEN, NEW_WORKER, Assumed, InputsNow
from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.machines.monitor import MONITOR, MonitorInputs


def monitor_inputs_now(now: float) -> InputsNow:
    """A claim by a new worker at ``now``; the lease holder (the record's own owner and
    token) completing its read at ``now``, failing with a retryable error for
    ``fail_attempt``; any worker's claim recovering an expired lease; the very same
    notification registered again."""

    def inputs(record: MonitorRecord) -> Mapping[str, Assumed]:
        holder = MonitorInputs(now, worker_id=record.lease_owner,
                               lease_token=record.lease_token)
        who = (f"the lease holder {record.lease_owner} with its own token"
               if record.lease_owner is not None else "a worker (none holds a lease)")
        completion = Assumed(holder, f"{who}, completing its read at now")
        return {
            "claim": Assumed(MonitorInputs(now, worker_id=NEW_WORKER, lease_token=NEW_TOKEN),
                             f"a claim by a new worker ({NEW_WORKER}) at now"),
            "expire_lease": Assumed(MonitorInputs(now),
                                    "any worker's claim at now (it recovers expired leases "
                                    "first)"),
            "observe_progress": completion,
            "observe_success": completion,
            "observe_failure": completion,
            "fail_attempt": Assumed(attrs.evolve(holder, retryable=True),
                                    f"{who}, its read failing with a retryable error at now"),
            "register": Assumed(MonitorInputs(now, registration=record),
                                "the very same notification registered again at now"),
        }

    return inputs


def reading_schema(connection: Any) -> Any:
    """The monitor's schema bound to the capabilities ``connection``'s meta row holds,
    verifying only: the table, its indexes and the meta row are never created."""
    from lifecycles._cli_ops import query, table_exists
    from lifecycles.monitor.schema import META, MonitorSchema

    rows = query(connection, f"SELECT expected_capabilities_sha256 FROM {META}") if (
        table_exists(connection, META)) else []
    bound = str(rows[0][0]) if len(rows) == 1 else ""

    class ReadingMonitorSchema(MonitorSchema):
        def ensure(self, catalogue: Any) -> None:
            self.verify(catalogue)

    return ReadingMonitorSchema(bound)


def sql_schema() -> Any:
    """The monitor's reference schema, for the SQL files beside the diagrams: the
    capabilities hash a database is bound to travels as a parameter, so no statement's
    text depends on it and any hash renders the same file."""
    from lifecycles.monitor.schema import MonitorSchema

    return MonitorSchema("0" * 64, MONITOR)


HOOKS = AppHooks(MONITOR, inputs_now=monitor_inputs_now, reading_schema=reading_schema,
                 sql_schema=sql_schema)

__all__ = ["HOOKS", "monitor_inputs_now", "reading_schema", "sql_schema"]
