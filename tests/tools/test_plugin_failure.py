"""A generated test reports a planted bug promptly, and the coverage report is honest.

The suite below is what a downstream project writes: a small lifecycle (document review,
from examples/review, built from the public API) with one planted bug, and the generated
test for it; no conftest, so the plugin's ``ci`` profile runs it. It runs in its own
pytest process, as a user's would. ``benchmarks/bench_plugin_failure.py`` times it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

PLANTED_SUITE = f'''
"""Document review with a planted bug: resubmit keeps the last round's decision."""

import attrs

from lifecycles._loading import import_target
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect
from lifecycles.stores._memory import MemoryStore
from lifecycles.testing import build_state_machine

import_target({str(ROOT / "examples" / "review" / "lifecycle.py")!r})

from examples.review import lifecycle as review  # noqa: E402
from examples.review.lifecycle_inputs import EXPLORATION  # noqa: E402


@effect("revision", "decision", "reason", "available_at", "updated_at")
def take_revision(r, i) -> Changes:
    """The planted bug: the decision of the last round is not cleared."""
    return {{"revision": r.revision + 1, "reason": None, "available_at": i.now,
            "updated_at": i.now}}


REVIEW = review.REVIEW
PLANTED = Lifecycle(
    module=__name__,
    name="review", statuses=review.ReviewStatus, table=review.TABLE,
    initial=REVIEW.initial, final=REVIEW.final, creation=REVIEW.creation,
    guards=REVIEW.guards.values(),
    effects=[*(e for e in REVIEW.effects.values() if e.name != "take_revision"),
             take_revision],
    invariants=REVIEW.invariants, record_type=review.ReviewRecord, key_field="doc_id",
    not_allowed_code=REVIEW.not_allowed_code, lease=REVIEW.lease,
)
TestPlanted = build_state_machine(
    attrs.evolve(EXPLORATION, lifecycle=PLANTED), lambda: MemoryStore(PLANTED),
    name="planted review",
).TestCase
'''

RESUBMIT = "resubmit [before_deadline, next_revision, revisions_remain]"


def test_the_planted_bug_is_reported_and_its_row_counts_as_exercised(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)  # what a suite gets by default
    pytester.makepyfile(test_planted=PLANTED_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                           "--lifecycles-require-coverage")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "StepFailed: planted review: resubmit raised InvariantViolation" in out, out
    assert "decision_matches_status" in out
    assert "steps of this example:" in out
    assert "Explanation:" not in out  # no explain phase

    summary = out[out.index("lifecycles transition coverage"):]
    row = re.search(rf"^ +\d+  changes_requested -> submitted: {re.escape(RESUBMIT)}(.*)$",
                    summary, flags=re.MULTILINE)
    assert row is not None, summary
    assert re.fullmatch(r"   <-- fired, failed \d+ times", row[1]), row[0]
    assert f"review: rows fired, failed: ['{RESUBMIT}']" in summary
    assert "never exercised" not in summary, summary
    assert "every row exercised" in summary
