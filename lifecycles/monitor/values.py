"""What the monitor returns: statuses, outcomes, health, and the row ``claim`` gives.

The reference's names and fields, in its order; :func:`status_of` and
:func:`outcome_of` build them from a record the store returned, never from a second
read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lifecycles.invariants.monitor import COLUMNS, MonitorRecord, MonitorStatus
from lifecycles.machines.monitor import lease_expired

__all__ = [
    "MonitorRow",
    "TerminalProcessingHealth",
    "TerminalProcessingOutcome",
    "TerminalProcessingStatus",
    "outcome_of",
    "status_of",
]

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


def outcome_of(record: MonitorRecord) -> TerminalProcessingOutcome:
    """A poll's outcome, from the record the store just wrote: no second read."""
    return TerminalProcessingOutcome(
        record.event_id, record.notification_id, str(record.status), record.poll_attempts,
        record.last_error_code,
    )


def status_of(record: MonitorRecord, now: float) -> TerminalProcessingStatus:
    lease = record.lease_expires_at
    return TerminalProcessingStatus(
        record.event_id, record.notification_id, record.site_id, record.notification_sha256,
        str(record.status), record.poll_attempts, record.failures, record.max_failures,
        float(record.next_poll_at), None if lease is None else float(lease),
        record.status == MonitorStatus.LEASED and lease_expired(record, now),
        record.last_error_code, record.receiver_status, record.receiver_attempts,
        record.receiver_max_attempts, record.receiver_error_code, record.receiver_processed_at,
    )
