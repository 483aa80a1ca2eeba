"""Golden values and exact boundaries of the outbox, pinned as literals.

Each assertion is one a small change of the code would break: the payload bound
(an intent of exactly 65,536 encoded bytes is accepted, one byte more refused, counted
in UTF-8 bytes, not characters), a result no UTF-8 can encode (a lone surrogate), the
guard that a delivery failure needs an attempt first, and the reference's message for
each rule a stored record breaks. The tests parametrized over ``module`` make the same
calls on the reference too when the seeds are at hand (``LIFECYCLES_SEEDS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest

import lifecycles.outbox.facade as ours
from lifecycles.invariants import InvariantViolation, canonical_json
from lifecycles.invariants.outbox import MAX_PAYLOAD_BYTES, OutboxStatus, entry_id_for
from lifecycles.machines import TransitionRefused
from lifecycles.machines.outbox import OUTBOX, OutboxInputs

FIXED_NOW = "2026-01-02T03:04:05.000006+00:00"
LATER = "2026-01-02T03:05:00+00:00"
BOTH = pytest.mark.parametrize("module", ["reference", "lifecycles"])
RUN, TX = "run-golden", "tx-1"


def implementation(module: str) -> ModuleType:
    if module == "lifecycles":
        return ours
    from support.reference import require_reference

    return require_reference("close_outbox")


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ours, "_now", lambda: FIXED_NOW)


def payload_bytes(result: dict[str, Any]) -> int:
    """The encoded size of a complete intent holding ``result`` (the reference's
    ``len(_json_bytes(request.intent()))``)."""
    return len(canonical_json({
        "version": "1", "entry_id": entry_id_for(RUN, TX), "run_id": RUN, "transaction_id": TX,
        "action": "complete", "result": result, "error": "", "reopen": False,
    }))


def result_of(size: int, character: str) -> dict[str, Any]:
    """A result that makes the intent exactly ``size`` bytes, mostly of ``character``."""
    width = len(character.encode())
    result: dict[str, Any] = {}
    while True:
        key = f"k{len(result):02d}"
        result[key] = ""
        missing = size - payload_bytes(result)
        if missing % width + missing // width <= 4000:  # a string holds 4000 characters
            result[key] = "x" * (missing % width) + character * (missing // width)
            break
        # leave room for the next key (``,"k01":""`` is 9 bytes)
        result[key] = character * min(4000, (missing - 9) // width)
    assert payload_bytes(result) == size
    return result


CHARACTERS = {"ascii": "x", "two-byte": "\u00e9", "four-byte": "\U0001f600"}


@BOTH
@pytest.mark.parametrize("character", CHARACTERS.values(), ids=list(CHARACTERS))
def test_an_intent_of_exactly_65536_bytes_is_accepted_and_one_byte_more_refused(
    module: str, character: str
) -> None:
    outbox = implementation(module)
    assert MAX_PAYLOAD_BYTES == 65536
    largest = outbox.CloseRequest(RUN, TX, "complete", result_of(65536, character))
    assert len(canonical_json(largest.intent())) == 65536
    with pytest.raises(outbox.InvalidCloseRequestError) as refused:
        outbox.CloseRequest(RUN, TX, "complete", result_of(65537, character))
    assert str(refused.value) == "close request exceeds 65536 encoded bytes"
    if module == "lifecycles":
        assert refused.value.rules == ("intent_within_payload_bound",)


@BOTH
def test_a_request_of_exactly_65536_bytes_is_stored_and_delivered(
    module: str, tmp_path: Path
) -> None:
    outbox = implementation(module)
    box = outbox.CloseOutbox(state_dir=tmp_path)
    request = outbox.CloseRequest(RUN, TX, "complete", result_of(65536, "\u00e9"))
    assert box.enqueue(request).created is True
    delivered: list[Any] = []
    report = box.replay(delivered.append)
    assert (report.attempted, report.delivered, report.quarantined) == (1, 1, 0)
    assert delivered[0].intent() == request.intent()
    stored = json.loads((box.delivered_dir / f"{request.entry_id}.json").read_bytes())
    assert stored["result"] == request.result and stored["state"] == "delivered"


def record_with(result: dict[str, Any]) -> Any:
    """A valid pending record, then its result replaced without a check."""
    small = ours.new_record(ours.CloseRequest(RUN, TX, "complete", {}), FIXED_NOW)
    return attrs.evolve(small, result=result)


def test_the_records_payload_invariant_holds_at_65536_bytes_and_breaks_one_byte_over() -> None:
    at_bound = record_with(result_of(65536, "\u00e9"))
    assert OUTBOX.check(at_bound) is at_bound
    with pytest.raises(InvariantViolation) as broken:
        OUTBOX.check(record_with(result_of(65537, "\u00e9")))
    assert broken.value.rules == ("intent_within_payload_bound",)


# --- a result no UTF-8 can hold ----------------------------------------------------------

SURROGATES = {
    "in a value": {"action": "complete", "result": {"a": "\ud800"}},
    "in a nested value": {"action": "complete", "result": {"a": ["ok", {"b": "x\udfff"}]}},
    "in a field name": {"action": "complete", "result": {"\udc80": 1}},
    "in the error": {"action": "fail", "result": {}, "error": "boom \udcff"},
}


@pytest.mark.parametrize("fields", SURROGATES.values(), ids=list(SURROGATES))
def test_a_request_holding_a_lone_surrogate_is_refused(fields: dict[str, Any]) -> None:
    """A lone surrogate is a ``str`` but no UTF-8: the intent cannot be encoded, so it is
    refused as an intent past the payload bound, with that rule named. (The reference
    raises ``UnicodeEncodeError`` instead: test_outbox_differences.py.)"""
    with pytest.raises(ours.InvalidCloseRequestError) as refused:
        ours.CloseRequest(RUN, TX, **fields)
    assert refused.value.rules == ("intent_within_payload_bound",)
    assert refused.value.code == "close_outbox.request_invalid"


def test_a_record_holding_a_lone_surrogate_breaks_the_payload_invariant() -> None:
    with pytest.raises(InvariantViolation) as broken:
        OUTBOX.check(record_with({"a": "\ud800"}))
    assert broken.value.rules == ("intent_within_payload_bound",)


# --- fail_delivery needs an attempt first ------------------------------------------------


def pending() -> Any:
    return OUTBOX.create(ours.new_record(ours.CloseRequest(RUN, TX, "complete", {}), FIXED_NOW))


FAILED = OutboxInputs(LATER, error="ConnectionError: close delivery failed")


def test_fail_delivery_before_any_attempt_is_refused() -> None:
    record = pending()
    assert (record.attempts, record.last_attempt_at) == (0, None)
    with pytest.raises(TransitionRefused) as refused:
        OUTBOX.fire("fail_delivery", record, FAILED)
    assert (refused.value.code, refused.value.guard) == (
        "close_outbox.not_attempted", "attempt_recorded")


def test_fail_delivery_after_exactly_one_attempt_is_allowed() -> None:
    attempted = OUTBOX.fire("attempt", pending(), OutboxInputs(LATER))
    assert attempted.attempts == 1
    failed = OUTBOX.fire("fail_delivery", attempted, FAILED)
    assert (failed.state, failed.attempts, failed.last_attempt_at, failed.last_error) == (
        OutboxStatus.PENDING, 1, LATER, "ConnectionError: close delivery failed")


def test_fail_delivery_of_an_attempt_already_answered_is_refused() -> None:
    attempted = OUTBOX.fire("attempt", pending(), OutboxInputs(LATER))
    failed = OUTBOX.fire("fail_delivery", attempted, FAILED)
    with pytest.raises(TransitionRefused) as refused:
        OUTBOX.fire("fail_delivery", failed, FAILED)
    assert refused.value.guard == "attempt_recorded"


def test_fail_delivery_with_attempts_counted_but_no_attempt_time_is_refused() -> None:
    counted = attrs.evolve(pending(), attempts=1)
    assert OUTBOX.check(counted) is counted  # a valid record; only the guard says no
    with pytest.raises(TransitionRefused) as refused:
        OUTBOX.fire("fail_delivery", counted, FAILED)
    assert refused.value.guard == "attempt_recorded"


def test_fail_delivery_with_an_attempt_time_but_no_attempt_counted_is_refused() -> None:
    timed = attrs.evolve(pending(), last_attempt_at=LATER)
    assert (timed.attempts, OUTBOX.check(timed)) == (0, timed)  # valid; the guard says no
    with pytest.raises(TransitionRefused) as refused:
        OUTBOX.fire("fail_delivery", timed, FAILED)
    assert refused.value.guard == "attempt_recorded"


def test_a_refused_fail_delivery_leaves_the_stored_record_unchanged(tmp_path: Path) -> None:
    box = ours.CloseOutbox(state_dir=tmp_path)
    request = ours.CloseRequest(RUN, TX, "complete", {"ok": True})
    box.enqueue(request)
    path = box.pending_dir / f"{request.entry_id}.json"
    before = path.read_bytes()
    with box.store.locked(), box.store.transaction():
        record = box.store.get(request.entry_id)
        assert record is not None
        with pytest.raises(TransitionRefused) as refused:
            box.store.fire(record, "fail_delivery", FAILED)
    assert refused.value.code == "close_outbox.not_attempted"
    assert path.read_bytes() == before
    assert sorted(p.name for p in box.pending_dir.iterdir() if not p.name.startswith(".")) == [
        path.name]
    assert box.pending_count() == 1


# --- the reference's message for each rule a stored record breaks -------------------------

DEEP: list[Any] = [[[[[[[[[1]]]]]]]]]
STORED_RECORD_RULES: dict[str, tuple[dict[str, Any], str, str]] = {
    "version": ({"version": "2"}, "unsupported close request version '2'",
                "version_supported"),
    "version not text": ({"version": 1}, "unsupported close request version 1",
                         "version_supported"),
    "run_id": ({"run_id": "bad/id"}, "run_id must be a bounded, path-safe identifier",
               "run_id_syntax"),
    "transaction_id": ({"transaction_id": ""},
                       "transaction_id must be a bounded, path-safe identifier",
                       "transaction_id_syntax"),
    "action": ({"action": "close"}, "action must be 'complete' or 'fail'", "action_known"),
    "result not an object": ({"result": []}, "result must be an object", "result_is_object"),
    "result string": ({"result": {"a": "x" * 4001}}, "result string exceeds 4000 characters",
                      "json_string_length_bound"),
    "result integer": ({"result": {"a": 2**63}}, "result integer exceeds signed 64-bit range",
                       "json_integer_range"),
    "result depth": ({"result": {"a": DEEP}}, "result exceeds the JSON depth bound",
                     "json_depth_bound"),
    "result array": ({"result": {"a": list(range(201))}}, "result array exceeds the item bound",
                     "json_array_size_bound"),
    "result object": ({"result": {f"k{i}": i for i in range(201)}},
                      "result object exceeds the field bound", "json_object_size_bound"),
    "result field name": ({"result": {"": 1}},
                          "result field names must be non-empty strings of at most 200 characters",
                          "json_field_name_bound"),
    "error": ({"error": 3}, "error must be a string", "error_is_text"),
    "reopen": ({"reopen": 1}, "reopen must be a boolean", "reopen_is_boolean"),
    "complete with error": ({"error": "e"}, "complete requests cannot carry error or reopen",
                            "complete_carries_no_error_or_reopen"),
    "fail without error": ({"action": "fail"}, "fail requests require a bounded error",
                           "fail_carries_error"),
    "payload one byte over": ({"result": result_of(65537, "x")},
                              "close request exceeds 65536 encoded bytes",
                              "intent_within_payload_bound"),
    "entry_id": ({"entry_id": "0" * 32}, "entry_id does not match run/transaction identity",
                 "entry_id_matches_identity"),
    "state": ({"state": "done"}, "invalid outbox state", "status_declared"),
    "state of another directory": ({"state": "delivered"},
                                   "pending directory contains state 'delivered'",
                                   "status_matches_directory"),
    "attempts": ({"attempts": -1}, "attempts must be a non-negative integer",
                 "attempts_non_negative"),
    "attempts not an integer": ({"attempts": True}, "attempts must be a non-negative integer",
                                "attempts_non_negative"),
    "created_at not a timestamp": ({"created_at": "yesterday"},
                                   "created_at is not an ISO timestamp",
                                   "timestamp_timezone_aware"),
    "created_at without a zone": ({"created_at": "2026-01-01T00:00:00"},
                                  "created_at must include a timezone",
                                  "timestamp_timezone_aware"),
    "created_at not text": ({"created_at": 5}, "created_at must be a timestamp string",
                            "timestamp_timezone_aware"),
    "last_attempt_at": ({"last_attempt_at": "x"}, "last_attempt_at is not an ISO timestamp",
                        "timestamp_timezone_aware"),
    "last_error not text": ({"last_error": 5}, "last_error must be a string or null",
                            "last_error_is_text"),
    "last_error too long": ({"last_error": "x" * 1001},
                            "last_error exceeds the durable size bound", "last_error_bound"),
    "file over the size bound": ({"result": {f"k{i}": "v" * 400 for i in range(180)}},
                                 "outbox record exceeds the durable size bound",
                                 "record_size_bound"),
}


def stored_record(**changes: Any) -> tuple[str, bytes]:
    """A valid pending record's file name and bytes, with ``changes`` written over it."""
    request = ours.CloseRequest(RUN, TX, "complete", {"i": 1})
    values = {**request.intent(), "state": "pending", "created_at": FIXED_NOW, "attempts": 0,
              "last_attempt_at": None, "last_error": None, **changes}
    return f"{request.entry_id}.json", canonical_json(values) + b"\n"


