"""Monitor health in the database (issue 12 item 2): one aggregate statement.

    python benchmarks/bench_health.py [--rows N] [--repeat R] [--million]

``health()`` of each monitor, the median of R calls, on a SQLite file on disk holding
N valid items (default 50,000) in every status, written straight into each file with
``executemany`` in one transaction: the reference (which loads every row and checks
it in Python), lifecycles (integrity check, then one SQL statement of counts: the rows
breaking a field rule or invariant from the rules indexes, which SQLite keeps as rows
are written, the rest from the lease-order index), and, for where the time goes,
lifecycles' two parts alone (``PRAGMA quick_check``, and the counts). With ``--million``,
lifecycles alone at 1,000,000 items (the reference would take about a minute).
Targets: lifecycles' health at 50k items <= 1/18 of the reference's; at 1M < 5 s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The figures compare with the reference components: by default those beside the clone.
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from support.monitor import CAPABILITIES, LEASED, PENDING, RETRY_WAIT, T0, held
from support.reference import load_reference

import lifecycles.monitor as lifecycles_monitor
from lifecycles.invariants.monitor import COLUMNS, MonitorRecord, ReceiverStatus
from lifecycles.machines.monitor import MONITOR, ReceiverAnswer

reference = load_reference("terminal_processing_monitor")
TABLE = "cms_source_terminal_processing"
RATIO_TARGET = 18  # lifecycles at most 1/18 of the reference's time
MILLION_TARGET = 5.0  # seconds


def answer(kind: ReceiverStatus, **changes: Any) -> ReceiverAnswer:
    values: dict[str, Any] = {
        "processing_status": kind, "attempts": 1, "max_attempts": 3, "next_attempt_at": T0,
        "lease_expires_at": None, "lease_expired": False, "last_error_code": None,
        "processed_at": None, **changes,
    }
    return ReceiverAnswer(**values)


def templates() -> list[MonitorRecord]:
    """One valid record in each status, made by real transitions."""
    later = held(T0 + 1, answer=answer(ReceiverStatus.LEASED, lease_expires_at=T0 + 60))
    return [
        PENDING,
        LEASED,
        RETRY_WAIT,
        MONITOR.fire("observe_progress", LEASED, later),
        MONITOR.fire("observe_success", LEASED,
                     held(T0 + 1, answer=answer(ReceiverStatus.SUCCEEDED, processed_at=T0))),
        MONITOR.fire("observe_failure", LEASED, held(T0 + 1, answer=answer(
            ReceiverStatus.FAILED, attempts=3, last_error_code="receiver.gave_up"))),
    ]


def rows(items: int) -> Iterator[tuple[Any, ...]]:
    """``items`` valid rows, the statuses in turn, each with its own ids."""
    plain = [
        {name: str(value) if name == "status" else value
         for name, value in attrs.asdict(record).items()}
        for record in templates()
    ]
    for index in range(items):
        values = dict(plain[index % len(plain)])
        values["event_id"], values["notification_id"] = f"e{index:08d}", f"n{index:08d}"
        yield tuple(values[name] for name in COLUMNS)


def fill(connection: sqlite3.Connection, items: int) -> None:
    connection.execute("BEGIN")
    connection.executemany(
        f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})",
        rows(items),
    )
    connection.execute("COMMIT")


def median_s(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def monitor_on(directory: Path, module: Any, items: int) -> Any:
    connection = sqlite3.connect(directory / f"{module.__name__}-{items}.db", isolation_level=None)
    monitor = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    fill(connection, items)
    return monitor


def parts(monitor: Any, repeat: int) -> dict[str, float]:
    """lifecycles' two statements alone: the engine's check and the aggregate."""
    store = monitor.store
    queries = store.rule_queries()
    statement = queries.aggregate
    return {
        "quick_check": median_s(store.integrity_problems, repeat),
        "aggregate": median_s(lambda: store._fetch(statement, (T0, T0)), repeat),
    }


def measure(directory: Path, items: int, repeat: int, with_reference: bool) -> dict[str, float]:
    figures: dict[str, float] = {}
    if with_reference:
        ref = monitor_on(directory, reference, items)
        ref.health(now=T0)  # a first read warms the page cache, as for lifecycles below
        figures["reference"] = median_s(lambda: ref.health(now=T0), repeat)
        ref.connection.close()
    ours = monitor_on(directory, lifecycles_monitor, items)
    health = ours.health(now=T0)
    assert sum(health.counts.values()) == items, health
    figures["lifecycles"] = median_s(lambda: ours.health(now=T0), repeat)
    figures.update(parts(ours, repeat))
    ours.connection.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="items for the comparison")
    parser.add_argument("--repeat", type=int, default=5, help="health calls timed per figure")
    parser.add_argument("--million", action="store_true", help="also lifecycles at 1M items")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        figures = measure(Path(folder), args.rows, args.repeat, with_reference=True)
        million = (
            measure(Path(folder), 1_000_000, max(1, args.repeat // 2), with_reference=False)
            if args.million else None
        )
    print(f"health: median of {args.repeat} calls (s), SQLite file on disk, valid items "
          "in every status")
    print(f"{'items':>10}{'reference':>12}{'lifecycles':>12}{'quick_check':>13}{'aggregate':>11}")
    print(f"{args.rows:>10,}{figures['reference']:>12.3f}{figures['lifecycles']:>12.3f}"
          f"{figures['quick_check']:>13.3f}{figures['aggregate']:>11.3f}")
    if million is not None:
        print(f"{1_000_000:>10,}{'-':>12}{million['lifecycles']:>12.3f}"
              f"{million['quick_check']:>13.3f}{million['aggregate']:>11.3f}")
    ratio = figures["reference"] / figures["lifecycles"]
    print(f"target: lifecycles' health at {args.rows:,} items <= 1/{RATIO_TARGET} of the "
          f"reference's: 1/{ratio:.1f} {'PASS' if ratio >= RATIO_TARGET else 'FAIL'}")
    if million is not None:
        seconds = million["lifecycles"]
        print(f"target: lifecycles' health at 1,000,000 items < {MILLION_TARGET:g} s: "
              f"{seconds:.2f} s {'PASS' if seconds < MILLION_TARGET else 'FAIL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
