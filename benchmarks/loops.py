"""The hand-written loops lifecycles' throughput is measured against, on its own schema.

* **raw** (``RawSQLite``, ``RawPostgres``): the fewest statements a claim-read-complete
  cycle takes, in claim order, at the same durability, and no checks at all: the floor
  the ratio targets of ``bench_throughput.py`` are stated against.
* **checked** (``CheckedSQLite``, ``CheckedPostgres``): the raw loop's own statements
  (the same claim order, the same commits, no rules indexes) plus, by hand, the checks a
  lifecycles ``run_once`` makes in Python, each through lifecycles' own check code:

  - the claimed record is read whole and checked as every read is (field rules, every
    invariant: ``store._decode``);
  - the claim is the table's row (its guards, effect, every invariant and step
    invariant of the new record: ``MONITOR.fire``);
  - the receiver's answer is read through its rules and the completion fired by the
    table (``read_answer``, ``poll_step``, ``MONITOR.fire``), its invariants checked.

  Nothing else: no store, no lease protocol, no whole-record compare-and-set, no schema
  guards, no rules indexes; and on PostgreSQL the claim's checks run after its statement
  has committed (lifecycles must refuse a claim before it commits, which costs a
  transaction or verdicts in the SQL). So a checked loop costs less than any correct
  implementation making these checks: its rate over the raw loop's is a ceiling of the
  ratio targets, which ``bench_throughput.py`` prints beside them.

* **verified** (``VerifiedPostgres``): the checked PostgreSQL loop, also refusing before
  its claim commits what the reference refuses (a broken record, an expired lease first,
  an altered schema), by verdicts and guards in its statements: the ceiling on
  PostgreSQL for an implementation that keeps the reference's refusals.

* **batches** (``RawBatchSQLite``, ``CheckedBatchSQLite``): the same two loops for
  ``run_many``: one transaction leasing up to ``limit`` due records (one SELECT in claim
  order, the leases by one ``executemany``), the reader for each outside any
  transaction, one transaction completing them all (one ``executemany``); the checked
  one makes, per item, the checks listed above. Measured against the reference's
  ``run_once`` at default settings, ``checked`` is the ceiling of the batch target.

``tests/tools/test_benchmark_loops.py`` holds every loop to writing exactly the rows
lifecycles' ``run_once`` (and ``run_many``) writes. No reference components are needed here.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from typing import Any

from lifecycles.machines import lease
from lifecycles.machines.monitor import MONITOR, MonitorInputs, poll_step, read_answer
from lifecycles.stores._sql_claim import numbered

Receiver = Callable[[str, str], Any]

TABLE = "cms_source_terminal_processing"
WORKER = "w1"
LEASE_SECONDS = 600.0
POLL_INTERVAL = 30.0  # both monitors' default: a watching item is polled again 30 s later


# --- the raw loops -------------------------------------------------------------------


def claimable() -> str:
    return ", ".join(f"'{status}'" for status in lease.claimable_statuses(MONITOR))


def claim_order() -> str:
    assert MONITOR.lease is not None
    return ", ".join(MONITOR.lease.order_by)


def due_in_claim_order(columns: str, limit: str) -> str:
    """SQLite: the due records' ``columns`` through the claim-order index, in claim order."""
    return (
        f"SELECT {columns} FROM {TABLE} INDEXED BY {TABLE}_claim_order"
        f" WHERE status IN ({claimable()}) AND next_poll_at <= ?"
        f" ORDER BY {claim_order()} LIMIT {limit}"
    )


def complete_statement(param: str) -> str:
    """complete: the columns both monitors write for a 'pending' answer, compare-and-set on
    the event and its lease token, nothing checked."""
    p = param
    return (
        f"UPDATE {TABLE} SET status = 'watching', failures = 0, next_poll_at = {p},"
        " lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,"
        f" last_error_code = NULL, receiver_status = {p}, receiver_attempts = {p},"
        f" receiver_max_attempts = {p}, receiver_next_attempt_at = {p},"
        f" receiver_lease_expires_at = {p}, receiver_lease_expired = {p},"
        f" receiver_error_code = {p}, receiver_processed_at = {p}, updated_at = {p}"
        f" WHERE event_id = {p} AND lease_token = {p}"
    )


def complete_params(
    reply: dict[str, Any], now: float, event_id: str, token: str
) -> tuple[Any, ...]:
    return (
        now + POLL_INTERVAL, reply["processing_status"], reply["attempts"],
        reply["max_attempts"], reply["next_attempt_at"], reply["lease_expires_at"],
        int(reply["lease_expired"]), reply["last_error_code"], reply["processed_at"], now,
        event_id, token,
    )


