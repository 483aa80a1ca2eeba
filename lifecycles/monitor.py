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
exception (``sqlite3``, ``psycopg``) leaves a public method: each becomes
``schema_altered``, ``database_integrity`` or ``database_unreachable``.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycles.invariants.core import (
    FieldRule,
    FieldRuleViolation,
    InvariantViolation,
    canonical_json,
)
from lifecycles.invariants.monitor import (
    COLUMNS,
    NOTIFICATION_FIELDS,
    NOTIFICATION_SCHEMA,
    MonitorRecord,
    MonitorStatus,
    ReceiverStatus,
    capabilities_rule,
    event_id_rule,
    failure_bound,
    lease_duration,
    notification_rules_broken,
    reader_rule,
    sha256_hex,
    terminal_status,
    time,
    token,
    worker_id_rule,
)
from lifecycles.invariants.monitor import (
    TERMINAL_STATUSES as _TERMINAL_STATUSES,
)
from lifecycles.machines.core import TransitionRefused
from lifecycles.machines.monitor import (
    CODE,
    MONITOR,
    STATUS_SCHEMA,
    MonitorInputs,
    PollStep,
    RetryPolicy,
    lease_expired,
    new_record,
    plain_value,
    poll_step,
    read_answer,
)
from lifecycles.monitor_schema import MonitorSchema, open_monitor_store
from lifecycles.stores.base import StaleRecord, Store, StoreError, UniqueViolation
from lifecycles.stores.sql import SQLStore

SCHEMA_VERSION = MonitorSchema.VERSION
# Derived from the declarations, never listed again.
STATUSES = tuple(status.value for status in MonitorStatus)
REMOTE_STATUSES = tuple(status.value for status in ReceiverStatus)
TERMINAL_STATUSES = set(_TERMINAL_STATUSES)


# --- errors --------------------------------------------------------------------


