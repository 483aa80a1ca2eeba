"""The claim decided inside PostgreSQL (lifecycles.stores._sql_claim): one statement.

It must be the lease protocol's claim exactly: the first due record in claim order,
the lease the table's claim row writes, observers told, every rule checked before it
commits; and whenever it cannot decide alone (an expired lease to rescue, a record
broken behind the store's back, a schema changed), it leases nothing and the full
protocol decides as before, with the same outcome and codes as on SQLite. Shown on the
tests' tasks (tests/support/tasks.py), whose rules all have an SQL form; the monitor
facade's outcomes and codes for the same claim are
tests/monitor/test_monitor_postgres_claim.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from support.postgres import Connect, pg_connect, pg_schema, require_postgres
from support.tasks import TASKS, Task, TaskInputs, new_task

from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.stores._base import SchemaMismatch, StoreDamaged
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_claim import claim_in_place
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

require_postgres()

pytestmark = pytest.mark.postgres

TABLE = "lifecycle_tasks"


def opened(store: SQLStore[Task], items: int = 3) -> Any:
    """``store`` with t0..t<items - 1> submitted, t0 first in claim order."""
    for index in range(items):
        store.insert(TASKS.create(new_task(f"t{index}", now=10.0 + index)))
    return store


def on_postgres(connection: Any, items: int = 3) -> Any:
    return opened(PostgresStore(TASKS, connection), items)


def claim_inputs(worker: str, token: str, now: float,
                 lease_seconds: float = 30.0) -> TaskInputs:
    return TaskInputs(now=now, worker_id=worker, lease_token=token, lease_seconds=lease_seconds)


def rows_of(connection: Any) -> list[tuple[Any, ...]]:
    """Every record, as stored (the tokens too: the inputs name them)."""
    return [tuple(row) for row in connection.execute(
        f"SELECT * FROM {TABLE} ORDER BY task_id").fetchall()]


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
    store = on_postgres(pg_connect())
    sent = Statements(monkeypatch, store)
    claimed = store.claim(claim_inputs("w1", "k1", now=20, lease_seconds=60))
    assert claimed is not None
    assert len(sent.sent) == 1 and sent.sent[0].startswith("WITH pick AS")
    assert (claimed.task_id, claimed.status, claimed.worker_id) == ("t0", "running", "w1")
    assert (claimed.attempts, claimed.lease_expires_at, claimed.updated_at) == (0, 80, 20)
    stored = store.get("t0")
    assert stored is not None and stored.lease_token == claimed.lease_token == "k1"


def test_observers_see_the_claim_fire_its_row(pg_connect: Connect) -> None:
    store = on_postgres(pg_connect())
    fired: list[tuple[str, str, str]] = []

    class Observer:
        def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                      inputs: Any) -> None:
            pass

        def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any,
                  after: Any) -> None:
            fired.append((row.trigger, str(before.status), str(after.status)))

    with TASKS.observing(Observer()):
        store.claim(claim_inputs("w1", "k1", now=20))
    assert fired == [("claim", "queued", "running")]


def script(store: SQLStore[Task]) -> list[Any]:
    """Claims around an expired lease, on either store: what each claim answered."""
    answers: list[Any] = []
    answers.append(store.claim(claim_inputs("w1", "k1", now=20, lease_seconds=10)))  # t0
    answers.append(store.claim(claim_inputs("w2", "k2", now=21, lease_seconds=100)))  # t1
    # t0's lease (until 30) rescued first, due again at 41; then t2 leased
    answers.append(store.claim(claim_inputs("w3", "k3", now=40, lease_seconds=100)))
    answers.append(store.claim(claim_inputs("w4", "k4", now=40, lease_seconds=100)))  # none due
    answers.append(store.claim(claim_inputs("w5", "k5", now=41, lease_seconds=100)))  # t0 again
    fields = ("task_id", "status", "worker_id", "attempts", "lease_expires_at", "last_error")
    return [None if a is None else tuple(getattr(a, name) for name in fields) for a in answers]


def test_an_expired_lease_is_rescued_first_as_on_sqlite(
    pg_connect: Connect, tmp_path: Path
) -> None:
    connection = pg_connect()
    on_pg = on_postgres(connection)
    on_sqlite = opened(SQLiteStore(TASKS, sqlite3.connect(tmp_path / "tasks.db")))
    answered = script(on_pg)
    assert answered == script(on_sqlite)
    assert answered[2] is not None and answered[2][0] == "t2"
    assert answered[3] is None
    assert answered[4] == ("t0", "running", "w5", 1, 141, "lease_expired")
    assert on_pg.health(40).counts == on_sqlite.health(40).counts
    assert rows_of(connection) == rows_of(on_sqlite.connection)


def test_with_an_expired_lease_the_statement_leases_nothing(pg_connect: Connect) -> None:
    connection = pg_connect()
    store = on_postgres(connection)
    store.claim(claim_inputs("w1", "k1", now=20, lease_seconds=10))
    before = rows_of(connection)
    assert store.claim_in_place(claim_inputs("w2", "k2", now=40)) is lease.LEFT_TO_PROTOCOL
    assert rows_of(connection) == before


@pytest.mark.parametrize(("broken", "rule"), [
    # A worker on a queued task breaks lease_fields_iff_running; the claim would
    # overwrite it, so only the check of the record as it was refuses it.
    ("worker_id = 'w'", "lease_fields_iff_running"),
    # Attempts beyond max_attempts: the claim's guard refuses the record, but a broken
    # record is refused, not passed over for the next one.
    ("attempts = 9", "attempts_within_max"),
])
def test_a_record_broken_behind_the_stores_back_is_refused_as_on_sqlite(
    pg_connect: Connect, tmp_path: Path, broken: str, rule: str
) -> None:
    codes = []
    for store in (PostgresStore(TASKS, pg_connect()),
                  SQLiteStore(TASKS, sqlite3.connect(tmp_path / "tasks.db"))):
        opened(store, items=2)
        connection = store.connection
        connection.execute(f"UPDATE {TABLE} SET {broken} WHERE task_id = 't0'")
        connection.commit()
        before = rows_of(connection)
        with pytest.raises(InvariantViolation) as refused:
            store.claim(claim_inputs("w1", "k1", now=20))
        codes.append((refused.value.code, refused.value.rules))
        assert rows_of(connection) == before
    assert codes == [("tasks.state_invalid", (rule,))] * 2


def test_a_record_as_written_breaking_a_rule_is_never_committed(pg_connect: Connect) -> None:
    """A worker id the lease's token_syntax refuses (the store is called directly; a
    caller's inputs are not checked before): the check of the record as written fails
    the statement before it commits, and the protocol decides in Python."""
    connection = pg_connect()
    store = on_postgres(connection, items=1)
    plan = claim_in_place(store.statements)
    assert not isinstance(plan, str)
    # The record as written is checked for the rules over the claim's fields only: the
    # identity's rules and attempts_within_max are judged once, on the record as it was.
    written_rules = plan.statement.split(" AS before, ")[1].split(" CASE WHEN ")[1]
    written_rules = written_rules.split(" THEN 0 ELSE ")[0]
    assert '"worker_id"' in written_rules and '"max_attempts"' not in written_rules
    before = rows_of(connection)
    inputs = claim_inputs("w 1", "k1", now=20)
    assert store.claim_in_place(inputs) is lease.LEFT_TO_PROTOCOL
    assert rows_of(connection) == before


def test_the_statement_must_write_what_the_table_says(pg_connect: Connect) -> None:
    store = on_postgres(pg_connect(), items=1)
    plan = claim_in_place(store.statements)
    assert not isinstance(plan, str)
    # A statement leasing a second longer than the table's effect does.
    tampered = plan.statement.replace('"lease_expires_at" = ($5 + $6)',
                                      '"lease_expires_at" = ($5 + $6 + 1)')
    assert tampered != plan.statement
    store._in_place = attrs.evolve(plan, statement=tampered)
    with pytest.raises(StoreDamaged) as damaged:
        store.claim_in_place(claim_inputs("w1", "k1", now=20))
    assert damaged.value.code == "lifecycles.database_integrity"


def test_a_changed_schema_leases_nothing_and_is_refused(pg_connect: Connect) -> None:
    """The generic table has no binding: the statement's schema guard is the catalogue
    as verified, which another connection's column changes."""
    connection = pg_connect()
    store = on_postgres(connection)
    other = pg_connect()
    other.execute(f"ALTER TABLE {TABLE} ADD COLUMN extra text")
    before = rows_of(connection)
    assert store.claim_in_place(claim_inputs("w1", "k1", now=20)) is lease.LEFT_TO_PROTOCOL
    assert rows_of(connection) == before
    with pytest.raises(SchemaMismatch) as refused:  # and the full protocol refuses it
        store.claim(claim_inputs("w1", "k1", now=20))
    assert refused.value.code == "lifecycles.schema_altered"
    assert rows_of(connection) == before
