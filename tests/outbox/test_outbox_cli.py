"""`lifecycles outbox status`: counts, oldest pending, untrusted files, quarantine reasons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycles.cli import main
from lifecycles.outbox.facade import CloseOutbox, CloseRequest


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def request(i: int) -> CloseRequest:
    return CloseRequest(f"run-{i}", "tx", "complete", {"i": i})


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_the_command_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "outbox" in capsys.readouterr().out


def test_status_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    for i in range(3):
        outbox.enqueue(request(i))
    first = request(0).entry_id
    outbox.replay(lambda item: None if item.entry_id == first else 1 / 0)
    bad = outbox.pending_dir / f"{request(9).entry_id}.json"
    bad.write_text("{")  # untrusted: reported, not moved
    quarantine_me = outbox.pending_dir / "0000.json"
    quarantine_me.write_text("[]")
    outbox.replay(lambda item: None, limit=1)  # "0000.json" sorts first: quarantined
    before = tree(tmp_path)

    code, out, err = run(capsys, "outbox", "status", "--state-dir", str(tmp_path), "--json")
    assert (code, err) == (1, ""), "untrusted material present: exit 1"
    status = json.loads(out)
    assert status["status"] == "untrusted"
    assert status["counts"] == {"pending": 3, "delivered": 1, "quarantined": 1}
    oldest = status["oldest_pending"]
    assert oldest["entry_id"] in {request(1).entry_id, request(2).entry_id}
    assert oldest["attempts"] == 1
    assert oldest["last_error"] == "ZeroDivisionError: close delivery failed"
    assert status["untrusted"] == [{
        "directory": "pending", "file": bad.name, "rules": ["record_decodes"],
        "reason": f"cannot decode outbox record {bad.name}: JSONDecodeError",
    }]
    (item,) = status["quarantine"]
    assert item["entry_id"] == "0000" and item["file"].startswith("0000.")
    assert item["reason"].startswith("outbox record must be an object")
    assert item["quarantined_at"]
    assert tree(tmp_path) == before, "status reads only"


def test_status_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    outbox.enqueue(request(1))
    code, out, _ = run(capsys, "outbox", "status", "--state-dir", str(tmp_path))
    assert code == 0
    assert "pending     1" in out and "delivered   0" in out and "quarantined 0" in out
    assert f"oldest pending: {request(1).entry_id}" in out and "attempts 0" in out


def test_an_empty_outbox(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    CloseOutbox(state_dir=tmp_path)
    code, out, _ = run(capsys, "outbox", "status", "--state-dir", str(tmp_path), "--json")
    assert code == 0
    assert json.loads(out)["oldest_pending"] is None


def test_no_outbox_exits_4_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "outbox", "status", "--state-dir", str(tmp_path / "none"),
                         "--json")
    assert code == 4
    assert json.loads(out)["error"] == "no_outbox" and "no outbox under" in err
    assert not (tmp_path / "none").exists()


def test_a_missing_status_directory_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    outbox.delivered_dir.rmdir()
    code, _, err = run(capsys, "outbox", "status", "--state-dir", str(tmp_path))
    assert code == 4 and "delivered does not exist" in err
    assert not outbox.delivered_dir.exists()


@pytest.mark.parametrize("planted", ["close-outbox", "close-outbox/pending", "close-outbox/.lock"])
def test_a_planted_link_exits_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    state = tmp_path / "state"
    CloseOutbox(state_dir=state)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = state / planted
    if path.is_dir():
        os.rename(path, tmp_path / "moved-away")
    else:
        path.unlink()
    os.symlink(elsewhere, path)
    code, out, err = run(capsys, "outbox", "status", "--state-dir", str(state), "--json")
    assert code == 5
    assert json.loads(out)["error"] == "unsafe_path" and "symbolic link" in err
    assert os.listdir(elsewhere) == []


def test_the_default_state_directory_is_the_outboxs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(tmp_path))
    CloseOutbox().enqueue(request(3))
    code, out, _ = run(capsys, "outbox", "status", "--json")
    assert code == 0 and json.loads(out)["counts"]["pending"] == 1


@pytest.mark.parametrize("argv", [["outbox", "frobnicate"], ["outbox", "status", "--bogus"]])
def test_usage_errors_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    # One prefix, then the command the error is about: not `lifecycles: lifecycles ...`.
    assert err.startswith("lifecycles: ") and "--help" in err
    assert "lifecycles: lifecycles" not in err and err.count("lifecycles:") == 1
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 2 and json.loads(out)["error"] == "usage"


def test_status_creates_nothing_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    outbox.enqueue(request(1))
    lock = tmp_path / "close-outbox" / ".lock"
    lock.unlink()  # as the reference leaves a directory no operation has run on
    pending = tmp_path / "close-outbox" / "pending"
    pending.chmod(0o755)  # a writer tightens it to 0700; a reader must not
    leftover = pending / f".{request(2).entry_id}.json.0123456789abcdef.tmp"
    leftover.write_text("{")  # a killed writer's temporary file: a writer removes it
    modes = {p: p.stat().st_mode for p in tmp_path.rglob("*")}
    before = tree(tmp_path)
    code, out, err = run(capsys, "outbox", "status", "--state-dir", str(tmp_path), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["counts"]["pending"] == 1
    assert not lock.exists()
    assert tree(tmp_path) == before
    assert {p: p.stat().st_mode for p in tmp_path.rglob("*")} == modes


def test_quarantined_items_alone_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    (outbox.pending_dir / "0000.json").write_text("[]")
    outbox.replay(lambda item: None)
    code, out, _ = run(capsys, "outbox", "status", "--state-dir", str(tmp_path))
    assert code == 1
    assert out.splitlines()[0] == "status: untrusted" and "quarantine:" in out


def test_a_lock_that_is_a_directory_exits_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    CloseOutbox(state_dir=tmp_path)
    lock = tmp_path / "close-outbox" / ".lock"
    lock.unlink()
    lock.mkdir()
    code, out, err = run(capsys, "outbox", "status", "--state-dir", str(tmp_path), "--json")
    assert code == 5 and json.loads(out)["error"] == "unsafe_path"
    assert len(err.splitlines()) == 1 and "not a regular file" in err


def test_python_dash_m_runs_it(tmp_path: Path) -> None:
    CloseOutbox(state_dir=tmp_path).enqueue(request(5))
    done = subprocess.run(
        [sys.executable, "-m", "lifecycles", "outbox", "status", "--state-dir", str(tmp_path),
         "--json"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["pending"] == 1


def test_a_directory_written_by_the_reference_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.reference import require_reference

    reference = require_reference("close_outbox")
    theirs = reference.CloseOutbox(state_dir=tmp_path)  # no operation yet: no .lock
    assert not theirs.lock_path.exists()
    code, out, _ = run(capsys, "outbox", "status", "--state-dir", str(tmp_path), "--json")
    assert code == 0 and json.loads(out)["counts"] == {
        "pending": 0, "delivered": 0, "quarantined": 0
    }
    theirs.enqueue(reference.CloseRequest("run-1", "tx", "fail", {}, error="boom"))
    code, out, _ = run(capsys, "outbox", "status", "--state-dir", str(tmp_path), "--json")
    assert json.loads(out)["oldest_pending"]["run_id"] == "run-1"
