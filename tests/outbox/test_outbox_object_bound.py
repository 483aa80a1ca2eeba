"""An object of exactly 200 keys in a request is accepted, one of 201 refused (issue 26).

The reference's bound is ``len(value) > 200`` for arrays and objects alike; the array
bound was tested at 200 and 201, the object bound only at 201, so an off-by-one there
went unseen. Both implementations run here: the result object itself and an object
nested in it, in a request, an altered request and a stored record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.outbox import tree_snapshot
from support.reference import require_reference

import lifecycles.outbox.facade as ours

ref = require_reference("close_outbox")

FIXED_NOW = "2026-01-02T03:04:05.000006+00:00"
BOTH = pytest.mark.parametrize("module", [ref, ours], ids=["reference", "lifecycles"])
BOUND = 200
REFUSAL = "result object exceeds the field bound"


@pytest.fixture(autouse=True)
def fixed_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ref, "_now", lambda: FIXED_NOW)
    monkeypatch.setattr(ours, "_now", lambda: FIXED_NOW)


def keys(count: int) -> dict[str, int]:
    return {f"k{number}": number for number in range(count)}


def nested(count: int) -> dict[str, Any]:
    return {"nested": keys(count)}


RESULTS: dict[str, Callable[[int], dict[str, Any]]] = {
    "the result": keys, "a nested object": nested,
}


def request(module: ModuleType, result: dict[str, Any]) -> Any:
    return module.CloseRequest(run_id="run-bound", transaction_id="tx-1", action="complete",
                               result=result)


@BOTH
@pytest.mark.parametrize("where", sorted(RESULTS))
def test_an_object_of_exactly_200_keys_is_enqueued_and_delivered(
    tmp_path: Path, module: ModuleType, where: str
) -> None:
    result = RESULTS[where](BOUND)
    outbox = module.CloseOutbox(state_dir=tmp_path)
    receipt = outbox.enqueue(request(module, result))
    assert receipt.created
    delivered: list[Any] = []
    report = outbox.replay(delivered.append)
    assert (report.delivered, report.quarantined, report.remaining) == (1, 0, 0)
    assert [request.result for request in delivered] == [result]


@pytest.mark.parametrize("where", sorted(RESULTS))
def test_both_write_the_same_bytes_for_200_keys(tmp_path: Path, where: str) -> None:
    written = {}
    for module in (ref, ours):
        state_dir = tmp_path / module.__name__
        module.CloseOutbox(state_dir=state_dir).enqueue(request(module, RESULTS[where](BOUND)))
        (path,) = (state_dir / "close-outbox" / "pending").iterdir()
        written[module] = path.read_bytes()
    assert written[ref] == written[ours]


@BOTH
@pytest.mark.parametrize("where", sorted(RESULTS))
def test_an_object_of_201_keys_is_refused_and_nothing_is_written(
    tmp_path: Path, module: ModuleType, where: str
) -> None:
    outbox = module.CloseOutbox(state_dir=tmp_path)
    outbox.pending_count()  # the layout exists (the reference makes its lock lazily)
    before = tree_snapshot(tmp_path)
    with pytest.raises(module.InvalidCloseRequestError) as refused:
        request(module, RESULTS[where](BOUND + 1))
    assert str(refused.value) == REFUSAL
    if module is ours:
        assert refused.value.code == "close_outbox.request_invalid"
        assert refused.value.rules == ("json_object_size_bound",)
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("where", sorted(RESULTS))
def test_a_request_altered_to_201_keys_is_refused_by_enqueue(tmp_path: Path, where: str) -> None:
    """The result mutated after the request was checked: enqueue checks its private copy
    again and refuses (README: "enqueue validates the request again")."""
    outbox = ours.CloseOutbox(state_dir=tmp_path)
    altered = request(ours, RESULTS[where](BOUND))
    inner = altered.result if where == "the result" else altered.result["nested"]
    inner[f"k{BOUND}"] = BOUND
    before = tree_snapshot(tmp_path)
    with pytest.raises(ours.InvalidCloseRequestError) as refused:
        outbox.enqueue(altered)
    assert (str(refused.value), refused.value.rules) == (REFUSAL, ("json_object_size_bound",))
    assert tree_snapshot(tmp_path) == before


def stored_record(count: int) -> tuple[str, bytes]:
    """A pending record file, as the reference writes it, whose result has ``count`` keys
    (the bound is checked on the intent, so the file is written past the constructor)."""
    intent = request(ref, keys(BOUND)).intent()
    intent["result"] = keys(count)
    values = {**intent, "state": "pending", "created_at": FIXED_NOW, "attempts": 0,
              "last_attempt_at": None, "last_error": None}
    return intent["entry_id"], bytes(ref._json_bytes(values)) + b"\n"


@BOTH
def test_a_stored_record_of_200_keys_is_delivered_and_one_of_201_quarantined(
    tmp_path: Path, module: ModuleType
) -> None:
    outcomes = {}
    for count in (BOUND, BOUND + 1):
        state_dir = tmp_path / str(count)
        outbox = module.CloseOutbox(state_dir=state_dir)
        entry_id, data = stored_record(count)
        (Path(outbox.pending_dir) / f"{entry_id}.json").write_bytes(data)
        delivered: list[Any] = []
        report = outbox.replay(delivered.append)
        reasons = [json.loads(path.read_bytes())["reason"]
                   for path in Path(outbox.quarantine_dir).glob("*.error.json")]
        outcomes[count] = (report.delivered, report.quarantined, len(delivered), reasons)
    assert outcomes[BOUND] == (1, 0, 1, [])
    delivered_count, quarantined, calls, (reason,) = outcomes[BOUND + 1]
    assert (delivered_count, quarantined, calls) == (0, 1, 0)
    assert reason.startswith(REFUSAL)
    if module is ours:
        assert reason == f"{REFUSAL} (rules: json_object_size_bound)"
