"""Concurrency at full scale: throughput and a verified history, per store.

    python benchmarks/bench_stress.py [--items 20000] [--processes 4] [--threads 2]
                                      [--stores sqlite postgres] [--dsn DSN]

Worker processes (``--processes``, each with ``--threads`` workers, every worker with
its own connection) drain ``--items`` monitor items through the drop-in facade
(``run_once``: claim, read a fake receiver, complete) on SQLite (a file on disk, WAL,
synchronous=FULL) and on PostgreSQL (``--dsn``, default ``$LIFECYCLES_TEST_POSTGRES_DSN``,
in a throw-away schema). One process reads so slowly that its leases expire and are
recovered by others; it is SIGKILLed mid-lease and replaced. Every lease grant is
audited in the claim's own transaction, and the whole history is then checked as in
tests/monitor/test_monitor_stress.py (no shared lease, no lost item, no stale completion accepted).

Throughput is accepted completions (claim + complete cycles) per second of wall time,
from the workers' start until every item is final; it includes the slow process, the
kill and the wait for its leases to expire, so it is a floor, not a peak. The machine
is shared and noisy: compare stores measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.postgres import create_schema, drop_schema
from support.stress_worker import StressResult, Target, run

DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"


def show(result: StressResult) -> None:
    refusals = ", ".join(
        f"{code.rsplit('.', 1)[1]} {count}" for code, count in sorted(result.refusals.items())
    ) or "none"
    print(
        f"{result.store:<9} {result.items:>7} {result.processes}x{result.threads:<5}"
        f" {result.seconds:>8.1f} {result.cycles:>8} {result.cycles_per_second:>10.0f}"
        f" {result.grants:>8} {result.recovered:>9}  {refusals}; history verified",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lease-seconds", type=float, default=1.0)
    parser.add_argument("--slow", type=float, default=0.002,
                        help="share of reads that outlive their lease (besides the slow process)")
    parser.add_argument("--stores", nargs="*", default=["sqlite", "postgres"])
    parser.add_argument("--dsn", default=os.environ.get(DSN_VARIABLE))
    options = parser.parse_args()
    print(f"{options.processes} processes x {options.threads} workers, {options.items} items,"
          f" lease {options.lease_seconds}s, {options.slow:.1%} of reads outlive their lease;"
          " one slow process SIGKILLed mid-lease and replaced")
    print(f"{'store':<9} {'items':>7} {'workers':<7} {'seconds':>8} {'cycles':>8}"
          f" {'cycles/s':>10} {'grants':>8} {'recovered':>9}  refusals")
    with tempfile.TemporaryDirectory(prefix="bench-stress-") as directory:
        for store in options.stores:
            journal = Path(directory) / f"{store}.jsonl"
            settings = {
                "items": options.items, "processes": options.processes,
                "threads": options.threads, "journal": journal,
                "lease_seconds": options.lease_seconds, "slow": options.slow, "timeout": 1800.0,
            }
            if store == "sqlite":
                show(run(Target("sqlite", str(Path(directory) / "monitor.db")), **settings))
            elif store == "postgres":
                if not options.dsn:
                    print(f"postgres  skipped: set {DSN_VARIABLE} or pass --dsn")
                    continue
                schema = create_schema(options.dsn)
                try:
                    show(run(Target("postgres", schema, options.dsn), **settings))
                finally:
                    drop_schema(schema, options.dsn)
            else:
                parser.error(f"unknown store {store!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
