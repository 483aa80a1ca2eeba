"""The third lifecycle (examples/review) gets check, stateful tests and diagrams for free."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from support.stateful import on_memory_and_sqlite

from lifecycles._checker import run_check
from lifecycles._loading import import_target
from lifecycles.diagrams import generate
from lifecycles.machines._declaration import TransitionRefused

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "review" / "lifecycle.py"
import_target(str(EXAMPLE))  # the example is not installed: put its root on the path

from examples.review.lifecycle import (  # noqa: E402
    REVIEW,
    ReviewInputs,
    new_document,
)


def test_lifecycles_check_explores_the_example_completely(tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_check((), (str(EXAMPLE),), snapshot_path=tmp_path / "s.json",
                     trace_dir=tmp_path, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "review (table v" in text and "(complete)" in text and "statuses reached: 6/6" in text
    assert "never fired" not in text


def test_refusals_carry_the_guard_code_and_change_nothing() -> None:
    document = new_document("doc-1", now=0.0, deadline_seconds=100.0)
    claimed = REVIEW.fire("claim", document, ReviewInputs(now=1.0, reviewer="r-a",
                                                          lease_token="t-1"))
    cases = [
        ("approve", ReviewInputs(now=2.0, reviewer="r-b", lease_token="t-1"),
         "document_review.lease_lost"),
        ("approve", ReviewInputs(now=301.0, reviewer="r-a", lease_token="t-1"),
         "document_review.lease_expired"),
        ("reject", ReviewInputs(now=2.0, reviewer="r-a", lease_token="t-1", reason="No!"),
         "document_review.reason_invalid"),
        ("resubmit", ReviewInputs(now=2.0, revision=2), "document_review.not_allowed"),
    ]
    for trigger, inputs, code in cases:
        with pytest.raises(TransitionRefused) as refused:
            REVIEW.fire(trigger, claimed, inputs)
        assert refused.value.code == code, trigger
    late = REVIEW.fire("expire", document, ReviewInputs(now=100.0))
    assert (late.status, late.reason) == ("expired", "deadline_passed")
    with pytest.raises(TransitionRefused) as refused:
        REVIEW.fire("claim", document, ReviewInputs(now=100.0, reviewer="r-a", lease_token="t"))
    assert refused.value.code == "document_review.deadline_passed"


def test_diagrams_are_drawn_from_the_example_table() -> None:
    files = generate({"review": REVIEW}, None).files
    mermaid = files["review.mmd"].decode()
    for row in REVIEW.rows:
        assert row.trigger in mermaid
    assert "in_review" in files["review.md"].decode()


# On SQLite with the generic schema, derived from the record (no hand-written SQL).
TestReviewOnMemory, TestReviewOnSQLite = on_memory_and_sqlite(REVIEW, "review")
