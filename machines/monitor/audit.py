"""Beside the monitor's table: who fires each trigger, and the codes a record carries.

Facts about the code around :data:`~lifecycles.machines.monitor.MONITOR` that its table
cannot state, declared once for the auditor page (:mod:`lifecycles.machines._audit`).
The facade is ``DurableTerminalProcessingMonitor`` (:mod:`lifecycles.monitor`).
"""

from __future__ import annotations

from lifecycles.invariants.monitor import RESPONSE_INVALID
from lifecycles.machines._audit import FiredBy, RecordedCodes
from lifecycles.machines.monitor import CODE, MONITOR

__all__ = [
    "FIRED_BY",
    "LAST_ERROR_CODES",
]

_WORKER = "`run_once(reader, worker_id, now=...)` and `run_many(...)`"

FIRED_BY = FiredBy(MONITOR, {
    "register": (
        "`register(notification, sha256, now=...)` and `register_many(...)`. A new event "
        "id creates the record (`pending`, due now); an event id already stored fires "
        "this row, which changes nothing when the notification is the same and is "
        "refused (`idempotency_collision`) when it differs."
    ),
    "claim": (
        f"`claim(worker_id, now=..., lease_seconds=...)`, and the claim inside {_WORKER}."
    ),
    "expire_lease": (
        "No timer: every claim (`claim`, `run_once`, `run_many`, any worker). Until some "
        "worker claims, an expired lease stays `leased` (`health()` counts it in "
        "`expired_leases`)."
    ),
    "observe_progress": (
        f"{_WORKER}, after the reader returned an answer that passes every answer rule "
        "and says `pending`, `leased` or `retry_wait` (`trigger_for_answer`). If the "
        "record it would write breaks an invariant, `fail_attempt` fires instead with "
        "`response_invalid`."
    ),
    "observe_success": (
        f"{_WORKER}, after the reader returned a valid answer that says `succeeded` "
        "(`trigger_for_answer`)."
    ),
    "observe_failure": (
        f"{_WORKER}, after the reader returned a valid answer that says `failed` "
        "(`trigger_for_answer`). If the record it would write breaks an invariant (the "
        "reference's known defect: no error code), `fail_attempt` fires instead with "
        "`response_invalid`."
    ),
    "fail_attempt": (
        f"{_WORKER}, when the reader raised (its own `code` if that is a valid error "
        "code, retryable only when the error says `cms_notification_failure` and "
        "`retryable` are both True; otherwise `reader_failure`, not retryable) or its "
        "answer broke an answer rule (`response_invalid`, not retryable): "
        "`poll_step`."
    ),
})

LAST_ERROR_CODES = RecordedCodes(MONITOR, "last_error_code", {
    CODE + "lease_expired": (
        "Written by `expire_lease`: the worker's lease ran out before it finished. The "
        "record counts a failure and goes to `retry_wait` (due at once), or to `failed` "
        "when no further failure is allowed."
    ),
    CODE + "reader_failure": (
        "Written by `fail_attempt`: the reader raised an exception without a valid "
        "`code` (or whose attributes raised when read). Not retryable: `failed`."
    ),
    RESPONSE_INVALID: (
        "Written by `fail_attempt`: the receiver's answer broke an answer rule, or the "
        "record it would produce breaks an invariant. Not retryable: `failed`."
    ),
    CODE + "remote_failed": (
        "Written by `observe_failure`: the receiver reported `failed`; its own code is in "
        "`receiver_error_code`. Final: `failed`."
    ),
}, others=(
    "Empty (None) in every status but `retry_wait` and `failed` (invariant "
    "`error_code_iff_waiting_or_failed`). Any other value is the `code` of an exception "
    "the reader raised, kept as the reference keeps it when it is a valid error code "
    "(a lowercase letter, then up to 127 of a-z, 0-9, `_`, `.`, `-`): `retry_wait` when "
    "the error is retryable and failures remain, else `failed`."
))
