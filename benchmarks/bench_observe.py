"""What logs and metrics (lifecycles.observe) cost the worker's cycle, off and on.

    python benchmarks/bench_observe.py [--items N] [--rounds N]

Two cycles on a SQLite file on disk (WAL, synchronous=OFF: the cheapest commit, so that
the Python cost of the hooks is as large a share of the cycle as it can be): the
monitor's ``run_once`` (claim, reader, finish) and the generic ``Worker.run_once`` one
record at a time over the tasks lifecycle of tests/support/tasks.py, no-op handler.

Four variants, taking turns round by round (A B C D, then D C B A), each round draining a
fresh file of ``--items`` due records:

* ``no-op hooks``: the observe hooks replaced by nothing (LeaseWork.claim and .finish
  bound straight to their bodies): the cycle as it was before this module, in-process;
* ``off``: as shipped, no logging configured (the ``lifecycles`` loggers at the default
  WARNING: the cycle logs nothing) and no OpenTelemetry SDK provider;
* ``DEBUG logging``: every claim and transition logged at DEBUG through a handler that
  formats each record with every field;
* ``OTel metrics``: the OpenTelemetry SDK's MeterProvider with an in-memory reader.

A ratio is the median of the per-round ratios against ``no-op hooks`` (rates: higher is
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
from lifecycles.stores.sqlite import SQLiteStore
from lifecycles.worker import LeaseWork, Worker

TARGET = 0.97


def fast_sqlite(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=OFF")
    return connection


def monitor_cycles(path: Path, items: int) -> float:
    """Monitor run_once cycles per second over ``items`` registered items."""
    monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(fast_sqlite(path), CAPABILITIES)
    for index in range(items):
        body, sha = notification(index)
        monitor.register(body, sha, now=10)

    def reader(event_id: str, site_id: str) -> Any:
        return answer(event_id, site_id, "pending")

    started = time.perf_counter()
    for _ in range(items):
        monitor.run_once(reader, "w1", now=20)
    seconds = time.perf_counter() - started
    monitor.store.connection.close()  # type: ignore[attr-defined]
    return items / seconds


def worker_cycles(path: Path, items: int) -> float:
    """Worker.run_once cycles per second (one record at a time) over ``items`` tasks."""
    store = SQLiteStore(TASKS, fast_sqlite(path))
    store.insert_many([new_task(f"task-{n:06d}", now=10.0) for n in range(items)])
    worker = Worker(TASKS, store, lambda task, lease: None, worker_id="w1",
                    clock=lambda: 20.0, lease_seconds=60)
    started = time.perf_counter()
    for _ in range(items):
        assert worker.run_once() is not None
    seconds = time.perf_counter() - started
    store.connection.close()
    return items / seconds


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
CYCLES: dict[str, Callable[[Path, int], float]] = {
    "monitor run_once": monitor_cycles, "Worker.run_once": worker_cycles,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1500, help="records per round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, alternating order")
    args = parser.parse_args()
    rates: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for round_number in range(args.rounds):
            order = list(VARIANTS) if round_number % 2 == 0 else list(reversed(VARIANTS))
            for cycle, measure in CYCLES.items():
                this_round: dict[str, float] = {}
                for variant in order:
                    path = Path(directory) / f"{cycle}-{variant}-{round_number}.db".replace(
                        " ", "_")
                    with VARIANTS[variant]():
                        this_round[variant] = measure(path, args.items)
                for variant, rate in this_round.items():
                    rates.setdefault((cycle, variant), []).append(rate)
                    ratios.setdefault((cycle, variant), []).append(
                        rate / this_round["no-op hooks"])
    print(f"observe: {args.rounds} rounds of {args.items} records, medians; SQLite file, "
          "WAL, synchronous=OFF")
    print(f"{'cycle':<18}{'variant':<16}{'cycles/s':>10}{'ratio':>8}  cost per cycle")
    failed = False
    for cycle in CYCLES:
        base = statistics.median(rates[(cycle, "no-op hooks")])
        for variant in VARIANTS:
            rate = statistics.median(rates[(cycle, variant)])
            ratio = statistics.median(ratios[(cycle, variant)])
            cost = (1 / rate - 1 / base) * 1e6
            verdict = ""
            if variant == "off":
                verdict = f"  target >= {TARGET}: {'ok' if ratio >= TARGET else 'FAIL'}"
                failed |= ratio < TARGET
            print(f"{cycle:<18}{variant:<16}{rate:>10.0f}{ratio:>8.3f}  {cost:+.1f} us{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