class TerminalProcessingMonitorBlocked(RuntimeError):
    """Stable, content-free processing-observation failure; match on ``code``.

    ``TerminalProcessingMonitorBlocked(code)`` builds the base class, as before.
    Raised errors are instances of a family subclass (``InputInvalid``,
    ``StateInvalid``, ``LeaseLost``, ``StorageBlocked``) so callers can also catch
    a family; :func:`blocked` maps a code to its family.
    """

    family_codes: ClassVar[frozenset[str]] = frozenset()
    _by_code: ClassVar[dict[str, type[TerminalProcessingMonitorBlocked]]] = {}

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code

    def __init_subclass__(cls, codes: frozenset[str] = frozenset(), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.family_codes = frozenset(CODE + name for name in codes)
        for code in cls.family_codes:
            TerminalProcessingMonitorBlocked._by_code[code] = cls


class InputInvalid(
    TerminalProcessingMonitorBlocked,
    codes=frozenset({
        "capabilities_invalid", "poll_interval_invalid", "delay_invalid", "time_invalid",
        "max_failures_invalid", "notification_invalid", "worker_invalid", "lease_invalid",
        "reader_invalid", "event_invalid", "idempotency_collision", "missing",
    }),
):
    """The caller's input was refused; nothing was changed."""


class StateInvalid(TerminalProcessingMonitorBlocked, codes=frozenset({"state_invalid"})):
    """A stored record breaks a named rule; ``rules`` names them, ``event_ids`` the
    stored records found broken (empty when the record was not yet stored)."""

    def __init__(self, code: str, rules: tuple[str, ...] = (), event_ids: tuple[str, ...] = ()):
        super().__init__(code)
        self.rules = rules
        self.event_ids = event_ids


class LeaseLost(
    TerminalProcessingMonitorBlocked,
    codes=frozenset({"claim_lost", "lease_expired", "completion_lost", "failure_lost"}),
):
    """This worker no longer holds the lease it acted on; nothing was changed."""


class StorageBlocked(
    TerminalProcessingMonitorBlocked,
    codes=frozenset({
        "schema_altered", "legacy_unbound", "database_integrity", "transaction_nested",
        "database_unreachable",
    }),
):
    """The database cannot be used as it is; nothing was changed."""


def blocked(
    code: str, rules: tuple[str, ...] = (), event_ids: tuple[str, ...] = ()
) -> TerminalProcessingMonitorBlocked:
    """The error for ``code``, as an instance of its family."""
    family = TerminalProcessingMonitorBlocked._by_code.get(code, TerminalProcessingMonitorBlocked)
    if family is StateInvalid:
        return StateInvalid(code, rules, event_ids)
    return family(code)


@contextmanager
def _public_errors(store: Store[Any] | None = None) -> Iterator[None]:
    """Translate engine and store errors into the facade's one exception type.

    With ``store``, an exception of its database driver becomes the store error it
    means (:meth:`Store.driver_error`), so no ``sqlite3`` or ``psycopg`` exception
    leaves a public method.
    """
    try:
        yield
    except InvariantViolation as error:
        raise blocked(error.code, error.rules, error.keys) from error
    except StaleRecord as error:
        raise blocked(CODE + "claim_lost") from error
    except (TransitionRefused, StoreError) as error:
        raise blocked(error.code) from error
    except Exception as error:
        meant = None if store is None else store.driver_error(error)
        if meant is None:
            raise
        raise blocked(meant.code) from error


@contextmanager
def _unique_is_collision() -> Iterator[None]:
    """Another event already holds this notification_id: a collision, not a crash."""
    try:
        yield
    except UniqueViolation as error:
        raise blocked(CODE + "idempotency_collision") from error


# --- returned values -----------------------------------------------------------


@dataclass(frozen=True)
class TerminalProcessingStatus:
    event_id: str
    notification_id: str
    site_id: str
    notification_sha256: str
    status: str
    poll_attempts: int
    failures: int
    max_failures: int
    next_poll_at: float
    lease_expires_at: float | None
    lease_expired: bool
    last_error_code: str | None
    receiver_status: str | None
    receiver_attempts: int | None
    receiver_max_attempts: int | None
    receiver_error_code: str | None
    receiver_processed_at: float | None


@dataclass(frozen=True)
class TerminalProcessingOutcome:
    event_id: str
    notification_id: str
    status: str
    attempt: int
    error_code: str | None


@dataclass(frozen=True)
class TerminalProcessingHealth:
    status: str
    counts: dict[str, int]
    due: int
    expired_leases: int
    failed: int
    expected_capabilities_sha256: str


class MonitorRow:
    """What ``claim`` returns: behaves like the ``sqlite3.Row`` the reference returned.

    Index by column name or position, ``keys()`` in column order, ``tuple(row)``
    gives the values, ``dict(row)`` the mapping.
    """

    __slots__ = ("_values",)

    def __init__(self, record: MonitorRecord) -> None:
        values = [getattr(record, name) for name in COLUMNS]
        values[COLUMNS.index("status")] = str(record.status)
        self._values = tuple(values)

    def keys(self) -> list[str]:
        return list(COLUMNS)

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            try:
                return self._values[COLUMNS.index(key)]
            except ValueError:
                raise IndexError("No item with that key") from None
        return self._values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MonitorRow) and self._values == other._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"<MonitorRow {self['event_id']} {self['status']}>"


# --- input checks: a broken rule's name -> its public code, in one table ----------

# Every rule is declared once (lifecycles.invariants.monitor, machines.monitor's
# RetryPolicy); an argument checked by several rules maps each to its one code.
RULE_CODES: Mapping[str, str] = {
    time.name: "time_invalid",  # every `now`, and a duration that is no time at all
    capabilities_rule.name: "capabilities_invalid",
    "poll_interval_bounds": "poll_interval_invalid",
    "delay_bounds": "delay_invalid",
    "base_delay_within_max_delay": "delay_invalid",
    failure_bound.name: "max_failures_invalid",
    lease_duration.name: "lease_invalid",
    worker_id_rule.name: "worker_invalid",
    event_id_rule.name: "event_invalid",
    reader_rule.name: "reader_invalid",
    # A notification is refused whole, whichever of its rules it breaks.
    **dict.fromkeys((
        "notification_is_object", "notification_readable", "notification_fields_exact",
        "notification_schema_is_notification_schema", token.name, terminal_status.name,
        sha256_hex.name, "notification_json", "notification_digest_matches",
    ), "notification_invalid"),
}


