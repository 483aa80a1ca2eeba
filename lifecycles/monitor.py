"""Drop-in replacement for the reference ``terminal_processing_monitor`` module.

Same names, signatures, returned fields, exception type and ``code`` strings, and
the same SQLite schema, so a database written by either opens and continues in the
other. Underneath, every status change is a row of the monitor's transition table
(``lifecycles.machines.monitor``), every record is checked against named
invariants on read and before write, and writes are compare-and-set.

One deliberate difference, the reference's known defect, is fixed: a receiver
answer whose resulting record would break any invariant (for example
``processing_status`` ``failed`` without an error code) fails the item with
``terminal_processing_monitor.response_invalid`` instead of being stored and then
blocking every later call with ``state_invalid``. The other deliberate differences
(stricter reading, hostile input refused, database errors mapped to codes) are each
pinned by a test in ``tests/monitor/test_monitor_differences.py``.

Every call checks, with one cheap query, that no other connection changed the schema
or the meta row since the monitor verified them (``schema_altered``), and no driver
exception (``sqlite3``, ``psycopg``) leaves a public method, the constructor
included: each becomes ``schema_altered``, ``database_integrity`` or
``database_unreachable`` (a :class:`DatabaseUnreachable`, whose ``outcome_unknown``
says whether a commit may have happened unseen).

A lease left to a worker by such a failure (a claim that committed unseen, a
completion that did not commit) is kept as a doubt, per process and worker id
(:class:`LeaseDoubts`): that worker's next claim takes it up again while it is live,
where the reference strands the item until its lease expires.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lifecycles.invariants.core import (
    FieldRule,
    FieldRuleViolation,
    canonical_json,
)
from lifecycles.invariants.monitor import (
    TERMINAL_STATUSES as _TERMINAL_STATUSES,
)
from lifecycles.invariants.monitor import (
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
    batch_limit,
    capabilities_rule,
    event_id_rule,
    failure_bound,
    lease_duration,
    reader_rule,
    time,
    worker_id_rule,
)
from lifecycles.invariants.monitor_messages import (
    NOTIFICATION_FIELDS,
    NOTIFICATION_SCHEMA,
    notification_rules_broken,
)
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines.monitor import (
    CODE,
    MONITOR,
    STATUS_SCHEMA,
    MonitorInputs,
    RetryPolicy,
    new_record,
    plain_value,
    poll_step,
    read_answer,
)
from lifecycles.machines.work import Step
from lifecycles.monitor_errors import (
    RULE_CODES,
    DatabaseUnreachable,
    InputInvalid,
    LeaseLost,
    StateInvalid,
    StorageBlocked,
    TerminalProcessingMonitorBlocked,
    blocked,
    public_errors,
    refused,
    unique_is_collision,
)
from lifecycles.monitor_schema import MonitorSchema, open_monitor_store
from lifecycles.monitor_values import (
    MonitorRow,
    TerminalProcessingHealth,
    TerminalProcessingOutcome,
    TerminalProcessingStatus,
    outcome_of,
    status_of,
)
from lifecycles.stores.base import StaleRecord
from lifecycles.stores.sql import SQLStore

SCHEMA_VERSION = MonitorSchema.VERSION
# Derived from the declarations, never listed again.
STATUSES = tuple(status.value for status in MonitorStatus)
REMOTE_STATUSES = tuple(status.value for status in ReceiverStatus)
TERMINAL_STATUSES = set(_TERMINAL_STATUSES)



def _checked(rule: FieldRule, value: Any) -> Any:
    if not rule.check(value):
        raise refused(rule.name)
    return value


def _time(value: Any) -> float:
    return float(_checked(time, value))


def _seconds(value: Any, bounds: FieldRule) -> float:
    """A duration: a time first (``time_invalid``), then within ``bounds``."""
    return float(_checked(bounds, _checked(time, value)))


def canonical_sha256(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value`` (sorted keys, no spaces, UTF-8)."""
    try:
        return hashlib.sha256(canonical_json(value)).hexdigest()
    except Exception:  # not JSON, or a value whose own methods raised while encoded
        raise refused("notification_json") from None


def new_lease_token() -> str:
    """A fresh, unguessable lease token (the fencing token of one claim)."""
    return secrets.token_urlsafe(32)


