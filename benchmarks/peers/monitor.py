"""lifecycles' monitor on PostgreSQL, through ``lifecycles.monitor`` as its users call it.

Each item is a valid notification (event ``e<i>``), registered at time 10 and so due at
time 20, when every drain runs; the reader answers ``succeeded`` at once (its answers are
built before the start), so each item is polled once and ends ``succeeded``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import Drainer, Enqueuer, Recorder, System, keys_problems, shown

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.monitor import CAPABILITIES, TABLE, answer, notification

import lifecycles.monitor as lifecycles_monitor
from lifecycles.stores.postgres import connect

REGISTERED_AT = 10.0
DRAINED_AT = 20.0
SITE = "site-1"
FINAL = "succeeded"
BATCH_LIMIT = 50


def index_of(item: str) -> int:
    return int(item[1:])


def open_monitor(dsn: str) -> Any:
    """The monitor on a fresh autocommit connection to ``dsn`` (its table created there)."""
    return lifecycles_monitor.DurableTerminalProcessingMonitor(connect(dsn), CAPABILITIES)


class MonitorSystem(System):
    """The monitor's table, ``cms_source_terminal_processing``, in its own database."""

    name = "lifecycles"

    def install(self, dsn: str) -> None:
        open_monitor(dsn).connection.close()

    def reset(self, dsn: str) -> None:
        with connect(dsn) as connection:
            connection.execute(f"TRUNCATE {TABLE}")  # the meta table stays, as opened

    def fill(self, dsn: str, items: Sequence[str]) -> None:
        monitor = open_monitor(dsn)
        try:
            for start in range(0, len(items), 1000):
                pairs = [notification(index_of(item)) for item in items[start:start + 1000]]
                refused = [r for r in monitor.register_many(pairs, now=REGISTERED_AT)
                           if isinstance(r, Exception)]
                if refused:
                    raise RuntimeError(f"register_many refused {refused[0]!r}")
        finally:
            monitor.connection.close()

    def _rows(self, dsn: str) -> list[tuple[Any, ...]]:
        with connect(dsn) as connection:
            return list(connection.execute(
                f"SELECT event_id, status, poll_attempts, lease_token FROM {TABLE}"
            ).fetchall())

    def queued_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        rows = self._rows(dsn)
        problems = keys_problems([row[0] for row in rows], items)
        waiting = [row[0] for row in rows if (row[1], row[2]) != ("pending", 0)]
        if waiting:
            problems.append(f"{len(waiting)} registered items not pending: {shown(waiting)}")
        return problems

    def final_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        rows = self._rows(dsn)
        problems = keys_problems([row[0] for row in rows], items)
        unfinished = sorted(row[0] for row in rows if row[1] != FINAL)
        if unfinished:
            problems.append(f"{len(unfinished)} items not {FINAL}: {shown(unfinished)}")
        polled = sorted(row[0] for row in rows if row[2] != 1)
        if polled:
            problems.append(f"{len(polled)} items not polled exactly once: {shown(polled)}")
        leased = sorted(row[0] for row in rows if row[3] is not None)
        if leased:
            problems.append(f"{len(leased)} items still hold a lease: {shown(leased)}")
        return problems


MONITOR = MonitorSystem()


class Register(Enqueuer):
    """``register``, one call (and one commit) per item."""

    name = "lifecycles register"
    system = MONITOR

    def enqueue(self, dsn: str, items: Sequence[str], batch: int) -> float:
        notifications = [notification(index_of(item)) for item in items]
        monitor = open_monitor(dsn)
        try:
            started = time.perf_counter()
            for value, digest in notifications:
                monitor.register(value, digest, now=REGISTERED_AT)
            return time.perf_counter() - started
        finally:
            monitor.connection.close()


class RegisterMany(Enqueuer):
    """``register_many``, ``batch`` items a call, one commit each."""

    name = "lifecycles register_many"
    system = MONITOR

    def enqueue(self, dsn: str, items: Sequence[str], batch: int) -> float:
        batches = [[notification(index_of(item)) for item in items[start:start + batch]]
                   for start in range(0, len(items), batch)]
        monitor = open_monitor(dsn)
        try:
            started = time.perf_counter()
            for pairs in batches:
                monitor.register_many(pairs, now=REGISTERED_AT)
            return time.perf_counter() - started
        finally:
            monitor.connection.close()


class RegisterPairByPair(Enqueuer):
    """``register_many`` as it was before its set-based write: each pair inserted on its
    own (a savepoint each on PostgreSQL) in one transaction. The facade keeps this path
    for a batch that meets a stored record breaking a rule (``_register_each``); here it
    is timed for every batch, the "5x today's" target's baseline, in the same run."""

    name = "lifecycles register_many, pair by pair"
    system = MONITOR

    def enqueue(self, dsn: str, items: Sequence[str], batch: int) -> float:
        batches = [[notification(index_of(item)) for item in items[start:start + batch]]
                   for start in range(0, len(items), batch)]
        monitor = open_monitor(dsn)
        try:
            started = time.perf_counter()
            for pairs in batches:
                records = [monitor._notification_record(*pair, 5, REGISTERED_AT)
                           for pair in pairs]
                monitor._register_each(records, REGISTERED_AT)
            return time.perf_counter() - started
        finally:
            monitor.connection.close()


