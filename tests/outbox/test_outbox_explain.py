"""`lifecycles outbox explain`: one entry, its rows and guards now, its rules; read-only."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from lifecycles.cli import main
from lifecycles.invariants import canonical_json
from lifecycles.machines.outbox import OUTBOX
from lifecycles.outbox.facade import CloseOutbox, CloseRequest

NOW = "2026-02-01T00:00:00+00:00"


def request(i: int) -> CloseRequest:
    return CloseRequest(f"run-{i}", "tx", "complete", {"i": i})


def tree(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every entry under ``root``: its bytes (files) and its mode."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None,
                                       p.lstat().st_mode) for p in sorted(root.rglob("*"))}


def explain(capsys: pytest.CaptureFixture[str], state: Path, *argv: str
            ) -> tuple[int, str, str]:
    """Run explain; nothing under the state directory may change."""
    before = tree(state)
    code = main(["outbox", "explain", "--state-dir", str(state), "--now", NOW, *argv])
    captured = capsys.readouterr()
    assert tree(state) == before, "explain must only read"
    return code, captured.out, captured.err


def explained(capsys: pytest.CaptureFixture[str], state: Path, entry_id: str
              ) -> tuple[int, dict[str, Any]]:
    code, out, err = explain(capsys, state, "--json", entry_id)
    assert err == ""
    return code, json.loads(out)


def verdicts(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {verdict["trigger"]: verdict for verdict in document["verdicts"]}


def rewrite(path: Path, **changes: Any) -> None:
    """Plant new values in a record file, bypassing every check (mode kept)."""
    values = json.loads(path.read_bytes())
    values.update(changes)
    path.write_bytes(canonical_json(values) + b"\n")


@pytest.fixture
def outbox(tmp_path: Path) -> CloseOutbox:
    outbox = CloseOutbox(state_dir=tmp_path)
    for i in range(3):
        outbox.enqueue(request(i))
    delivered = request(0).entry_id
    outbox.replay(lambda item: None if item.entry_id == delivered else 1 / 0)
    return outbox  # run-0 delivered; run-1, run-2 pending, their attempt answered by a failure


def test_a_pending_entry_after_a_failed_attempt(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = explained(capsys, tmp_path, request(1).entry_id)
    assert code == 0 and document["status"] == "pending" and document["broken"] == []
    assert document["where"].endswith(f"pending/{request(1).entry_id}.json")
    found = verdicts(document)
    assert (found["attempt"]["dest"], found["enqueue"]["dest"]) == ("pending", "pending")
    assert found["deliver"]["guard"] == "attempt_recorded"
    assert found["deliver"]["refusal"] == "close_outbox.not_attempted"
    assert "close delivery failed" in found["fail_delivery"]["who"]


def test_a_pending_entry_with_an_unanswered_attempt_can_be_delivered(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite(outbox.pending_dir / f"{request(2).entry_id}.json", last_error=None)
    code, document = explained(capsys, tmp_path, request(2).entry_id)
    assert code == 0
    (deliver,) = [row for row in document["rows"] if row["trigger"] == "deliver"]
    assert deliver["fires"] and deliver["guards"][0]["value"] is True
    assert verdicts(document)["deliver"]["dest"] == "delivered"


def test_a_delivered_entry_is_final(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = explained(capsys, tmp_path, request(0).entry_id)
    assert code == 0 and document["status"] == "delivered" and document["final"]
    assert [(row["trigger"], row["dest"]) for row in document["rows"]] == [
        ("enqueue", "delivered")]  # the same intent again changes nothing


def test_a_quarantined_entry_has_no_row_open_and_shows_its_reason(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = request(1).entry_id
    source = outbox.pending_dir / f"{entry}.json"
    values = json.loads(source.read_bytes())
    values.update(state="quarantined", last_error="set aside by hand")
    tag = "0123456789ab"
    (outbox.quarantine_dir / f"{entry}.{tag}.error.json").write_bytes(canonical_json(
        {"entry_id": entry, "quarantined_at": NOW, "reason": "set aside by hand"}) + b"\n")
    (outbox.quarantine_dir / f"{entry}.{tag}.json").write_bytes(canonical_json(values) + b"\n")
    os.chmod(outbox.quarantine_dir / f"{entry}.{tag}.json", 0o600)
    source.unlink()
    code, document = explained(capsys, tmp_path, entry)
    assert code == 0 and document["status"] == "quarantined" and document["final"]
    assert document["rows"] == [] and all(v["row"] is None for v in document["verdicts"])
    assert document["notes"] == ["quarantine reason: set aside by hand"]
    _, out, _ = explain(capsys, tmp_path, entry)
    assert "rows open from quarantined (numbered as on the auditor page): 0" in out


def test_material_that_is_no_record_is_explained_with_the_stores_finding(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (outbox.pending_dir / "0000.json").write_text("[]")
    outbox.replay(lambda item: None, limit=1)  # "0000.json" sorts first: quarantined
    code, document = explained(capsys, tmp_path, "0000")
    assert code == 1 and document["status"] == "quarantined"
    assert document["store_findings"] == ["record_is_object: outbox record must be an object"]
    assert document["rows"] == [] and document["verdicts"] == []


def test_an_entry_breaking_an_invariant_is_explained_with_the_rule_names(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite(outbox.pending_dir / f"{request(2).entry_id}.json", error="planted")
    code, document = explained(capsys, tmp_path, request(2).entry_id)
    assert code == 1 and document["status"] == "pending"
    assert document["broken"] == ["complete_carries_no_error_or_reopen"]
    assert document["store_findings"] == [
        "complete_carries_no_error_or_reopen: outbox record breaks "
        "complete_carries_no_error_or_reopen"]
    assert verdicts(document)["attempt"]["dest"] == "pending"
    code, out, _ = explain(capsys, tmp_path, request(2).entry_id)
    assert code == 1 and "BROKEN complete_carries_no_error_or_reopen" in out
    assert "the store refuses it: complete_carries_no_error_or_reopen" in out


def test_an_unknown_entry_is_no_entry_exit_3(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = explain(capsys, tmp_path, "f" * 32)
    assert (code, out) == (3, "")
    assert err.startswith(f"lifecycles: no entry {'f' * 32!r} in the outbox under")
    code, out, _ = explain(capsys, tmp_path, "--json", "f" * 32)
    assert code == 3 and json.loads(out)["error"] == "no_entry"


def test_no_outbox_exits_4_and_a_bad_time_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["outbox", "explain", "--state-dir", str(tmp_path / "none"), "--json", "x"])
    assert code == 4 and json.loads(capsys.readouterr().out)["error"] == "no_outbox"
    assert not (tmp_path / "none").exists()
    CloseOutbox(state_dir=tmp_path)
    code = main(["outbox", "explain", "--state-dir", str(tmp_path), "--now", "yesterday",
                 "--json", "x"])
    assert code == 2 and json.loads(capsys.readouterr().out)["error"] == "time_invalid"


@pytest.mark.parametrize(("index", "status"), [(1, "pending"), (0, "delivered")])
def test_mermaid_draws_the_status_and_the_rows_leaving_it_and_nothing_else(
    outbox: CloseOutbox, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    index: int, status: str,
) -> None:
    code, out, _ = explain(capsys, tmp_path, "--mermaid", request(index).entry_id)
    assert code == 0
    edges = {(match[1], match[2], label)
             for match in re.finditer(r"^  (\S+) --> (\S+): (.*)$", out, re.MULTILINE)
             for label in match[3].split("<br/>")}
    states = set(re.findall(r'^  state "\w+" as (\w+)$', out, re.MULTILINE))
    leaving = [row for row in OUTBOX.rows if row.source == status]
    assert edges == {(status, row.dest, row.label) for row in leaving}
    assert states == {status} | {row.dest for row in leaving}
    assert "[*]" not in out
