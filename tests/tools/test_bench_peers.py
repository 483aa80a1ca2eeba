"""bench_peers.py's checks: a drain that lost an item, ran one twice or left a system's
table otherwise is refused, and a target is judged only against what the run measured.

The peers (procrastinate, pgqueuer) come from the ``bench`` extra, which the tests never
need: these run the harness's own logic, and lifecycles' entry on the real server.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.monitor import TABLE
from support.postgres import connect_in, require_postgres, temporary_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_peers  # the benchmarks are scripts, not a package on the path
from peers.base import (
    Recorder,
    WorkerReport,
    handling_problems,
    item_ids,
    keys_problems,
    missing_modules,
)
from peers.monitor import DRAINED_AT, MONITOR, RunMany, RunOnce, open_monitor

BENCHMARKS = Path(bench_peers.__file__).parent
ITEMS = item_ids(6)


def report(index: int, calls: list[str], completions: list[str] | None = None) -> WorkerReport:
    """A worker's report: its handler calls, and (by default) each one's completion."""
    done = list(calls) if completions is None else completions
    return WorkerReport(index, list(calls), done, 1.0, 2.0, 0.1, [0.001] * len(done))


def test_a_clean_drain_split_between_workers_has_no_problem() -> None:
    assert handling_problems(ITEMS, [report(0, ITEMS[:4]), report(1, ITEMS[4:])]) == []


def test_an_item_never_handled_is_lost() -> None:
    problems = handling_problems(ITEMS, [report(0, ITEMS[:2]), report(1, ITEMS[3:])])
    assert problems == ["1 items never handled (lost): e2"]


def test_an_item_handled_by_two_workers_ran_twice() -> None:
    problems = handling_problems(ITEMS, [report(0, ITEMS[:4]), report(1, ITEMS[3:])])
    assert problems == ["1 items handled more than once: e3"]


def test_an_item_handled_twice_by_one_worker_ran_twice() -> None:
    problems = handling_problems(ITEMS, [report(0, [*ITEMS, "e5"])])
    assert problems == ["1 items handled more than once: e5"]


def test_a_handler_call_for_no_item_of_the_run_is_refused() -> None:
    problems = handling_problems(ITEMS, [report(0, [*ITEMS, "e99"])])
    assert problems == ["1 handler calls for no item of the run: e99"]


def test_a_handled_item_whose_completion_was_never_committed_is_refused() -> None:
    # What a worker that died with completions in memory would report.
    problems = handling_problems(ITEMS, [report(0, ITEMS, ITEMS[:5])])
    assert problems == [
        "1 items whose completions reported differ from their handler calls: e5"]


def test_many_problems_are_counted_and_the_first_shown() -> None:
    items = item_ids(20)
    problems = handling_problems(items, [report(0, items[:10])])
    assert problems == ["10 items never handled (lost): e10, e11, e12, e13, e14 (+5 more)"]


def test_rows_missing_repeated_or_foreign_are_each_named() -> None:
    assert keys_problems(["e0", "e1", "e1", "e7"], ["e0", "e1", "e2"]) == [
        "1 items have no row (lost): e2",
        "1 rows repeat an item",
        "1 rows for no item of the run: e7",
    ]
    assert keys_problems(["e2", "e0", "e1"], ["e0", "e1", "e2"]) == []


def test_a_missing_peer_module_is_named_and_an_installed_one_is_not() -> None:
    assert missing_modules(["json", "no_such_peer_module_here"]) == ["no_such_peer_module_here"]


def test_the_dsn_names_the_system_database_in_either_form() -> None:
    assert (bench_peers.dsn_for("postgresql://postgres@127.0.0.1:5432/test", "lc_x")
            == "postgresql://postgres@127.0.0.1:5432/lc_x")
    assert (bench_peers.dsn_for("host=db port=6543 user=me password=p@ss dbname=test"
                                " application_name=bench", "lc_x")
            == "postgresql://me:p%40ss@db:6543/lc_x?application_name=bench")


# --- the targets --------------------------------------------------------------------------

DRAIN = {"lifecycles run_once": 800.0, "pgqueuer batch=10": 5000.0,
         bench_peers.WORKER_BATCH: 6000.0}


def judged(target: bench_peers.Target, rates: dict[str, float],
           capsys: pytest.CaptureFixture[str], durable: bool = True) -> tuple[bool, str]:
    """The target's verdict on ``rates``, and the line it printed."""
    passed = bench_peers.judge([target], {target.section: rates},
                               {target.entry: durable}, set())
    return passed, capsys.readouterr().out.splitlines()[-1]


def test_a_target_met_passes(capsys: pytest.CaptureFixture[str]) -> None:
    target = bench_peers.Target(bench_peers.WORKER_BATCH, ("pgqueuer batch=10",), 1.0, "drain")
    passed, line = judged(target, DRAIN, capsys)
    assert passed and line.endswith("6000/s is 1.20x  PASS")


def test_a_target_missed_fails(capsys: pytest.CaptureFixture[str]) -> None:
    target = bench_peers.Target(bench_peers.WORKER_BATCH, ("pgqueuer batch=10",), 5.0, "drain")
    passed, line = judged(target, DRAIN, capsys)
    assert not passed and line.endswith("6000/s is 1.20x  FAIL")


def test_a_target_needing_durable_completions_fails_without_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = bench_peers.Target(bench_peers.WORKER_BATCH, ("pgqueuer batch=10",), 1.0,
                                "drain", durable=True)
    passed, line = judged(target, DRAIN, capsys, durable=False)
    assert not passed and line.endswith("FAIL")


