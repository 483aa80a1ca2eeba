"""`lifecycles check`: exhaustive exploration, shortest traces, replays, the status snapshot."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Hashable
from pathlib import Path

import attrs
import pytest

from lifecycles._checker import check_one, run_check
from lifecycles._checker_report import Target
from lifecycles._loading import find_exploration, load_exploration
from lifecycles._registry import registered
from lifecycles.cli import main
from lifecycles.invariants._core import InvariantViolation
from lifecycles.invariants.monitor import RESPONSE_INVALID, MonitorRecord
from lifecycles.machines import _checks as checks
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import TraceMismatch, replay
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.inputs import EXPLORATION, abstraction

ROOT = Path(__file__).resolve().parents[2]
DEFECT_MODULE = ROOT / "examples" / "monitor_defect.py"


def check(tmp_path: Path, *names: str, modules: tuple[str, ...] = (),
          snapshot: Path | None = None, record: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    code = run_check(names, modules, snapshot_path=snapshot or tmp_path / "statuses.json",
                     record=record, trace_dir=tmp_path / "traces", out=out)
    return code, out.getvalue()


def test_every_registered_lifecycle_passes_and_prints_its_figures(tmp_path: Path) -> None:
    code, text = check(tmp_path)
    assert code == 0, text
    for name, lifecycle in registered().items():
        assert f"{name} (table v{lifecycle.table_version})" in text
        for row in lifecycle.rows:
            assert f"{row.source} -> {row.dest}: {row.label}" in text
    assert "states/s" in text and "(complete)" in text
    assert "all OK" in text and "never fired" not in text


def _no_timings(text: str) -> str:
    return re.sub(r"[\d,.]+ (s|states/s|edges/s)\b", "T", text)


def test_the_check_searched_in_two_processes_prints_what_the_serial_one_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LIFECYCLES_CHECK_PROCESSES=2 (the default on two CPUs) and =1: the same figures,
    coverage, liveness and findings, for passing lifecycles and for the planted defect
    (whose search is then serial)."""
    monkeypatch.setenv("LIFECYCLES_CHECK_PROCESSES", "1")
    serial = [check(tmp_path, "monitor", "outbox"),
              check(tmp_path, modules=(str(DEFECT_MODULE),))]
    monkeypatch.setenv("LIFECYCLES_CHECK_PROCESSES", "2")
    apart = [check(tmp_path, "monitor", "outbox"),
             check(tmp_path, modules=(str(DEFECT_MODULE),))]
    assert [(code, _no_timings(text)) for code, text in apart] == [
        (code, _no_timings(text)) for code, text in serial]
    assert serial[0][0] == 0 and serial[1][0] == 1


@pytest.mark.parametrize("setting", ["two", "0", "-1", "1.5"])
def test_a_processes_setting_that_is_no_count_is_refused_before_any_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.setenv("LIFECYCLES_CHECK_PROCESSES", setting)
    out, err = io.StringIO(), io.StringIO()
    code = run_check(("outbox",), trace_dir=tmp_path, out=out, err=err, as_json=True)
    assert code == 2
    assert json.loads(out.getvalue())["error"] == "bound_invalid"
    assert "LIFECYCLES_CHECK_PROCESSES" in err.getvalue()
    assert list(tmp_path.iterdir()) == []  # no search ran, no replay file written


def test_monitor_exploration_reaches_every_row_and_status_without_violation() -> None:
    result = explore(EXPLORATION)
    assert result.violation is None
    assert not result.truncated
    assert result.statuses == {status.value for status in MONITOR.statuses}
    assert result.coverage is not None and result.coverage.unfired_rows == []
    assert result.states > 100 and result.edges > result.states
    # The invariant-breaking answers were explored and became response_invalid failures.
    assert result.coverage.guard_outcomes["lease_is_live"][False] > 0


def _exact(r: MonitorRecord) -> Hashable:
    """Every field, times as exact offsets from the clock: a finer abstraction."""
    def offset(value: float | None) -> float | None:
        return None if value is None else value - r.updated_at

    values = attrs.asdict(r, recurse=False)
    for name in ("next_poll_at", "lease_expires_at", "receiver_next_attempt_at",
                 "receiver_lease_expires_at", "receiver_processed_at", "created_at"):
        values[name] = offset(values[name])
    del values["updated_at"]
    return tuple(values.items())


def test_the_monitor_abstraction_loses_no_state_a_finer_search_reaches() -> None:
    coarse = explore(EXPLORATION, keep_records=True)
    reached = {abstraction(record) for record in coarse.records}
    assert len(reached) == coarse.states
    fine = explore(attrs.evolve(EXPLORATION, abstraction=_exact, max_depth=5),
                   keep_records=True)
    assert fine.violation is None and fine.states > coarse.states
    missed = [record for record in fine.records if abstraction(record) not in reached]
    assert missed == []


def test_defect_put_back_fails_with_the_shortest_trace_and_a_replay_file(tmp_path: Path) -> None:
    code, text = check(tmp_path, modules=(str(DEFECT_MODULE),))
    assert code == 1
    assert "receiver_error_iff_receiver_waiting_or_failed" in text
    assert "1. claim: now=clock+0s" in text
    assert "2. observe_progress: 'retry_wait without error'" in text
    assert "3." not in text.split("shortest trace")[1]  # two steps: the shortest there is
    replay_file = tmp_path / "traces" / "test_replay_monitor.py"
    assert f"replay: pytest {replay_file}" in text

    # The replay file fails while the defect is there, from any directory.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(replay_file)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "receiver_error_iff_receiver_waiting_or_failed" in run.stdout


