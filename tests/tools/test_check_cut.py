"""A search cut at its bounds proves nothing past them, so `lifecycles check` fails on it
(exit 1, ``search_cut`` / ``interleaving_cut``) unless the author accepts the cut with a
reason (``Exploration(incomplete_ok=...)`` or ``--incomplete-ok``), which the check and
the auditor page then show. Planted on the task lifecycle made for the framework's tests:
an abstraction that tells records apart by their exact times never closes, because a
holder may renew its lease for ever."""

from __future__ import annotations

import io
import json
from pathlib import Path

import attrs
import pytest
import support.tasks_inputs as tasks_inputs
from support.tasks import TASKS

from lifecycles._checker import check_one, run_check
from lifecycles._checker_report import EXIT_FAILED, EXIT_OK, Target
from lifecycles.diagrams import generate
from lifecycles.machines import explore

WRONG = attrs.evolve(tasks_inputs.EXPLORATION, abstraction=lambda record: record,
                     abstraction_doc="every field exactly (wrong: renewals never end)",
                     max_states=400, workers=None)


def checked(exploration: object, tmp_path: Path) -> tuple[list[str], str]:
    out = io.StringIO()
    outcome = check_one(Target(TASKS, exploration, None),  # type: ignore[arg-type]
                        {}, tmp_path / "statuses.json", tmp_path / "traces", out)
    return outcome.failures, out.getvalue()


def test_the_wrong_abstraction_is_cut_at_its_state_bound() -> None:
    result = explore(WRONG)
    assert result.truncated and result.cut_at == "max_states=400"
    assert result.states == 400 and result.violation is None


def test_a_cut_search_fails_naming_the_bound_and_the_way_out(tmp_path: Path) -> None:
    failures, text = checked(WRONG, tmp_path)
    assert failures == ["search_cut"]
    assert "FAIL search_cut: the search stopped at max_states=400 after 400 states" in text
    assert "incomplete_ok=" in text and "--incomplete-ok REASON" in text
    assert "liveness: not checked" in text
    assert text.rstrip().endswith("FAILED: search_cut")


def test_a_cut_the_author_accepts_passes_and_says_why(tmp_path: Path) -> None:
    accepted = attrs.evolve(WRONG, incomplete_ok="renewals are checked by the interleaving")
    failures, text = checked(accepted, tmp_path)
    assert failures == []
    assert ("search cut at max_states=400 after 400 states, accepted: renewals are checked "
            "by the interleaving") in text


def test_the_complete_search_is_not_cut(tmp_path: Path) -> None:
    failures, text = checked(attrs.evolve(tasks_inputs.EXPLORATION, workers=None), tmp_path)
    assert failures == [] and "_cut" not in text


def test_a_cut_interleaving_fails_unless_accepted(tmp_path: Path) -> None:
    workers = tasks_inputs.EXPLORATION.workers
    assert workers is not None
    narrow = attrs.evolve(tasks_inputs.EXPLORATION, workers=attrs.evolve(workers, max_states=5))
    failures, text = checked(narrow, tmp_path)
    assert failures == ["interleaving_cut"]
    assert "FAIL interleaving_cut: the interleaving stopped at max_states=5" in text
    failures, text = checked(attrs.evolve(narrow, incomplete_ok="a smoke test"), tmp_path)
    assert failures == []
    assert "interleaving cut at max_states=5 after 5 states, accepted: a smoke test" in text


def run(monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[int, dict[str, object]]:
    monkeypatch.setattr(tasks_inputs, "EXPLORATION", WRONG)
    out = io.StringIO()
    code = run_check(["tasks"], ["support.tasks"], as_json=True, out=out, err=io.StringIO(),
                     incomplete_ok=flags[0] if flags else None)
    return code, json.loads(out.getvalue())


def test_the_command_exits_1_on_a_cut_and_0_with_the_flag(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    code, document = run(monkeypatch)
    assert code == EXIT_FAILED and document["ok"] is False
    code, document = run(monkeypatch, "bounded on purpose")
    assert code == EXIT_OK and document["ok"] is True


def test_the_page_shows_whether_the_cut_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks_inputs, "EXPLORATION", WRONG)
    page = generate({"tasks": TASKS}, graphviz=None).files["tasks.md"].decode()
    assert "cut at max_states=400 (not accepted: `lifecycles check` fails)" in page
    monkeypatch.setattr(tasks_inputs, "EXPLORATION",
                        attrs.evolve(WRONG, incomplete_ok="bounded on purpose"))
    page = generate({"tasks": TASKS}, graphviz=None).files["tasks.md"].decode()
    assert "cut at max_states=400 (accepted as incomplete: bounded on purpose)" in page