def drop_unused_indexes(connection: sqlite3.Connection) -> None:
    """Drop the indexes lifecycles keeps for what a hand-written loop does not do from a
    file the loop will use, so that it does not pay for them on each write: the rules
    indexes (it keeps no health) and the lease-expiry index (it rescues no lease)."""
    names = [name for (name,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND (name LIKE ? OR name = ?)",
        (f"{TABLE}_rules_%", f"{TABLE}_lease_expiry"))]
    assert f"{TABLE}_lease_expiry" in names and len(names) > 1, names
    for name in names:
        connection.execute(f"DROP INDEX {name}")
    connection.commit()


class RawSQLite:
    """The floor on SQLite: claim through the claim-order index, read, complete."""

    def __init__(self, connection: sqlite3.Connection, receiver: Receiver, now: float) -> None:
        self.connection, self.receiver, self.now = connection, receiver, now
        self.select = due_in_claim_order("event_id, site_id", "1")
        self.lease = (
            f"UPDATE {TABLE} SET status = 'leased', poll_attempts = poll_attempts + 1,"
            " lease_owner = ?, lease_token = ?, lease_expires_at = ?, last_error_code = NULL,"
            " updated_at = ? WHERE event_id = ?"
        )
        self.complete = complete_statement("?")

    def cycle(self) -> bool:
        connection, now = self.connection, self.now
        connection.execute("BEGIN IMMEDIATE")
        row = connection.execute(self.select, (now,)).fetchone()
        if row is None:
            connection.execute("COMMIT")
            return False
        event_id, site_id = row
        token = secrets.token_urlsafe(32)
        connection.execute(self.lease, (WORKER, token, now + LEASE_SECONDS, now, event_id))
        connection.execute("COMMIT")
        reply = self.receiver(event_id, site_id)
        done = connection.execute(self.complete, complete_params(reply, now, event_id, token))
        if done.rowcount != 1:
            raise RuntimeError(f"raw completion of {event_id} lost")
        return True


class RawPostgres:
    """The floor on PostgreSQL: one autocommit claim statement with SKIP LOCKED, read,
    one autocommit compare-and-set completion."""

    def __init__(self, connection: Any, receiver: Receiver, now: float, worker: str) -> None:
        self.connection, self.receiver, self.now, self.worker = connection, receiver, now, worker
        self.claim = (
            f"UPDATE {TABLE} SET status = 'leased', poll_attempts = poll_attempts + 1,"
            " lease_owner = %s, lease_token = %s, lease_expires_at = %s,"
            " last_error_code = NULL, updated_at = %s"
            f" WHERE event_id = (SELECT event_id FROM {TABLE}"
            f" WHERE status IN ({claimable()}) AND next_poll_at <= %s"
            f" ORDER BY {claim_order()} LIMIT 1 FOR UPDATE SKIP LOCKED)"
            " RETURNING event_id, site_id"
        )
        self.complete = complete_statement("%s")

    def cycle(self) -> bool:
        now, token = self.now, secrets.token_urlsafe(32)
        with self.connection.cursor() as cursor:
            cursor.execute(self.claim, (self.worker, token, now + LEASE_SECONDS, now, now))
            row = cursor.fetchone()
            if row is None:
                return False
            event_id, site_id = row
            reply = self.receiver(event_id, site_id)
            cursor.execute(self.complete, complete_params(reply, now, event_id, token))
            if cursor.rowcount != 1:
                raise RuntimeError(f"raw completion of {event_id} lost")
        return True


# --- the checked loops ---------------------------------------------------------------


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
        """The receiver's answer read through its rules, the completion fired by the table.
        The loops' statements write what a 'pending' answer leads to (the only answer the
        benchmarks give): another outcome is refused rather than written as that."""
        reply = self.receiver(claimed.event_id, claimed.site_id)
        lease = MonitorInputs(now=self.now, policy=self.policy, worker_id=claimed.lease_owner,
                              lease_token=claimed.lease_token)
        done = poll_step(lease, read_answer(reply, claimed, self.sha)).fire(claimed, MONITOR.fire)
        if done.status != "watching":
            raise RuntimeError(f"{done.event_id} ended {done.status}: the loops write watching")
        return done


# The columns the checked loops write from the record leased, and from the record completed.
LEASED = ("poll_attempts", "lease_owner", "lease_token", "lease_expires_at", "updated_at")
COMPLETED = (
    "next_poll_at", "receiver_status", "receiver_attempts", "receiver_max_attempts",
    "receiver_next_attempt_at", "receiver_lease_expires_at", "receiver_lease_expired",
    "receiver_error_code", "receiver_processed_at", "updated_at",
)