def refused(rule: str) -> TerminalProcessingMonitorBlocked:
    """The public error for an argument that breaks ``rule`` (:data:`RULE_CODES`)."""
    return blocked(CODE + RULE_CODES[rule])


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
        with _public_errors():
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
        with _public_errors(self.store):
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
        with _public_errors(self.store), _unique_is_collision():
            stored = self.store.insert(MONITOR.create(record))
            if stored is not record:  # already registered: the table's register row decides
                MONITOR.fire("register", stored, MonitorInputs(now=moment, registration=record))
        return _status_of(stored, moment)  # the record the store returned: no second read

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
        inputs = MonitorInputs(
            now=moment, policy=self.policy, worker_id=worker_id,
            lease_token=new_lease_token(), lease_seconds=seconds,
        )
        with _public_errors(self.store):
            return self.store.claim(inputs)  # its transaction checks the schema first

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
        lease = MonitorInputs(
            now=moment, policy=self.policy, worker_id=claimed.lease_owner,
            lease_token=claimed.lease_token,
        )
        try:
            response = reader(claimed.event_id, claimed.site_id)
            # Reading runs the answer's own Mapping code: its failures count as the reader's.
            read = read_answer(response, claimed, self.expected_capabilities_sha256)
            step = poll_step(lease, read)
        except TerminalProcessingMonitorBlocked:
            raise  # the monitor's own refusal, met inside the reader: not the reader's failure
        except Exception as error:  # the reader is foreign code: any failure is recorded
            step = poll_step(lease, error)
        done = self._finish(claimed.event_id, step)
        # The outcome is the record the store just wrote: no second read.
        return TerminalProcessingOutcome(
            done.event_id, done.notification_id, str(done.status), done.poll_attempts,
            done.last_error_code,
        )

    def _finish(self, event_id: str, step: PollStep) -> MonitorRecord:
        """Fire the poll's step (:func:`poll_step`, the machine's rule) through the store.

        One transaction: its schema check first (nothing is written into a database
        altered while the reader ran), then the strict re-read of the leased record
        under the write lock (a row lost to another worker is ``claim_lost``, a row
        broken meanwhile ``state_invalid``, as in the reference), then one
        compare-and-set write.
        """
        with _public_errors(self.store), self.store.transaction():
            return step.fire(self._leased_record(event_id), self._fire_stored)

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
        with _public_errors(self.store):
            record = self.store.get(event_id)
        if record is None:
            raise blocked(CODE + "missing")
        return _status_of(record, now)

    def health(self, *, now: float | int) -> TerminalProcessingHealth:
        moment = _time(now)  # before the schema, as in the reference
        with _public_errors(self.store):
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


def _status_of(record: MonitorRecord, now: float) -> TerminalProcessingStatus:
    lease = record.lease_expires_at
    return TerminalProcessingStatus(
        record.event_id, record.notification_id, record.site_id, record.notification_sha256,
        str(record.status), record.poll_attempts, record.failures, record.max_failures,
        float(record.next_poll_at), None if lease is None else float(lease),
        record.status == MonitorStatus.LEASED and lease_expired(record, now),
        record.last_error_code, record.receiver_status, record.receiver_attempts,
        record.receiver_max_attempts, record.receiver_error_code, record.receiver_processed_at,
    )


__all__ = [
    "NOTIFICATION_FIELDS", "NOTIFICATION_SCHEMA", "REMOTE_STATUSES", "RULE_CODES",
    "SCHEMA_VERSION", "STATUSES", "STATUS_SCHEMA", "TERMINAL_STATUSES",
    "DurableTerminalProcessingMonitor", "InputInvalid", "LeaseLost", "MonitorRow",
    "StateInvalid", "StorageBlocked",
    "TerminalProcessingHealth", "TerminalProcessingMonitorBlocked",
    "TerminalProcessingOutcome", "TerminalProcessingStatus", "blocked", "canonical_sha256",
    "new_lease_token",
]
