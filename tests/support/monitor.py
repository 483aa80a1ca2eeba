"""Builders shared by the monitor's tests: notifications, receiver answers, reader errors."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from enum import Enum
from typing import Any

CAPABILITIES = "c" * 64
NOTIFICATION_SCHEMA = "blun.cms-source-terminal-notification.v1"
STATUS_SCHEMA = "blun.cms-terminal-receiver-status-response.v1"


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


class ReaderError(Exception):
    """What a CMS client raises: a code, and whether the failure is retryable."""

    def __init__(self, code: Any, retryable: bool, cms: bool = True) -> None:
        super().__init__(code)
        self.code = code
        self.retryable = retryable
        self.cms_notification_failure = cms


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
