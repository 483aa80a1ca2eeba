"""Time from a registration to its handler's start, with an idle worker (issue 27).

    python benchmarks/bench_wakeup.py [--rounds N] [--poll-interval S]

A worker (``lifecycles._worker.Worker``) runs in a thread of its own process on the task
lifecycle of the tests (tests/support/tasks.py) and has found nothing due; the
benchmark then inserts one record from another connection, at a random moment, and
records how long until the handler starts (the handler reads the clock first thing).
``N`` rounds, one record each, a random pause between them so that the worker is idle
and waiting each time.

* **PostgreSQL**: the table's notify trigger wakes the worker (LISTEN/NOTIFY); its
  polling is set to a minute, so a figure far under a second can only come from the
  notification. Target: under 20 ms at the median.
* **SQLite**: no notifications; the worker polls at least once every poll interval
  (default 1 s). Target: every latency within one poll interval.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.tasks import TASKS, Task, new_task

from lifecycles._worker import Idle, Worker
from lifecycles._worker_lease import HeldLease
from lifecycles.stores._base import Store
from lifecycles.stores.sqlite import SQLiteStore

DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def latencies(open_store: Callable[[], Store[Task]], idle: Idle, rounds: int) -> list[float]:
    """Seconds from each insert's commit to its handler's first line."""
    started: dict[str, float] = {}
    arrived = threading.Event()

    def handler(task: Task, lease: HeldLease) -> None:
        started[task.task_id] = time.perf_counter()
        arrived.set()

    worker = Worker(TASKS, open_store, handler, idle=idle)
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    writer = open_store()
    found = []
    try:
        for number in range(rounds):
            time.sleep(random.uniform(0.15, 0.4))  # the worker is idle, waiting
            arrived.clear()
            key = f"task-{number:04d}"
            inserted = time.perf_counter()
            writer.insert(new_task(key, now=time.time()))
            if not arrived.wait(idle.poll_interval + 5):
                raise RuntimeError(f"{key} was never run")
            found.append(started[key] - inserted)
    finally:
        worker.stop()
        runner.join(30)
    return found


def summary(name: str, found: list[float], target: str, met: bool) -> None:
    ordered = sorted(found)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    print(f"  {name}: median {statistics.median(found) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms,"
          f" max {max(found) * 1000:.1f} ms over {len(found)} registrations; target "
          f"{target}: {'PASS' if met else 'FAIL'}")


def postgres(rounds: int) -> None:
    import psycopg

    from lifecycles.stores.postgres import PostgresStore

    dsn = os.environ.get(DSN_VARIABLE, DEFAULT_DSN)
    schema = f"lc_wakeup_{os.getpid()}"
    try:
        admin = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as error:
        print(f"  PostgreSQL: not measured, no server at {dsn} ({error})")
        return
    admin.execute(f"CREATE SCHEMA {schema}")
    opened: list[Any] = []
    try:
        def open_store() -> Store[Task]:
            connection = psycopg.connect(dsn, autocommit=True,
                                         options=f"-c search_path={schema}")
            opened.append(connection)
            return PostgresStore(TASKS, connection)

        found = latencies(open_store, Idle(poll_interval=60.0, first=60.0), rounds)
        summary("PostgreSQL, woken by NOTIFY (polling: 60 s)", found, "median < 20 ms",
                statistics.median(found) < 0.020)
    finally:
        for connection in opened:
            connection.close()
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


def sqlite(rounds: int, poll_interval: float) -> None:
    path = Path(tempfile.mkdtemp(prefix="lc-wakeup-")) / "tasks.db"

    def open_store() -> Store[Task]:
        return SQLiteStore(TASKS, sqlite3.connect(path, check_same_thread=False))

    found = latencies(open_store, Idle(poll_interval=poll_interval), rounds)
    summary(f"SQLite, polling every {poll_interval:g} s at most", found,
            f"all <= {poll_interval:g} s", max(found) <= poll_interval)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    args = parser.parse_args()
    print("Registration to handler start, an idle worker:")
    postgres(args.rounds)
    sqlite(max(10, args.rounds // 4), args.poll_interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
