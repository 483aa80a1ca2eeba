"""The planted defects under examples/defects/: `lifecycles check --module FILE` finds
each one, with the shortest trace, and exits 1.

* reused_token.py: a claim that reuses the old lease token (a step invariant);
* trapped_status.py: a status no record ever leaves (the liveness check);
* late_completion.py: a completion that ignores the lease token (interleaved workers
  only: one record alone passes every other check).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check(module: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycles", "check", "--module", str(ROOT / module),
         "--trace-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize(("module", "expected"), [
    ("examples/defects/reused_token.py", [
        "FAIL StepViolation: jobs.state_invalid: claim_mints_a_new_lease_token",
        "1. claim: ", "2. fail: ", "3. claim: ",
    ]),
    ("examples/defects/trapped_status.py", [
        "FAIL 1 reachable states can never reach a final status",
        "1. claim: ", "2. fail: ", "3. claim: ", "4. fail: ",
    ]),
    ("examples/defects/late_completion.py", [
        "liveness: 7/7 states can reach a final status",
        "FAIL interleaving (superseded_completion): a completion from a superseded lease "
        "was accepted: worker-1 held job-1 under lease-1, but finish wrote over it when it "
        "was running under lease-2",
        "1. worker-1 claims at t+0s", "2. clock moves to t+60s",
        "3. worker-2 claims at t+60s: expire job-1 running -> idle, then claim job-1",
        "4. worker-1 completes job-1 ('finish') at t+60s under lease-1: finish accepted",
    ]),
])
def test_each_planted_defect_is_found_with_a_trace(
    module: str, expected: list[str], tmp_path: Path
) -> None:
    done = check(module, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    for line in expected:
        assert line in done.stdout, done.stdout


def test_the_late_completion_is_found_only_by_interleaving(tmp_path: Path) -> None:
    """Before the interleaving, the single-record search reports nothing wrong; the
    replay test written for the interleaving fails with the finding."""
    done = check("examples/defects/late_completion.py", tmp_path)
    single, _, interleaved = done.stdout.partition("interleaved workers:")
    assert "FAIL" not in single, single
    assert "FAIL interleaving" in interleaved
    replay = tmp_path / "test_replay_leased_jobs_late_completion_interleaved.py"
    assert f"replay: pytest {replay}" in done.stdout
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(replay)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 1, ran.stdout
    assert "InterleavingViolation" in ran.stdout and "superseded lease" in ran.stdout
