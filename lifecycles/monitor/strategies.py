"""Hypothesis strategies for the monitor's generated tests, for users writing tests too.

The monitor's exploration (:mod:`lifecycles.machines.monitor.inputs`, beside its table)
lists the finite inputs ``lifecycles check`` explores; the generated stateful tests
(:func:`lifecycles.testing.build_state_machine`) draw from these strategies instead,
which the exploration names move by move: any time from the record's clock on, other
workers and lease tokens, lease lengths, reader errors with any code, and receiver
responses whose fields are drawn independently (so most are inconsistent).

Each takes the record the move starts from and returns a strategy of that move's
inputs: :func:`claim_strategy` and :func:`expiry_strategy` (:class:`MonitorInputs`),
:func:`progress_strategy`, :func:`success_strategy`, :func:`failure_strategy`
(a :class:`Poll`: who completes the read, when, and the raw response),
:func:`fail_attempt_strategy` (a :class:`ReadFailure` or a rejected :class:`Poll`);
:func:`new_records` draws registered notifications. The fakes they use
(:class:`ReaderError`, :func:`receiver_answer`) are the exploration's, re-exported here.

Hypothesis favours the first of a list while generating: every list starts with the
case that moves the record, so short runs still reach every row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.machines.monitor import MonitorInputs, new_record
from lifecycles.machines.monitor.inputs import (
    CLAIMER,
    INTRUDER,
    LEASE_SECONDS,
    POLICY,
    READER_ERRORS,
    Poll,
    ReaderError,
    ReadFailure,
    held_inputs,
    near,
)
from lifecycles.machines.monitor.responses import (
    START,
    failure_responses,
    progress_responses,
    receiver_answer,
    rejected_responses,
    success_responses,
)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


# --- builders for examples and tests that drive the facade --------------------------


def notification_for(event_id: str, **fields: Any) -> tuple[dict[str, Any], str]:
    """A valid notification for ``event_id`` and its canonical SHA-256, the pair
    ``register`` takes; ``fields`` replace any of its values (the digest follows)."""
    from lifecycles.invariants.monitor_messages import NOTIFICATION_SCHEMA
    from lifecycles.monitor.facade import canonical_sha256

    notification: dict[str, Any] = {
        "schema": NOTIFICATION_SCHEMA, "notification_id": f"ntf-{event_id}",
        "event_id": event_id, "site_id": "site-1", "plan_id": "plan-1",
        "website_version": 1, "source_sequence": 1, "job_count": 1,
        "change_sha256": "0" * 64, "lifecycle_binding_sha256": "0" * 64,
        "terminal_status": "published", "lifecycle_sha256": "0" * 64,
    }
    notification.update(fields)
    return notification, canonical_sha256(notification)


def status_answer_for(
    notification: dict[str, Any], notification_sha256: str, processing_status: str,
    capabilities_sha256: str, **fields: Any,
) -> dict[str, Any]:
    """The receiver's consistent status answer about a registered notification: what a
    reader returns. ``processing_status`` decides the fields that go with it (an error
    code for ``retry_wait``/``failed``, ``processed_at`` for ``succeeded``, a lease
    expiry for ``leased``); ``fields`` replace any value."""
    from lifecycles.invariants.monitor_messages import ANSWER_IDENTITY, STATUS_SCHEMA

    answer: dict[str, Any] = {
        "schema": STATUS_SCHEMA, **{name: notification[name] for name in ANSWER_IDENTITY
                                    if name != "notification_sha256"},
        "notification_sha256": notification_sha256, "processing_status": processing_status,
        "attempts": 1, "max_attempts": 5, "next_attempt_at": START + 60.0,
        "lease_expires_at": START + 900.0 if processing_status == "leased" else None,
        "lease_expired": False,
        "last_error_code": (
            "receiver.busy" if processing_status in ("retry_wait", "failed") else None),
        "processed_at": START if processing_status == "succeeded" else None,
        "capabilities_sha256": capabilities_sha256,
    }
    answer.update(fields)
    return answer

__all__ = [
    "Poll",
    "ReadFailure",
    "claim_strategy",
    "expiry_strategy",
    "fail_attempt_strategy",
    "failure_strategy",
    "generated_response",
    "new_records",
    "notification_for",
    "poll_strategy",
    "progress_strategy",
    "receiver_answer",
    "status_answer_for",
    "success_strategy",
]




def _times_from(r: MonitorRecord, *marks: float | None) -> SearchStrategy[float]:
    from hypothesis import strategies as st

    return st.one_of(
        st.sampled_from(near(r.updated_at, *marks)),
        st.floats(0.0, 2000.0).map(lambda offset: r.updated_at + offset),
    )


def claim_strategy(r: MonitorRecord) -> SearchStrategy[MonitorInputs]:
    from hypothesis import strategies as st

    return st.builds(
        MonitorInputs, now=_times_from(r, r.next_poll_at), policy=st.just(POLICY),
        worker_id=st.sampled_from([CLAIMER, "worker-b"]),
        lease_token=st.sampled_from([f"lease-{r.poll_attempts + 1}", "lease-x", "lease-y"]),
        lease_seconds=st.sampled_from([LEASE_SECONDS, 1.0, 30.0]),
    )


def expiry_strategy(r: MonitorRecord) -> SearchStrategy[MonitorInputs]:
    from hypothesis import strategies as st

    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.updated_at
    return st.builds(
        MonitorInputs,
        now=st.one_of(st.just(expiry), _times_from(r, r.lease_expires_at)),
        policy=st.just(POLICY),
    )


def _holder_inputs(r: MonitorRecord) -> SearchStrategy[MonitorInputs]:
    from hypothesis import strategies as st

    holder = (r.lease_owner, r.lease_token)
    identity = st.sampled_from(
        [holder] * 6 + [(INTRUDER, r.lease_token), (r.lease_owner, "lease-stale")]
    )
    return st.builds(
        lambda who, now: MonitorInputs(now=now, policy=POLICY, worker_id=who[0],
                                       lease_token=who[1], lease_seconds=LEASE_SECONDS),
        identity,
        st.one_of(st.just(r.updated_at), st.just(r.updated_at), st.just(r.updated_at),
                  _times_from(r, r.lease_expires_at)),
    )


def generated_response(r: MonitorRecord, statuses: list[str]) -> SearchStrategy[dict[str, Any]]:
    """Well-typed responses with every field drawn independently, many inconsistent."""
    from hypothesis import strategies as st

    time_or_none = st.one_of(st.none(), st.floats(0.0, 5000.0))
    return st.builds(
        lambda status, attempts, maximum, lease, expired, error, processed: receiver_answer(
            r, processing_status=status, attempts=attempts, max_attempts=maximum,
            lease_expires_at=lease, lease_expired=expired, last_error_code=error,
            processed_at=processed,
        ),
        st.sampled_from(statuses), st.integers(0, 22), st.integers(0, 21), time_or_none,
        st.booleans(), st.sampled_from([None, "cms.receiver_busy", "Bad Code"]), time_or_none,
    )


def poll_strategy(
    kinds: Callable[[MonitorRecord], list[tuple[str, object]]], statuses: list[str]
) -> Callable[[MonitorRecord], SearchStrategy[Poll]]:
    """Polls by the holder (mostly), an intruder or a stale token: the first of ``kinds``,
    any of them, or a generated response with a processing status among ``statuses``."""

    def strategy(r: MonitorRecord) -> SearchStrategy[Poll]:
        from hypothesis import strategies as st

        listed = kinds(r)
        labelled = st.one_of(
            st.just(listed[0]), st.sampled_from(listed),
            generated_response(r, statuses).map(lambda response: ("generated", response)),
        )
        return st.builds(lambda inputs, pair: Poll(inputs, pair[1], pair[0]),
                         _holder_inputs(r), labelled)

    return strategy


def fail_attempt_strategy(r: MonitorRecord) -> SearchStrategy[ReadFailure | Poll]:
    from hypothesis import strategies as st

    error = st.one_of(
        st.sampled_from(READER_ERRORS),
        st.builds(ReaderError, st.sampled_from(["cms.timeout", "cms.gone", "X"]),
                  st.booleans(), st.sampled_from([True, False, None])),
    )
    failure = st.builds(ReadFailure, _holder_inputs(r), error)
    rejected = st.builds(lambda inputs, pair: Poll(inputs, pair[1], pair[0]),
                         _holder_inputs(r), st.sampled_from(rejected_responses(r)))
    retryable_now = st.just(ReadFailure(held_inputs(r), READER_ERRORS[0]))
    return st.one_of(retryable_now, failure, rejected)


def new_records() -> SearchStrategy[MonitorRecord]:
    """Registered notifications: a few keys (so repeats happen), any max_failures, any time."""
    from hypothesis import strategies as st

    return st.builds(
        lambda key, limit, now: new_record(
            event_id=key, notification_id=f"ntf-{key}", site_id="site-1",
            terminal_status="published", notification_sha256="a" * 64,
            max_failures=limit, now=now,
        ),
        st.sampled_from(["evt-1", "evt-2", "evt-3"]), st.sampled_from([3, 2, 1, 4]),
        st.sampled_from([0.0, START, START + 0.5]),
    )


progress_strategy = poll_strategy(progress_responses, ["pending", "leased", "retry_wait"])
success_strategy = poll_strategy(success_responses, ["succeeded"])
failure_strategy = poll_strategy(failure_responses, ["failed"])
