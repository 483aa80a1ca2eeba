"""Batches on PostgreSQL: insert_many, claim_many, put_many and the worker's batch mode.

    python benchmarks/bench_batches.py [--dsn DSN] [--rounds 5] [--batch 1000]
        [--claim-batch 100] [--drain-items 5000] [--drain-rounds 3]
        [--sections insert register claim put drain]

Every figure is measured in this run, contestants in alternating rounds (A B C, then
C B A), medians over the rounds, each process with its own connection to the same
server, in a throw-away schema. Per item: wall rate (items/s), the client's CPU
(``time.process_time`` of the processes) and the server's (``/proc/<pid>/stat`` of the
backends serving them, so the server must run on this machine; its clock ticks every
10 ms, so a small sample reads in steps).

1. ``insert``: ``insert_many`` of ``--batch`` new records (the monitor's on its exact
   schema, and the test task lifecycle's), 1 and 4 processes: the store's set-based path
   (``COPY`` into a staging table, one ``INSERT ... ON CONFLICT DO NOTHING``), the same
   ``INSERT`` fed by one binary array per column (``unnest``, the alternative measured
   for the choice), and ``Store.insert_many``'s default, an ``insert`` each in one
   transaction (what the monitor's ``register_many`` did before, a savepoint each).
2. ``register``: the monitor's ``register_many`` of ``--batch`` notifications, on
   ``insert_many`` (each pair checked, the valid records stored by one set-based write),
   against the pair-by-pair path it had before (``_register_each``: a savepoint a pair,
   kept for a batch that meets a broken stored record). Target (issue 27): at least 0.8
   of procrastinate's ``batch_defer`` (18,457/s in the issue's run on this machine; in
   the same run, ``bench_peers.py``) and at least 5x the pair-by-pair path, in this run.
3. ``claim``: ``claim_many`` of ``--claim-batch`` due tasks, 1 and 4 processes: the one
   statement, against the protocol in a transaction (``lease.claim_in_transaction``).
4. ``put``: the completions of a claimed batch (``succeed``), ``put_many`` inside a
   transaction as the worker writes them: one statement, against the writes back to back.
5. ``drain``: the generic worker draining ``--drain-items`` no-op tasks with 4 processes
   (``Worker(..., batch_size=B).run(until_idle=True)``, B = 50, 100: one handler at a
   time, batches run in the worker's thread; B = 100 with ``concurrency=100``, handlers
   on a pool of 100 threads; and one at a time, B = 1), beside a raw batch loop (two
   autocommit statements per batch, no checks: a ``FOR UPDATE SKIP LOCKED`` claim of B
   and one completion of the B) at B = 10 and 100, the ceiling any PostgreSQL queue
   with durable completions approaches (pgqueuer's dequeue is such a claim). Every
   drain is verified: each task handled once, all succeeded. Targets (issue 27): at
   least pgqueuer's rate at its default batch (5,333-6,951/s in the issue's run) and at
   least 5x procrastinate's (447-825/s); peers are not installed here, so those figures
   are the issue's, not this run's.

The machine is shared and noisy: read the ratios, which are measured under the same load.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from support.monitor import CAPABILITIES, notification
from support.tasks import TASKS, Task, TaskInputs, new_task

from lifecycles._worker import Idle, Worker
from lifecycles.machines import lease
from lifecycles.machines.monitor import MONITOR, new_record
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor
from lifecycles.monitor.schema import MonitorSchema
from lifecycles.stores._base import Store
from lifecycles.stores._sql import SQLStore

DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"
LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"
# The figures, measured on this machine in its own run (peers not installed here).
PROCRASTINATE_BATCH_DEFER = 18_457.0
REGISTER_MANY_BEFORE = 2_485.0
PGQUEUER_DEFAULT_BATCH = (5_333.0, 6_951.0)
PROCRASTINATE_DRAIN = (447.0, 825.0)

Measured = tuple[int, float, float, float]  # items, wall seconds, client CPU s, server CPU s


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) of server process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Clocks:
    """Wall, client and server time of what runs inside :meth:`timed` blocks, summed."""

    def __init__(self, connection: Any) -> None:
        self.pid = int(connection.info.backend_pid)
        self.items = 0
        self.wall = self.client = self.server = 0.0

    def timed(self, items: int, action: Callable[[], Any]) -> Any:
        wall, client, server = time.perf_counter(), time.process_time(), server_cpu(self.pid)
        result = action()
        self.wall += time.perf_counter() - wall
        self.client += time.process_time() - client
        self.server += server_cpu(self.pid) - server
        self.items += items
        return result

    def report(self) -> Measured:
        return self.items, self.wall, self.client, self.server


def connect_to(dsn: str, schema: str) -> Any:
    from lifecycles.stores.postgres import connect

    return connect(dsn, options=f"-c search_path={schema}")


# --- the contestants, each run in a process of its own --------------------------------


def monitor_records(first: int, count: int) -> list[Any]:
    return [new_record(event_id=f"e{n}", notification_id=f"n{n}", site_id="site-1",
                       terminal_status="published", notification_sha256="a" * 64,
                       max_failures=5, now=10.0) for n in range(first, first + count)]


def task_records(first: int, count: int) -> list[Task]:
    return [new_task(f"task-{n:08d}", now=0.0) for n in range(first, first + count)]


def unnest_insert(store: Any, records: Sequence[Any]) -> list[Any]:
    """The set-based insert fed by one binary array per column instead of ``COPY``: the
    alternative measured (psycopg dumps arrays element by element in Python; ``COPY``
    formats its rows in C)."""
    from lifecycles.stores._postgres_batch import _columns, batches

    batches(store)  # registers the binary dumper on the connection
    names = store.schema.column_names
    quote = store.dialect.quote
    types = [f"{store.dialect.type_names[c.kind]}[]" for c in store.schema.columns]
    listed = ", ".join(map(quote, names))
    statement = (
        f"INSERT INTO {quote(store.schema.table)} ({listed}) SELECT {listed} FROM unnest("
        f"{', '.join(f'%s::{t}' for t in types)}) WITH ORDINALITY AS v({listed}, lc_at)"
        f" ORDER BY lc_at ON CONFLICT DO NOTHING RETURNING {quote(store.lifecycle.key_field)}")
    for record in records:
        store.lifecycle.check(record)
    rows = [store._encode(record, names) for record in records]
    with store.transaction():
        inserted = store.run(statement, _columns(rows, types))
    assert len(inserted) == len(records), "the benchmark inserts new keys only"
    return list(records)


INSERTS: dict[str, Callable[[Any, Sequence[Any]], Any]] = {
    "insert_many": lambda store, records: store.insert_many(records),
    "unnest": unnest_insert,
    "insert each": lambda store, records: Store.insert_many(store, records),
}


def open_store(lifecycle: str, connection: Any) -> Any:
    from lifecycles.stores.postgres import PostgresStore

    if lifecycle == "monitor":
        return PostgresStore(MONITOR, connection, MonitorSchema(CAPABILITIES, MONITOR))
    return PostgresStore(TASKS, connection)


def run_insert(dsn: str, schema: str, task: tuple[str, str, int, int, int]) -> Measured:
    lifecycle, kind, first, batches, size = task
    connection = connect_to(dsn, schema)
    store = open_store(lifecycle, connection)
    make = monitor_records if lifecycle == "monitor" else task_records
    work = [make(first + n * size, size) for n in range(batches)]
    clocks = Clocks(connection)
    insert = INSERTS[kind]
    for records in work:
        answers = clocks.timed(size, lambda records=records: insert(store, records))
        assert len(answers) == size
    connection.close()
    return clocks.report()


def run_register(dsn: str, schema: str, task: tuple[str, str, int, int, int]) -> Measured:
    _, kind, first, batches, size = task
    connection = connect_to(dsn, schema)
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    work = [[notification(first + n * size + k) for k in range(size)] for n in range(batches)]
    clocks = Clocks(connection)
    for pairs in work:
        if kind == "pair by pair":  # what register_many did before insert_many
            answers = clocks.timed(size, lambda pairs=pairs: monitor._register_each(
                [monitor._notification_record(*pair, 5, 10.0) for pair in pairs], 10.0))
        else:
            answers = clocks.timed(size, lambda pairs=pairs: monitor.register_many(
                pairs, now=10))
        assert len(answers) == size and not any(isinstance(a, Exception) for a in answers)
    connection.close()
    return clocks.report()


def claim_inputs(now: float, worker: str) -> Callable[[int], TaskInputs]:
    return lambda n: TaskInputs(now=now, worker_id=worker, lease_token=secrets.token_urlsafe(16),
                                lease_seconds=600.0)


def run_claim(dsn: str, schema: str, task: tuple[str, str, int, int, int]) -> Measured:
    _, kind, first, batches, size = task
    connection = connect_to(dsn, schema)
    store = open_store("tasks", connection)
    clocks = Clocks(connection)
    inputs_for = claim_inputs(1.0, f"w{first}")
    for _ in range(batches):
        if kind == "claim_many":
            granted = clocks.timed(size, lambda: store.claim_many(inputs_for, size))
        else:
            granted = clocks.timed(size, lambda: lease.claim_in_transaction(
                store, TASKS, inputs_for, size))
        assert len(granted) == size, "the table ran out of due tasks"
    connection.close()
    return clocks.report()


def run_put(dsn: str, schema: str, task: tuple[str, str, int, int, int]) -> Measured:
    _, kind, first, batches, size = task
    connection = connect_to(dsn, schema)
    store = open_store("tasks", connection)
    clocks = Clocks(connection)
    for _ in range(batches):
        held = store.claim_many(claim_inputs(1.0, f"w{first}"), size)
        assert len(held) == size, "the table ran out of due tasks"
        writes = []
        for record in held:
            inputs = TaskInputs(now=2.0, worker_id=record.worker_id, lease_token=record.lease_token)
            row = TASKS.select_row("succeed", record, inputs)
            writes.append((record, TASKS.apply_row(row, record, inputs), row))

        def written(writes: list[Any] = writes) -> list[bool]:
            with store.transaction():
                if kind == "put_many":
                    return store.put_many(writes)
                return SQLStore.put_many(store, writes)

        assert all(clocks.timed(size, written))
    connection.close()
    return clocks.report()


RUNNERS: dict[str, Callable[[str, str, tuple[str, str, int, int, int]], Measured]] = {
    "insert": run_insert, "register": run_register, "claim": run_claim, "put": run_put,
}


def child(section: str, dsn: str, schema: str, task: Any, start: Any, results: Any) -> None:
    try:
        start.wait(timeout=120)
        results.put((RUNNERS[section](dsn, schema, task), ""))
    except BaseException as error:  # reported by the parent, which must not hang
        results.put(((0, 0.0, 0.0, 0.0), f"{type(error).__name__}: {error}"))


def in_processes(section: str, dsn: str, schema: str, tasks: list[Any]) -> Measured:
    """Run one task per process, started together; items, the longest wall, CPU summed."""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(len(tasks)), context.Queue()
    processes = [context.Process(target=child, args=(section, dsn, schema, task, start, results))
                 for task in tasks]
    for process in processes:
        process.start()
    reports = []
    try:
        for _ in processes:
            reports.append(results.get(timeout=600))
    except queue.Empty:
        raise RuntimeError(f"{section}: a process did not report") from None
    finally:
        for process in processes:
            process.join(timeout=30)
    errors = [error for _, error in reports if error]
    if errors:
        raise RuntimeError(f"{section}: {errors[0]}")
    measured = [m for m, _ in reports]
    return (sum(m[0] for m in measured), max(m[1] for m in measured),
            sum(m[2] for m in measured), sum(m[3] for m in measured))


def alternating(names: Sequence[str], round_number: int) -> Sequence[str]:
    return names if round_number % 2 == 0 else list(reversed(names))


def table_row(name: str, figures: list[Measured]) -> str:
    rate = statistics.median(items / wall for items, wall, _, _ in figures)
    client = statistics.median(c / items * 1e6 for items, _, c, _ in figures)
    server = statistics.median(s / items * 1e6 for items, _, _, s in figures)
    return f"   {name:<34}{rate:>11,.0f}{client:>11.1f}{server:>11.1f}"


HEADER = f"   {'':<34}{'items/s':>11}{'client us':>11}{'server us':>11}   medians per item"


def median_rate(figures: list[Measured]) -> float:
    return statistics.median(items / wall for items, wall, _, _ in figures)


# --- sections -------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, schema: str) -> None:
        self.args, self.schema, self.dsn = args, schema, args.dsn
        self.next_key = 0

    def keys(self, count: int) -> int:
        first, self.next_key = self.next_key, self.next_key + count
        return first

    def admin(self, statement: str) -> None:
        with connect_to(self.dsn, self.schema) as admin:
            admin.execute(statement)

    def fill_tasks(self, count: int, due: float = 0.0) -> None:
        """A task table of ``count`` due tasks, nothing else, analysed."""
        with connect_to(self.dsn, self.schema) as connection:
            store = open_store("tasks", connection)
            connection.execute(f"TRUNCATE {store.schema.table}")
            for first in range(0, count, 5_000):
                store.insert_many([new_task(f"task-{n:08d}", now=due)
                                   for n in range(first, min(count, first + 5_000))])
            connection.execute(f"VACUUM ANALYZE {store.schema.table}")

    def compare(self, section: str, lifecycle: str, kinds: Sequence[str], processes: int,
                batches: int, size: int, before: Callable[[], None] | None = None,
                ) -> dict[str, list[Measured]]:
        figures: dict[str, list[Measured]] = {kind: [] for kind in kinds}
        for round_number in range(self.args.rounds):
            for kind in alternating(kinds, round_number):
                if before is not None:
                    before()
                tasks = [(lifecycle, kind, self.keys(batches * size), batches, size)
                         for _ in range(processes)]
                figures[kind].append(in_processes(section, self.dsn, self.schema, tasks))
        return figures

    def section_insert(self) -> None:
        size = self.args.batch
        print(f"1. insert_many of {size:,} new records per batch, 3 batches per process,"
              f" {self.args.rounds} rounds")
        for lifecycle in ("monitor", "tasks"):
            for processes in (1, 4):
                figures = self.compare("insert", lifecycle, list(INSERTS), processes, 3, size)
                print(f"   {lifecycle}, {processes} process{'es' if processes > 1 else ''}:")
                print(HEADER)
                for kind, measured in figures.items():
                    print(table_row(kind, measured))
                ratio = statistics.median(
                    a[0] / a[1] / (b[0] / b[1])
                    for a, b in zip(figures["insert_many"], figures["insert each"], strict=True))
                copy_vs_arrays = statistics.median(
                    a[0] / a[1] / (b[0] / b[1])
                    for a, b in zip(figures["insert_many"], figures["unnest"], strict=True))
                print(f"   insert_many / insert each {ratio:.1f}x;"
                      f" COPY / unnest {copy_vs_arrays:.2f}")

    def section_register(self) -> None:
        size = self.args.batch
        print(f"2. the monitor's register_many of {size:,} notifications, 3 batches per"
              f" process, {self.args.rounds} rounds")
        for processes in (1, 4):
            figures = self.compare("register", "monitor", ["on insert_many", "pair by pair"],
                                   processes, 3, size)
            print(f"   {processes} process{'es' if processes > 1 else ''}:")
            print(HEADER)
            for kind, measured in figures.items():
                print(table_row(kind, measured))
            wired = median_rate(figures["on insert_many"])
            today = median_rate(figures["pair by pair"])
            ratio = statistics.median(
                a[0] / a[1] / (b[0] / b[1])
                for a, b in zip(figures["on insert_many"], figures["pair by pair"], strict=True))
            target = 0.8 * PROCRASTINATE_BATCH_DEFER
            ok = wired >= target and ratio >= 5
            print(f"   on insert_many {wired:,.0f}/s = {ratio:.1f}x pair by pair's {today:,.0f}/s"
                  f" (issue: {REGISTER_MANY_BEFORE:,.0f}/s); target >= 5x and >="
                  f" 0.8 x procrastinate's batch_defer ({target:,.0f}/s, the issue's figure)"
                  f"  {'PASS' if ok else 'FAIL'}" if processes == 1 else
                  f"   on insert_many {wired:,.0f}/s = {ratio:.1f}x pair by pair's {today:,.0f}/s")

    def section_claim(self) -> None:
        size = self.args.claim_batch
        print(f"3. claim_many of {size} due tasks, 5 batches per process, {self.args.rounds}"
              " rounds, table refilled before each")
        for processes in (1, 4):
            figures = self.compare(
                "claim", "tasks", ["claim_many", "in a transaction"], processes, 5, size,
                before=lambda processes=processes: self.fill_tasks(processes * 5 * size + 10))
            print(f"   {processes} process{'es' if processes > 1 else ''}:")
            print(HEADER)
            for kind, measured in figures.items():
                print(table_row(kind, measured))

    def section_put(self) -> None:
        size = self.args.claim_batch
        print(f"4. put_many of {size} completions in a transaction, 5 batches per process,"
              f" {self.args.rounds} rounds")
        for processes in (1, 4):
            figures = self.compare(
                "put", "tasks", ["put_many", "back to back"], processes, 5, size,
                before=lambda processes=processes: self.fill_tasks(processes * 5 * size + 10))
            print(f"   {processes} process{'es' if processes > 1 else ''}:")
            print(HEADER)
            for kind, measured in figures.items():
                print(table_row(kind, measured))

    def section_drain(self) -> None:
        count, processes = self.args.drain_items, 4
        print(f"5. draining {count:,} no-op tasks with {processes} processes,"
              f" {self.args.drain_rounds} rounds, every drain verified")
        kinds = ["worker batch 100", "worker batch 50", "worker batch 100 x 100 threads",
                 "worker one at a time", "raw batch 100", "raw batch 10"]
        figures: dict[str, list[Measured]] = {kind: [] for kind in kinds}
        for round_number in range(self.args.drain_rounds):
            for kind in alternating(kinds, round_number):
                self.fill_tasks(count)
                figures[kind].append(drain(self.dsn, self.schema, kind, processes, count))
        print(HEADER)
        for kind, measured in figures.items():
            print(table_row(kind, measured))
        best = max(median_rate(figures["worker batch 100"]),
                   median_rate(figures["worker batch 50"]))
        raw, raw_10 = median_rate(figures["raw batch 100"]), median_rate(figures["raw batch 10"])
        ok = best >= PGQUEUER_DEFAULT_BATCH[0] and best >= 5 * PROCRASTINATE_DRAIN[1]
        print(f"   worker batch mode {best:,.0f}/s = {best / raw:.2f} of the raw batch loop at"
              f" 100 and {best / raw_10:.2f} of it at 10 (pgqueuer's default batch: no queue"
              " at batch 10 passes the raw loop at 10), in this run")
        print(f"   worker batch mode {best:,.0f}/s; target >= pgqueuer at its default batch"
              f" ({PGQUEUER_DEFAULT_BATCH[0]:,.0f}-{PGQUEUER_DEFAULT_BATCH[1]:,.0f}/s) and"
              f" >= 5x procrastinate ({5 * PROCRASTINATE_DRAIN[1]:,.0f}/s): the issue's"
              f" figures  {'PASS' if ok else 'FAIL'}")


# --- the drain ---------------------------------------------------------------------------


def drain_child(dsn: str, schema: str, kind: str, start: Any, results: Any) -> None:
    try:
        handled: list[str] = []
        connection = connect_to(dsn, schema)
        if kind.startswith("worker"):
            # "worker batch B": one handler at a time, batches of B (run in this thread);
            # "... x N threads": N handlers at once on a thread pool, claims of up to B.
            size = 1 if kind.endswith("one at a time") else int(kind.split()[2])
            threads = int(kind.split()[4]) if kind.endswith("threads") else 1
            worker = Worker(TASKS, lambda: open_store("tasks", connection),
                            lambda task, held: handled.append(task.task_id),
                            batch_size=size, concurrency=threads,
                            idle=Idle(poll_interval=0.05, first=0.01))
            pid = int(worker.store.connection.info.backend_pid)  # type: ignore[attr-defined]

            def run() -> None:
                worker.run(until_idle=True, install_signal_handlers=False)
        else:
            raw = RawBatches(connection, int(kind.rsplit(" ", 1)[1]), handled)
            pid, run = int(connection.info.backend_pid), raw.run  # type: ignore[assignment]
        start.wait(timeout=120)
        client, server = time.process_time(), server_cpu(pid)
        run()
        results.put((handled, time.perf_counter(), time.process_time() - client,
                     server_cpu(pid) - server, ""))
        connection.close()
    except BaseException as error:  # reported by the parent
        results.put(([], 0.0, 0.0, 0.0, f"{type(error).__name__}: {error}"))


def drain(dsn: str, schema: str, kind: str, processes: int, count: int) -> Measured:
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(processes + 1), context.Queue()
    children = [context.Process(target=drain_child, args=(dsn, schema, kind, start, results))
                for _ in range(processes)]
    for process in children:
        process.start()
    start.wait(timeout=120)
    began = time.perf_counter()
    reports = []
    try:
        for _ in children:
            reports.append(results.get(timeout=600))
    finally:
        for process in children:
            process.join(timeout=30)
    errors = [report[-1] for report in reports if report[-1]]
    if errors:
        raise RuntimeError(f"{kind}: {errors[0]}")
    handled = [key for report in reports for key in report[0]]
    if len(handled) != count or len(set(handled)) != count:
        raise RuntimeError(f"{kind}: {len(handled)} calls for {len(set(handled))} of {count}")
    with connect_to(dsn, schema) as connection:
        succeeded = connection.execute(
            "SELECT count(*) FROM lifecycle_tasks WHERE status = 'succeeded'").fetchone()
    if succeeded is None or succeeded[0] != count:
        raise RuntimeError(f"{kind}: {succeeded} succeeded of {count}")
    ended = max(report[1] for report in reports)
    return (count, ended - began, sum(report[2] for report in reports),
            sum(report[3] for report in reports))


class RawBatches:
    """The fewest statements a durable batch drain takes, no checks: claim ``size`` due
    tasks with one ``UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING``, call the handler
    on each, complete them all with one ``UPDATE`` (compare-and-set on the token)."""

    def __init__(self, connection: Any, size: int, handled: list[str]) -> None:
        self.connection, self.size, self.handled = connection, size, handled

    def run(self) -> None:
        execute = self.connection.execute
        while True:
            token = secrets.token_urlsafe(16)
            claimed = execute(
                "WITH picked AS (SELECT task_id FROM lifecycle_tasks WHERE status = 'queued'"
                " AND available_at <= %s ORDER BY available_at, task_id LIMIT %s"
                " FOR UPDATE SKIP LOCKED) UPDATE lifecycle_tasks AS t SET status = 'running',"
                " worker_id = 'raw', lease_token = %s, lease_expires_at = %s, updated_at = %s"
                " FROM picked WHERE t.task_id = picked.task_id RETURNING t.task_id",
                (1.0, self.size, token, 601.0, 1.0), prepare=True).fetchall()
            if not claimed:
                return
            keys = [key for (key,) in claimed]
            for key in keys:
                self.handled.append(key)
            execute(
                "UPDATE lifecycle_tasks SET status = 'succeeded', worker_id = NULL,"
                " lease_token = NULL, lease_expires_at = NULL, updated_at = %s"
                " WHERE task_id = ANY(%s) AND lease_token = %s",
                (2.0, keys, token), prepare=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get(DSN_VARIABLE, LOCAL_DSN))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--claim-batch", type=int, default=100)
    parser.add_argument("--drain-items", type=int, default=5_000)
    parser.add_argument("--drain-rounds", type=int, default=3)
    parser.add_argument("--sections", nargs="*",
                        default=["insert", "register", "claim", "put", "drain"])
    args = parser.parse_args()
    try:
        from lifecycles.stores.postgres import connect

        with connect(args.dsn, connect_timeout=5) as admin:
            schema = f"lc_bench_{secrets.token_hex(6)}"
            admin.execute(f"CREATE SCHEMA {schema}")  # the name is ours: lc_bench_ + hex
    except Exception as error:  # no driver, or no server
        reason = (str(error).strip().splitlines() or [""])[0]
        print(f"skipped: PostgreSQL not reachable at {args.dsn} ({type(error).__name__}:"
              f" {reason})")
        return 0
    try:
        with connect_to(args.dsn, schema) as setup:  # the tables, created once
            open_store("monitor", setup)
            open_store("tasks", setup)
        bench = Bench(args, schema)
        print(f"(server {args.dsn.rsplit('@', 1)[-1]}, schema {schema}, load average"
              f" {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        for section in args.sections:  # a missed target prints FAIL (run.py --strict)
            getattr(bench, f"section_{section}")()
    finally:
        with connect(args.dsn) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(f"(schema {schema} dropped; load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
