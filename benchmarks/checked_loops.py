"""The raw loops of ``bench_throughput.py`` with lifecycles' checks added, and nothing else.

Each cycle runs the raw loop's own statements (the same claim order, the same commits,
on a file or table without lifecycles' rules indexes) and, by hand, the checks a
lifecycles ``run_once`` makes in Python, each through lifecycles' own check code:

* the claimed record is read whole and checked as every read is (field rules, every
  invariant: ``store._decode``);
* the claim is the table's row (its guards, effect, every invariant and step invariant
  of the new record: ``MONITOR.fire``);
* the receiver's answer is read through its rules and the completion fired by the table
  (``read_answer``, ``poll_step``, ``MONITOR.fire``), its invariants checked.

Nothing else: no store, no lease protocol, no whole-record compare-and-set, no schema
guards, no rules indexes, and on PostgreSQL the claim's checks run after its statement
has committed (lifecycles must refuse a claim before it commits, which costs a
transaction or verdicts in the SQL). So each loop costs less than any correct
implementation making these checks: its rate over the raw loop's is a ceiling of the
ratio targets, which ``bench_throughput.py`` prints beside them.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from typing import Any

from lifecycles.machines.monitor import MONITOR, MonitorInputs, poll_step, read_answer
from lifecycles.stores.sql_claim import numbered

Receiver = Callable[[str, str], Any]


class Checks:
    """The checks of one cycle, on lifecycles' code: shared by both loops."""

    def __init__(self, monitor: Any, receiver: Receiver, now: float, worker: str,
                 lease_seconds: float) -> None:
        self.store, self.receiver, self.now, self.worker = monitor.store, receiver, now, worker
        self.policy, self.sha = monitor.policy, monitor.expected_capabilities_sha256
        self.lease_seconds = lease_seconds
        self.columns = ", ".join(self.store.schema.column_names)

    def claimed(self, row: tuple[Any, ...], token: str | None = None) -> Any:
        """The record read (checked as every read is), then leased by the table's row
        (under ``token``, or a new one)."""
        was = self.store._decode(row)
        inputs = MonitorInputs(
            now=self.now, policy=self.policy, worker_id=self.worker,
            lease_token=token or secrets.token_urlsafe(32), lease_seconds=self.lease_seconds,
        )
        return MONITOR.fire("claim", was, inputs)

    def completed(self, claimed: Any) -> Any:
        """The receiver's answer read through its rules, the completion fired by the table."""
        reply = self.receiver(claimed.event_id, claimed.site_id)
        lease = MonitorInputs(now=self.now, policy=self.policy, worker_id=claimed.lease_owner,
                              lease_token=claimed.lease_token)
        return poll_step(lease, read_answer(reply, claimed, self.sha)).fire(claimed, MONITOR.fire)


# The columns the raw loops write, from a completed record.
LEASED = ("poll_attempts", "lease_owner", "lease_token", "lease_expires_at", "updated_at")
COMPLETED = (
    "next_poll_at", "receiver_status", "receiver_attempts", "receiver_max_attempts",
    "receiver_next_attempt_at", "receiver_lease_expires_at", "receiver_lease_expired",
    "receiver_error_code", "receiver_processed_at", "updated_at",
)


def values(record: Any, names: tuple[str, ...]) -> list[Any]:
    return [int(value) if isinstance(value, bool) else value
            for value in (getattr(record, name) for name in names)]


def lease_statement(table: str, param: str) -> str:
    p = param
    return (
        f"UPDATE {table} SET status = 'leased', poll_attempts = {p}, lease_owner = {p},"
        f" lease_token = {p}, lease_expires_at = {p}, last_error_code = NULL, updated_at = {p}"
        f" WHERE event_id = {p}"
    )


class CheckedSQLite:
    """``RawSQLite`` plus the checks: BEGIN IMMEDIATE, the first due record (every column)
    in claim order, checked and leased by the table, one UPDATE, COMMIT; the reader; the
    completion fired by the table, one autocommit UPDATE (compare-and-set on the event
    and its token)."""

    def __init__(self, connection: sqlite3.Connection, checks: Checks, table: str,
                 claimable: str, order: str, complete: str) -> None:
        self.connection, self.checks, self.complete = connection, checks, complete
        self.select = (
            f"SELECT {checks.columns} FROM {table} INDEXED BY {table}_claim_order"
            f" WHERE status IN ({claimable}) AND next_poll_at <= ? ORDER BY {order} LIMIT 1"
        )
        self.lease = lease_statement(table, "?")

    def cycle(self) -> bool:
        connection, checks = self.connection, self.checks
        connection.execute("BEGIN IMMEDIATE")
        row = connection.execute(self.select, (checks.now,)).fetchone()
        if row is None:
            connection.execute("COMMIT")
            return False
        claimed = checks.claimed(row)
        connection.execute(self.lease, [*values(claimed, LEASED), claimed.event_id])
        connection.execute("COMMIT")
        done = checks.completed(claimed)
        params = [*values(done, COMPLETED), done.event_id, claimed.lease_token]
        if connection.execute(self.complete, params).rowcount != 1:
            raise RuntimeError(f"checked completion of {done.event_id} lost")
        return True


class CheckedPostgres:
    """``RawPostgres`` plus the checks: one autocommit claim statement (the raw loop's, SKIP
    LOCKED, returning the record as it was, every column), then the claim checked and
    fired by the table; the reader; the completion fired by the table, one autocommit
    compare-and-set UPDATE on the event and its token. Numbered markers, as lifecycles'
    statements run."""

    def __init__(self, connection: Any, checks: Checks, table: str, claimable: str,
                 order: str, complete: str) -> None:
        import psycopg

        self.checks = checks
        self.cursor = psycopg.RawCursor(connection)
        was = ", ".join(f"was.{name}" for name in checks.store.schema.column_names)
        self.claim = numbered(
            f"UPDATE {table} SET status = 'leased', poll_attempts = {table}.poll_attempts + 1,"
            " lease_owner = %s, lease_token = %s, lease_expires_at = %s,"
            f" last_error_code = NULL, updated_at = %s FROM (SELECT {checks.columns} FROM"
            f" {table} WHERE status IN ({claimable}) AND next_poll_at <= %s ORDER BY {order}"
            f" LIMIT 1 FOR UPDATE SKIP LOCKED) AS was WHERE {table}.event_id = was.event_id"
            f" RETURNING {was}", "%s")
        self.complete = numbered(complete, "%s")

    def cycle(self) -> bool:
        cursor, checks = self.cursor, self.checks
        now, token = checks.now, secrets.token_urlsafe(32)
        row = cursor.execute(
            self.claim, (checks.worker, token, now + checks.lease_seconds, now, now)).fetchone()
        if row is None:
            return False
        claimed = checks.claimed(row, token)
        done = checks.completed(claimed)
        cursor.execute(self.complete, [*values(done, COMPLETED), done.event_id, token])
        if cursor.rowcount != 1:
            raise RuntimeError(f"checked completion of {done.event_id} lost")
        return True
