"""The planted defects under examples/defects/: `lifecycles check --module FILE` finds
each one, with the shortest trace, and exits 1.

* reused_token.py: a claim that reuses the old lease token (a step invariant);
* trapped_status.py: a status no record ever leaves (the liveness check).
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
])
def test_each_planted_defect_is_found_with_a_trace(
    module: str, expected: list[str], tmp_path: Path
) -> None:
    done = check(module, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    for line in expected:
        assert line in done.stdout, done.stdout
