"""Every rule of the outbox record, broken alone, is refused with that rule named.

Three places enforce the rules, all from :mod:`lifecycles.invariants.outbox`:
building a record (field rules and invariants), reading a stored file (the files
store's file rules, then the same record rules) and validating a request (the
facade's ``CloseRequest``, in the reference's order and with its messages).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles.invariants import (
    InvariantViolation,
    build_record,
    canonical_json,
    field_rules,
)
from lifecycles.invariants.outbox import (
    MAX_PAYLOAD_BYTES,
    MAX_RECORD_FILE_BYTES,
    OUTBOX_INVARIANTS,
    PLACEMENT_INVARIANTS,
    RECORD_INVALID,
    RECORD_KEYS,
    STORED_FILE_RULES,
    OutboxRecord,
    OutboxStatus,
    PlacedRecord,
    entry_id_for,
    record_bytes,
)
from lifecycles.machines.outbox import OUTBOX
from lifecycles.outbox.facade import OUTBOX_LAYOUT, CloseRequest, InvalidCloseRequestError
from lifecycles.stores import FilesStore, UntrustedRecord

NOW = "2026-03-04T05:06:07.000008+00:00"


def valid_values(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "version": "1",
        "run_id": "run-1",
        "transaction_id": "tx-1",
        "action": "complete",
        "result": {"ok": True, "items": [1, 2.5, None, "x"], "nested": {"a": {"b": 1}}},
        "error": "",
        "reopen": False,
        "entry_id": entry_id_for("run-1", "tx-1"),
        "state": "pending",
        "attempts": 0,
        "created_at": NOW,
        "last_attempt_at": None,
        "last_error": None,
    }
    values.update(changes)
    return values


def fail_values(**changes: Any) -> dict[str, Any]:
    return valid_values(**{"action": "fail", "error": "remote refused", **changes})


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# (rule, values that break that rule and no other)
BROKEN_ALONE: list[tuple[str, dict[str, Any]]] = [
    ("version_supported", valid_values(version="2")),
    ("version_supported", valid_values(version=1)),
    ("run_id_syntax", valid_values(run_id="../etc")),
    ("run_id_syntax", valid_values(run_id="")),
    ("run_id_syntax", valid_values(run_id="r" * 201)),
    ("transaction_id_syntax", valid_values(transaction_id="-tx")),
    ("transaction_id_syntax", valid_values(transaction_id=7)),
    ("action_known", valid_values(action="close")),
    ("result_is_object", valid_values(result=[1])),
    ("json_depth_bound", valid_values(result={"a": nested(8)})),
    ("json_string_length_bound", valid_values(result={"a": "x" * 4001})),
    ("json_integer_range", valid_values(result={"a": 2**63})),
    ("json_integer_range", valid_values(result={"a": -(2**63)})),
    ("json_floats_finite", valid_values(result={"a": float("inf")})),
    ("json_floats_finite", valid_values(result={"a": float("nan")})),
    ("json_array_size_bound", valid_values(result={"a": list(range(201))})),
    ("json_object_size_bound", valid_values(result={f"k{i}": i for i in range(201)})),
    ("json_field_name_bound", valid_values(result={"": 1})),
    ("json_field_name_bound", valid_values(result={"k" * 201: 1})),
    ("json_type_supported", valid_values(result={"a": (1, 2)})),
    ("json_type_supported", valid_values(result={"a": {1, 2}})),
    ("error_is_text", fail_values(error=None)),
    ("error_length_bound", fail_values(error="e" * 2001)),
    ("error_text_normalised", fail_values(error="two  spaces")),
    ("error_text_normalised", fail_values(error=" leading")),
    ("reopen_is_boolean", valid_values(reopen=0)),
    ("entry_id_syntax", valid_values(entry_id="../" + "0" * 29)),
    ("entry_id_syntax", valid_values(entry_id=entry_id_for("run-1", "tx-1").upper())),
    ("status_declared", valid_values(state="sent")),
    ("attempts_non_negative", valid_values(attempts=-1)),
    ("attempts_non_negative", valid_values(attempts=True)),
    ("attempts_non_negative", valid_values(attempts=1.0)),
    ("timestamp_timezone_aware", valid_values(created_at="2026-03-04T05:06:07")),
    ("timestamp_timezone_aware", valid_values(created_at="yesterday")),
    ("timestamp_timezone_aware", valid_values(created_at=1700000000)),
    ("timestamp_timezone_aware", valid_values(attempts=1, last_attempt_at="2026-03-04")),
    ("last_error_is_text", valid_values(last_error=5)),
    ("last_error_bound", valid_values(last_error="e" * 1001)),
    ("complete_carries_no_error_or_reopen", valid_values(error="unexpected")),
    ("complete_carries_no_error_or_reopen", valid_values(reopen=True)),
    ("fail_carries_error", valid_values(action="fail")),
    ("intent_within_payload_bound",
     valid_values(result={f"k{i}": "v" * 400 for i in range(170)})),
    ("entry_id_matches_identity", valid_values(entry_id=entry_id_for("run-1", "tx-2"))),
    ("quarantined_has_reason", valid_values(state="quarantined")),
]


def refused_rules(values: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(InvariantViolation) as refused:
        OUTBOX_INVARIANTS.check(build_record(OutboxRecord, values, RECORD_INVALID))
    assert refused.value.code == RECORD_INVALID
    return refused.value.rules


def test_the_valid_record_holds_every_rule() -> None:
    record = build_record(OutboxRecord, valid_values(), RECORD_INVALID)
    assert OUTBOX_INVARIANTS.broken(record) == []
    assert OUTBOX_INVARIANTS.broken(build_record(OutboxRecord, fail_values(), RECORD_INVALID)) == []
    assert record.state is OutboxStatus.PENDING


@pytest.mark.parametrize(("rule", "values"), BROKEN_ALONE, ids=[r for r, _ in BROKEN_ALONE])
def test_a_record_breaking_one_rule_is_refused_naming_it(
    rule: str, values: dict[str, Any]
) -> None:
    assert refused_rules(values) == (rule,)


def test_every_declared_rule_has_a_breaking_case() -> None:
    declared = {rule.name for _, rule in field_rules(OutboxRecord)}
    declared |= {rule.name for rule in OUTBOX_INVARIANTS}
    declared |= {
        "json_depth_bound", "json_string_length_bound", "json_integer_range",
        "json_floats_finite", "json_array_size_bound", "json_object_size_bound",
        "json_field_name_bound", "json_type_supported",
    }
    assert declared <= {rule for rule, _ in BROKEN_ALONE}


def test_bounds_are_inclusive() -> None:
    limits = valid_values(
        run_id="r" * 200,
        result={
            "s": "x" * 4000, "i": 2**63 - 1, "n": -(2**63 - 1), "a": list(range(200)),
            "d": nested(7), "k" * 200: 1.5e308,
        },
    )
    limits["entry_id"] = entry_id_for(limits["run_id"], "tx-1")
    record = build_record(OutboxRecord, limits, RECORD_INVALID)
    assert OUTBOX_INVARIANTS.broken(record) == []
    assert OUTBOX_INVARIANTS.broken(
        build_record(OutboxRecord, fail_values(error="e" * 2000, last_error="l" * 1000,
                                               attempts=3, last_attempt_at=NOW), RECORD_INVALID)
    ) == []


def test_serialisation_is_the_reference_format() -> None:
    values = valid_values(result={"caf\u00e9": "\u2603"})
    record = build_record(OutboxRecord, values, RECORD_INVALID)
    data = record_bytes(record)
    assert data.endswith(b"}\n") and data.count(b"\n") == 1
    decoded = json.loads(data)
    assert set(decoded) == RECORD_KEYS and len(RECORD_KEYS) == 13
    assert list(decoded) == sorted(decoded)
    assert "\u2603".encode() in data  # ensure_ascii=False
    assert data == json.dumps(
        decoded, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode() + b"\n"
    assert data == canonical_json(record.values()) + b"\n"


def test_status_matches_directory_is_a_named_placement_rule() -> None:
    record = build_record(OutboxRecord, valid_values(), RECORD_INVALID)
    assert PLACEMENT_INVARIANTS.broken(PlacedRecord("pending", record)) == []
    assert PLACEMENT_INVARIANTS.broken(PlacedRecord("delivered", record)) == [
        "status_matches_directory"
    ]


# --- the same rules on stored files -----------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> FilesStore[OutboxRecord]:
    return FilesStore(OUTBOX, tmp_path / "close-outbox", OUTBOX_LAYOUT)


def stored_rules(
    store: FilesStore[OutboxRecord], directory: str, name: str, data: bytes
) -> tuple[str, ...]:
    path = store.root / directory / name
    path.write_bytes(data)
    before = sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(UntrustedRecord) as refused:
        store.read_named("pending" if directory == "pending" else "delivered", name)
    assert refused.value.code == RECORD_INVALID
    assert sorted(p.name for p in path.parent.iterdir()) == before, "a read changes nothing"
    return refused.value.rules


ENTRY = entry_id_for("run-1", "tx-1") + ".json"


def as_bytes(values: Any) -> bytes:
    return json.dumps(values).encode()


# Tuples and sets exist only in Python values, never in a stored file (JSON has
# arrays and objects only), so that one rule is checked on records and requests.
STORED_CASES = [(rule, values) for rule, values in BROKEN_ALONE if rule != "json_type_supported"]


@pytest.mark.parametrize(("rule", "values"), STORED_CASES, ids=[r for r, _ in STORED_CASES])
def test_a_stored_file_breaking_one_record_rule_is_untrusted_naming_it(
    store: FilesStore[OutboxRecord], rule: str, values: dict[str, Any]
) -> None:
    data = json.dumps(values).encode()
    entry_id = values["entry_id"]
    name = f"{entry_id}.json" if re.fullmatch(r"[0-9a-f]{32}", entry_id) else ENTRY
    # json.dumps writes NaN and Infinity, which are not JSON: such a file never parses.
    expected = ("record_decodes",) if b"NaN" in data or b"Infinity" in data else (rule,)
    assert stored_rules(store, "pending", name, data) == expected


FILE_CASES: list[tuple[str, bytes]] = [
    ("record_decodes", canonical_json(valid_values())[:-7]),
    ("record_decodes", b"\xff\xfe not utf-8"),
    ("record_decodes", b"{\"a\": 1, \"a\": 2}"),
    ("record_decodes", b"[" * 100_000 + b"]" * 100_000),
    ("record_is_object", b"[]"),
    ("record_is_object", b"\"text\""),
    ("record_keys_exact", as_bytes({k: v for k, v in valid_values().items() if k != "attempts"})),
    ("record_keys_exact", as_bytes({**valid_values(), "reason": "extra"})),
    ("status_matches_directory", as_bytes(valid_values(state="delivered"))),
    ("status_matches_directory",
     as_bytes(valid_values(state="quarantined", last_error="set aside"))),
]


@pytest.mark.parametrize(("rule", "data"), FILE_CASES, ids=[r for r, _ in FILE_CASES])
def test_a_stored_file_breaking_one_file_rule_is_untrusted_naming_it(
    store: FilesStore[OutboxRecord], rule: str, data: bytes
) -> None:
    if len(data) > MAX_RECORD_FILE_BYTES:
        rule = "record_size_bound"
    assert stored_rules(store, "pending", ENTRY, data) == (rule,)


def test_file_rules_size_link_and_name(store: FilesStore[OutboxRecord], tmp_path: Path) -> None:
    good = canonical_json(valid_values()) + b"\n"
    padded = good[:-2] + b" " * (MAX_RECORD_FILE_BYTES) + b"}\n"
    assert stored_rules(store, "pending", ENTRY, padded) == ("record_size_bound",)
    (store.root / "pending" / ENTRY).unlink()
    other = entry_id_for("run-9", "tx-9") + ".json"
    assert stored_rules(store, "pending", other, good) == ("file_name_matches_key",)
    target = tmp_path / "elsewhere.json"
    target.write_bytes(good)
    os.symlink(target, store.root / "pending" / ENTRY)
    with pytest.raises(UntrustedRecord) as refused:
        store.read_named("pending", ENTRY)
    assert refused.value.rules == ("record_is_regular_file",)
    os.unlink(store.root / "pending" / ENTRY)
    os.mkfifo(store.root / "pending" / ENTRY)  # must not block the reader
    with pytest.raises(UntrustedRecord) as refused:
        store.read_named("pending", ENTRY)
    assert refused.value.rules == ("record_is_regular_file",)
    assert set(STORED_FILE_RULES) <= {
        "record_size_bound", "record_is_regular_file", "record_decodes", "record_is_object",
        "record_keys_exact", "file_name_matches_key", "record_single_link",
    }


def test_a_stored_valid_record_reads_back_equal(store: FilesStore[OutboxRecord]) -> None:
    record = build_record(OutboxRecord, valid_values(), RECORD_INVALID)
    (store.root / "pending" / ENTRY).write_bytes(record_bytes(record))
    assert store.read_named("pending", ENTRY) == record
    assert store.get(record.entry_id) == record


# --- the same rules on requests ---------------------------------------------------


REQUEST_CASES: list[tuple[str, dict[str, Any]]] = [
    ("version_supported", {"version": "0"}),
    ("run_id_syntax", {"run_id": "a/b"}),
    ("transaction_id_syntax", {"transaction_id": ""}),
    ("action_known", {"action": "COMPLETE"}),
    ("result_is_object", {"result": None}),
    ("json_depth_bound", {"result": {"a": nested(8)}}),
    ("json_string_length_bound", {"result": {"a": "x" * 4001}}),
    ("json_integer_range", {"result": {"a": 2**64}}),
    ("json_floats_finite", {"result": {"a": float("-inf")}}),
    ("json_array_size_bound", {"result": {"a": [0] * 201}}),
    ("json_object_size_bound", {"result": {str(i): i for i in range(201)}}),
    ("json_field_name_bound", {"result": {"a": {"": 1}}}),
    ("json_type_supported", {"result": {"a": b"bytes"}}),
    ("error_is_text", {"action": "fail", "error": ["x"]}),
    ("reopen_is_boolean", {"reopen": "yes"}),
    ("complete_carries_no_error_or_reopen", {"error": "why"}),
    ("fail_carries_error", {"action": "fail", "error": "   "}),
    ("intent_within_payload_bound", {"result": {f"k{i}": "v" * 400 for i in range(170)}}),
]


@pytest.mark.parametrize(("rule", "changes"), REQUEST_CASES, ids=[r for r, _ in REQUEST_CASES])
def test_a_request_breaking_one_rule_is_refused_naming_it(
    rule: str, changes: dict[str, Any]
) -> None:
    fields: dict[str, Any] = {
        "run_id": "run-1", "transaction_id": "tx-1", "action": "complete", "result": {}
    }
    fields.update(changes)
    with pytest.raises(InvalidCloseRequestError) as refused:
        CloseRequest(**fields)
    assert refused.value.rules == (rule,)
    assert refused.value.code == "close_outbox.request_invalid"


def test_a_request_normalises_error_text_and_copies_its_result() -> None:
    result = {"a": [1, {"b": 2}]}
    request = CloseRequest("run-1", "tx-1", "fail", result, error="  a \t b\n" + "c" * 3000)
    assert request.error == ("a b " + "c" * 3000)[:2000]
    assert request.result == result and request.result is not result
    assert request.result["a"] is not result["a"]
    payload = len(canonical_json(request.intent()))
    assert payload <= MAX_PAYLOAD_BYTES
    record = attrs.evolve(
        build_record(OutboxRecord, fail_values(), RECORD_INVALID), error=request.error
    )
    assert OUTBOX_INVARIANTS.broken(record) == []