def test_the_same_trace_on_the_fixed_monitor_fails_the_attempt_as_response_invalid(
    tmp_path: Path,
) -> None:
    check(tmp_path, modules=(str(DEFECT_MODULE),))
    namespace: dict[str, object] = {}
    exec((tmp_path / "traces" / "test_replay_monitor.py").read_text(), namespace)
    steps = namespace["STEPS"]
    assert isinstance(steps, list)
    defective = load_exploration(f"{DEFECT_MODULE}:DEFECT_PUT_BACK")
    with pytest.raises(InvariantViolation) as raised:
        replay(defective, 0, steps)
    assert raised.value.rules == ("receiver_error_iff_receiver_waiting_or_failed",)
    fixed = replay(EXPLORATION, 0, steps)
    assert (fixed.status, fixed.last_error_code) == ("failed", RESPONSE_INVALID)
    assert fixed.receiver_status is None  # nothing of the bad answer was kept


def test_a_trace_that_no_longer_applies_says_so() -> None:
    with pytest.raises(TraceMismatch, match="no longer reads"):
        replay(EXPLORATION, 0, [("claim", 0, "now=clock+42s by someone-else")])


def test_a_row_never_reached_fails_the_check(tmp_path: Path) -> None:
    narrowed = attrs.evolve(
        EXPLORATION, moves=tuple(m for m in EXPLORATION.moves if m.name != "expire_lease")
    )
    out = io.StringIO()
    outcome = check_one(Target(MONITOR, narrowed, None), {}, tmp_path / "s.json",
                        tmp_path / "traces", out)
    assert not outcome.ok
    assert "rows never fired" in outcome.failures
    assert "FAIL rows never fired: ['expire_lease [lease_has_expired, another_failure_allowed]'" \
        in out.getvalue()


def test_a_cut_search_says_so_and_fails(tmp_path: Path) -> None:
    shallow = attrs.evolve(EXPLORATION, max_depth=2)
    result = explore(shallow)
    assert result.truncated and result.depth == 2 and result.cut_at == "max_depth=2"
    out = io.StringIO()
    outcome = check_one(Target(MONITOR, shallow, None), {}, tmp_path / "s.json",
                        tmp_path / "t", out)
    assert "search cut at its max_depth/max_states" in out.getvalue()
    assert "search_cut" in outcome.failures


def test_removing_a_recorded_status_fails_until_records_are_migrated(tmp_path: Path) -> None:
    snapshot = tmp_path / "lifecycle-statuses.json"
    code, text = check(tmp_path, "monitor", snapshot=snapshot, record=True)
    assert code == 0 and snapshot.is_file()
    recorded = json.loads(snapshot.read_text())["lifecycles"]["monitor"]
    assert recorded["statuses"] == [status.value for status in MONITOR.statuses]

    # An older table had an "archived" status; records stored then may still hold it.
    content = json.loads(snapshot.read_text())
    content["lifecycles"]["monitor"]["statuses"].append("archived")
    snapshot.write_text(json.dumps(content))
    code, text = check(tmp_path, "monitor", snapshot=snapshot)
    assert code == 1
    assert f"FAIL status_removed: 'archived' is recorded in {snapshot}" in text
    assert "FAILED ['monitor']" in text

    # After migrating the stored records, recording the statuses accepts the removal.
    code, text = check(tmp_path, "monitor", snapshot=snapshot, record=True)
    assert code == 0, text
    code, text = check(tmp_path, "monitor", snapshot=snapshot)
    assert code == 0 and "all still declared" in text


def test_the_committed_snapshot_matches_the_tables() -> None:
    code, text = check(ROOT, snapshot=ROOT / "lifecycle-statuses.json")
    assert code == 0, text
    assert "not recorded" not in text


def test_cli_check_by_name_and_unknown_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    snapshot = tmp_path / "s.json"
    snapshot.write_text('{"lifecycles": {}}')
    assert main(["check", "outbox", "--statuses", str(snapshot),
                 "--trace-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr()
    assert "outbox (table v" in printed.out and "monitor (table" not in printed.out
    assert printed.err == ""
    assert main(["check", "no-such-lifecycle", "--statuses", str(snapshot)]) == 2
    printed = capsys.readouterr()
    # The error is one line on stderr; stdout stays for the normal output.
    assert printed.out == ""
    assert printed.err.startswith("lifecycles check: unknown lifecycles ['no-such-lifecycle']")


def test_exploration_is_found_beside_the_table() -> None:
    found = find_exploration(MONITOR)
    assert found is not None
    exploration, spec = found
    assert exploration is EXPLORATION
    assert spec == "lifecycles.machines.monitor.inputs:EXPLORATION"
    assert load_exploration(spec) is EXPLORATION


def test_a_snapshot_path_that_does_not_exist_is_a_warning_not_a_silent_pass(
    tmp_path: Path,
) -> None:
    code, text = check(tmp_path, "outbox", snapshot=tmp_path / "nowhere.json")
    assert code == 0
    summary = text.splitlines()[-1]
    assert summary.endswith(f"all OK (WARNING: status snapshot {tmp_path / 'nowhere.json'} "
                            "does not exist; removed statuses cannot be detected — pass an "
                            "existing --statuses FILE or run --record-statuses)")


def test_the_monitor_passes_every_definition_check() -> None:
    for check in checks.DEFINITION_CHECKS:
        check(MONITOR)