def values(record: Any, names: tuple[str, ...]) -> list[Any]:
    return [int(value) if isinstance(value, bool) else value
            for value in (getattr(record, name) for name in names)]


def lease_statement(param: str) -> str:
    p = param
    return (
        f"UPDATE {TABLE} SET status = 'leased', poll_attempts = {p}, lease_owner = {p},"
        f" lease_token = {p}, lease_expires_at = {p}, last_error_code = NULL, updated_at = {p}"
        f" WHERE event_id = {p}"
    )


class CheckedSQLite:
    """``RawSQLite`` plus the checks: BEGIN IMMEDIATE, the first due record (every column)
    in claim order, checked and leased by the table, one UPDATE, COMMIT; the reader; the
    completion fired by the table, one autocommit UPDATE (compare-and-set on the event
    and its token)."""

    def __init__(self, connection: sqlite3.Connection, checks: Checks) -> None:
        self.connection, self.checks = connection, checks
        self.select = due_in_claim_order(checks.columns, "1")
        self.lease = lease_statement("?")
        self.complete = complete_statement("?")

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

    def __init__(self, connection: Any, checks: Checks) -> None:
        import psycopg

        self.checks = checks
        self.cursor = psycopg.RawCursor(connection)
        was = ", ".join(f"was.{name}" for name in checks.store.schema.column_names)
        self.claim = numbered(
            f"UPDATE {TABLE} SET status = 'leased', poll_attempts = {TABLE}.poll_attempts + 1,"
            " lease_owner = %s, lease_token = %s, lease_expires_at = %s,"
            f" last_error_code = NULL, updated_at = %s FROM (SELECT {checks.columns} FROM"
            f" {TABLE} WHERE status IN ({claimable()}) AND next_poll_at <= %s"
            f" ORDER BY {claim_order()} LIMIT 1 FOR UPDATE SKIP LOCKED) AS was"
            f" WHERE {TABLE}.event_id = was.event_id RETURNING {was}", "%s")
        self.complete = numbered(complete_statement("%s"), "%s")

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


class VerifiedPostgres:
    """``CheckedPostgres`` plus what the reference's contract requires before a write
    commits, in the cheapest form known, each piece through lifecycles' own code:

    - the claimed record's rules, and the rules reading a field the claim writes on the
      record as written, as verdicts inside the claim statement (health's SQL forms,
      ``rule_queries``): a record breaking a rule fails the statement, so nothing is
      leased, where the checked loop checks it only after its lease has committed;
    - no lease expired (the reference's claim recovers those first), as a condition;
    - the schema as verified (the reference validates it on every operation), as the
      dialect's guards, in both statements: each is a transaction of its own.

    Still no store, lease protocol or whole-record compare-and-set: the completion
    compares the event and its token, as the reference's does. So ``raw / verified`` is
    the most any implementation can reach that refuses, before it commits, what the
    reference refuses.

    ``verdicts=False`` or ``guards=False`` leave the rule verdicts, or the schema guards,
    out: ``profile_postgres_cycle.py`` prices each kind of check that way."""

    def __init__(self, connection: Any, checks: Checks, *, verdicts: bool = True,
                 guards: bool = True) -> None:
        import psycopg

        from lifecycles.stores._sql_claim import verdict
        from lifecycles.stores._sql_lease import expired_clause

        self.checks = checks
        store = checks.store
        d, schema = store.dialect, store.schema
        self.cursor = psycopg.RawCursor(connection)
        health = store.rule_queries()
        names = schema.column_names
        # The record as it was under other names, so that the rules rendered over the
        # bare column names read the record as written in RETURNING.
        was = ", ".join(f"{name} AS was_{name}" for name in names)
        trigger = lease.declared_lease(MONITOR).trigger
        claim_row = next(row for row in MONITOR.rows if row.trigger == trigger)
        written = health.rules_reading(set(MONITOR.writes(claim_row)))
        every_rule = health.every_rule
        if not verdicts:
            every_rule = written = "1 = 1"
        meta, meta_params = d.meta_guard(schema)
        guard = f"{d.catalogue_guard(schema)} AND {meta}" if guards else "1 = 1"
        self.guard_params = [*d.catalogue_params(schema, None), *meta_params] if guards else []
        expired = expired_clause(d, MONITOR, "%s", "expired")
        self.claim = numbered(
            f"UPDATE {TABLE} SET status = 'leased', poll_attempts = {TABLE}.poll_attempts + 1,"
            " lease_owner = %s, lease_token = %s, lease_expires_at = %s,"
            f" last_error_code = NULL, updated_at = %s FROM (SELECT {was},"
            f" {verdict(d, 'event_id', every_rule)} AS was_verdict"
            f" FROM {TABLE} WHERE status IN ({claimable()}) AND next_poll_at <= %s"
            f" ORDER BY {claim_order()} LIMIT 1 FOR UPDATE SKIP LOCKED) AS was"
            f" WHERE {TABLE}.event_id = was.was_event_id"
            f" AND NOT EXISTS (SELECT 1 FROM {TABLE} AS expired WHERE {expired})"
            f" AND {guard} RETURNING {', '.join(f'was.was_{name}' for name in names)},"
            f" was.was_verdict, {verdict(d, 'event_id', written)}", "%s")
        self.complete = numbered(f"{complete_statement('%s')} AND {guard}", "%s")

    def cycle(self) -> bool:
        cursor, checks = self.cursor, self.checks
        now, token = checks.now, secrets.token_urlsafe(32)
        row = cursor.execute(self.claim, (
            checks.worker, token, now + checks.lease_seconds, now, now, now,
            *self.guard_params)).fetchone()
        if row is None:
            return False
        claimed = checks.claimed(row[:-2], token)
        done = checks.completed(claimed)
        cursor.execute(self.complete, [
            *values(done, COMPLETED), done.event_id, token, *self.guard_params])
        if cursor.rowcount != 1:
            raise RuntimeError(f"verified completion of {done.event_id} lost")
        return True


