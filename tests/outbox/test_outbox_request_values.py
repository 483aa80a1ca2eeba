"""A request's values, however deep, and a request changed after it was built (issue 26,
item 4: the first two cases).

- A value nested thousands deep, in any field, is refused as `InvalidCloseRequestError`
  naming the field's rule, wherever a request's values are walked: construction,
  `enqueue`'s private copy of a changed request, `detached_copy`, the encoder
  (`intent_digest`, `entry_id`), and a stored record holding one (replay quarantines
  it with its reason; `lifecycles outbox explain` explains it). Its message shows such a
  value down to the JSON depth bound: `repr` would recurse once per level.
- A request changed after it was built (`object.__setattr__`) is stored only if it is
  exactly the request as given: an `error` the constructor would have normalised or cut
  is refused with the rule a stored record with that text breaks, never normalised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.outbox import tree_snapshot

from lifecycles.cli import main
from lifecycles.invariants import canonical_json
from lifecycles.invariants.outbox import MAX_JSON_DEPTH, shown
from lifecycles.outbox.facade import (
    CloseOutbox,
    CloseRequest,
    InvalidCloseRequestError,
)

REQUEST_INVALID = "close_outbox.request_invalid"
DEPTH = 3000
FIELDS = {"run_id": "run-deep", "transaction_id": "tx", "action": "complete", "result": {}}


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def nested_object(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# (field, value given, the rule it breaks)
DEEP_VALUES = [
    ("version", nested_list(DEPTH), "version_supported"),
    ("version", nested_object(DEPTH), "version_supported"),
    ("run_id", nested_list(DEPTH), "run_id_syntax"),
    ("transaction_id", nested_list(DEPTH), "transaction_id_syntax"),
    ("action", nested_list(DEPTH), "action_known"),
    ("result", {"deep": nested_list(DEPTH)}, "json_depth_bound"),
    ("result", {"deep": nested_object(DEPTH)}, "json_depth_bound"),
    ("result", nested_list(DEPTH), "result_is_object"),
    ("error", nested_list(DEPTH), "error_is_text"),
    ("reopen", nested_object(DEPTH), "reopen_is_boolean"),
]
DEEP_IDS = [f"{field}-{type(value).__name__}-{rule}" for field, value, rule in DEEP_VALUES]


@pytest.mark.parametrize(("field", "value", "rule"), DEEP_VALUES, ids=DEEP_IDS)
def test_a_value_nested_thousands_deep_is_refused_when_the_request_is_built(
    field: str, value: Any, rule: str
) -> None:
    with pytest.raises(InvalidCloseRequestError) as refused:
        CloseRequest(**{**FIELDS, field: value})
    assert (refused.value.code, refused.value.rules) == (REQUEST_INVALID, (rule,))
    assert len(str(refused.value)) < 200


def test_the_message_shows_a_deep_version_down_to_the_depth_bound() -> None:
    """Up to the bound the message is the reference's (`repr`); past it, elided."""
    shallow = nested_list(MAX_JSON_DEPTH - 1)  # 8 lists: repr prints them all
    with pytest.raises(InvalidCloseRequestError) as refused:
        CloseRequest(**FIELDS, version=shallow)
    assert str(refused.value) == f"unsupported close request version {shallow!r}"
    with pytest.raises(InvalidCloseRequestError) as refused:
        CloseRequest(**FIELDS, version=nested_list(DEPTH))
    deep = "[" * (MAX_JSON_DEPTH + 1) + "..." + "]" * (MAX_JSON_DEPTH + 1)
    assert str(refused.value) == f"unsupported close request version {deep}"
    with pytest.raises(InvalidCloseRequestError) as refused:
        CloseRequest(**FIELDS, version="2")
    assert str(refused.value) == "unsupported close request version '2'"


def test_a_value_whose_repr_raises_is_refused_with_its_type() -> None:
    class Unprintable:
        def __repr__(self) -> str:
            raise ValueError("no repr")

    with pytest.raises(InvalidCloseRequestError) as refused:
        CloseRequest(**FIELDS, version=Unprintable())  # type: ignore[arg-type]
    assert str(refused.value) == "unsupported close request version <Unprintable object>"
    assert refused.value.rules == ("version_supported",)
    cycle: list[Any] = []
    cycle.append(cycle)
    assert shown(cycle) == "[[...]]"  # a cycle is printed as repr prints it


@pytest.mark.parametrize(("field", "value", "rule"), DEEP_VALUES, ids=DEEP_IDS)
def test_a_request_changed_to_hold_a_deep_value_is_refused_and_nothing_is_written(
    tmp_path: Path, field: str, value: Any, rule: str
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path / "state")
    outbox.enqueue(CloseRequest(**FIELDS))  # a record is stored already
    before = tree_snapshot(tmp_path)
    forged = CloseRequest(**{**FIELDS, "transaction_id": "tx-forged"})
    object.__setattr__(forged, field, value)
    for call in (lambda: outbox.enqueue(forged), forged.detached_copy):
        with pytest.raises(InvalidCloseRequestError) as refused:
            call()
        assert (refused.value.code, refused.value.rules) == (REQUEST_INVALID, (rule,))
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("field", ["result", "run_id", "transaction_id"])
def test_the_encoder_refuses_a_changed_request_it_cannot_encode(field: str) -> None:
    """`intent_digest` and `entry_id` encode the request; on values that cannot be
    encoded they refuse, never raise `RecursionError`."""
    forged = CloseRequest(**FIELDS)
    deep = {"deep": nested_list(DEPTH)} if field == "result" else nested_list(DEPTH)
    object.__setattr__(forged, field, deep)
    with pytest.raises(InvalidCloseRequestError) as refused:
        forged.intent_digest  # noqa: B018 - a property that encodes
    assert refused.value.code == REQUEST_INVALID
    expected = "intent_within_payload_bound" if field == "result" else f"{field}_syntax"
    assert refused.value.rules == (expected,)


