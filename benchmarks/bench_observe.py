"""What logs and metrics (lifecycles.observe) cost the worker's cycle, off and on.

    python benchmarks/bench_observe.py [--chunk N] [--rounds N]

Two cycles on a SQLite file on disk (WAL, synchronous=OFF: the cheapest commit, so that
the Python cost of the hooks is as large a share of the cycle as it can be): the
monitor's ``run_once`` (claim, reader, finish) and the generic ``Worker.run_once`` one
record at a time over the tasks lifecycle of tests/support/tasks.py, no-op handler.

Four variants take turns on one file per cycle, ``--chunk`` cycles each, the order rotated
every round (A B C D, B C D A, ...), so that a burst of load on this shared machine hits
them all alike:

* ``no-op hooks``: the observe hooks replaced by nothing (LeaseWork.claim and .finish
  bound straight to their bodies): the cycle as it was before this module, in-process;
* ``off``: as shipped, no logging configured (the ``lifecycles`` loggers at the default
  WARNING: the cycle logs nothing) and no OpenTelemetry SDK provider;
* ``DEBUG logging``: every claim and transition logged at DEBUG through a handler that
  formats each record with every field;
* ``OTel metrics``: the OpenTelemetry SDK's MeterProvider with an in-memory reader.

A ratio is the median of the per-round ratios of rates against ``no-op hooks`` (higher is
better). Target: ``off`` >= 0.97 (within noise of no hooks at all); the cost when on is
printed (FAIL is printed when the target is missed).
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.monitor import CAPABILITIES, answer, notification
from support.tasks import TASKS, new_task

import lifecycles.monitor as lifecycles_monitor
from lifecycles import observe
from lifecycles._worker import Worker
from lifecycles._worker_steps import LeaseWork
from lifecycles.stores.sqlite import SQLiteStore

TARGET = 0.97


def fast_sqlite(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=OFF")
    return connection


class MonitorCycles:
    """The monitor's run_once over ``items`` registered items, ``cycles(n)`` at a time."""

    def __init__(self, path: Path, items: int) -> None:
        self.monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(
            fast_sqlite(path), CAPABILITIES)
        for index in range(items):
            body, sha = notification(index)
            self.monitor.register(body, sha, now=10)

    @staticmethod
    def reader(event_id: str, site_id: str) -> Any:
        return answer(event_id, site_id, "pending")

    def cycles(self, count: int) -> float:
        """Seconds for ``count`` cycles."""
        run_once, reader = self.monitor.run_once, self.reader
        started = time.perf_counter()
        for _ in range(count):
            run_once(reader, "w1", now=20)
        return time.perf_counter() - started


class WorkerCycles:
    """Worker.run_once, one record at a time, no-op handler, over ``items`` due tasks."""

    def __init__(self, path: Path, items: int) -> None:
        self.store = SQLiteStore(TASKS, fast_sqlite(path))
        self.store.insert_many([new_task(f"task-{n:06d}", now=10.0) for n in range(items)])
        self.worker = Worker(TASKS, self.store, lambda task, lease: None, worker_id="w1",
                             clock=lambda: 20.0, lease_seconds=60)

    def cycles(self, count: int) -> float:
        run_once = self.worker.run_once
        started = time.perf_counter()
        for _ in range(count):
            if run_once() is None:
                raise RuntimeError("the queue ran dry: more items per round are needed")
        return time.perf_counter() - started


class Formatting(logging.Handler):
    """Formats every record with every field, then drops it (a log shipper's CPU cost
    without its I/O)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        fields = " ".join(f"{name}=%({name})s" for name in observe.FIELDS)
        self.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s %(name)s %(message)s "
                                            f"{fields}"))
        self.formatted = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.format(record)
        self.formatted += 1


@contextmanager
def no_hooks() -> Iterator[None]:
    claim, finish = LeaseWork.claim, LeaseWork.finish
    LeaseWork.claim = LeaseWork._claim  # type: ignore[method-assign]
    LeaseWork.finish = LeaseWork._finish  # type: ignore[method-assign]
    try:
        yield
    finally:
        LeaseWork.claim = claim  # type: ignore[method-assign]
        LeaseWork.finish = finish  # type: ignore[method-assign]


@contextmanager
def off() -> Iterator[None]:
    yield


@contextmanager
def debug_logging() -> Iterator[None]:
    logger = logging.getLogger("lifecycles")
    handler = Formatting()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        assert handler.formatted > 0


@contextmanager
def otel_metrics() -> Iterator[None]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    observe.use_meter_provider(provider)
    try:
        yield
    finally:
        observe.use_meter_provider(None)
        assert reader.get_metrics_data() is not None
        provider.shutdown()


VARIANTS: dict[str, Callable[[], Any]] = {
    "no-op hooks": no_hooks, "off": off, "DEBUG logging": debug_logging,
    "OTel metrics": otel_metrics,
}
CYCLES: dict[str, Callable[[Path, int], Any]] = {
    "monitor run_once": MonitorCycles, "Worker.run_once": WorkerCycles,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunk", type=int, default=100, help="cycles per variant per round")
    parser.add_argument("--rounds", type=int, default=40, help="rounds, rotating the order")
    args = parser.parse_args()
    names = list(VARIANTS)
    seconds: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for cycle, make in CYCLES.items():
            bench = make(Path(directory) / f"{cycle.split()[0]}.db",
                         args.chunk * len(names) * args.rounds + args.chunk)
            bench.cycles(args.chunk)  # warm up: statements prepared, caches filled
            for round_number in range(args.rounds):
                shift = round_number % len(names)
                this_round: dict[str, float] = {}
                for variant in names[shift:] + names[:shift]:
                    with VARIANTS[variant]():
                        this_round[variant] = bench.cycles(args.chunk)
                for variant, took in this_round.items():
                    seconds.setdefault((cycle, variant), []).append(took / args.chunk)
                    ratios.setdefault((cycle, variant), []).append(
                        this_round["no-op hooks"] / took)
    print(f"observe: {args.rounds} rounds of {args.chunk} cycles per variant, the variants "
          "taking turns (order rotated each round), medians; SQLite file, WAL, "
          "synchronous=OFF")
    print(f"{'cycle':<18}{'variant':<16}{'cycles/s':>10}{'ratio':>8}  cost per cycle")
    failed = False
    for cycle in CYCLES:
        base = statistics.median(seconds[(cycle, "no-op hooks")])
        for variant in VARIANTS:
            per_cycle = statistics.median(seconds[(cycle, variant)])
            ratio = statistics.median(ratios[(cycle, variant)])
            verdict = ""
            if variant == "off":
                verdict = f"  target >= {TARGET}: {'ok' if ratio >= TARGET else 'FAIL'}"
                failed |= ratio < TARGET
            # The cost from the paired ratio (the unpaired medians drift with the load).
            print(f"{cycle:<18}{variant:<16}{1 / per_cycle:>10.0f}{ratio:>8.3f}  "
                  f"{base * (1 / ratio - 1) * 1e6:+.1f} us{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