def test_an_entry_this_build_lacks_fails(capsys: pytest.CaptureFixture[str]) -> None:
    target = bench_peers.Target(bench_peers.WORKER_ONE, ("lifecycles run_once",), 1.0, "drain")
    passed, line = judged(target, DRAIN, capsys)
    assert not passed and line.endswith("not available in this build  FAIL")


def test_a_target_against_peers_not_measured_is_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = bench_peers.Target("lifecycles register_many", ("procrastinate batch_defer",),
                                0.8, "enqueue")
    passed = bench_peers.judge([target], {"enqueue": {"lifecycles register_many": 3000.0}},
                               {}, {"procrastinate"})
    assert passed
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        "skipped: procrastinate batch_defer not measured (procrastinate not installed)")


def test_issue_27s_worker_targets_ask_for_durable_completions() -> None:
    worker = [t for t in bench_peers.TARGETS if t.entry.startswith("lifecycles Worker")]
    assert len(worker) == 3 and all(t.durable and t.section == "drain" for t in worker)


# --- the script ---------------------------------------------------------------------------


def test_without_a_server_it_says_so_and_exits_non_zero() -> None:
    # Port 1 on the loopback: nothing listens there, so the connection is refused at once.
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_peers.py"),
         "--dsn", "postgresql://postgres@127.0.0.1:1/test"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == bench_peers.NO_SERVER == 3
    assert result.stdout.startswith("PostgreSQL not reachable at postgresql://postgres@127.0"
                                    ".0.1:1/test (OperationalError:")


# Loaded at start-up through PYTHONPATH: the peers' modules cannot be found, as in an
# install without the bench extra.
WITHOUT_PEERS = """
import sys

class WithoutPeers:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("procrastinate", "pgqueuer", "asyncpg", "uvloop"):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, WithoutPeers())
"""


ENQUEUE_ROW = re.compile(r"^   (\S.*?) +\d+ +\d+\.\.\d+$")  # name, items/s, min..max


def test_without_the_peers_it_names_them_and_measures_the_rest(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(WITHOUT_PEERS)
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_peers.py"), "--dsn", require_postgres(),
         "--items", "20", "--rounds", "1", "--sections", "enqueue"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        f"missing peer: {name} (no module {modules}; install the bench extra: pip install -e"
        " '.[dev,bench]'); measuring the rest"
        for name, modules in (("pgqueuer", "pgqueuer, asyncpg"), ("procrastinate", "procrastinate"))
    ]
    rows = [match[1] for line in lines if (match := ENQUEUE_ROW.match(line))]
    assert rows == ["lifecycles register", "lifecycles register_many",
                    "lifecycles register_many, pair by pair"]
    assert any(line.endswith("skipped: procrastinate batch_defer not measured (pgqueuer,"
                             " procrastinate not installed)") for line in lines)


# --- lifecycles' entries on the real server -----------------------------------------------


def in_process_recorder() -> Recorder:
    """A recorder whose start and release have already been given (no parent process)."""
    go, release = threading.Event(), threading.Event()
    go.set()
    release.set()
    return Recorder(0, queue.Queue(), go, release)


def drained_by(drainer: RunOnce | RunMany, dsn: str) -> WorkerReport:
    recorder = in_process_recorder()
    drainer.work(dsn, ITEMS, 0, recorder)
    messages = [recorder.messages.get_nowait() for _ in range(2)]
    assert messages[0] == ("ready", 0) and messages[1][0] == "report"
    result: WorkerReport = messages[1][1]
    return result


@pytest.mark.parametrize("drainer", [RunOnce(), RunMany()], ids=lambda d: d.name)
def test_lifecycles_drains_verify_clean_and_catch_lost_repolled_or_leased_items(
    drainer: RunOnce | RunMany,
) -> None:
    from psycopg.conninfo import make_conninfo

    with temporary_schema() as schema:
        dsn = make_conninfo(require_postgres(), options=f"-c search_path={schema}")
        MONITOR.install(dsn)
        MONITOR.fill(dsn, ITEMS)
        assert MONITOR.queued_problems(dsn, ITEMS) == []
        assert MONITOR.final_problems(dsn, ITEMS) == [
            "6 items not succeeded: e0, e1, e2, e3, e4 (+1 more)",
            "6 items not polled exactly once: e0, e1, e2, e3, e4 (+1 more)",
        ]
        worker = drained_by(drainer, dsn)
        assert sorted(worker.calls) == sorted(worker.completions) == sorted(ITEMS)
        assert worker.first_claim is not None and worker.last_completion is not None
        assert handling_problems(ITEMS, [worker]) == []
        assert MONITOR.final_problems(dsn, ITEMS) == []
        with connect_in(schema) as connection:
            connection.execute(f"UPDATE {TABLE} SET poll_attempts = 2 WHERE event_id = 'e4'")
            connection.execute(f"DELETE FROM {TABLE} WHERE event_id = 'e1'")
        assert MONITOR.final_problems(dsn, ITEMS) == [
            "1 items have no row (lost): e1",
            "1 items not polled exactly once: e4",
        ]
        MONITOR.reset(dsn)
        assert MONITOR.queued_problems(dsn, ITEMS) == [
            "6 items have no row (lost): e0, e1, e2, e3, e4 (+1 more)"]
        MONITOR.fill(dsn, ITEMS[:1])
        monitor = open_monitor(dsn)
        assert monitor.claim("w0", now=DRAINED_AT)["event_id"] == "e0"
        monitor.connection.close()
        assert MONITOR.final_problems(dsn, ITEMS[:1]) == [
            "1 items not succeeded: e0", "1 items still hold a lease: e0"]
