"""The receiver's responses the monitor's exploration feeds, grouped by the trigger they
aim at (:mod:`lifecycles.machines.monitor.inputs` reads them; its docstring lists them).
"""

from __future__ import annotations

from typing import Any

from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.invariants.monitor_messages import STATUS_SCHEMA

__all__ = [
    "CAPABILITIES_SHA256",
    "LEASE_AT_RECEIVER",
    "START",
    "failure_responses",
    "progress_responses",
    "receiver_answer",
    "rejected_responses",
    "responses",
    "success_responses",
]

START = 1000.0
"""When the explored notifications are registered; the receiver's times are placed after."""
CAPABILITIES_SHA256 = "c" * 64
"""The capabilities hash the monitor expects, and the valid responses carry."""


def receiver_answer(r: MonitorRecord, **fields: Any) -> dict[str, Any]:
    """A receiver's status response about ``r``: pending, consistent, unless ``fields``
    say otherwise (the exploration's responses and the generated tests' are built here)."""
    response: dict[str, Any] = {
        "schema": STATUS_SCHEMA, "notification_id": r.notification_id, "event_id": r.event_id,
        "site_id": r.site_id, "terminal_status": r.terminal_status,
        "notification_sha256": r.notification_sha256, "processing_status": "pending",
        "attempts": 0, "max_attempts": 5, "next_attempt_at": START + 60.0,
        "lease_expires_at": None, "lease_expired": False, "last_error_code": None,
        "processed_at": None, "capabilities_sha256": CAPABILITIES_SHA256,
    }
    response.update(fields)
    return response


LEASE_AT_RECEIVER = START + 900.0


def progress_responses(r: MonitorRecord) -> list[tuple[str, object]]:
    """Answers that keep the item watched; the last parses but breaks an invariant."""
    return [
        ("pending", receiver_answer(r)),
        ("leased", receiver_answer(r, processing_status="leased", attempts=1,
                                   lease_expires_at=LEASE_AT_RECEIVER)),
        ("leased, lease expired", receiver_answer(r, processing_status="leased", attempts=1,
                                                  lease_expires_at=LEASE_AT_RECEIVER,
                                                  lease_expired=True)),
        ("retry_wait with error", receiver_answer(r, processing_status="retry_wait", attempts=2,
                                                  last_error_code="cms.receiver_busy")),
        # The reference's defect: parses, but breaks
        # receiver_error_iff_receiver_waiting_or_failed.
        ("retry_wait without error",
         receiver_answer(r, processing_status="retry_wait", attempts=2)),
    ]


def success_responses(r: MonitorRecord) -> list[tuple[str, object]]:
    return [
        ("succeeded", receiver_answer(r, processing_status="succeeded", attempts=1,
                                      processed_at=START + 5.0)),
        ("error code on success", receiver_answer(r, processing_status="succeeded", attempts=1,
                                                  processed_at=START, last_error_code="cms.oops")),
    ]


def failure_responses(r: MonitorRecord) -> list[tuple[str, object]]:
    return [
        ("failed with error", receiver_answer(r, processing_status="failed", attempts=5,
                                              last_error_code="cms.publication_failed")),
        # The reference's defect again, on the failed side.
        ("failed without error", receiver_answer(r, processing_status="failed", attempts=5)),
    ]


def rejected_responses(r: MonitorRecord) -> list[tuple[str, object]]:
    """Responses parse_answer refuses: the attempt fails with response_invalid."""
    missing = receiver_answer(r)
    del missing["processed_at"]
    return [
        ("not a mapping", ["pending"]),
        ("a field missing", missing),
        ("another schema", receiver_answer(r, schema="blun.other.v1")),
        ("another event", receiver_answer(r, event_id="evt-other")),
        ("other capabilities", receiver_answer(r, capabilities_sha256="d" * 64)),
        ("attempts above max", receiver_answer(r, attempts=6, max_attempts=5)),
        ("leased without expiry", receiver_answer(r, processing_status="leased", attempts=1)),
    ]


def responses(r: MonitorRecord) -> list[tuple[str, object]]:
    """Every kind of receiver response about ``r``, labelled."""
    return [*progress_responses(r), *success_responses(r), *failure_responses(r),
            *rejected_responses(r)]
