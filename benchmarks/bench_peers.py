"""Peers side by side: lifecycles, procrastinate and pgqueuer on one PostgreSQL server.

    python benchmarks/bench_peers.py [--items 5000] [--rounds 2] [--processes 1 4]
        [--enqueue-batch 1000] [--sections drain enqueue] [--only NAME ...] [--dsn DSN]
        [--strict]

Issue 27's figures, measured in one run on one server (``--dsn``, default
``$LIFECYCLES_TEST_POSTGRES_DSN`` or the local test server): each system gets a
throw-away database of its own (``lc_peers_<hex>_<system>``, dropped at the end), and
the entries take turns round by round (A B C, then C B A), so drift hits every one alike.

1. drain: ``--items`` items, enqueued (not timed) and the database vacuumed and
   analysed, then drained with a no-op handler by 1 and by 4 worker processes
   (``multiprocessing``, spawn; each process opens its connections, then all start at
   once), each entry as its users run it (peers/): lifecycles' monitor (``run_once``
   and ``run_many(limit=50)`` through ``lifecycles.monitor``, the reader answering at
   once), procrastinate's worker (its defaults, and concurrency=10 with a pool for it),
   pgqueuer's (its default batch of 10, batch 100, and batch 10 with each completion
   committed before the job's dispatch ends). Items/s is counted from the first claim
   any process sends to the last completion any process has committed. Every drain is
   verified: each handler call records its item, and every item must have been handled
   exactly once and its completion reported once, and each system's own table must
   show every item finished once and nothing else (a failure stops the run, exit 1).
   CPU per item: the worker processes' own (``getrusage``) and the server processes
   serving the system's database (``/proc/<pid>/stat`` of its ``pg_stat_activity``
   backends; "n/a" when the server runs elsewhere), in microseconds. "Commit after
   handler": how long after its handler ran an item's completion was committed (the
   window in which a finished item is not durable).
2. enqueue: ``--items`` items into an empty table, items/s: lifecycles ``register`` (one
   call an item) and ``register_many``, procrastinate's ``batch_defer``, pgqueuer's list
   enqueue (``--enqueue-batch`` items a call for the last three); each verified queued once.

Then issue 27's targets, PASS or FAIL, each against entries measured in this run (an
entry of lifecycles that this build does not have yet is FAIL, "not available in this
build"; one whose peer is not installed is skipped). The peers come from the ``bench``
extra (``pip install -e '.[dev,bench]'``); without them the run says which are missing
and measures the rest. Without a PostgreSQL server it says so and exits 3 (which
run.py reports as not run). The default run took 10 to 18 minutes on this shared 2-core
machine (load average 5 to 10), most of it procrastinate's drains.
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
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers.base import (
    START_TIMEOUT,
    Drainer,
    Enqueuer,
    System,
    WorkerReport,
    handling_problems,
    item_ids,
    missing_modules,
    run_worker,
)
from peers.monitor import (
    MONITOR,
    Register,
    RegisterMany,
    RegisterPairByPair,
    RunMany,
    RunOnce,
    WorkerBatch,
    WorkerOne,
)
from peers.pgqueuer_queue import PGQUEUER, ListEnqueue, PgqueuerWorker
from peers.procrastinate_queue import PROCRASTINATE, BatchDefer, ProcrastinateWorker

DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"
LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"
NO_SERVER = 3  # the exit status without a PostgreSQL server: run.py's "not run"
DRAIN_TIMEOUT = 1800.0  # seconds a drain may take before the run gives up on it

SYSTEMS: list[System] = [MONITOR, PROCRASTINATE, PGQUEUER]
DRAINERS: list[Drainer] = [
    RunOnce(), RunMany(), WorkerOne(), WorkerBatch(),
    ProcrastinateWorker(1), ProcrastinateWorker(10),
    PgqueuerWorker(10), PgqueuerWorker(100), PgqueuerWorker(10, durable=True),
]
ENQUEUERS: list[Enqueuer] = [
    Register(), RegisterMany(), RegisterPairByPair(), BatchDefer(), ListEnqueue()]

# The generic Worker's entries, when this build has them (issue 27's targets name them).
WORKER_ONE = "lifecycles Worker one at a time"
WORKER_BATCH = "lifecycles Worker batch"
TARGET_PROCESSES = 4


@dataclass(frozen=True)
class Target:
    """``entry`` at least ``factor`` times the best of ``against``, in the same run."""

    entry: str
    against: tuple[str, ...]
    factor: float
    section: str  # "drain" (at TARGET_PROCESSES processes) or "enqueue"
    durable: bool = False  # the entry must commit every completion when it reports it


PROCRASTINATE_DRAINERS = tuple(d.name for d in DRAINERS if d.system is PROCRASTINATE)
TARGETS = [
    Target(WORKER_BATCH, ("pgqueuer batch=10",), 1.0, "drain", durable=True),
    Target(WORKER_BATCH, PROCRASTINATE_DRAINERS, 5.0, "drain", durable=True),
    Target(WORKER_ONE, ("lifecycles run_once",), 1.0, "drain", durable=True),
    Target("lifecycles register_many", ("procrastinate batch_defer",), 0.8, "enqueue"),
    Target("lifecycles register_many", ("lifecycles register_many, pair by pair",), 5.0,
           "enqueue"),
]


class DrainFailed(RuntimeError):
    """A drain lost an item, ran one twice, or left a system's table in another state."""


