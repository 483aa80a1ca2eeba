"""Where one run_once cycle spends its time: inside SQLite, or in Python around it.

    python benchmarks/profile_run_once.py [--items 2000] [--rounds 3]

Drains a fresh SQLite file (WAL + synchronous=NORMAL) of ``--items`` due items with
lifecycles' ``run_once``; another with the raw loop of ``loops.py``, on a
file without lifecycles' rules and lease-expiry indexes (``raw``) and on one with
them (``raw+indexes``); and another with its checked loop (the raw
loop's statements plus lifecycles' checks and nothing else), each through a connection
that times every ``execute``, ``executemany`` and ``fetch*`` call. Prints, per cycle,
the time inside SQLite, the time outside it (Python: checks, transitions, encoding,
the reader) and the statements run. Not a ``bench_*`` file: ``run.py`` does not run
it; it explains ``bench_throughput.py``'s first figure.

``checked`` minus ``raw`` is what the checks cost in the loop (a check timed alone in
a tight loop reads hot caches and costs about half as much), and ``raw / checked``
bounds the WAL target's ratio for any implementation that makes them;
``raw+indexes`` minus ``raw`` is what keeping health's broken rows and the leases'
expiries in indexes costs every write; the rest of ``lifecycles`` is its own machinery
(the store, the lease protocol, the glance, the whole-record compare-and-set, the schema
guards).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from loops import LEASE_SECONDS, WORKER, CheckedSQLite, Checks, RawSQLite, drop_unused_indexes
from support.monitor import CAPABILITIES, answer, notification

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor


class Timed:
    """Seconds spent inside SQLite calls, and how many statements ran."""

    seconds = 0.0
    statements = 0


class TimedCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> TimedCursor:
        started = time.perf_counter()
        try:
            super().execute(sql, parameters)
        finally:
            Timed.seconds += time.perf_counter() - started
            Timed.statements += 1
        return self

    def fetchall(self) -> list[Any]:
        started = time.perf_counter()
        try:
            return super().fetchall()
        finally:
            Timed.seconds += time.perf_counter() - started

    def fetchone(self) -> Any:
        started = time.perf_counter()
        try:
            return super().fetchone()
        finally:
            Timed.seconds += time.perf_counter() - started


class TimedConnection(sqlite3.Connection):
    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(TimedCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)


def drain(path: Path, items: int, kind: str) -> tuple[float, float, float]:
    """(seconds per cycle, of which inside SQLite, statements per cycle) of ``kind``'s
    loop: ``lifecycles``, ``raw`` or ``checked`` (both without the rules and lease-expiry
    indexes), or
    ``raw+indexes``."""
    raw = kind != "lifecycles"
    setup = sqlite3.connect(path)
    DurableTerminalProcessingMonitor(setup, CAPABILITIES).register_many(
        [notification(i) for i in range(items)], now=10)
    if kind in ("raw", "checked"):
        drop_unused_indexes(setup)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.close()
    connection = sqlite3.connect(path, factory=TimedConnection)
    connection.execute("PRAGMA synchronous=NORMAL")
    answers = {f"e{i}": answer(f"e{i}", "site-1", "pending") for i in range(items)}

    def receiver(event_id: str, site_id: str) -> Any:
        return answers[event_id]

    if kind == "checked":
        connection.isolation_level = None
        checks = Checks(DurableTerminalProcessingMonitor(connection, CAPABILITIES), receiver,
                        20.0, WORKER, LEASE_SECONDS)
        cycle = CheckedSQLite(connection, checks).cycle
    elif raw:
        connection.isolation_level = None
        loop = RawSQLite(connection, receiver, 20.0)
        cycle = loop.cycle
    else:
        monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)

        def cycle() -> bool:
            return monitor.run_once(receiver, "w1", now=20) is not None

    Timed.seconds, Timed.statements = 0.0, 0
    started, cycles = time.perf_counter(), 0
    while cycle():
        cycles += 1
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed / cycles, Timed.seconds / cycles, Timed.statements / cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = ["lifecycles", "raw", "raw+indexes", "checked"]
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="profile-run-once-") as directory:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                path = Path(directory) / f"{name}-{round_}.db"
                figures[name].append(drain(path, args.items, name))
    print(f"run_once on SQLite WAL + synchronous=NORMAL, {args.items:,} items drained, "
          f"medians of {args.rounds} rounds; microseconds per cycle")
    print(f"{'':>12}{'total':>10}{'in SQLite':>12}{'in Python':>12}{'statements':>12}")
    totals = {}
    for name, runs in figures.items():
        total = totals[name] = statistics.median(run[0] for run in runs) * 1e6
        inside = statistics.median(run[1] for run in runs) * 1e6
        statements = statistics.median(run[2] for run in runs)
        print(f"{name:>12}{total:>10.0f}{inside:>12.0f}{total - inside:>12.0f}{statements:>12.1f}")
    raw, indexed, checked = totals["raw"], totals["raw+indexes"], totals["checked"]
    print(f"the checks cost {checked - raw:.0f} us a cycle: any implementation making them"
          f" reaches at most {raw:.0f} / {checked:.0f} = {raw / checked:.2f} of the raw loop's"
          f" rate (target 0.8); with the rules indexes health needs (a further"
          f" {indexed - raw:.0f} us), {raw / (checked + indexed - raw):.2f}")
    print(f"lifecycles' machinery costs {totals['lifecycles'] - checked - (indexed - raw):.0f} us"
          f" a cycle beyond the checks and the rules indexes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