def stored_with(outbox: CloseOutbox, field: str, depth: int) -> Path:
    """A pending record file whose ``field`` holds a list nested ``depth`` deep."""
    request = CloseRequest(**FIELDS)
    outbox.enqueue(request)
    path = outbox.pending_dir / f"{request.entry_id}.json"
    values = json.loads(path.read_bytes())
    values[field] = {"deep": "@deep@"} if field == "result" else "@deep@"
    path.write_bytes(canonical_json(values).replace(
        b'"@deep@"', b"[" * depth + b"]" * depth) + b"\n")
    return path


@pytest.mark.parametrize("field", ["version", "result", "state", "attempts"])
def test_a_stored_record_holding_a_deep_value_is_quarantined_with_its_reason(
    tmp_path: Path, field: str
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    stored_with(outbox, field, 400)  # JSON decodes this deep; the record's rules refuse it
    report = outbox.replay(lambda request: pytest.fail("must not be delivered"))
    assert (report.quarantined, report.attempted, report.remaining) == (1, 0, 0)
    (reason_file,) = outbox.quarantine_dir.glob("*.error.json")
    reason = json.loads(reason_file.read_bytes())["reason"]
    assert len(reason) < 300 and "(rules: " in reason


@pytest.mark.parametrize(("field", "rule"), [
    ("version", "version_supported"), ("result", "json_depth_bound"),
    ("state", "status_declared"), ("run_id", "run_id_syntax"),
])
def test_explain_shows_a_deep_stored_value_cut_past_the_depth_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, rule: str
) -> None:
    """`explain --json` of such a file exits 1 (it breaks rules), not 70: the values
    are shown down to one level past the depth bound, then "...", which every rule
    judges as it judges the whole value; a note says so."""
    outbox = CloseOutbox(state_dir=tmp_path)
    path = stored_with(outbox, field, 400)
    before = tree_snapshot(tmp_path)
    code = main(["outbox", "explain", "--state-dir", str(tmp_path), "--json",
                 path.name.removesuffix(".json")])
    captured = capsys.readouterr()
    assert (code, captured.err) == (1, "")
    document = json.loads(captured.out)
    assert [finding.split(":")[0] for finding in document["store_findings"]] == [rule]
    assert document["broken"]
    value, levels = document["values"][field], 0
    while isinstance(value, list | dict):
        (value,), levels = list(value.values()) if isinstance(value, dict) else value, levels + 1
    assert (value, levels) == ("...", MAX_JSON_DEPTH + 1)
    assert any("cut there" in note for note in document["notes"])
    assert tree_snapshot(tmp_path) == before


def test_explain_of_a_record_within_the_bound_shows_every_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    result = {"a": nested_list(MAX_JSON_DEPTH - 1)}  # the deepest result allowed
    request = CloseRequest(**{**FIELDS, "result": result})
    outbox.enqueue(request)
    code = main(["outbox", "explain", "--state-dir", str(tmp_path), "--json", request.entry_id])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["values"]["result"] == result and not document["notes"]


# --- a request changed after it was built ------------------------------------------------


class ChangingList(list[Any]):
    """Answers differently each time it is read (as a list another thread changes):
    the constructor's copy of a result holding it is not the result as given."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __iter__(self) -> Any:
        self.reads += 1
        return iter([self.reads])


@pytest.mark.parametrize(("action", "field", "value", "rule"), [
    ("complete", "error", " ", "error_text_normalised"),
    ("fail", "error", "  receiver   refused ", "error_text_normalised"),
    ("fail", "error", "refused\ttoday", "error_text_normalised"),
    ("fail", "error", "x" * 2001, "error_length_bound"),
    ("fail", "error", " " + "x" * 2001, "error_length_bound"),
    ("complete", "result", {"items": ChangingList()}, "request_as_given"),
], ids=["complete-blank", "fail-spaces", "fail-tab", "fail-too-long", "fail-long-and-spaced",
        "result-changing-as-read"])
def test_a_request_changed_after_it_was_built_is_refused_never_normalised(
    tmp_path: Path, action: str, field: str, value: Any, rule: str
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path / "state")
    outbox.enqueue(CloseRequest(**{**FIELDS, "transaction_id": "tx-stored"}))
    before = tree_snapshot(tmp_path)
    error = "receiver refused" if action == "fail" else ""
    forged = CloseRequest(**{**FIELDS, "action": action, "error": error})
    object.__setattr__(forged, field, value)
    for call in (lambda: outbox.enqueue(forged), forged.detached_copy):
        with pytest.raises(InvalidCloseRequestError) as refused:
            call()
        assert (refused.value.code, refused.value.rules) == (REQUEST_INVALID, (rule,))
    assert tree_snapshot(tmp_path) == before
    assert outbox.pending_count() == 1


def test_the_constructor_still_normalises_the_error_it_is_given(tmp_path: Path) -> None:
    """What the constructor does is the reference's contract: it normalises and cuts
    `error`; such a request is then the request as given, and is stored."""
    outbox = CloseOutbox(state_dir=tmp_path)
    request = CloseRequest(**{**FIELDS, "action": "fail", "error": "  receiver \n refused  "})
    assert request.error == "receiver refused"
    assert outbox.enqueue(request).created
    stored = json.loads((outbox.pending_dir / f"{request.entry_id}.json").read_bytes())
    assert stored["error"] == "receiver refused"
    copy = request.detached_copy()
    assert copy == request and copy.result is not request.result
