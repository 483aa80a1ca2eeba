"""Scale: claim, health and outbox replay at 1k, 10k and 100k rows (1M with --million).

    python benchmarks/bench_scale.py [--repeats 3] [--claims 9] [--million] [--dir /tmp]

One table, lifecycles beside the reference, each figure the median of several calls
timed in alternating order (lifecycles, reference, then reference, lifecycles), in ms:

- ``claim``: one monitor ``claim`` (median of ``--claims``, after two untimed ones);
- ``health``: one ``health(now=)`` (median of ``--repeats``);
- ``replay``: one outbox ``replay(limit=10)`` on a store opened just before the call,
  as in bench_outbox.py (median of ``--repeats``).

Monitor rows are all pending and due, written with ``executemany`` straight into a
SQLite file on disk (default settings: rollback journal, synchronous=FULL), as in
bench_claims.py. Outbox backlogs are pending records written as files in the outbox's
on-disk format by bench_outbox.py's own helper, in a temporary directory under /tmp
(``--dir``) with real fsync. The reference's health and replay at 1M take tens of
seconds a call (it validates every row in Python; it lists and sorts every pending
file, twice): at 1M they are timed once, marked ``*``.

Targets (PASS/FAIL, never asserted in tests): health with 50k rows takes lifecycles at
most 1/18 of the reference's time (median of ``--repeats`` alternating calls each); with
``--million``, lifecycles' health with 1M rows takes under 5 s.

The default run takes about a minute and a half on a 2-core machine (most of it writing
100k outbox files twice); ``--million`` adds 1M rows and 1M outbox files per
implementation (about 8 GB of small files, written and removed) and took 11 minutes here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The figures compare with the reference components: by default those beside the clone.
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from bench_claims import fill
from bench_outbox import IMPLEMENTATIONS as OUTBOXES
from bench_outbox import deliver_nothing, filesystem_of, write_backlog
from support.monitor import CAPABILITIES
from support.reference import load_reference

import lifecycles.monitor as lifecycles_monitor

MONITORS: dict[str, ModuleType] = {
    "lifecycles": lifecycles_monitor,
    "reference": load_reference("terminal_processing_monitor"),
}
NAMES = ("lifecycles", "reference")
MILLION = 1_000_000
HEALTH_SHARE = 18  # lifecycles' health at 50k rows <= 1/18 of the reference's
HEALTH_ROWS = 50_000
MILLION_HEALTH_SECONDS = 5.0

Call = Callable[[], Any]


def alternating(calls: dict[str, Call], repeats: dict[str, int]) -> dict[str, float]:
    """Median milliseconds of each call, the callers taking turns in alternating order;
    ``repeats[name]`` calls of each."""
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for step in range(max(repeats.values())):
        names = list(calls) if step % 2 == 0 else list(reversed(calls))
        for name in names:
            if step < repeats[name]:
                started = time.perf_counter()
                calls[name]()
                seconds[name].append(time.perf_counter() - started)
    return {name: statistics.median(times) * 1000 for name, times in seconds.items()}


def open_monitors(directory: Path, rows: int) -> tuple[dict[str, Any], list[sqlite3.Connection]]:
    """A monitor of each implementation on its own file holding ``rows`` due items."""
    monitors: dict[str, Any] = {}
    connections = []
    for name, module in MONITORS.items():
        connection = sqlite3.connect(directory / f"{name}-{rows}.db", isolation_level=None)
        connections.append(connection)
        monitors[name] = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        fill(connection, rows)
    return monitors, connections


def claimer(monitor: Any, now: float, moments: Iterator[int]) -> Call:
    """One claim, each a moment later than the last (all leases stay unexpired)."""
    return lambda: monitor.claim("w1", now=now + next(moments), lease_seconds=600)


def monitor_figures(
    directory: Path, rows: int, repeats: int, claims: int, capped: bool
) -> dict[str, float]:
    monitors, connections = open_monitors(directory, rows)
    now = rows / 1000 + 1.0  # every item is due
    try:
        health = alternating(
            {name: partial(monitors[name].health, now=now) for name in NAMES},
            {"lifecycles": repeats, "reference": 1 if capped else repeats},
        )
        moments = iter(range(10 * claims + 10))
        for name in NAMES:  # two untimed claims each
            for _ in range(2):
                monitors[name].claim("w1", now=now + next(moments), lease_seconds=600)
        claim = alternating(
            {name: claimer(monitors[name], now, moments) for name in NAMES},
            dict.fromkeys(NAMES, claims),
        )
    finally:
        for connection in connections:
            connection.close()
    return {
        **{f"claim {name}": claim[name] for name in NAMES},
        **{f"health {name}": health[name] for name in NAMES},
    }


def outbox_figures(directory: Path, rows: int, repeats: int, capped: bool) -> dict[str, float]:
    folders = {name: directory / f"outbox-{name}-{rows}" for name in NAMES}
    try:
        for name in NAMES:
            write_backlog(folders[name], rows)
        os.sync()  # so writeback of the backlog does not land inside a timed call

        def replay(name: str) -> Call:
            return lambda: OUTBOXES[name].CloseOutbox(state_dir=folders[name]).replay(
                deliver_nothing, limit=10
            )

        replays = alternating(
            {name: replay(name) for name in NAMES},
            {"lifecycles": repeats, "reference": 1 if capped else repeats},
        )
    finally:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
    return {f"replay {name}": replays[name] for name in NAMES}


def health_at(directory: Path, rows: int, repeats: int) -> dict[str, float]:
    monitors, connections = open_monitors(directory, rows)
    try:
        return alternating(
            {name: partial(monitors[name].health, now=rows / 1000 + 1.0) for name in NAMES},
            dict.fromkeys(NAMES, repeats),
        )
    finally:
        for connection in connections:
            connection.close()


def cell(figures: dict[str, float], figure: str, capped: bool) -> str:
    ours, theirs = figures[f"{figure} lifecycles"], figures[f"{figure} reference"]
    mark = "*" if capped and figure != "claim" else " "
    return f"{ours:>11.1f}{theirs:>11.1f}{mark}{ours / theirs:>6.2f}"


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="health and replay calls timed")
    parser.add_argument("--claims", type=int, default=9, help="claim calls timed")
    parser.add_argument("--million", action="store_true", help="also 1M rows and files")
    parser.add_argument("--dir", default="/tmp", help="parent of the temporary directory")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args()
    sizes: Sequence[int] = [1_000, 10_000, 100_000, *([MILLION] if args.million else [])]
    table: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.dir) as work:
        directory = Path(work)
        filesystem = filesystem_of(directory)
        for rows in sizes:
            capped = rows >= MILLION
            table[rows] = {
                **monitor_figures(directory, rows, args.repeats, args.claims, capped),
                **outbox_figures(directory, rows, args.repeats, capped),
            }
        health50 = health_at(directory, HEALTH_ROWS, args.repeats)

    print("scale: ms per call, medians of alternating calls (lifecycles, reference);"
          " ratio = lifecycles / reference")
    print(f"  monitor: SQLite file, default settings, all rows pending and due; claim median of"
          f" {args.claims}, health median of {args.repeats}")
    print(f"  outbox: pending files in {filesystem} ({args.dir}), real fsync;"
          f" replay(limit=10) on a store opened just before, median of {args.repeats}")
    groups = ("claim", "health", "replay(limit=10)")
    print(f"{'':>10}" + "".join(f"{group:>29}" for group in groups))
    print(f"{'rows':>10}" + f"{'lifecycles':>11}{'reference':>11}{'ratio':>7}" * len(groups))
    for rows, figures in table.items():
        capped = rows >= MILLION
        print(f"{rows:>10,}" + "".join(
            cell(figures, figure, capped) for figure in ("claim", "health", "replay")
        ))
    if args.million:
        print("  * the reference timed once at 1M rows (tens of seconds a call)")
    else:
        print("  1M rows: not measured (pass --million)")

    ours, theirs = health50["lifecycles"], health50["reference"]
    passed = ours <= theirs / HEALTH_SHARE
    failed = not passed
    print(f"health with {HEALTH_ROWS // 1000}k rows: lifecycles {ours:.0f} ms, reference"
          f" {theirs:.0f} ms, ratio {ours / theirs:.3f};"
          f" target <= 1/{HEALTH_SHARE} ({1 / HEALTH_SHARE:.3f})  {verdict(passed)}")
    if args.million:
        seconds = table[MILLION]["health lifecycles"] / 1000
        passed = seconds < MILLION_HEALTH_SECONDS
        failed = failed or not passed
        print(f"health with 1M rows: lifecycles {seconds:.1f} s;"
              f" target < {MILLION_HEALTH_SECONDS:g} s  {verdict(passed)}")
    else:
        print(f"health with 1M rows: not measured (pass --million); target"
              f" < {MILLION_HEALTH_SECONDS:g} s")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
