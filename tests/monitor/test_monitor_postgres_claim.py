"""The monitor's claim decided inside PostgreSQL: the facade's outcomes and codes.

The one-statement claim itself (lifecycles.stores._sql_claim: one statement, the first
due record, observers told, every rule checked before it commits, nothing leased when it
cannot decide alone) is tested on the tests' tasks in tests/stores/test_postgres_claim.py.
Here what the monitor adds: a record broken behind the store's back is the facade's
``StateInvalid`` (``terminal_processing_monitor.state_invalid``), as on SQLite, and a
changed capabilities binding (the monitor's meta row) leases nothing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, notification
from support.postgres import Connect, pg_connect, pg_schema, require_postgres

from lifecycles.machines import lease
from lifecycles.machines.monitor import MonitorInputs
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

require_postgres()

pytestmark = pytest.mark.postgres

TABLE = "cms_source_terminal_processing"


def opened(connection: Any, items: int = 3) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    for index in range(items):
        value, sha = notification(index)
        monitor.register(value, sha, now=10 + index)  # e0 first in claim order
    return monitor


def rows_of(connection: Any) -> list[tuple[Any, ...]]:
    """Every record, lease tokens left out (each claim mints a random one)."""
    found = connection.execute(
        f"SELECT * FROM {TABLE} ORDER BY event_id"
    ).fetchall()
    token = [column[0] for column in connection.execute(
        f"SELECT * FROM {TABLE} LIMIT 0").description].index("lease_token")
    return [tuple(value for at, value in enumerate(row) if at != token) for row in found]


@pytest.mark.parametrize("broken", [
    # An error code on a pending record breaks error_code_iff_waiting_or_failed; the
    # claim would overwrite it, so only the check of the record as it was refuses it.
    "last_error_code = 'x.y'",
    # Failures beyond max_failures: the claim's guard refuses the record, but a broken
    # record is refused, not passed over for the next one.
    "failures = 9",
])
def test_a_record_broken_behind_the_stores_back_is_refused_as_on_sqlite(
    pg_connect: Connect, tmp_path: Path, broken: str
) -> None:
    codes = []
    for connection in (pg_connect(), sqlite3.connect(tmp_path / "monitor.db")):
        monitor = opened(connection, items=2)
        connection.execute(f"UPDATE {TABLE} SET {broken} WHERE event_id = 'e0'")
        connection.commit()
        before = rows_of(connection)
        with pytest.raises(StateInvalid) as refused:
            monitor.claim("w1", now=20)
        codes.append(refused.value.code)
        assert rows_of(connection) == before
    assert codes == ["terminal_processing_monitor.state_invalid"] * 2


def test_a_changed_binding_leases_nothing_and_is_refused(pg_connect: Connect) -> None:
    connection = pg_connect()
    monitor = opened(connection)
    other = pg_connect()
    other.execute("UPDATE cms_source_terminal_processing_meta"
                  " SET expected_capabilities_sha256 = %s", ("e" * 64,))
    before = rows_of(connection)
    inputs = MonitorInputs(now=20, policy=monitor.policy, worker_id="w1", lease_token="t1")
    assert monitor.store.claim_in_place(inputs) is lease.LEFT_TO_PROTOCOL
    assert rows_of(connection) == before