def _open_store(connection: Any, capabilities_sha256: str) -> SQLStore[MonitorRecord]:
    # The reference schema is the monitor's own (lifecycles/monitor_schema.py).
    return open_monitor_store(connection, capabilities_sha256)


class LeaseDoubts:
    """The leases this process's workers may hold after a write that failed unconfirmed
    (:class:`~lifecycles.machines.lease.Doubt`), by the store's location and worker id.

    A worker whose connection broke opens a new connection and a new monitor; the doubt
    must outlive both, so it lives here, once per process. Thread-safe. A doubt is
    dropped when the worker's next claim resolves it, or unasked once its last lease has
    expired; while none is pending a claim only finds this empty (no query).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._doubts: dict[tuple[str, str], lease_protocol.Doubt] = {}

    def __bool__(self) -> bool:
        return bool(self._doubts)

    def add(self, where: str, worker_id: str, doubt: lease_protocol.Doubt) -> None:
        """Keep ``doubt`` (with any the worker already has: their tokens together)."""
        with self._lock:
            held = self._doubts.get((where, worker_id))
            if held is not None:
                doubt = lease_protocol.Doubt(
                    held.tokens | doubt.tokens, max(held.expires_at, doubt.expires_at),
                    doubt.holder,
                )
            self._doubts[(where, worker_id)] = doubt

    def take(self, where: str, worker_id: str, now: float) -> lease_protocol.Doubt | None:
        """The worker's doubt, removed (the caller resolves it or adds it back); ``None``
        when there is none, or it is spent at ``now``."""
        with self._lock:
            doubt = self._doubts.pop((where, worker_id), None)
        if doubt is None or lease_protocol.doubt_is_spent(doubt, now):
            return None
        return doubt


#: This process's lease doubts (see :class:`LeaseDoubts`).
LEASE_DOUBTS = LeaseDoubts()


class DurableTerminalProcessingMonitor:
    """Poll exact receiver status with durable leases and bounded failures."""

    def __init__(
        self,
        connection: Any,
        expected_capabilities_sha256: str,
        *,
        poll_interval_seconds: float | int = 30,
        base_delay_seconds: float | int = 5,
        max_delay_seconds: float | int = 300,
    ):
        if not isinstance(connection, sqlite3.Connection) and not type(
            connection
        ).__module__.startswith("psycopg"):
            raise TypeError("connection must be sqlite3.Connection")
        self.connection = connection
        if isinstance(connection, sqlite3.Connection):
            connection.row_factory = sqlite3.Row  # the reference set it; callers may rely on it
        capabilities = _checked(capabilities_rule, plain_value(expected_capabilities_sha256))
        self.expected_capabilities_sha256: str = capabilities
        try:  # the policy's own rules, in the reference's order
            RetryPolicy(poll_interval_seconds, base_delay_seconds, max_delay_seconds)
        except FieldRuleViolation as broken:
            raise refused(broken.rule) from None
        self.poll_interval_seconds = float(poll_interval_seconds)
        self.base_delay_seconds = float(base_delay_seconds)
        self.max_delay_seconds = float(max_delay_seconds)
        self.policy = RetryPolicy(
            self.poll_interval_seconds, self.base_delay_seconds, self.max_delay_seconds
        )
        with public_errors():
            self.store = _open_store(connection, capabilities)

    # -- the database under the monitor ---------------------------------------------

    @contextmanager
    def _schema_first(self) -> Iterator[None]:
        """Input checks whose refusal yields to an altered database.

        The reference checks the schema before the arguments of ``register`` and
        ``claim``; here the check runs inside the write transaction (one query per
        call), so a refused argument first asks whether the database was altered,
        and the same code wins as in the reference.
        """
        try:
            yield
        except TerminalProcessingMonitorBlocked:
            self._check_schema()
            raise

    def _check_schema(self) -> None:
        """One cheap query: refuse when another connection altered the schema or meta row."""
        with public_errors(self.store):
            self.store.check_schema()

    # -- registering ------------------------------------------------------------

    def register(
        self,
        notification: Mapping[str, Any],
        notification_sha256: str,
        *,
        max_failures: int = 5,
        now: float | int,
    ) -> TerminalProcessingStatus:
        with self._schema_first():
            moment = _time(now)
            _checked(failure_bound, max_failures)
            record = self._notification_record(
                notification, notification_sha256, max_failures, moment
            )
        with public_errors(self.store):
            return self._store_registration(record, moment)

    def register_many(
        self,
        notifications: Iterable[tuple[Mapping[str, Any], str]],
        *,
        max_failures: int = 5,
        now: float | int,
    ) -> list[TerminalProcessingStatus | TerminalProcessingMonitorBlocked]:
        """``register`` for many ``(notification, notification_sha256)`` pairs, in one commit.

        Returns one entry per pair, in order: its status, or the refusal ``register``
        would have raised for it (``notification_invalid``, ``idempotency_collision``,
        ``state_invalid``), which stores nothing for that pair and never blocks the
        others. Everything returned is durable when the call returns. Refusals of
        ``now``, ``max_failures`` and of the database raise, as ``register``'s do; so
        does ``notification_invalid`` when ``notifications`` cannot be iterated.
        """
        with self._schema_first():
            moment = _time(now)
            _checked(failure_bound, max_failures)
            try:
                pairs = list(notifications)
            except Exception:  # its own __iter__ raised: nothing to register
                raise refused("notification_readable") from None
        records: list[MonitorRecord | TerminalProcessingMonitorBlocked] = []
        for pair in pairs:
            try:
                if type(pair) is not tuple or len(pair) != 2:
                    raise refused("notification_is_object")
                records.append(self._notification_record(*pair, max_failures, moment))
            except TerminalProcessingMonitorBlocked as refusal:
                records.append(refusal)
        results: list[TerminalProcessingStatus | TerminalProcessingMonitorBlocked] = []
        with public_errors(self.store), self.store.transaction():
            for record in records:
                try:
                    if isinstance(record, TerminalProcessingMonitorBlocked):
                        raise record
                    with public_errors(self.store):
                        results.append(self._store_registration(record, moment))
                except (InputInvalid, StateInvalid) as refusal:  # this pair's alone
                    results.append(refusal)
        return results

    def _store_registration(self, record: MonitorRecord, now: float) -> TerminalProcessingStatus:
        with unique_is_collision():
            stored = self.store.insert(MONITOR.create(record))
        if stored is not record:  # already registered: the table's register row decides
            MONITOR.fire("register", stored, MonitorInputs(now=now, registration=record))
        return status_of(stored, now)  # the record the store returned: no second read

    @staticmethod
    def _notification_record(
        notification: Any, notification_sha256: Any, max_failures: int, now: float
    ) -> MonitorRecord:
        """The record a valid notification registers; refused: ``notification_invalid``.

        The notification is read once, through what the reference reads of it
        (iteration and item access), into a plain dict of plain keys and values
        (:func:`plain_value`); any failure of its own code makes it invalid. Every
        check, the digest and the stored values then come from that one copy, and no
        method of a caller's value runs again: a ``str`` subclass that compares equal
        to an allowed value is judged by the value it holds, which the database would
        store.
        """
        if not isinstance(notification, dict):  # the reference's JSON digest refuses others
            raise refused("notification_is_object")
        try:
            value = {plain_value(key): plain_value(notification[key]) for key in notification}
        except Exception:  # its own __iter__ or __getitem__ raised: nothing to register
            raise refused("notification_readable") from None
        for rule in notification_rules_broken(value):
            raise refused(rule)
        digest = plain_value(notification_sha256)
        try:  # the identity fields and the digest obey the record's own field rules
            record = new_record(
                event_id=value["event_id"], notification_id=value["notification_id"],
                site_id=value["site_id"], terminal_status=value["terminal_status"],
                notification_sha256=digest, max_failures=max_failures, now=now,
            )
        except FieldRuleViolation as broken:
            raise refused(broken.rule) from None
        if canonical_sha256(value) != digest:
            raise refused("notification_digest_matches")
        return record

    # -- leasing and polling -----------------------------------------------------

    def claim(
        self,
        worker_id: str,
        *,
        now: float | int,
        lease_seconds: float | int = 600,
    ) -> MonitorRow | None:
        record = self._claim(worker_id, now, lease_seconds)
        return None if record is None else MonitorRow(record)

    def _claim(self, worker_id: Any, now: Any, lease_seconds: Any) -> MonitorRecord | None:
        worker_id = plain_value(worker_id)  # the str it holds is the one stored as lease_owner
        with self._schema_first():
            _checked(worker_id_rule, worker_id)
            moment = _time(now)
            seconds = _seconds(lease_seconds, lease_duration)
        if LEASE_DOUBTS:  # the common path asks nothing more
            resumed = self._resumed(worker_id, moment, 1)
            if resumed:
                return resumed[0]
        token = new_lease_token()
        inputs = MonitorInputs(
            now=moment, policy=self.policy, worker_id=worker_id,
            lease_token=token, lease_seconds=seconds,
        )
        try:
            with public_errors(self.store):
                return self.store.claim(inputs)  # its transaction checks the schema first
        except DatabaseUnreachable as error:
            if error.outcome_unknown:  # it may have leased a record under this token
                self._keep_doubt(worker_id, [token], moment + seconds)
            raise

    def _claim_many(
        self, worker_id: Any, now: float, lease_seconds: Any, limit: int
    ) -> list[MonitorRecord]:
        worker_id = plain_value(worker_id)
        with self._schema_first():
            _checked(worker_id_rule, worker_id)
            seconds = _seconds(lease_seconds, lease_duration)
        resumed = self._resumed(worker_id, now, limit) if LEASE_DOUBTS else []
        if len(resumed) == limit:
            return resumed
        tokens: list[str] = []

        def inputs_for(_: int) -> MonitorInputs:  # each lease its own token
            tokens.append(new_lease_token())
            return MonitorInputs(
                now=now, policy=self.policy, worker_id=worker_id,
                lease_token=tokens[-1], lease_seconds=seconds,
            )

        try:
            with public_errors(self.store):
                return [*resumed, *self.store.claim_many(inputs_for, limit - len(resumed))]
        except DatabaseUnreachable as error:
            if error.outcome_unknown:  # it may have leased records under these tokens
                self._keep_doubt(worker_id, tokens, now + seconds)
            self._keep_doubts_of(resumed)  # taken up again, not yet done
            raise

    # -- doubts: leases a failed write may have left to this worker ------------------

    def _resumed(self, worker_id: str, now: float, limit: int) -> list[MonitorRecord]:
        """The leases this worker still holds from a write that failed unconfirmed, up to
        ``limit``: its claim takes them up again (called only while some doubt is
        pending in the process; otherwise a claim asks nothing more)."""
        where = self.store.location
        doubt = LEASE_DOUBTS.take(where, worker_id, now)
        if doubt is None:
            return []
        try:
            with public_errors(self.store):
                self.store.check_schema()
                found = self.store.leased_under(doubt.tokens, now)
        except BaseException:
            LEASE_DOUBTS.add(where, worker_id, doubt)  # still unresolved: asked next time
            raise
        resumed = lease_protocol.resume(MONITOR, doubt, found, now, limit)
        if resumed.left is not None:
            LEASE_DOUBTS.add(where, worker_id, resumed.left)
        return resumed.taken

    def _keep_doubt(self, worker_id: str, tokens: list[str], expires_at: float) -> None:
        """Leases under ``tokens`` that a failed write may have left to this worker, until
        ``expires_at`` at the latest: its next claim looks for them."""
        if tokens:
            LEASE_DOUBTS.add(self.store.location, worker_id, lease_protocol.Doubt(
                frozenset(tokens), expires_at, (("lease_owner", worker_id),)))

    def _keep_doubts_of(self, claimed: list[MonitorRecord]) -> None:
        """The leases of ``claimed``, whose completion failed with ``database_unreachable``:
        not committed, they are still held; committed unseen, the doubt resolves to
        nothing. Either way the worker's next claim looks."""
        leases: dict[str, list[tuple[str, float]]] = {}
        for r in claimed:  # leased records: owner, token and expiry are set (an invariant)
            if r.lease_owner is not None and r.lease_token is not None and (
                r.lease_expires_at is not None
            ):
                leases.setdefault(r.lease_owner, []).append((r.lease_token, r.lease_expires_at))
        for worker_id, held in leases.items():
            self._keep_doubt(worker_id, [token for token, _ in held],
                             max(expiry for _, expiry in held))

    def run_once(
        self,
        reader: Callable[[str, str], Any],
        worker_id: str,
        *,
        now: float | int,
        lease_seconds: float | int = 600,
    ) -> TerminalProcessingOutcome | None:
        _checked(reader_rule, reader)
        moment = _time(now)
        claimed = self._claim(worker_id, moment, lease_seconds)
        if claimed is None:
            return None
        step = self._poll(reader, claimed, moment)
        if isinstance(step, TerminalProcessingMonitorBlocked):
            raise step  # the monitor's own refusal, met inside the reader
        try:
            return outcome_of(self._finish(claimed, step))
        except DatabaseUnreachable:
            self._keep_doubts_of([claimed])
            raise

    def run_many(
        self,
        reader: Callable[[str, str], Any],
        worker_id: str,
        *,
        now: float | int,
        lease_seconds: float | int = 600,
        limit: int = 50,
    ) -> list[TerminalProcessingOutcome | TerminalProcessingMonitorBlocked]:
        """``run_once`` for up to ``limit`` due items, sharing two commits.

        One transaction leases up to ``limit`` due items in claim order; the reader is
        called for each outside any transaction; one transaction completes them all.
        Returns one entry per leased item, in claim order: its outcome, or the refusal
        ``run_once`` would have raised for it (``claim_lost``, ``state_invalid``, a
        monitor refusal raised inside the reader), which leaves that item as it was and
        never blocks the others. Everything returned is durable when the call returns.
        An empty list: nothing was due. Refusals of the arguments (``limit_invalid``:
        ``limit`` is an integer from 1 to 1000) and of the database raise, as
        ``run_once``'s do.
        """
        _checked(reader_rule, reader)
        moment = _time(now)
        count = _checked(batch_limit, limit)
        claimed = self._claim_many(worker_id, moment, lease_seconds, count)
        steps = [self._poll(reader, record, moment) for record in claimed]
        results: list[TerminalProcessingOutcome | TerminalProcessingMonitorBlocked | None]
        results = [step if isinstance(step, TerminalProcessingMonitorBlocked) else None
                   for step in steps]
        try:
            self._complete_batch(claimed, steps, results)
        except DatabaseUnreachable:
            self._keep_doubts_of(claimed)
            raise
        finished = [result for result in results if result is not None]
        assert len(finished) == len(claimed)  # each item: its outcome or its refusal
        return finished

    def _complete_batch(
        self, claimed: list[MonitorRecord],
        steps: list[Step[MonitorInputs] | TerminalProcessingMonitorBlocked],
        results: list[TerminalProcessingOutcome | TerminalProcessingMonitorBlocked | None],
    ) -> None:
        """``run_many``'s completions, in one transaction, each into its place in
        ``results`` (a step that is already a refusal is left as it is)."""
        with public_errors(self.store), self.store.transaction():
            # Each completion decided first, then all written together; an item whose
            # write finds its record changed (or whose step the table refuses on the
            # record as claimed) is decided again alone, on the record as stored.
            planned: list[tuple[int, Step[MonitorInputs], lease_protocol.Grant]] = []
            alone: list[tuple[int, Step[MonitorInputs]]] = []
            for at, (record, step) in enumerate(zip(claimed, steps, strict=True)):
                if isinstance(step, TerminalProcessingMonitorBlocked):
                    continue
                try:
                    with public_errors(self.store):
                        grant = lease_protocol.planned_completion(MONITOR, record, step.fire)
                except (LeaseLost, StateInvalid) as refusal:  # this item's alone
                    results[at] = refusal
                    continue
                if grant is None:
                    alone.append((at, step))
                else:
                    planned.append((at, step, grant))
            written = self.store.put_many([(g.before, g.after, g.row) for _, _, g in planned])
            for (at, step, grant), done in zip(planned, written, strict=True):
                if done:
                    results[at] = outcome_of(grant.after)
                else:
                    alone.append((at, step))
            for at, step in sorted(alone, key=lambda item: item[0]):
                try:
                    results[at] = outcome_of(self._finish(claimed[at], step))
                except (LeaseLost, StateInvalid) as refusal:
                    results[at] = refusal

    def _poll(
        self, reader: Callable[[str, str], Any], claimed: MonitorRecord, now: float
    ) -> Step[MonitorInputs] | TerminalProcessingMonitorBlocked:
        """Call the reader for one leased item, outside any transaction: the step that
        finishes its poll, or the monitor's own refusal met inside the reader (which is
        not the reader's failure and records nothing)."""
        lease = MonitorInputs(
            now=now, policy=self.policy, worker_id=claimed.lease_owner,
            lease_token=claimed.lease_token,
        )
        try:
            response = reader(claimed.event_id, claimed.site_id)
            # Reading runs the answer's own Mapping code: its failures count as the reader's.
            read = read_answer(response, claimed, self.expected_capabilities_sha256)
            return poll_step(lease, read)
        except TerminalProcessingMonitorBlocked as refusal:
            return refusal
        except Exception as error:  # the reader is foreign code: any failure is recorded
            return poll_step(lease, error)

    def _finish(self, claimed: MonitorRecord, step: Step[MonitorInputs]) -> MonitorRecord:
        """Fire the poll's step (:func:`poll_step`, the machine's rule) through the store,
        by the lease protocol's :func:`~lifecycles.machines.lease.complete`.

        First on the record as claimed: outside any transaction the store writes it with
        one statement that matches the whole record as claimed and the schema as
        verified (inside a batch's transaction, one statement of it), so it succeeds
        only if nothing changed since the claim. Otherwise a transaction (the batch's,
        or one of its own) decides as the reference does: its schema check first
        (nothing is written into a database altered while the reader ran), then the
        strict re-read of the leased record under the write lock (a row lost to another
        worker is ``claim_lost``, a row broken meanwhile ``state_invalid``), then one
        compare-and-set write.
        """
        with public_errors(self.store):
            return lease_protocol.complete(
                self.store, MONITOR, claimed, step.fire,
                fire_again=self._fire_stored, read_again=self._leased_record,
            )

    def _fire_stored(
        self, trigger: str, record: MonitorRecord, inputs: MonitorInputs
    ) -> MonitorRecord:
        """Fire and compare-and-set; a lost race is the reference's completion/failure_lost."""
        try:
            return self.store.fire(record, trigger, inputs)
        except StaleRecord as error:
            lost = "failure_lost" if trigger == "fail_attempt" else "completion_lost"
            raise blocked(CODE + lost) from error

    def _leased_record(self, event_id: str) -> MonitorRecord:
        record = self.store.get(event_id)
        if record is None:
            raise blocked(CODE + "claim_lost")
        return record

    # -- reading -------------------------------------------------------------------

    def status(self, event_id: str, *, now: float | int) -> TerminalProcessingStatus:
        self._check_schema()  # first, as in the reference
        key = _checked(event_id_rule, plain_value(event_id))
        return self._stored_status(key, _time(now))

    def _stored_status(self, event_id: str, now: float) -> TerminalProcessingStatus:
        with public_errors(self.store):
            record = self.store.get(event_id)
        if record is None:
            raise blocked(CODE + "missing")
        return status_of(record, now)

    def health(self, *, now: float | int) -> TerminalProcessingHealth:
        moment = _time(now)  # before the schema, as in the reference
        with public_errors(self.store):
            self.store.check_schema()
            # Integrity, every rule on every record and the counts: one SQL statement.
            found = self.store.health(moment)
            if found.integrity:
                raise blocked(CODE + "database_integrity")
            found.raise_broken()  # state_invalid: the rules, the first broken event ids
        counts = dict(found.counts)
        failed = counts[MonitorStatus.FAILED]
        return TerminalProcessingHealth(
            "blocked" if found.expired or failed else "ok",
            counts, found.due, found.expired, failed, self.expected_capabilities_sha256,
        )


__all__ = [
    "LEASE_DOUBTS", "NOTIFICATION_FIELDS", "NOTIFICATION_SCHEMA", "REMOTE_STATUSES",
    "RULE_CODES", "SCHEMA_VERSION", "STATUSES", "STATUS_SCHEMA", "TERMINAL_STATUSES",
    "DatabaseUnreachable", "DurableTerminalProcessingMonitor", "InputInvalid", "LeaseDoubts",
    "LeaseLost", "MonitorRow", "StateInvalid", "StorageBlocked",
    "TerminalProcessingHealth", "TerminalProcessingMonitorBlocked",
    "TerminalProcessingOutcome", "TerminalProcessingStatus", "blocked", "canonical_sha256",
    "new_lease_token",
]
