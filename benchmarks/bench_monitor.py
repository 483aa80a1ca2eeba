"""Monitor figures: lifecycles against the reference, measured in one run on one machine.

    python benchmarks/bench_monitor.py [--items N]

Both implementations run the same calls on their own SQLite file on disk (default
synchronous=FULL, so every commit is durable). The machine is shared and noisy: read
the ratios, which are measured side by side, rather than the absolute rates.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The figures compare with the reference components: by default those beside the clone.
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from support.monitor import CAPABILITIES, answer, notification
from support.reference import load_reference

import lifecycles.monitor as lifecycles_monitor
from lifecycles.machines.monitor import MONITOR, MonitorInputs, new_record

IMPLEMENTATIONS = {
    "reference": load_reference("terminal_processing_monitor"),
    "lifecycles": lifecycles_monitor,
}


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(module: Any, directory: Path, items: int, health_rows: int) -> dict[str, float]:
    connection = sqlite3.connect(directory / f"{module.__name__}.db")
    monitor = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    notes = [notification(i) for i in range(items)]
    figures: dict[str, float] = {}

    seconds = timed(lambda: [monitor.register(n, sha, now=10) for n, sha in notes])
    figures["register per s"] = items / seconds

    def cycles() -> None:
        for _ in range(items):
            monitor.run_once(lambda e, s: answer(e, s, "pending"), "w1", now=20)

    figures["run_once cycles per s"] = items / timed(cycles)
    ids = [f"e{i}" for i in range(items)]
    figures["status per s"] = items / timed(lambda: [monitor.status(e, now=30) for e in ids])

    big = sqlite3.connect(directory / f"{module.__name__}-health.db")
    large = module.DurableTerminalProcessingMonitor(big, CAPABILITIES)
    big.execute("BEGIN")
    for index in range(health_rows):
        record = new_record(
            event_id=f"h{index}", notification_id=f"hn{index}", site_id="s",
            terminal_status="published", notification_sha256="a" * 64, max_failures=5,
            now=float(index),
        )
        big.execute(
            "INSERT INTO cms_source_terminal_processing (event_id, notification_id, site_id, "
            "terminal_status, notification_sha256, status, poll_attempts, failures, "
            "max_failures, next_poll_at, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, 'pending', 0, 0, 5, ?, ?, ?)",
            (record.event_id, record.notification_id, "s", "published", "a" * 64,
             record.next_poll_at, record.created_at, record.updated_at),
        )
    big.commit()
    figures[f"health with {health_rows} rows, ms"] = statistics.median(
        timed(lambda: large.health(now=1e9)) for _ in range(3)
    ) * 1000
    return figures


def pure_transition_us(repeat: int = 20_000) -> float:
    record = new_record(
        event_id="e1", notification_id="n1", site_id="s", terminal_status="published",
        notification_sha256="a" * 64, max_failures=5, now=1.0,
    )
    inputs = MonitorInputs(now=2.0, worker_id="w1", lease_token="t")
    seconds = timed(lambda: [MONITOR.fire("claim", record, inputs) for _ in range(repeat)])
    return seconds / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=300, help="items per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    parser.add_argument("--health-rows", type=int, default=10_000)
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in IMPLEMENTATIONS}
    with tempfile.TemporaryDirectory() as directory:
        # Alternate the implementations so a burst of load on this shared machine hits both.
        for round_number in range(args.rounds):
            for name, module in IMPLEMENTATIONS.items():
                folder = Path(directory) / f"{name}-{round_number}"
                folder.mkdir()
                rounds[name].append(measure(module, folder, args.items, args.health_rows))
    medians = {
        name: {f: statistics.median(r[f] for r in results) for f in results[0]}
        for name, results in rounds.items()
    }
    print(f"monitor: {args.rounds} alternating rounds of {args.items} items, medians; "
          "SQLite file on disk, synchronous=FULL")
    print(f"{'figure':<36}{'reference':>12}{'lifecycles':>12}{'ratio':>8}")
    for figure in medians["reference"]:
        ours, theirs = medians["lifecycles"][figure], medians["reference"][figure]
        better = "lower is better" if figure.endswith("ms") else "higher is better"
        print(f"{figure:<36}{theirs:>12.1f}{ours:>12.1f}{ours / theirs:>8.2f}  ({better})")
    print(f"pure claim transition (lookup, guards, effect, invariants): "
          f"{pure_transition_us():.1f} us")


if __name__ == "__main__":
    main()
