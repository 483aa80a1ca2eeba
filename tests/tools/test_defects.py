"""The planted defects under examples/defects/: `lifecycles check --module FILE` finds
each one, with the shortest trace, and exits 1.

* reused_token.py: a claim that reuses the old lease token (a step invariant);
* trapped_status.py: a status no record ever leaves (the liveness check);
* late_completion.py: a completion that ignores the lease token (interleaved workers
  only: one record alone passes every other check);
* unkeyed_refund.py: a provider call without an idempotency key (the external-effect
  check: the table is right, the refund is paid twice), and its keyed fix, which passes.
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
    ("examples/defects/unkeyed_refund.py", [
        "FAIL interleaving (external_effect): refund-1 is refunded after 2 pay calls that "
        "took effect (keyed by none): the rule 'refunded exactly when paid once' is broken",
        "3. worker-1 calls pay for refund-1; completes refund-1 ('paid') at t+30s under "
        "lease-1: refused (refunds.lease_lost)",
        "5. worker-1 calls pay for refund-1; completes refund-1 ('paid') at t+30s under "
        "lease-2: record_payment accepted -> refunded",
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


def test_the_refund_keyed_by_the_record_passes_the_external_effect_check(tmp_path: Path
                                                                         ) -> None:
    done = check("examples/defects/unkeyed_refund.py", tmp_path)
    keyed = done.stdout.partition("\nkeyed_refund (table")[2].partition("\nchecked ")[0]
    assert keyed, done.stdout
    assert "FAIL" not in keyed, keyed
    assert ("external effect pay (keyed by record): refunded exactly when paid once: all hold"
            in keyed)
    assert "FAILED ['unkeyed_refund']" in done.stdout


def test_a_call_keyed_by_the_lease_token_still_pays_twice() -> None:
    # A rescued lease has a new token: the provider sees a new call.
    import attrs

    from examples.defects.unkeyed_refund import EXPLORATION, _workers
    from lifecycles import explore_workers

    by_token = attrs.evolve(EXPLORATION, workers=_workers("token"))
    finding = explore_workers(by_token).finding
    assert finding is not None and finding.kind == "external_effect"
    assert "after 2 pay calls that took effect (keyed by token)" in finding.message
