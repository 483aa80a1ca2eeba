"""Builders shared by the monitor's tests: notifications, receiver answers, reader errors,
records made by real transitions, hostile values, and changes planted in a SQLite file."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.machines.monitor import MONITOR, MonitorInputs, new_record
from lifecycles.machines.monitor.inputs import ReaderError as PublicReaderError

CAPABILITIES = "c" * 64
NOTIFICATION_SCHEMA = "blun.cms-source-terminal-notification.v1"
STATUS_SCHEMA = "blun.cms-terminal-receiver-status-response.v1"
TABLE = "cms_source_terminal_processing"


def canonical(value: Any) -> str:
    rendered = json.dumps(
        value, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(rendered.encode("utf-8")).hexdigest()


def notification(index: int, **overrides: Any) -> tuple[dict[str, Any], str]:
    """A valid notification for event ``e<index>`` and its canonical SHA-256."""
    value: dict[str, Any] = {
        "schema": NOTIFICATION_SCHEMA,
        "notification_id": f"n{index}",
        "event_id": f"e{index}",
        "site_id": "site-1",
        "plan_id": "plan-1",
        "website_version": 3,
        "source_sequence": index,
        "job_count": 1,
        "change_sha256": "a" * 64,
        "lifecycle_binding_sha256": "b" * 64,
        "terminal_status": "published",
        "lifecycle_sha256": "d" * 64,
    }
    value.update(overrides)
    return value, canonical(value)


def answer(event_id: str, site_id: str, kind: str, **overrides: Any) -> dict[str, Any]:
    """A receiver status answer of ``kind`` about event ``event_id`` (valid unless overridden)."""
    index = int(event_id[1:])
    _, sha = notification(index)
    value: dict[str, Any] = {
        "schema": STATUS_SCHEMA,
        "notification_id": f"n{index}",
        "event_id": event_id,
        "site_id": site_id,
        "terminal_status": "published",
        "notification_sha256": sha,
        "processing_status": kind,
        "attempts": 1,
        "max_attempts": 3,
        "next_attempt_at": 50.0,
        "lease_expires_at": 70.0 if kind == "leased" else None,
        "lease_expired": False,
        "last_error_code": "cms.receiver_busy" if kind in ("retry_wait", "failed") else None,
        "processed_at": 40.0 if kind == "succeeded" else None,
        "capabilities_sha256": CAPABILITIES,
    }
    value.update(overrides)
    return value


class ReaderError(PublicReaderError):
    """What a CMS client raises: the public fake
    (:class:`lifecycles.monitor.strategies.ReaderError`), called as these tests call it: a
    code, whether the failure is retryable, and whether it is a CMS notification failure
    (by default it is)."""

    def __init__(self, code: Any, retryable: Any, cms: Any = True) -> None:
        super().__init__(code, cms, retryable)


def three_items(path: Path) -> Any:
    """A monitor database at ``path`` with e0, e1, e2 registered at 10 and e0 succeeded
    at 20 (the CLI tests' fixture); returns the monitor, still open."""
    from lifecycles.monitor.facade import DurableTerminalProcessingMonitor

    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(3):
        monitor.register(*notification(index), now=10)
    monitor.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=20)
    return monitor


def pending_items(path: Path, items: int) -> Any:
    """A monitor database at ``path`` with ``items`` pending items registered at 10,
    event ids e00, e01... (notification ids n00...); returns the monitor, still open."""
    from lifecycles.monitor.facade import DurableTerminalProcessingMonitor

    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(items):
        value, sha = notification(index, event_id=f"e{index:02d}",
                                  notification_id=f"n{index:02d}")
        monitor.register(value, sha, now=10)
    return monitor


