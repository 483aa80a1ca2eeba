"""Concurrency, measured small: worker processes racing on one monitor database.

Several processes, each with several workers (threads, each with its own
connection), claim and complete items through the drop-in facade on SQLite (a file
on disk in WAL mode) and on PostgreSQL. One process reads so slowly that its leases
expire and are recovered by others; it is SIGKILLed mid-lease and replaced. The
history (tests/support/stress_worker.py) must show: no two leases of one item at once, no
item lost, at most one accepted completion per lease token, and every completion
with a stale token refused with a lease-lost code. The full-scale run with
throughput figures is ``python benchmarks/bench_stress.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.postgres import require_postgres, temporary_schema
from support.stress_worker import REFUSAL_CODES, StressResult, Target, run

ITEMS = 300
PROCESSES = 2
THREADS = 2


def check(result: StressResult) -> None:
    assert result.final["succeeded"] + result.final["failed"] == ITEMS
    assert result.cycles >= ITEMS  # every item completed at least once
    assert result.grants == result.cycles + result.recovered  # every lease ended exactly once
    assert result.killed_mid_lease >= 1  # the killed process's lease was recovered
    assert sum(result.refusals.values()) >= 1  # stale completions happened, and were refused
    assert set(result.refusals) <= REFUSAL_CODES


@pytest.mark.slow
def test_sqlite_workers_in_several_processes_never_share_a_lease(tmp_path: Path) -> None:
    target = Target("sqlite", str(tmp_path / "monitor.db"))
    check(run(target, items=ITEMS, processes=PROCESSES, threads=THREADS,
              journal=tmp_path / "journal.jsonl", timeout=90))


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_workers_in_several_processes_never_share_a_lease(tmp_path: Path) -> None:
    dsn = require_postgres()
    with temporary_schema() as schema:
        target = Target("postgres", schema, dsn)
        check(run(target, items=ITEMS, processes=PROCESSES, threads=THREADS,
                  journal=tmp_path / "journal.jsonl", timeout=90))
