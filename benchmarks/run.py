"""Run every benchmark in this directory and print all their figures.

    python benchmarks/run.py [--only NAME ...] [--strict]

Each `bench_*.py` runs in its own process (so one cannot warm the other's caches),
one after another; its output is printed when it ends, with the time it took. The exit status is 1
when a benchmark crashes, or, with `--strict`, when one reports a FAIL target or could not run
here: a benchmark exits 3 when what it measures on is missing (`bench_peers.py` without a
PostgreSQL server), reported as "not run". `bench_peers.py` measures procrastinate and
pgqueuer beside lifecycles when the `bench` extra is installed, and the rest without it.
`bench_observe.py` measures the cycle with logs and metrics off (against the observe hooks
replaced by no-ops) and on.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_RUN = 3  # a benchmark's exit status when what it measures on is missing here


def benchmarks(only: list[str]) -> list[Path]:
    found = sorted(HERE.glob("bench_*.py"))
    if only:
        found = [path for path in found if path.stem.removeprefix("bench_") in only]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=[], help="e.g. --only outbox monitor")
    parser.add_argument("--strict", action="store_true", help="a FAIL target fails the run")
    args = parser.parse_args()
    selected = benchmarks(args.only)
    if not selected:
        print(f"no benchmark matches {args.only}", file=sys.stderr)
        return 1
    broken: list[str] = []
    not_run: list[str] = []
    failed_targets: list[str] = []
    for path in selected:
        print(f"== {path.name}", flush=True)
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, check=False
        )
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        print(f"   ({time.perf_counter() - started:.0f} s, exit {result.returncode})\n", flush=True)
        if result.returncode == NOT_RUN:
            not_run.append(path.name)
        elif result.returncode != 0:
            broken.append(path.name)
        if any("FAIL" in line.split() for line in result.stdout.splitlines()):
            failed_targets.append(path.name)
    if broken:
        print(f"crashed: {', '.join(broken)}")
    if not_run:
        print(f"not run: {', '.join(not_run)}")
    if failed_targets:
        print(f"targets missed in: {', '.join(failed_targets)}")
    return 1 if broken or (args.strict and (failed_targets or not_run)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