def quarantine_reasons(module: str, tmp_path: Path, changes: dict[str, Any]) -> list[str]:
    box = implementation(module).CloseOutbox(state_dir=tmp_path)
    name, data = stored_record(**changes)
    (box.pending_dir / name).write_bytes(data)
    report = box.replay(lambda request: pytest.fail("a broken record is never delivered"))
    assert (report.quarantined, report.attempted, report.remaining) == (1, 0, 0)
    return [json.loads(path.read_bytes())["reason"]
            for path in sorted(box.quarantine_dir.glob("*.error.json"))]


@BOTH
@pytest.mark.parametrize("case", STORED_RECORD_RULES)
def test_a_stored_record_breaking_a_rule_is_quarantined_with_the_references_message(
    module: str, case: str, tmp_path: Path
) -> None:
    """The reason is the reference's message, word for word; lifecycles adds the rule."""
    changes, message, rule = STORED_RECORD_RULES[case]
    expected = message if module == "reference" else f"{message} (rules: {rule})"
    assert quarantine_reasons(module, tmp_path, changes) == [expected]


@pytest.mark.parametrize("case", STORED_RECORD_RULES)
def test_describe_gives_the_references_message_for_each_rule(case: str) -> None:
    changes, message, rule = STORED_RECORD_RULES[case]
    if rule in ("status_matches_directory", "record_size_bound"):
        return  # told by the files store, not by describe (the cases above cover them)
    (field, value), *_ = changes.items()
    if field == "action" and rule == "fail_carries_error":
        field, value = "error", ""
    assert ours.describe(rule, field, value) == message
