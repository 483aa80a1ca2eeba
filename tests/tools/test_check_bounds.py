"""`lifecycles check --bound NAME=LOW..HIGH` and `--workers N --records M`: bounds
widened from the command line.

An exploration declares the bounds it lets callers change (``tunable``) and how to
build itself for others (``rebound``); the monitor's is ``max_failures``. A bound that
does not parse, that no checked lifecycle declares, or that the exploration refuses is
``bound_invalid`` (exit 2, nothing checked); so are workers or records outside what
the exploration's ``Workers`` declares, or asked of lifecycles that declare none.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from lifecycles._checker import run_check
from lifecycles._checker_report import EXIT_OK, EXIT_UNAVAILABLE
from lifecycles.machines._exhaustive import explore
from lifecycles.machines.monitor.inputs import EXPLORATION


def check(*bounds: str, names: tuple[str, ...] = ("monitor",), workers: int | None = None,
          records: int | None = None) -> tuple[int, dict]:
    out, err = io.StringIO(), io.StringIO()
    code = run_check(names, as_json=True, out=out, err=err, bounds=bounds, workers=workers,
                     records=records)
    return code, json.loads(out.getvalue())


def test_the_monitor_declares_max_failures() -> None:
    assert EXPLORATION.tunable == {"max_failures": (1, 3)}
    assert EXPLORATION.rebound is not None
    wider = EXPLORATION.rebound({"max_failures": (1, 5)})
    assert [r.max_failures for r in wider.initial()] == [1, 2, 3, 4, 5]
    assert wider.bounds.startswith("max_failures 1..5;")


def test_a_wider_bound_explores_more_states_and_passes() -> None:
    code, default = check()
    wider_code, wider = check("max_failures=1..5")
    assert (code, wider_code) == (EXIT_OK, EXIT_OK)
    (ours,), (theirs,) = default["lifecycles"], wider["lifecycles"]
    assert ours["states"] == explore(EXPLORATION).states
    assert theirs["states"] > ours["states"] and theirs["complete"]


@pytest.mark.parametrize("bound", [
    "max_failures=3", "max_failures=5..2", "max_failures=0..3", "max_failures=1..21",
    "unknown=1..2", "max-failures=1..2",
])
def test_a_bound_that_cannot_apply_is_refused(bound: str) -> None:
    code, outcome = check(bound)
    assert code == EXIT_UNAVAILABLE
    assert outcome["error"] == "bound_invalid"


def test_a_bound_leaves_the_lifecycles_that_do_not_declare_it_alone() -> None:
    code, outcome = check("max_failures=1..4", names=("monitor", "outbox"))
    assert code == EXIT_OK
    states = {entry["name"]: entry["states"] for entry in outcome["lifecycles"]}
    assert states["outbox"] == check(names=("outbox",))[1]["lifecycles"][0]["states"]


@pytest.mark.parametrize("searched", ["one record", "interleaved workers"])
def test_a_long_search_reports_its_progress(monkeypatch: pytest.MonkeyPatch,
                                            searched: str) -> None:
    from lifecycles.machines import _exploration as search
    from lifecycles.machines._interleaving import explore_workers

    monkeypatch.setattr(search, "PROGRESS_AFTER", 0.0)  # every search is "long" here
    heard: list[tuple[int, int]] = []
    if searched == "one record":
        result: Any = explore(
            EXPLORATION, progress=lambda so_far: heard.append((so_far.states, so_far.edges)))
        done = (result.states, result.edges)
    else:
        result = explore_workers(
            EXPLORATION, progress=lambda so_far: heard.append((so_far.states, so_far.steps)))
        done = (result.states, result.steps)
    assert heard and heard[0][0] >= 1
    assert all(states <= done[0] and moves <= done[1] for states, moves in heard)
    assert heard == sorted(heard)  # figures so far, never going back


@pytest.mark.parametrize(("name", "line"), [
    ("outbox", "... outbox:"), ("monitor", "... monitor, 2 workers x 1 record:")])
def test_the_check_command_prints_progress_on_stderr_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, line: str,
) -> None:
    from lifecycles.machines import _exploration as search

    monkeypatch.setattr(search, "PROGRESS_AFTER", 0.0)
    assert run_check((name,)) == EXIT_OK
    captured = capsys.readouterr()
    assert line in captured.err and line not in captured.out


def test_a_declared_bound_without_a_rebound_is_refused() -> None:
    import attrs

    from lifecycles._checker import rebound
    from lifecycles._checker_report import Target
    from lifecycles._loading import CheckerError
    from lifecycles.machines.monitor import MONITOR

    stuck = attrs.evolve(EXPLORATION, rebound=None)
    with pytest.raises(CheckerError) as refused:
        rebound([Target(MONITOR, stuck, None)], ["max_failures=1..4"])
    assert refused.value.error == "bound_invalid"


def test_the_monitor_interleaves_two_workers_on_one_record_by_default() -> None:
    code, outcome = check()
    assert code == EXIT_OK
    (monitor,) = outcome["lifecycles"]
    interleaving = monitor["interleaving"]
    assert (interleaving["workers"], interleaving["records"]) == (2, 1)
    assert interleaving["complete"] and interleaving["finding"] is None


def test_more_workers_and_records_explore_more_worlds() -> None:
    _, default = check()
    code, wider = check(workers=3, records=1)  # 3 x 2 (with batches) is the slow end
    assert code == EXIT_OK
    ours, theirs = default["lifecycles"][0]["interleaving"], wider["lifecycles"][0]["interleaving"]
    assert (theirs["workers"], theirs["records"]) == (3, 1)
    assert theirs["states"] > ours["states"] and theirs["complete"]


@pytest.mark.parametrize(("workers", "records", "names"), [
    (0, None, ("monitor",)), (4, None, ("monitor",)), (None, 3, ("monitor",)),
    (2, None, ("outbox",)),
])
def test_workers_or_records_that_cannot_apply_are_refused(
    workers: int | None, records: int | None, names: tuple[str, ...]
) -> None:
    code, outcome = check(names=names, workers=workers, records=records)
    assert code == EXIT_UNAVAILABLE
    assert outcome["error"] == "bound_invalid"
    assert "--workers/--records" in outcome["message"]
