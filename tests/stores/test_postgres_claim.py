"""The claim decided inside PostgreSQL (lifecycles.stores._sql_claim): one statement.

It must be the lease protocol's claim exactly: the first due record in claim order,
the lease the table's claim row writes, observers told, every rule checked before it
commits; and whenever it cannot decide alone (an expired lease to rescue, a record
broken behind the store's back, a schema changed), it leases nothing and the full
protocol decides as before, with the same outcome and codes as on SQLite.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from support.monitor import CAPABILITIES, notification
from support.postgres import Connect, pg_connect, pg_schema, require_postgres

from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.machines.monitor import MONITOR, MonitorInputs
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid
from lifecycles.stores._base import StoreDamaged
from lifecycles.stores._sql_claim import claim_in_place
from lifecycles.stores.postgres import PostgresStore

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


class Statements:
    """Counts what the store sends: through its own helpers or the claim's raw cursor."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: PostgresStore[Any]) -> None:
        self.sent: list[str] = []
        for name in ("run", "run_write"):
            original = getattr(store, name)
            monkeypatch.setattr(store, name, self._spy(original))
        raw_execute = psycopg.RawCursor.execute
        monkeypatch.setattr(psycopg.RawCursor, "execute", lambda cursor, sql, *a, **k: (
            self.sent.append(str(sql)), raw_execute(cursor, sql, *a, **k))[1])

    def _spy(self, original: Any) -> Any:
        def spy(statement: str, *args: Any, **kwargs: Any) -> Any:
            self.sent.append(statement)
            return original(statement, *args, **kwargs)
        return spy


def test_a_claim_is_one_statement_leasing_the_first_due_record(
    pg_connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = pg_connect()
    monitor = opened(connection)
    sent = Statements(monkeypatch, monitor.store)
    claimed = monitor.claim("w1", now=20, lease_seconds=60)
    assert claimed is not None
    assert len(sent.sent) == 1 and sent.sent[0].startswith("WITH pick AS")
    got = dict(claimed)
    assert (got["event_id"], got["status"], got["lease_owner"]) == ("e0", "leased", "w1")
    assert (got["poll_attempts"], got["lease_expires_at"], got["updated_at"]) == (1, 80, 20)
    stored = monitor.store.get("e0")
    assert stored is not None and stored.lease_token == got["lease_token"]


def test_observers_see_the_claim_fire_its_row(pg_connect: Connect) -> None:
    monitor = opened(pg_connect())
    fired: list[tuple[str, str, str]] = []

    class Observer:
        def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                      inputs: Any) -> None:
            pass

        def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any,
                  after: Any) -> None:
            fired.append((row.trigger, str(before.status), str(after.status)))

    with MONITOR.observing(Observer()):
        monitor.claim("w1", now=20)
    assert fired == [("claim", "pending", "leased")]


def script(monitor: DurableTerminalProcessingMonitor) -> list[Any]:
    """Claims around an expired lease, on either store: what each claim answered."""
    answers: list[Any] = []
    answers.append(monitor.claim("w1", now=20, lease_seconds=10))  # e0, until 30
    answers.append(monitor.claim("w2", now=21, lease_seconds=100))  # e1
    answers.append(monitor.claim("w3", now=40, lease_seconds=100))  # e0 rescued, then leased
    answers.append(monitor.claim("w4", now=40, lease_seconds=100))  # e2
    answers.append(monitor.claim("w5", now=40, lease_seconds=100))  # nothing due
    fields = ("event_id", "status", "lease_owner", "failures", "poll_attempts",
              "lease_expires_at")
    return [None if a is None else tuple(a[name] for name in fields) for a in answers]


def test_an_expired_lease_is_rescued_first_as_on_sqlite(
    pg_connect: Connect, tmp_path: Path
) -> None:
    on_postgres = opened(pg_connect())
    on_sqlite = opened(sqlite3.connect(tmp_path / "monitor.db"))
    assert script(on_postgres) == script(on_sqlite)
    assert on_postgres.health(now=40).counts == on_sqlite.health(now=40).counts
    assert rows_of(on_postgres.connection) == [
        tuple(row) for row in rows_of(on_sqlite.connection)
    ]


def test_with_an_expired_lease_the_statement_leases_nothing(pg_connect: Connect) -> None:
    connection = pg_connect()
    monitor = opened(connection)
    monitor.claim("w1", now=20, lease_seconds=10)
    before = rows_of(connection)
    inputs = MonitorInputs(now=40, policy=monitor.policy, worker_id="w2", lease_token="t2")
    assert monitor.store.claim_in_place(inputs) is lease.LEFT_TO_PROTOCOL
    assert rows_of(connection) == before


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


def test_a_record_as_written_breaking_a_rule_is_never_committed(pg_connect: Connect) -> None:
    """A worker id the lease owner's token_syntax refuses (the facade refuses it first;
    the store is called directly): the check of the record as written fails the
    statement before it commits, and the protocol decides in Python."""
    connection = pg_connect()
    monitor = opened(connection, items=1)
    plan = claim_in_place(monitor.store.statements)
    assert not isinstance(plan, str)
    # The record as written is checked for the rules over the claim's fields only: the
    # identity's rules are judged once, on the record as it was.
    written_rules = plan.statement.split(" AS before, ")[1].split(" CASE WHEN ")[1]
    written_rules = written_rules.split(" THEN 0 ELSE ")[0]
    assert '"lease_owner"' in written_rules and '"notification_sha256"' not in written_rules
    before = rows_of(connection)
    inputs = MonitorInputs(now=20, policy=monitor.policy, worker_id="w 1", lease_token="t1")
    assert monitor.store.claim_in_place(inputs) is lease.LEFT_TO_PROTOCOL
    assert rows_of(connection) == before


def test_the_statement_must_write_what_the_table_says(pg_connect: Connect) -> None:
    connection = pg_connect()
    monitor = opened(connection, items=1)
    store = monitor.store
    plan = claim_in_place(store.statements)
    assert not isinstance(plan, str)
    # A statement counting two poll attempts where the table's effect counts one.
    tampered = plan.statement.replace('"poll_attempts" = ("poll_attempts" + 1)',
                                      '"poll_attempts" = ("poll_attempts" + 2)')
    assert tampered != plan.statement
    store._in_place = attrs.evolve(plan, statement=tampered)
    inputs = MonitorInputs(now=20, policy=monitor.policy, worker_id="w1", lease_token="t1")
    with pytest.raises(StoreDamaged) as damaged:
        store.claim_in_place(inputs)
    assert damaged.value.code == "terminal_processing_monitor.database_integrity"


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
