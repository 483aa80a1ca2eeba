"""The ``repr`` of a lifecycle and of its rules: what a traceback, a log line or a
debugger shows of them, in one exact format (issue 26: no test pinned it).

A lifecycle shows its name and table version; a field rule its name, and whether
``None`` passes (``allow_none``); an invariant and a step invariant their names.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from fixtures_check.tiny import TINY, TWIN

from lifecycles.invariants.monitor import MONITOR_INVARIANTS, MonitorRecord
from lifecycles.invariants.outbox import OutboxRecord, json_bounds
from lifecycles.machines._core import Lifecycle
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.outbox import OUTBOX


@pytest.mark.parametrize("lifecycle", [MONITOR, OUTBOX, TINY, TWIN], ids=lambda lc: lc.name)
def test_a_lifecycle_shows_its_name_and_table_version(lifecycle: Lifecycle[Any, Any]) -> None:
    assert repr(lifecycle) == f"<Lifecycle {lifecycle.name} v{lifecycle.table_version}>"
    assert re.fullmatch(r"<Lifecycle [a-z_]+ v[0-9a-f]{12}>", repr(lifecycle))


def test_two_lifecycles_of_one_table_differ_by_name_only() -> None:
    assert TINY.table_version == TWIN.table_version
    assert (repr(TINY), repr(TWIN)) == (f"<Lifecycle tiny v{TINY.table_version}>",
                                        f"<Lifecycle tiny_twin v{TINY.table_version}>")


def validators_of(record_type: type) -> dict[str, list[str]]:
    """Each field's validators, as their reprs (the parts of a combined one, in order)."""
    return {field.name: [repr(part) for part in getattr(
        field.validator, "_validators", (field.validator,))]
        for field in attrs.fields(record_type)}


def test_the_monitor_records_field_rules() -> None:
    token, time = "<field rule token_syntax>", "<field rule time_finite_non_negative>"
    optional_time = "<field rule time_finite_non_negative (optional)>"
    assert validators_of(MonitorRecord) == {
        "event_id": [token], "notification_id": [token], "site_id": [token],
        "terminal_status": ["<field rule terminal_status_known>"],
        "notification_sha256": ["<field rule sha256_syntax>"],
        "status": ["<field rule status_declared>"],
        "poll_attempts": ["<field rule count_non_negative>"],
        "failures": ["<field rule count_non_negative>"],
        "max_failures": ["<field rule max_failures_bounds>"],
        "next_poll_at": [time],
        "lease_owner": ["<field rule token_syntax (optional)>"],
        "lease_token": ["<field rule token_syntax (optional)>"],
        "lease_expires_at": [optional_time],
        "last_error_code": ["<field rule error_code_syntax (optional)>"],
        "receiver_status": ["<field rule receiver_status_declared (optional)>"],
        "receiver_attempts": ["<field rule integer_type (optional)>"],
        "receiver_max_attempts": ["<field rule integer_type (optional)>"],
        "receiver_next_attempt_at": [optional_time],
        "receiver_lease_expires_at": [optional_time],
        "receiver_lease_expired": ["<field rule lease_expired_flag (optional)>"],
        "receiver_error_code": ["<field rule error_code_syntax (optional)>"],
        "receiver_processed_at": [optional_time],
        "created_at": [time], "updated_at": [time],
    }


def test_the_outbox_records_field_rules() -> None:
    assert repr(json_bounds) == "<field rule json_bounds>"
    assert validators_of(OutboxRecord) == {
        "version": ["<field rule version_supported>"],
        "run_id": ["<field rule run_id_syntax>"],
        "transaction_id": ["<field rule transaction_id_syntax>"],
        "action": ["<field rule action_known>"],
        "result": ["<field rule result_is_object>", "<field rule json_bounds>"],
        "error": ["<field rule error_is_text>", "<field rule error_length_bound>",
                  "<field rule error_text_normalised>"],
        "reopen": ["<field rule reopen_is_boolean>"],
        "entry_id": ["<field rule entry_id_syntax>"],
        "state": ["<field rule status_declared>"],
        "attempts": ["<field rule attempts_non_negative>"],
        "created_at": ["<field rule timestamp_timezone_aware>"],
        "last_attempt_at": ["<field rule timestamp_timezone_aware (optional)>"],
        "last_error": ["<field rule last_error_is_text (optional)>",
                       "<field rule last_error_bound (optional)>"],
    }


def test_invariants_and_step_invariants_show_their_names() -> None:
    assert [repr(rule) for rule in MONITOR_INVARIANTS][:2] == [
        "<invariant failures_within_max>", "<invariant polls_cover_failures>"]
    assert all(repr(rule) == f"<invariant {rule.name}>" for rule in MONITOR_INVARIANTS)
    assert repr(MONITOR_INVARIANTS.steps[0]) == (
        "<step invariant claim_mints_a_new_lease_token>")
    assert all(repr(rule) == f"<step invariant {rule.name}>"
               for rule in MONITOR_INVARIANTS.steps)