# --- the server ---------------------------------------------------------------------------


def dsn_for(dsn: str, database: str) -> str:
    """``dsn`` (a URI or ``key=value`` string) naming ``database``, as a URI (asyncpg
    takes no other form)."""
    from psycopg.conninfo import conninfo_to_dict

    parts = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    user = urllib.parse.quote(parts.pop("user", ""), safe="")
    password = parts.pop("password", None)
    host, port = parts.pop("host", "localhost"), parts.pop("port", None)
    parts.pop("dbname", None)
    login = user + (f":{urllib.parse.quote(password, safe='')}" if password else "")
    address = host + (f":{port}" if port else "")
    query = urllib.parse.urlencode(parts)
    return (f"postgresql://{login}{'@' if login else ''}{address}/{database}"
            + (f"?{query}" if query else ""))


def backend_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of server process ``pid``; None if it is not here."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerCPU:
    """The CPU of the server processes serving one database, from ``/proc``: readable
    only when the server runs on this machine."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin
        pid = admin.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.readable = backend_cpu(pid) is not None

    def sample(self, database: str) -> dict[int, float]:
        if not self.readable:
            return {}
        pids = [row[0] for row in self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,))]
        found = {pid: backend_cpu(pid) for pid in pids}
        return {pid: cpu for pid, cpu in found.items() if cpu is not None}

    def spent(self, before: dict[int, float], after: dict[int, float]) -> float | None:
        """CPU seconds spent between two samples (a backend born since counts from 0)."""
        if not self.readable:
            return None
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


@dataclass
class Databases:
    """A throw-away database per system, on one server."""

    dsn: str
    admin: Any
    names: dict[str, str]

    def of(self, system: System) -> str:
        return dsn_for(self.dsn, self.names[system.name])

    def vacuum(self, system: System) -> None:
        import psycopg

        with psycopg.connect(self.of(system), autocommit=True) as connection:
            connection.execute("VACUUM ANALYZE")


# --- one drain ----------------------------------------------------------------------------


@dataclass
class Drained:
    rate: float  # items/s from the first claim to the last completion committed
    worker_us: float  # worker processes' CPU per item
    server_us: float | None  # server processes' CPU per item
    lag_median_ms: float
    lag_max_ms: float


def next_message(messages: Any, deadline: float) -> tuple[Any, ...]:
    try:
        message: tuple[Any, ...] = messages.get(timeout=max(deadline - time.monotonic(), 0.1))
    except queue.Empty:
        raise DrainFailed("a worker process did not answer in time") from None
    if message[0] == "error":
        raise DrainFailed(f"worker {message[1]} failed: {message[2]}")
    return message


def summary(items: int, reports: Sequence[WorkerReport], server_seconds: float | None
            ) -> Drained:
    starts = [r.first_claim for r in reports if r.first_claim is not None]
    ends = [r.last_completion for r in reports if r.last_completion is not None]
    lags = sorted(lag for report in reports for lag in report.lags)
    return Drained(
        items / (max(ends) - min(starts)),
        sum(report.cpu for report in reports) / items * 1e6,
        None if server_seconds is None else server_seconds / items * 1e6,
        statistics.median(lags) * 1e3, lags[-1] * 1e3,
    )


def drain(drainer: Drainer, processes: int, databases: Databases, items: Sequence[str],
          server: ServerCPU) -> Drained:
    """Fill ``drainer``'s system with ``items``, drain it with ``processes`` workers,
    verify, and measure. Raises :class:`DrainFailed` on any problem."""
    system, dsn = drainer.system, databases.of(drainer.system)
    system.reset(dsn)
    system.fill(dsn, items)
    problems = system.queued_problems(dsn, items)
    if problems:
        raise DrainFailed(f"{drainer.name}: filled wrong: " + "; ".join(problems))
    databases.vacuum(system)
    context = multiprocessing.get_context("spawn")
    messages, go, release = context.Queue(), context.Event(), context.Event()
    workers = [context.Process(target=run_worker, args=(
        drainer, dsn, items, index, messages, go, release)) for index in range(processes)]
    for worker in workers:
        worker.start()
    reports: list[WorkerReport] = []
    finished = False
    try:
        deadline = time.monotonic() + START_TIMEOUT
        for _ in workers:
            next_message(messages, deadline)  # ("ready", index)
        before = server.sample(databases.names[system.name])
        go.set()
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while len(reports) < processes:
            reports.append(next_message(messages, deadline)[1])
        after = server.sample(databases.names[system.name])
        finished = True
    finally:
        release.set()
        for worker in workers:
            worker.join(timeout=60 if finished else 5)
            if worker.is_alive():  # ours, stuck after a failure: stop it
                worker.terminate()
                worker.join(timeout=10)
    problems = handling_problems(items, reports) + system.final_problems(dsn, items)
    if problems:
        raise DrainFailed(f"{drainer.name}, {counted(processes)}: " + "; ".join(problems))
    return summary(len(items), reports, server.spent(before, after))


# --- the sections -------------------------------------------------------------------------


def counted(processes: int) -> str:
    return f"{processes} process" + ("es" if processes > 1 else "")


def alternating(entries: Sequence[Any], turn: int) -> Sequence[Any]:
    return entries if turn % 2 == 0 else list(reversed(entries))


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def span(values: Sequence[float]) -> str:
    return f"{min(values):.0f}..{max(values):.0f}"


Drains = dict[tuple[str, int], list[Drained]]


def section_drain(args: argparse.Namespace, drainers: Sequence[Drainer], databases: Databases,
                  server: ServerCPU) -> Drains:
    items = item_ids(args.items)
    results: Drains = {}
    for round_number in range(args.rounds):
        for processes in args.processes:
            for drainer in alternating(drainers, round_number + processes):
                results.setdefault((drainer.name, processes), []).append(
                    drain(drainer, processes, databases, items, server))
    host = urllib.parse.urlsplit(dsn_for(args.dsn, "x")).netloc.rsplit("@", 1)[-1]
    print(f"1. drain: {args.items:,} no-op items, PostgreSQL {host} (a database per system,"
          f" dropped), {args.rounds} alternating rounds; every drain verified: none lost,"
          " none run twice")
    counts = args.processes
    last = counts[-1]
    header = "".join(f"{counted(n):>22}" for n in counts)
    print(f"   {'':<34}{header}{'x run_once':>12}{'CPU us/item':>16}"
          f"{'commit after handler':>23}  durable")
    print(f"   {'entry':<34}" + "".join(f"{'items/s':>10}{'min..max':>12}" for _ in counts)
          + f"{f'at {last}':>12}{'worker':>8}{'server':>8}{'median ms':>12}{'max ms':>9}")
    baseline = results.get(("lifecycles run_once", last))
    for drainer in drainers:
        rates = {n: [d.rate for d in results[(drainer.name, n)]] for n in counts}
        at_last = results[(drainer.name, last)]
        ratio = (f"{median(rates[last]) / median([d.rate for d in baseline]):.2f}"
                 if baseline else "")
        server_us = [d.server_us for d in at_last if d.server_us is not None]
        print(f"   {drainer.name:<34}"
              + "".join(f"{median(rates[n]):>10.0f}{span(rates[n]):>12}" for n in counts)
              + f"{ratio:>12}{median([d.worker_us for d in at_last]):>8.0f}"
              + (f"{median(server_us):>8.0f}" if server_us else f"{'n/a':>8}")
              + f"{median([d.lag_median_ms for d in at_last]):>12.1f}"
              + f"{max(d.lag_max_ms for d in at_last):>9.1f}"
              + f"  {'yes' if drainer.durable else 'NO'}")
    print("   settings:")
    for drainer in drainers:
        print(f"     {drainer.name:<32}{drainer.settings}")
    durability_note(drainers, results, last)
    return results


def durability_note(drainers: Sequence[Drainer], results: Drains, processes: int) -> None:
    buffered = [d for d in drainers if not d.durable]
    for drainer in buffered:
        lags = results[(drainer.name, processes)]
        print(f"   {drainer.name}: a finished item's completion is held in memory, committed"
              f" a median {median([d.lag_median_ms for d in lags]):.0f} ms (at most"
              f" {max(d.lag_max_ms for d in lags):.0f} ms) after its handler ran; a worker"
              " dying meanwhile loses it, and the item runs again")
    durable = {d.name: d for d in drainers if d.durable and d.system is PGQUEUER}
    for drainer in buffered:
        committed = durable.get(f"{drainer.name} durable")
        if committed is None:
            continue
        ratio = (median([d.rate for d in results[(committed.name, processes)]])
                 / median([d.rate for d in results[(drainer.name, processes)]]))
        print(f"   {committed.name}: the same with each completion committed before its"
              f" job's dispatch ends (pgqueuer has no setting for it: its completion buffer"
              f" replaced in the worker processes): {ratio:.2f} of its buffered rate at"
              f" {counted(processes)}")


Enqueues = dict[str, list[float]]


def section_enqueue(args: argparse.Namespace, enqueuers: Sequence[Enqueuer],
                    databases: Databases) -> Enqueues:
    items = item_ids(args.items)
    results: Enqueues = {}
    for round_number in range(args.rounds):
        for enqueuer in alternating(enqueuers, round_number):
            dsn = databases.of(enqueuer.system)
            enqueuer.system.reset(dsn)
            seconds = enqueuer.enqueue(dsn, items, args.enqueue_batch)
            problems = enqueuer.system.queued_problems(dsn, items)
            if problems:
                raise DrainFailed(f"{enqueuer.name}: " + "; ".join(problems))
            results.setdefault(enqueuer.name, []).append(len(items) / seconds)
    print(f"2. enqueue: {args.items:,} items into an empty table, {args.enqueue_batch:,} a call"
          f" where the call takes many, {args.rounds} alternating rounds; each verified"
          " queued once")
    print(f"   {'entry':<34}{'items/s':>10}{'min..max':>14}")
    for enqueuer in enqueuers:
        rates = results[enqueuer.name]
        print(f"   {enqueuer.name:<34}{median(rates):>10.0f}{span(rates):>14}")
    return results


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def judge(targets: Sequence[Target], medians: dict[str, dict[str, float]],
          durable: dict[str, bool], uninstalled: set[str]) -> bool:
    """Print each target's verdict from ``medians`` (section -> entry -> median items/s,
    drains at TARGET_PROCESSES processes); False when one fails."""
    print("3. issue 27's targets, in this run")
    passed = True
    for target in targets:
        where = f"at {TARGET_PROCESSES} processes" if target.section == "drain" else "enqueue"
        label = (f"   {target.entry} >= {target.factor:g}x best of"
                 f" {', '.join(target.against)} ({where}):")
        rates = medians.get(target.section)
        if rates is None:
            print(f"{label} not measured in this run")
            continue
        against = [rates[name] for name in target.against if name in rates]
        if not against:
            print(f"{label} skipped: {' and '.join(target.against)} not measured"
                  + (f" ({', '.join(sorted(uninstalled))} not installed)" if uninstalled else ""))
            continue
        if target.entry not in rates:
            passed = False
            print(f"{label} not available in this build  FAIL")
            continue
        ratio = rates[target.entry] / max(against)
        ok = ratio >= target.factor and (durable.get(target.entry, True) or not target.durable)
        passed = passed and ok
        print(f"{label} {rates[target.entry]:.0f}/s is {ratio:.2f}x  {verdict(ok)}")
    return passed


# --- main ---------------------------------------------------------------------------------


def chosen(entries: Sequence[Any], only: Sequence[str]) -> list[Any]:
    return [e for e in entries if not only or any(part in e.name for part in only)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, TARGET_PROCESSES])
    parser.add_argument("--enqueue-batch", type=int, default=1_000)
    parser.add_argument("--sections", nargs="*", default=["drain", "enqueue"],
                        choices=["drain", "enqueue"])
    parser.add_argument("--only", nargs="*", default=[],
                        help="entries whose name contains one of these")
    parser.add_argument("--dsn", default=os.environ.get(DSN_VARIABLE) or LOCAL_DSN)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args()
    import psycopg

    try:
        admin = psycopg.connect(args.dsn, autocommit=True, connect_timeout=5)
    except psycopg.Error as error:
        reason = (str(error).strip().splitlines() or [""])[0]
        print(f"PostgreSQL not reachable at {args.dsn} ({type(error).__name__}: {reason});"
              " bench_peers measures on a server: start one, or pass --dsn")
        return NO_SERVER
    missing = {system.name: missing_modules(system.requires) for system in SYSTEMS}
    uninstalled = {name for name, modules in missing.items() if modules}
    for name in sorted(uninstalled):
        print(f"missing peer: {name} (no module {', '.join(missing[name])}; install the bench"
              " extra: pip install -e '.[dev,bench]'); measuring the rest")
    drainers = [d for d in chosen(DRAINERS, args.only) if d.system.name not in uninstalled]
    enqueuers = [e for e in chosen(ENQUEUERS, args.only) if e.system.name not in uninstalled]
    used = [s for s in SYSTEMS if any(e.system is s for e in [*drainers, *enqueuers])]
    token = secrets.token_hex(4)
    databases = Databases(args.dsn, admin, {s.name: f"lc_peers_{token}_{s.name}" for s in used})
    sections: dict[str, Callable[[], Any]] = {
        "drain": lambda: section_drain(args, drainers, databases, ServerCPU(admin)),
        "enqueue": lambda: section_enqueue(args, enqueuers, databases),
    }
    measured: dict[str, Any] = {}
    try:
        for system in used:
            admin.execute(f"CREATE DATABASE {databases.names[system.name]}")  # ours: hex
            system.install(databases.of(system))
        for name in args.sections:
            started = time.perf_counter()
            measured[name] = sections[name]()
            print(f"   ({time.perf_counter() - started:.0f} s)", flush=True)
    except DrainFailed as failure:
        print(f"FAILED verification: {failure}")
        return 1
    finally:
        for name in databases.names.values():
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
    medians: dict[str, dict[str, float]] = {}
    if "drain" in measured and TARGET_PROCESSES in args.processes:
        medians["drain"] = {name: median([d.rate for d in runs])
                            for (name, processes), runs in measured["drain"].items()
                            if processes == TARGET_PROCESSES}
    if "enqueue" in measured:
        medians["enqueue"] = {name: median(rates) for name, rates in measured["enqueue"].items()}
    passed = judge(TARGETS, medians, {d.name: d.durable for d in DRAINERS}, uninstalled)
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    raise SystemExit(main())
