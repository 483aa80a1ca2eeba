"""Where one run_once cycle spends its time: inside SQLite, or in Python around it.

    python benchmarks/profile_run_once.py [--items 2000] [--rounds 3]

Drains a fresh SQLite file (WAL + synchronous=NORMAL) of ``--items`` due items with
lifecycles' ``run_once``, and another with the raw loop of ``bench_throughput.py``,
through a connection that times every ``execute``, ``executemany`` and ``fetch*`` call.
Prints, per cycle, the time inside SQLite, the time outside it (Python: checks,
transitions, encoding, the reader) and the statements run. Not a ``bench_*`` file:
``run.py`` does not run it; it explains ``bench_throughput.py``'s first figure.

Then the floor: the Python work a cycle cannot drop without dropping a check, timed
alone on one claimed row (no I/O): decode and check the claimed row, read the
receiver's answer through its rules, fire the completing row (its guards, its effect,
every invariant of the new record) and encode it. That is the work left even if the
claim itself were decided inside the database (``UPDATE ... RETURNING``) with the
raw loop's statements, so ``raw / (raw + floor)`` bounds the WAL target's ratio. The
raw loop runs on a file without lifecycles' rules indexes, and once more with them
(``raw+indexes``): the difference is what keeping health's broken rows in an index costs
every cycle, whoever writes.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from bench_throughput import RawSQLite, drop_rules_indexes
from support.monitor import CAPABILITIES, answer, notification

from lifecycles.machines.monitor import MONITOR, MonitorInputs, poll_step, read_answer
from lifecycles.monitor import DurableTerminalProcessingMonitor


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


def drain(path: Path, items: int, raw: bool, indexed: bool = False) -> tuple[float, float, float]:
    """(seconds per cycle, of which inside SQLite, statements per cycle); the raw loop on
    a file without lifecycles' rules indexes unless ``indexed``."""
    setup = sqlite3.connect(path)
    DurableTerminalProcessingMonitor(setup, CAPABILITIES).register_many(
        [notification(i) for i in range(items)], now=10)
    if raw and not indexed:
        drop_rules_indexes(setup)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.close()
    connection = sqlite3.connect(path, factory=TimedConnection)
    connection.execute("PRAGMA synchronous=NORMAL")
    answers = {f"e{i}": answer(f"e{i}", "site-1", "pending") for i in range(items)}

    def receiver(event_id: str, site_id: str) -> Any:
        return answers[event_id]

    if raw:
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


def floor_steps(directory: Path, repeat: int = 2_000) -> dict[str, float]:
    """Microseconds per cycle of each step no design can skip, timed alone."""
    connection = sqlite3.connect(directory / "floor.db")
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    monitor.register_many([notification(0)], now=10)
    claimed_view = monitor.claim("w1", now=20, lease_seconds=600)
    assert claimed_view is not None
    store = monitor.store
    (row,) = store.run(store._get, ("e0",))
    claimed = store._decode(row)
    reply = answer("e0", "site-1", "pending")
    sha = monitor.expected_capabilities_sha256
    lease = MonitorInputs(now=20, policy=monitor.policy, worker_id="w1",
                          lease_token=claimed.lease_token)
    step = poll_step(lease, read_answer(reply, claimed, sha))
    done = step.fire(claimed, MONITOR.fire)
    encode = store._encoder_of(tuple(store.schema.column_names))
    steps: dict[str, Callable[[], object]] = {
        "decode and check the claimed row": lambda: store._decode(row),
        "read the answer through its rules": lambda: poll_step(
            lease, read_answer(reply, claimed, sha)),
        "fire the completing row (guards, effect, invariants)": lambda: step.fire(
            claimed, MONITOR.fire),
        "encode the completed record": lambda: encode(done),
    }
    figures = {}
    for name, call in steps.items():
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(repeat):
                call()
            best = min(best, (time.perf_counter() - started) / repeat)
        figures[name] = best * 1e6
    connection.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = ["lifecycles", "raw", "raw+indexes"]
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="profile-run-once-") as directory:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                path = Path(directory) / f"{name}-{round_}.db"
                figures[name].append(drain(path, args.items, raw=name != "lifecycles",
                                           indexed=name == "raw+indexes"))
    print(f"run_once on SQLite WAL + synchronous=NORMAL, {args.items:,} items drained, "
          f"medians of {args.rounds} rounds; microseconds per cycle")
    print(f"{'':>12}{'total':>10}{'in SQLite':>12}{'in Python':>12}{'statements':>12}")
    totals = {}
    for name, runs in figures.items():
        total = totals[name] = statistics.median(run[0] for run in runs) * 1e6
        inside = statistics.median(run[1] for run in runs) * 1e6
        statements = statistics.median(run[2] for run in runs)
        print(f"{name:>12}{total:>10.0f}{inside:>12.0f}{total - inside:>12.0f}{statements:>12.1f}")
    with tempfile.TemporaryDirectory(prefix="profile-floor-") as directory:
        floor = floor_steps(Path(directory))
    print("the Python floor of one cycle, each step timed alone (best of 5), microseconds")
    for name, micros in floor.items():
        print(f"  {micros:8.1f}  {name}")
    least = sum(floor.values())
    raw, indexed = totals["raw"], totals["raw+indexes"]
    print(f"  {least:8.1f}  in all; with the raw loop's own statements the WAL ratio is at "
          f"most {raw:.0f} / ({raw:.0f} + {least:.0f}) = {raw / (raw + least):.2f}")
    print(f"the rules indexes (health's broken rows, kept by SQLite on every write) cost "
          f"{indexed - raw:.0f} us a cycle on the raw loop's statements; with them the ratio "
          f"is at most {raw:.0f} / ({indexed:.0f} + {least:.0f}) = {raw / (indexed + least):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