class Reader:
    """The receiver's answer ``succeeded`` about every item, built beforehand; each call
    is recorded."""

    def __init__(self, items: Sequence[str], recorder: Recorder) -> None:
        self.answers = {item: answer(item, SITE, FINAL) for item in items}
        self.recorder = recorder

    def __call__(self, event_id: str, site_id: str) -> dict[str, Any]:
        self.recorder.handled(event_id)
        return self.answers[event_id]


def checked(outcome: Any) -> str:
    """The event id of an outcome that ended as every drained item must."""
    status = getattr(outcome, "status", None)
    if status != FINAL:
        raise RuntimeError(f"an item ended {outcome!r}, not {FINAL}")
    return str(outcome.event_id)


class MonitorDrainer(Drainer):
    """The monitor drained by a loop of its own facade's calls, one connection a process."""

    system = MONITOR

    def work(self, dsn: str, items: Sequence[str], index: int, recorder: Recorder) -> None:
        reader = Reader(items, recorder)
        monitor = open_monitor(dsn)
        try:
            recorder.ready()
            self.drain(monitor, reader, f"w{index}", recorder)
            recorder.finished()
        finally:
            monitor.connection.close()

    def drain(self, monitor: Any, reader: Reader, worker: str, recorder: Recorder) -> None:
        raise NotImplementedError


class RunOnce(MonitorDrainer):
    """``run_once`` until nothing is due: one claim and one completion a commit each."""

    name = "lifecycles run_once"
    settings = "one item a call: its claim and its completion, each committed"

    def drain(self, monitor: Any, reader: Reader, worker: str, recorder: Recorder) -> None:
        while True:
            recorder.claiming()
            outcome = monitor.run_once(reader, worker, now=DRAINED_AT)
            if outcome is None:
                return
            recorder.completed([checked(outcome)])


class RunMany(MonitorDrainer):
    """``run_many(limit=50)`` until nothing is due: a batch's claims share one commit,
    its completions another."""

    name = f"lifecycles run_many({BATCH_LIMIT})"
    settings = f"up to {BATCH_LIMIT} claims in one commit, their completions in another"

    def drain(self, monitor: Any, reader: Reader, worker: str, recorder: Recorder) -> None:
        while True:
            recorder.claiming()
            outcomes = monitor.run_many(reader, worker, now=DRAINED_AT, limit=BATCH_LIMIT)
            if not outcomes:
                return
            recorder.completed([checked(outcome) for outcome in outcomes])


def worked(outcome: Any) -> str:
    """The key of a worker's outcome that ended as every drained item must (it is reported
    once its completion is committed)."""
    if outcome.status != FINAL:
        raise RuntimeError(f"an item ended {outcome!r}, not {FINAL}")
    return str(outcome.key)


class WorkerDrainer(MonitorDrainer):
    """The generic worker (``lifecycles._worker.Worker``) on the monitor's table, with the
    same reader as handler (its answer read as the facade reads it), one process each:
    what any leased lifecycle gets from ``lifecycles worker``."""

    batch = 1

    def work(self, dsn: str, items: Sequence[str], index: int, recorder: Recorder) -> None:
        from lifecycles._worker import Worker
        from lifecycles.machines.monitor import MONITOR as TABLE_MONITOR
        from lifecycles.machines.monitor import read_answer
        from lifecycles.monitor.schema import open_monitor_store

        reader = Reader(items, recorder)

        def handler(record: Any, lease: Any) -> Any:
            return read_answer(reader(record.event_id, record.site_id), record, CAPABILITIES)

        connection = connect(dsn)
        store = open_monitor_store(connection, CAPABILITIES)
        worker = Worker(
            TABLE_MONITOR, store, handler, worker_id=f"w{index}", lease_seconds=600,
            batch_size=self.batch, clock=lambda: DRAINED_AT,
            on_outcome=lambda outcome: recorder.completed([worked(outcome)]),
        )
        try:
            recorder.ready()
            recorder.claiming()
            worker.run(until_idle=True, install_signal_handlers=False)
            recorder.finished()
        finally:
            connection.close()


class WorkerOne(WorkerDrainer):
    name = "lifecycles Worker one at a time"
    settings = "the generic worker, one item a claim: its claim and completion committed"


class WorkerBatch(WorkerDrainer):
    name = "lifecycles Worker batch"
    batch = 100
    settings = ("the generic worker, batches of up to 100: one claim statement, one "
                "completion statement")