def table_dump(connection: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """Every row of the monitor table and the meta table, to show nothing changed."""
    rows = [
        tuple(row)
        for row in connection.execute("SELECT * FROM cms_source_terminal_processing ORDER BY 1")
    ]
    meta = [tuple(row) for row in connection.execute(
        "SELECT * FROM cms_source_terminal_processing_meta"
    )]
    return [*rows, *meta]


def reference_monitor() -> Any:
    """The reference monitor module (skips the calling test when the seeds are absent)."""
    from support.reference import require_reference

    return require_reference("terminal_processing_monitor")


def plain_row(record: Any) -> dict[str, Any]:
    """A record as the reference sees a row: plain values, statuses as strings."""
    import attrs

    return {
        name: str(value) if isinstance(value, Enum) else value
        for name, value in attrs.asdict(record).items()
    }


def reference_accepts(row: Mapping[str, Any]) -> bool:
    """Whether the reference's own row rule (``_validated_row``) accepts ``row``."""
    ref = reference_monitor()
    try:
        ref.DurableTerminalProcessingMonitor._validated_row(dict(row))
    except ref.TerminalProcessingMonitorBlocked as blocked:
        assert blocked.code == "terminal_processing_monitor.state_invalid"
        return False
    return True


# --- records in a few statuses, made by firing real transitions ----------------------

T0 = 1_000.0
WORKER, TOKEN = "worker-1", "token-1"


def registered(max_failures: int = 5) -> MonitorRecord:
    """Event ``evt-1`` registered at ``T0``."""
    return new_record(
        event_id="evt-1", notification_id="ntf-1", site_id="site-1",
        terminal_status="published", notification_sha256="a" * 64,
        max_failures=max_failures, now=T0,
    )


def held(now: float, **changes: Any) -> MonitorInputs:
    """Inputs at ``now`` from the worker holding the lease ``TOKEN``."""
    return MonitorInputs(now=now, worker_id=WORKER, lease_token=TOKEN, **changes)


PENDING = registered()
LEASED = MONITOR.fire("claim", PENDING, held(T0))
RETRY_WAIT = MONITOR.fire(
    "fail_attempt", LEASED, held(T0 + 1, error_code="reader.timeout", retryable=True)
)


def records_in_every_status() -> list[MonitorRecord]:
    """One valid record in each monitor status, made by real transitions from ``LEASED``."""
    from lifecycles.invariants.monitor import ReceiverStatus
    from lifecycles.machines.monitor import ReceiverAnswer

    def answered(kind: ReceiverStatus, **changes: Any) -> MonitorInputs:
        values: dict[str, Any] = {
            "processing_status": kind, "attempts": 1, "max_attempts": 3,
            "next_attempt_at": T0, "lease_expires_at": None, "lease_expired": False,
            "last_error_code": None, "processed_at": None, **changes,
        }
        return held(T0 + 1, answer=ReceiverAnswer(**values))

    return [
        PENDING, LEASED, RETRY_WAIT,
        MONITOR.fire("observe_progress", LEASED, answered(
            ReceiverStatus.LEASED, lease_expires_at=T0 + 60, lease_expired=True)),
        MONITOR.fire("observe_success", LEASED, answered(
            ReceiverStatus.SUCCEEDED, processed_at=T0)),
        MONITOR.fire("observe_failure", LEASED, answered(
            ReceiverStatus.FAILED, attempts=3, last_error_code="receiver.gave_up")),
    ]


# --- hostile values and a database changed under the monitor ---------------------------


class AlwaysEqual(str):
    """Holds one string but claims to equal (and hash like) another."""

    def __new__(cls, held: str, pretends: str) -> AlwaysEqual:
        made = super().__new__(cls, held)
        made.pretends = pretends  # type: ignore[attr-defined]
        return made

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return hash(self.pretends)  # type: ignore[attr-defined]


def plant(path: Path, statements: list[str]) -> None:
    """Run ``statements`` on a connection of their own (the monitor's stays open); none:
    recreate the monitor table exactly as it was, index included, but empty."""
    other = sqlite3.connect(path, isolation_level=None)
    if not statements:
        definitions = [sql for (sql,) in other.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL"
            " ORDER BY type DESC", (TABLE,)
        )]  # the table first, then its index
        statements = [f"DROP TABLE {TABLE}", *definitions]
    for statement in statements:
        other.execute(statement)
    other.close()


def every_table(path: Path) -> list[Any]:
    """Every row of every table (whatever its columns), read by a connection of its own."""
    other = sqlite3.connect(path)
    try:
        tables = [name for (name,) in other.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )]
        return [(table, *other.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall())
                for table in tables]
    finally:
        other.close()