# --- the batch loops (run_many) --------------------------------------------------------


class RawBatchSQLite:
    """The floor of a batch on SQLite: BEGIN IMMEDIATE, up to ``limit`` due records in
    claim order (one SELECT), their leases (one ``executemany``), COMMIT; the reader for
    each; BEGIN IMMEDIATE, the completions (one ``executemany``, compare-and-set on the
    event and its token), COMMIT. No checks."""

    def __init__(self, connection: sqlite3.Connection, receiver: Receiver, now: float) -> None:
        self.connection, self.receiver, self.now = connection, receiver, now
        self.select = due_in_claim_order("event_id, site_id", "?")
        self.lease = RawSQLite(connection, receiver, now).lease
        self.complete = complete_statement("?")

    def batch(self, limit: int) -> int:
        """One batch of at most ``limit`` items; how many it finished (0: none was due)."""
        connection, now = self.connection, self.now
        connection.execute("BEGIN IMMEDIATE")
        found = connection.execute(self.select, (now, limit)).fetchall()
        leased = [(event_id, site_id, secrets.token_urlsafe(32)) for event_id, site_id in found]
        connection.executemany(self.lease, [
            (WORKER, token, now + LEASE_SECONDS, now, event_id) for event_id, _, token in leased
        ])
        connection.execute("COMMIT")
        if not leased:
            return 0
        replies = [self.receiver(event_id, site_id) for event_id, site_id, _ in leased]
        connection.execute("BEGIN IMMEDIATE")
        done = connection.executemany(self.complete, [
            complete_params(reply, now, event_id, token)
            for reply, (event_id, _, token) in zip(replies, leased, strict=True)
        ])
        if done.rowcount != len(leased):
            raise RuntimeError("a raw batch completion was lost")
        connection.execute("COMMIT")
        return len(leased)


class CheckedBatchSQLite:
    """``RawBatchSQLite`` plus the checks of :class:`Checks` for every item: each due
    record read whole and checked, leased by the table's row; each answer read through
    its rules and the completion fired by the table."""

    def __init__(self, connection: sqlite3.Connection, checks: Checks) -> None:
        self.connection, self.checks = connection, checks
        self.select = due_in_claim_order(checks.columns, "?")
        self.lease = lease_statement("?")
        self.complete = complete_statement("?")

    def batch(self, limit: int) -> int:
        connection, checks = self.connection, self.checks
        connection.execute("BEGIN IMMEDIATE")
        claimed = [checks.claimed(row) for row in
                   connection.execute(self.select, (checks.now, limit)).fetchall()]
        connection.executemany(self.lease, [
            [*values(record, LEASED), record.event_id] for record in claimed
        ])
        connection.execute("COMMIT")
        if not claimed:
            return 0
        finished = [checks.completed(record) for record in claimed]
        connection.execute("BEGIN IMMEDIATE")
        done = connection.executemany(self.complete, [
            [*values(record, COMPLETED), record.event_id, was.lease_token]
            for record, was in zip(finished, claimed, strict=True)
        ])
        if done.rowcount != len(claimed):
            raise RuntimeError("a checked batch completion was lost")
        connection.execute("COMMIT")
        return len(claimed)
