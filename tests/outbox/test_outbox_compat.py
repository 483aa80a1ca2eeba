"""Drop-in compatibility with the reference close outbox, in both directions.

The reference module is imported from the seeds directory (never copied into the
repository). With both clocks fixed, the same calls write byte-identical files; a
directory written by either is read and continued by the other. Where lifecycles
differs on purpose, tests/outbox/test_outbox_differences.py runs both and pins the difference.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.reference import require_reference

import lifecycles.outbox.facade as ours

FIXED_NOW = "2026-01-02T03:04:05.000006+00:00"

ref = require_reference("close_outbox")


@pytest.fixture
def fixed_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ref, "_now", lambda: FIXED_NOW)
    monkeypatch.setattr(ours, "_now", lambda: FIXED_NOW)


def intents() -> list[dict[str, Any]]:
    return [
        {"run_id": "run-1", "transaction_id": "tx-1", "action": "complete",
         "result": {"ok": True, "n": 3, "x": 1.5, "nested": {"list": [1, "two", None]}}},
        {"run_id": "run-1", "transaction_id": "tx-2", "action": "fail",
         "result": {}, "error": "  boom \n happened  ", "reopen": True},
        {"run_id": "run-2", "transaction_id": "tx-1", "action": "complete",
         "result": {"text": "caf\u00e9 \u2603", "big": 2**63 - 1}},
        {"run_id": "r@x+y:z", "transaction_id": "t.1-2_3", "action": "fail",
         "result": {"e": []}, "error": "remote said no"},
    ]


def files_of(state_dir: Path) -> dict[str, bytes]:
    root = state_dir / "close-outbox"
    found: dict[str, bytes] = {}
    for directory in ("pending", "delivered"):
        for path in sorted((root / directory).iterdir()):
            found[f"{directory}/{path.name}"] = path.read_bytes()
    return found


def quarantine_of(state_dir: Path) -> list[str]:
    return sorted(p.name for p in (state_dir / "close-outbox" / "quarantine").iterdir())


def failing_for(entry_ids: set[str]) -> Callable[[Any], None]:
    def deliver(request: Any) -> None:
        if request.entry_id in entry_ids:
            raise ConnectionError("remote down")

    return deliver


def run_script(module: ModuleType, state_dir: Path, fail: set[str]) -> list[Any]:
    """The same calls against either implementation; returns what each call answered."""
    outbox = module.CloseOutbox(state_dir=state_dir)
    answers: list[Any] = []
    for intent in intents():
        answers.append(outbox.enqueue(module.CloseRequest(**intent)))
    answers.append(outbox.enqueue(module.CloseRequest(**intents()[0])))
    answers.append(outbox.pending_count())
    answers.append(outbox.replay(failing_for(fail), limit=2))
    answers.append(outbox.replay(failing_for(fail)))
    answers.append(outbox.enqueue(module.CloseRequest(**intents()[0])))
    answers.append(outbox.pending_count())
    return answers


def plain(value: Any) -> Any:
    """Dataclass answers of either module as comparable tuples."""
    if hasattr(value, "__dataclass_fields__"):
        return (type(value).__name__, tuple(sorted(vars(value).items())))
    return value


def test_the_same_calls_write_byte_identical_files(tmp_path: Path, fixed_clocks: None) -> None:
    failing = {ours.CloseRequest(**intents()[1]).entry_id}
    ref_answers = run_script(ref, tmp_path / "ref", failing)
    our_answers = run_script(ours, tmp_path / "ours", failing)

    assert [plain(a) for a in our_answers] == [plain(a) for a in ref_answers]
    ref_files, our_files = files_of(tmp_path / "ref"), files_of(tmp_path / "ours")
    assert set(our_files) == set(ref_files)
    for name, data in ref_files.items():
        assert our_files[name] == data, name
    # Exactly the 13 reference keys, canonical JSON and a trailing newline.
    for data in our_files.values():
        record = json.loads(data)
        assert set(record) == set(ref._RECORD_KEYS)
        assert data == ref._json_bytes(record) + b"\n"


def test_request_identity_and_digest_match_the_reference() -> None:
    for intent in intents():
        mine, theirs = ours.CloseRequest(**intent), ref.CloseRequest(**intent)
        assert mine.entry_id == theirs.entry_id
        assert mine.intent() == theirs.intent()
        assert mine.intent_digest == theirs.intent_digest
        assert mine.detached_copy() == mine
        assert mine.detached_copy().result is not mine.result


BAD_REQUESTS: list[dict[str, Any]] = [
    {"run_id": "", "transaction_id": "t", "action": "complete", "result": {}},
    {"run_id": "r/../x", "transaction_id": "t", "action": "complete", "result": {}},
    {"run_id": "r", "transaction_id": "t" * 201, "action": "complete", "result": {}},
    {"run_id": "r", "transaction_id": "t", "action": "close", "result": {}},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": []},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {"a": float("nan")}},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {"a": 2**63}},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {"a": "x" * 4001}},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {"": 1}},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {"a": (1,)}},
    {"run_id": "r", "transaction_id": "t", "action": "complete",
     "result": {"a": list(range(201))}},
    {"run_id": "r", "transaction_id": "t", "action": "complete",
     "result": {"a": [[[[[[[[[1]]]]]]]]]}},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {}, "error": "e"},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {}, "reopen": True},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {}, "reopen": 1},
    {"run_id": "r", "transaction_id": "t", "action": "fail", "result": {}},
    {"run_id": "r", "transaction_id": "t", "action": "fail", "result": {}, "error": " \n "},
    {"run_id": "r", "transaction_id": "t", "action": "fail", "result": {}, "error": 3},
    {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {}, "version": "2"},
    {"run_id": "r", "transaction_id": "t", "action": "complete",
     "result": {f"k{i}": "v" * 400 for i in range(180)}},
]


@pytest.mark.parametrize("fields", BAD_REQUESTS, ids=range(len(BAD_REQUESTS)))
def test_invalid_requests_raise_the_reference_type_and_message(fields: dict[str, Any]) -> None:
    with pytest.raises(ref.InvalidCloseRequestError) as theirs:
        ref.CloseRequest(**fields)
    with pytest.raises(ours.InvalidCloseRequestError) as mine:
        ours.CloseRequest(**fields)
    assert str(mine.value) == str(theirs.value)
    assert mine.value.rules, "the broken rule is named"
    assert isinstance(mine.value, ours.CloseOutboxError)


def test_replay_rejects_a_bad_limit_like_the_reference(tmp_path: Path) -> None:
    outbox = ours.CloseOutbox(state_dir=tmp_path)
    for limit in (0, 1001, True, 1.0, "10"):
        with pytest.raises(ValueError, match="limit must be an integer between 1 and 1000"):
            outbox.replay(lambda request: None, limit=limit)  # type: ignore[arg-type]


def test_enqueue_refuses_what_is_not_a_request(tmp_path: Path) -> None:
    outbox = ours.CloseOutbox(state_dir=tmp_path)
    with pytest.raises(ours.InvalidCloseRequestError, match="request must be a CloseRequest"):
        outbox.enqueue(ref.CloseRequest(**intents()[0]))  # type: ignore[arg-type]
    assert outbox.pending_count() == 0


@pytest.fixture
def state_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name in ("REIN_AHARNESS_STATE_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield tmp_path


def test_default_state_directory_follows_the_reference(
    state_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ours.CloseOutbox().state_dir == ref.CloseOutbox().state_dir
    assert ours.CloseOutbox().state_dir == state_env / "home" / ".local" / "state" / "rein-aharness"
    monkeypatch.setenv("XDG_STATE_HOME", str(state_env / "xdg"))
    assert ours.CloseOutbox().state_dir == ref.CloseOutbox().state_dir == (
        state_env / "xdg" / "rein-aharness"
    )
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", f"  {state_env / 'explicit'}  ")
    assert ours.CloseOutbox().state_dir == ref.CloseOutbox().state_dir == state_env / "explicit"
    assert (state_env / "explicit" / "close-outbox" / "pending").is_dir()


def test_lifecycles_continues_a_directory_written_by_the_reference(tmp_path: Path) -> None:
    theirs = ref.CloseOutbox(state_dir=tmp_path)
    requests = [ref.CloseRequest(**intent) for intent in intents()]
    for request in requests:
        theirs.enqueue(request)
    failing = {requests[1].entry_id}
    theirs.replay(failing_for(failing), limit=3)  # two delivered, one failed
    (theirs.pending_dir / "not-a-record.json").write_text("{truncated")
    theirs.replay(lambda request: None, limit=1)  # quarantines "ab..."? only the first name

    mine = ours.CloseOutbox(state_dir=tmp_path)
    assert mine.pending_count() == theirs.pending_count()
    for intent, request in zip(intents(), requests, strict=True):
        receipt = mine.enqueue(ours.CloseRequest(**intent))
        state = "delivered" if (theirs.delivered_dir / f"{request.entry_id}.json").exists() else (
            "pending"
        )
        assert (receipt.entry_id, receipt.created, receipt.state) == (
            request.entry_id, False, state
        )
    with pytest.raises(ours.OutboxConflictError):
        mine.enqueue(ours.CloseRequest(**{**intents()[0], "result": {"other": 1}}))

    delivered: list[str] = []
    report = mine.replay(lambda request: delivered.append(request.entry_id))
    assert report.remaining == 0 and mine.pending_count() == 0
    assert set(delivered) | {
        p.stem for p in theirs.delivered_dir.iterdir()
    } >= {request.entry_id for request in requests}
    # The reference reads back everything lifecycles wrote.
    for request in requests:
        assert theirs.enqueue(request).state == "delivered"
    assert theirs.replay(lambda request: None).remaining == 0


def test_the_reference_continues_a_directory_written_by_lifecycles(tmp_path: Path) -> None:
    mine = ours.CloseOutbox(state_dir=tmp_path)
    requests = sorted(
        (ours.CloseRequest(**intent) for intent in intents()), key=lambda r: r.entry_id
    )
    for request in requests:
        mine.enqueue(request)
    failing = {requests[0].entry_id}  # replay takes entries in name order
    report = mine.replay(failing_for(failing), limit=2)
    assert (report.attempted, report.failed) == (2, 1)

    theirs = ref.CloseOutbox(state_dir=tmp_path)
    assert theirs.pending_count() == mine.pending_count() == 3
    failed_record = json.loads((theirs.pending_dir / f"{requests[0].entry_id}.json").read_text())
    assert failed_record["attempts"] == 1
    assert failed_record["last_error"] == "ConnectionError: close delivery failed"
    for intent in intents():
        receipt = theirs.enqueue(ref.CloseRequest(**intent))
        assert receipt.created is False
    seen: list[str] = []
    again = theirs.replay(lambda request: seen.append(request.entry_id))
    assert again.delivered == 3 and again.remaining == 0
    assert requests[0].entry_id in seen
    again_record = json.loads((theirs.delivered_dir / f"{requests[0].entry_id}.json").read_text())
    assert again_record["attempts"] == 2
    # and back again: lifecycles sees the reference's deliveries
    for request in requests:
        assert mine.enqueue(request) == ours.EnqueueReceipt(request.entry_id, False, "delivered")


def test_quarantine_is_shared_in_both_directions(tmp_path: Path) -> None:
    theirs = ref.CloseOutbox(state_dir=tmp_path / "a")
    poisoned = ref.CloseRequest(**intents()[0])
    (theirs.pending_dir / f"{poisoned.entry_id}.json").write_text('{"version": "1"}')
    assert theirs.replay(lambda request: None).quarantined == 1
    mine = ours.CloseOutbox(state_dir=tmp_path / "a")
    with pytest.raises(ours.OutboxCorruptError, match="has quarantined outbox material"):
        mine.enqueue(ours.CloseRequest(**intents()[0]))

    mine_b = ours.CloseOutbox(state_dir=tmp_path / "b")
    (mine_b.pending_dir / f"{poisoned.entry_id}.json").write_text("not json")
    assert mine_b.replay(lambda request: None).quarantined == 1
    names = quarantine_of(tmp_path / "b")
    assert len(names) == 2 and any(n.endswith(".error.json") for n in names)
    reason = json.loads(
        next((mine_b.quarantine_dir).glob("*.error.json")).read_text()
    )
    assert set(reason) == {"entry_id", "quarantined_at", "reason"}
    assert reason["entry_id"] == poisoned.entry_id
    assert reason["reason"].startswith(
        f"cannot decode outbox record {poisoned.entry_id}.json: JSONDecodeError"
    )
    theirs_b = ref.CloseOutbox(state_dir=tmp_path / "b")
    with pytest.raises(ref.OutboxCorruptError, match="has quarantined outbox material"):
        theirs_b.enqueue(poisoned)


def test_corrupt_records_are_reported_with_the_reference_messages(tmp_path: Path) -> None:
    request = ours.CloseRequest(**intents()[0])
    good = json.loads(
        ref._json_bytes({**request.intent(), "state": "pending", "created_at": FIXED_NOW,
                         "attempts": 0, "last_attempt_at": None, "last_error": None})
    )
    damaged: list[Any] = [
        {**good, "attempts": -1},
        {**good, "created_at": "2026-01-02T03:04:05"},
        {**good, "entry_id": "0" * 32},
        {**good, "extra": 1},
        {**good, "state": "delivered"},
        {**good, "last_error": "x" * 1001},
        {**good, "run_id": "a b"},
        [good],
    ]
    for index, value in enumerate(damaged):
        state_dir = tmp_path / str(index)
        theirs, mine = ref.CloseOutbox(state_dir=state_dir), ours.CloseOutbox(state_dir=state_dir)
        (mine.pending_dir / f"{request.entry_id}.json").write_text(json.dumps(value))
        with pytest.raises(ref.OutboxCorruptError) as their_error:
            theirs.enqueue(ref.CloseRequest(**intents()[0]))
        with pytest.raises(ours.OutboxCorruptError) as my_error:
            mine.enqueue(request)
        assert str(my_error.value) == str(their_error.value), value
        assert my_error.value.rules
