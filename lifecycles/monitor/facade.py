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
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

from lifecycles._worker_lease import REFUSALS, new_lease_token
from lifecycles._worker_steps import LeaseWork
from lifecycles.invariants._core import (
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
    STATUS_SCHEMA,
    notification_rules_broken,
)
from lifecycles.machines._work import Leave, Raised, Result, Step
from lifecycles.machines.monitor import (
    CODE,
    MONITOR,
    MonitorInputs,
    RetryPolicy,
    finish_poll,
    monitor_handling,
    new_record,
    plain_value,
    read_answer,
)
from lifecycles.monitor.errors import (
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
from lifecycles.monitor.schema import MonitorSchema, open_monitor_store
from lifecycles.monitor.values import (
    MonitorRow,
    TerminalProcessingHealth,
    TerminalProcessingOutcome,
    TerminalProcessingStatus,
    outcome_of,
    status_of,
)
from lifecycles.stores._base import StaleRecord, UniqueViolation
from lifecycles.stores._sql import SQLStore

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


def _open_store(connection: Any, capabilities_sha256: str) -> SQLStore[MonitorRecord]:
    # The reference schema is the monitor's own (lifecycles/monitor/schema.py).
    return open_monitor_store(connection, capabilities_sha256)




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
        # The worker's steps run run_once and run_many: the reader is their handler.
        self._work: LeaseWork[MonitorRecord, MonitorInputs] = LeaseWork(
            MONITOR, attrs.evolve(monitor_handling(self.policy), finish=self._finish_poll),
            fire_again=self._fire_stored, read_again=self._leased_record,
            refusals=(*REFUSALS, LeaseLost, StateInvalid),
        )

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
                made = self._notification_record(*pair, max_failures, moment)
                with public_errors(self.store):
                    records.append(MONITOR.create(made))
            except TerminalProcessingMonitorBlocked as refusal:
                records.append(refusal)
        valid = [record for record in records if isinstance(record, MonitorRecord)]
        try:
            # One set-based write where the store has one (PostgreSQL: COPY, then one
            # INSERT and one SELECT of the keys already stored).
            with public_errors(self.store):
                stored = iter(self.store.insert_many(valid))
        except StateInvalid:
            # A stored record under one of these event ids breaks a rule, and the batch
            # wrote nothing: decided pair by pair, each refusal in its pair's place.
            return self._register_each(records, moment)
        results: list[TerminalProcessingStatus | TerminalProcessingMonitorBlocked] = []
        for record in records:
            if isinstance(record, TerminalProcessingMonitorBlocked):
                results.append(record)
                continue
            answer = next(stored)
            try:
                if isinstance(answer, UniqueViolation):  # another event holds its notification id
                    raise blocked(CODE + "idempotency_collision")
                with public_errors(self.store):
                    results.append(self._registered(record, answer, moment))
            except (InputInvalid, StateInvalid) as refusal:  # this pair's alone
                results.append(refusal)
        return results

    def _register_each(
        self, records: list[MonitorRecord | TerminalProcessingMonitorBlocked], now: float,
    ) -> list[TerminalProcessingStatus | TerminalProcessingMonitorBlocked]:
        """``register_many``'s records one by one, in one transaction, each refusal in its
        place (the path a stored record that breaks a rule takes)."""
        results: list[TerminalProcessingStatus | TerminalProcessingMonitorBlocked] = []
        with public_errors(self.store), self.store.transaction():
            for record in records:
                try:
                    if isinstance(record, TerminalProcessingMonitorBlocked):
                        raise record
                    with public_errors(self.store):
                        results.append(self._store_registration(record, now))
                except (InputInvalid, StateInvalid) as refusal:  # this pair's alone
                    results.append(refusal)
        return results

    def _store_registration(self, record: MonitorRecord, now: float) -> TerminalProcessingStatus:
        with unique_is_collision():
            stored = self.store.insert(MONITOR.create(record))
        return self._registered(record, stored, now)

    @staticmethod
    def _registered(record: MonitorRecord, stored: MonitorRecord, now: float
                    ) -> TerminalProcessingStatus:
        """The status of a registration, from what the store holds under its event id:
        ``record`` itself when it was new; otherwise the table's ``register`` row decides
        (the same notification again, or ``idempotency_collision``)."""
        if stored is not record:
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
        worker, moment, seconds = self._lease_arguments(worker_id, now, lease_seconds)
        with public_errors(self.store):  # its transaction checks the schema first
            claimed = self._work.claim(self.store, worker, moment, seconds)
        return claimed[0].record if claimed else None

    def _lease_arguments(self, worker_id: Any, now: Any, lease_seconds: Any
                         ) -> tuple[str, float, float]:
        """The worker id (the str it holds is the one stored as lease_owner), the time and
        the lease length, each refused with its code, as the reference checks them."""
        worker = plain_value(worker_id)
        with self._schema_first():
            _checked(worker_id_rule, worker)
            moment = _time(now)
            seconds = _seconds(lease_seconds, lease_duration)
        return worker, moment, seconds

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
        worker, moment, seconds = self._lease_arguments(worker_id, moment, lease_seconds)
        with public_errors(self.store):
            outcome = self._work.run_once(self.store, self._reading(reader), worker, moment,
                                          seconds)
        if outcome is None:
            return None
        if outcome.refusal is not None:
            raise self._public(outcome.refusal)
        assert outcome.record is not None
        return outcome_of(outcome.record)

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
        worker, moment, seconds = self._lease_arguments(worker_id, moment, lease_seconds)
        with public_errors(self.store):
            outcomes = self._work.run_batch(self.store, self._reading(reader), worker, moment,
                                            seconds, count)
        return [self._public(outcome.refusal) if outcome.refusal is not None
                else outcome_of(outcome.record) for outcome in outcomes]  # type: ignore[arg-type]

    def _reading(self, reader: Callable[[str, str], Any]) -> Callable[[MonitorRecord, Any], Any]:
        """The worker's handler: the reader called for one leased item, outside any
        transaction, and its answer read (:func:`read_answer`, which runs the answer's own
        Mapping code: its failures count as the reader's)."""
        capabilities = self.expected_capabilities_sha256

        def read(record: MonitorRecord, lease: Any) -> Any:
            return read_answer(reader(record.event_id, record.site_id), record, capabilities)

        return read

    def _finish_poll(self, held: MonitorRecord, inputs: MonitorInputs, result: Result,
                     ) -> Step[MonitorInputs] | Leave:
        """:func:`finish_poll`, except that the monitor's own refusal met inside the reader
        is not the reader's failure: it records nothing and is raised (``run_once``) or
        returned in the item's place (``run_many``)."""
        if isinstance(result, Raised) and isinstance(result.error,
                                                      TerminalProcessingMonitorBlocked):
            return Leave(result.error)
        return finish_poll(held, inputs, result)

    def _public(self, refusal: BaseException) -> TerminalProcessingMonitorBlocked:
        """A worker's refusal as the facade's public error (its code, as ever)."""
        if isinstance(refusal, TerminalProcessingMonitorBlocked):
            return refusal
        try:
            with public_errors(self.store):
                raise refusal
        except TerminalProcessingMonitorBlocked as public:
            return public
        raise AssertionError("unreachable: public_errors maps every refusal")  # pragma: no cover

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
    "NOTIFICATION_FIELDS", "NOTIFICATION_SCHEMA", "REMOTE_STATUSES",
    "RULE_CODES", "SCHEMA_VERSION", "STATUSES", "STATUS_SCHEMA", "TERMINAL_STATUSES",
    "DatabaseUnreachable", "DurableTerminalProcessingMonitor", "InputInvalid",
    "LeaseLost", "MonitorRow", "StateInvalid", "StorageBlocked",
    "TerminalProcessingHealth", "TerminalProcessingMonitorBlocked",
    "TerminalProcessingOutcome", "TerminalProcessingStatus", "blocked", "canonical_sha256",
    "new_lease_token",
]
