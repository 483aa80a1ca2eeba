"""Monitor throughput: lifecycles against the reference and hand-written raw SQL loops.

    python benchmarks/bench_throughput.py [--items 1000] [--rounds 5]
        [--pg-seconds 1.5] [--pg-ceiling-seconds 5] [--pg-rounds 3] [--pg-items 20000]
        [--dsn DSN]
        [--batch-items 1000] [--batch-rounds 11] [--sections wal postgres batches]

Three figures, each from contestants measured in alternating rounds (A B C, then C B A)
in this one run, medians over the rounds; a ratio is the median of the ratios measured
round by round. Every cycle reads a fake receiver that answers a valid 'pending' status
(built beforehand, so the reader costs a dict lookup), so each cycle moves one item from
pending to watching, with its next poll 30 s ahead.

1. run_once cycles/s on SQLite in WAL mode with synchronous=NORMAL (commits are not
   fsync'ed: what is left is the monitor's own work): lifecycles, the reference, and a
   raw loop at the same durability (claim: BEGIN IMMEDIATE, one SELECT through the
   claim-order index in index order, one UPDATE setting the lease, COMMIT; then the
   reader; then complete: one autocommit UPDATE, compare-and-set on event_id and
   lease_token; no checks). Each round drains a fresh file of ``--items`` due items per
   contestant (the reference sorts every due item on each claim, so its rate falls as
   that backlog grows; bench_claims.py measures that). Target: lifecycles/raw >= 0.8.
   A fourth contestant, ``checked`` (loops.py), is the raw loop plus lifecycles' checks
   and nothing else: checked/raw is the most any implementation making those checks can
   reach, printed beside the target.
2. PostgreSQL cycles/s with 1, 4 and 8 worker processes (each its own connection, in a
   throw-away schema): lifecycles run_once against a raw SKIP LOCKED loop (claim: one
   autocommit ``UPDATE ... WHERE event_id = (SELECT ... ORDER BY created_at, event_id
   LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING``; complete: one compare-and-set UPDATE).
   The workers start together and run for ``--pg-seconds``; the table is emptied and
   refilled with ``--pg-items`` due items before each measurement. Target at 4 workers:
   lifecycles/raw >= 0.8; the ``checked`` loop (loops.py) at 4 workers gives its
   ceiling, as in section 1, from longer runs (``--pg-ceiling-seconds``, the raw, checked
   and ``verified`` loops, each round). On PostgreSQL the checked loop checks its claim
   only after the claim has committed; ``verified`` also refuses, before it commits, what
   the reference refuses (a broken record, an expired lease first, an altered schema),
   with verdicts and guards in its statements: verified/raw is the ceiling for an
   implementation keeping the reference's refusals. Skipped, with the reason, when the server
   cannot be reached (``--dsn``, default ``$LIFECYCLES_TEST_POSTGRES_DSN`` or the local
   test server).
3. Batches at default settings (a SQLite file as ``sqlite3.connect(path)`` opens it:
   rollback journal, synchronous=FULL, every commit fsync'ed): items/s of lifecycles'
   ``run_many(limit=50)`` against the reference's ``run_once`` (and lifecycles'
   ``run_once``, for comparison), each draining ``--batch-items`` items per round.
   Target: run_many >= 10x the reference. A build without ``run_many`` prints
   ``run_many: not available in this build`` and FAIL. The batch loops of loops.py run
   beside them at the same settings: ``raw batches`` (no checks) and ``checked
   batches`` (the raw batches plus lifecycles' checks): checked batches/reference is the
   ceiling of the target for any implementation making those checks.

The default run takes about three minutes on a 2-core machine (section 2 refills its table
24 times; section 3 waits on the disk's fsyncs, 11 rounds because they swing);
``--rounds``, ``--pg-rounds``, ``--pg-seconds``, ``--batch-rounds`` and the item counts
deepen it. The machine is shared and noisy: read the ratios, not the absolute rates.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The figures compare with the reference components: by default those beside the clone.
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from loops import (
    LEASE_SECONDS,
    TABLE,
    WORKER,
    CheckedBatchSQLite,
    CheckedPostgres,
    CheckedSQLite,
    Checks,
    RawBatchSQLite,
    RawPostgres,
    RawSQLite,
    VerifiedPostgres,
    drop_unused_indexes,
)
from support.monitor import CAPABILITIES, answer, notification
from support.reference import load_reference

import lifecycles.monitor as lifecycles_monitor

reference = load_reference("terminal_processing_monitor")

SITE = "site-1"
DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"
LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/test"
RAW_TARGET = 0.8  # lifecycles at least this share of the raw loop's rate
BATCH_TARGET = 10.0  # run_many at least this many times the reference's run_once
BATCH_LIMIT = 50

Cycle = Callable[[], bool]  # one cycle; False when nothing was due


# --- items and the fake receiver ------------------------------------------------------


class Receiver:
    """A receiver answering a valid 'pending' status for items e0 .. e<items-1>; the
    answers are built beforehand, so calling it costs one dict lookup."""

    def __init__(self, items: int) -> None:
        self.answers = {f"e{i}": answer(f"e{i}", SITE, "pending") for i in range(items)}

    def __call__(self, event_id: str, site_id: str) -> dict[str, Any]:
        return self.answers[event_id]


class Items:
    """The rows of ``count`` pending items, due from time 0, created 1 ms apart, each with
    the digest of its notification (so the receiver's answer about it is valid)."""

    def __init__(self, count: int) -> None:
        self.digests = [notification(i)[1] for i in range(count)]

    def rows(self, count: int) -> Iterable[tuple[Any, ...]]:
        return (
            (f"e{i}", f"n{i}", SITE, "published", self.digests[i], i / 1000, i / 1000, i / 1000)
            for i in range(count)
        )

    def fill(self, connection: Any, count: int, param: str) -> None:
        """Write ``count`` items straight into the monitor table, in one transaction."""
        marks = ", ".join([param] * 5)
        statement = (
            f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
            " notification_sha256, status, poll_attempts, failures, max_failures,"
            f" next_poll_at, created_at, updated_at) VALUES ({marks}, 'pending', 0, 0, 5,"
            f" {param}, {param}, {param})"
        )
        if isinstance(connection, sqlite3.Connection):
            connection.execute("BEGIN")
            connection.executemany(statement, self.rows(count))
            connection.commit()
        else:  # psycopg, autocommit
            with connection.transaction(), connection.cursor() as cursor:
                cursor.executemany(statement, self.rows(count))


def due_time(count: int) -> float:
    """A moment at which all ``count`` items are due."""
    return count / 1000 + 1.0


def monitor_cycle(monitor: Any, receiver: Receiver, now: float, worker: str = WORKER) -> Cycle:
    """One ``run_once`` of ``monitor`` (either implementation), its outcome checked."""

    def cycle() -> bool:
        outcome = monitor.run_once(receiver, worker, now=now)
        if outcome is None:
            return False
        if outcome.status != "watching":
            raise RuntimeError(f"{outcome.event_id} ended {outcome.status}, not watching")
        return True

    return cycle


def batch_cycle(monitor: Any, receiver: Receiver, now: float, worker: str) -> Callable[[], int]:
    """One ``run_many(limit=BATCH_LIMIT)``: how many items it finished, each checked."""

    def cycle() -> int:
        outcomes = monitor.run_many(receiver, worker, now=now, limit=BATCH_LIMIT)
        for outcome in outcomes:
            if getattr(outcome, "status", None) != "watching":
                raise RuntimeError(f"a batch item ended {outcome!r}, not watching")
        return len(outcomes)

    return cycle


# --- shared reporting ---------------------------------------------------------------------


def alternating(names: Sequence[str], round_number: int) -> Sequence[str]:
    return names if round_number % 2 == 0 else list(reversed(names))


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def drain(cycle: Cycle, count: int) -> float:
    """Seconds taken by ``count`` cycles (each of which must find a due item)."""
    started = time.perf_counter()
    for _ in range(count):
        if not cycle():
            raise RuntimeError("ran out of due items")
    return time.perf_counter() - started


# --- 1. run_once on SQLite, WAL + synchronous=NORMAL -------------------------------------


def wal_connection(path: Path, autocommit: bool = False) -> sqlite3.Connection:
    """``path`` in WAL mode, synchronous=NORMAL; as sqlite3 opens it, or autocommitting."""
    connection = sqlite3.connect(path, isolation_level=None if autocommit else "DEFERRED")
    mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode != "wal":
        raise RuntimeError(f"journal_mode is {mode}, not wal")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


def wal_round(
    directory: Path, items: Items, receiver: Receiver, count: int, round_number: int
) -> dict[str, float]:
    now = due_time(count)
    cycles: dict[str, Cycle] = {}
    opened: list[sqlite3.Connection] = []
    for name, module in (("lifecycles", lifecycles_monitor), ("reference", reference)):
        connection = wal_connection(directory / f"{name}-{round_number}.db")
        opened.append(connection)
        monitor = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        items.fill(connection, count, "?")
        cycles[name] = monitor_cycle(monitor, receiver, now)
    # The raw loop runs on lifecycles' schema (the same table and claim-order index),
    # without the indexes it has no use for (loops.drop_unused_indexes).
    path = directory / f"raw-{round_number}.db"
    setup = sqlite3.connect(path)
    lifecycles_monitor.DurableTerminalProcessingMonitor(setup, CAPABILITIES)
    drop_unused_indexes(setup)
    setup.close()
    connection = wal_connection(path, autocommit=True)
    opened.append(connection)
    items.fill(connection, count, "?")
    cycles["raw"] = RawSQLite(connection, receiver, now).cycle
    # The raw loop plus lifecycles' checks (loops.py), like it without those indexes.
    path = directory / f"checked-{round_number}.db"
    connection = wal_connection(path, autocommit=True)
    opened.append(connection)
    monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    drop_unused_indexes(connection)
    items.fill(connection, count, "?")
    cycles["checked"] = CheckedSQLite(
        connection, Checks(monitor, receiver, now, WORKER, LEASE_SECONDS)).cycle
    try:
        return {
            name: count / drain(cycles[name], count)
            for name in alternating(list(cycles), round_number)
        }
    finally:
        for connection in opened:
            connection.close()


def section_wal(args: argparse.Namespace, items: Items, receiver: Receiver) -> bool:
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as directory:
        for round_number in range(args.rounds):
            rounds.append(wal_round(Path(directory), items, receiver, args.items, round_number))
    print(f"1. run_once on SQLite, WAL + synchronous=NORMAL: {args.rounds} alternating rounds,"
          f" each draining a fresh file of {args.items:,} due items per contestant")
    names = ("lifecycles", "reference", "raw", "checked")
    print(f"   {'cycles/s':<12}" + "".join(f"{name:>12}" for name in names))
    print(f"   {'median':<12}"
          + "".join(f"{statistics.median(r[n] for r in rounds):>12.0f}" for n in names))
    spans = (f"{min(r[n] for r in rounds):.0f}..{max(r[n] for r in rounds):.0f}" for n in names)
    print(f"   {'min..max':<12}" + "".join(f"{span:>12}" for span in spans))
    to_raw = statistics.median(r["lifecycles"] / r["raw"] for r in rounds)
    to_reference = statistics.median(r["lifecycles"] / r["reference"] for r in rounds)
    passed = to_raw >= RAW_TARGET
    print(f"   lifecycles/raw {to_raw:.2f}  target >= {RAW_TARGET}  {verdict(passed)}")
    print(f"   lifecycles/reference {to_reference:.2f}  (no target)")
    ceiling("checked/raw", [r["checked"] / r["raw"] for r in rounds], "rounds")
    kept = statistics.median(r["lifecycles"] / r["checked"] for r in rounds)
    print(f"   lifecycles/checked {kept:.2f}: what lifecycles' machinery keeps of the checked"
          " loop's rate")
    return passed


CHECKED = "the raw loop with lifecycles' checks and nothing else"


def ceiling(
    label: str, ratios: Sequence[float], rounds: str, target: float = RAW_TARGET,
    unit: str = "", loop: str = CHECKED,
) -> float:
    """Print a checked loop's ratio, one per round: the checked loop (loops.py, the raw
    loop's statements plus lifecycles' checks and nothing else) over the raw loop (or the
    reference), the most any implementation making those checks reaches. Returns its
    median."""
    checked, spans = statistics.median(ratios), sorted(ratios)
    # A shortfall that two places would round up to the target itself: cut, not rounded.
    shown = f"{checked:.2f}" if round(checked, 2) < target or checked >= target else (
        f"{int(checked * 1000) / 1000:.3f}")
    print(f"   {label} {shown}{unit} ({rounds}: {spans[0]:.2f}..{spans[-1]:.2f}):"
          f" {loop}, the ceiling of the ratio; target"
          f" {'reachable' if checked >= target else 'UNREACHABLE'} with these checks")
    return checked


# --- 2. PostgreSQL, 1, 4 and 8 worker processes -------------------------------------------


def pg_worker(
    kind: str, dsn: str, schema: str, index: int, now: float, seconds: float,
    receiver: Receiver, start: Any, results: Any,
) -> None:
    """One worker process: its own connection, then ``seconds`` of cycles after ``start``."""
    from lifecycles.stores.postgres import connect

    try:
        connection = connect(dsn, options=f"-c search_path={schema}")
        worker = f"w{index}"
        cycle: Cycle
        if kind == "lifecycles":
            monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
            cycle = monitor_cycle(monitor, receiver, now, worker)
        elif kind == "run_many":
            monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
            cycle = batch_cycle(monitor, receiver, now, worker)
        elif kind in ("checked", "verified"):
            monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
            loop = CheckedPostgres if kind == "checked" else VerifiedPostgres
            cycle = loop(connection, Checks(monitor, receiver, now, worker, LEASE_SECONDS)).cycle
        else:
            cycle = RawPostgres(connection, receiver, now, worker).cycle
        start.wait(timeout=60)
        started = time.perf_counter()
        deadline, done, ran_out = started + seconds, 0, False
        while time.perf_counter() < deadline:
            finished = int(cycle())  # items: 1 per run_once, up to BATCH_LIMIT per batch
            if not finished:
                ran_out = True
                break
            done += finished
        results.put((done, time.perf_counter() - started, ran_out, ""))
        connection.close()
    except BaseException as error:  # reported by the parent, which must not hang
        results.put((0, 0.0, False, f"{type(error).__name__}: {error}"))
        start.abort()


def pg_measure(
    context: Any, kind: str, dsn: str, schema: str, workers: int, seconds: float,
    items: Items, count: int, receiver: Receiver,
) -> tuple[float, bool]:
    """Cycles per second of ``workers`` processes on a freshly filled table; and whether
    some worker ran out of due items (the figure is then a floor)."""
    from lifecycles.stores.postgres import connect

    with connect(dsn, options=f"-c search_path={schema}") as admin:
        admin.execute(f"TRUNCATE {TABLE}")
        items.fill(admin, count, "%s")
        admin.execute(f"VACUUM ANALYZE {TABLE}")
    now = due_time(count)
    start, results = context.Barrier(workers), context.Queue()
    processes = [
        context.Process(
            target=pg_worker,
            args=(kind, dsn, schema, index, now, seconds, receiver, start, results),
        )
        for index in range(workers)
    ]
    for process in processes:
        process.start()
    reports = []
    try:
        for _ in processes:
            reports.append(results.get(timeout=seconds + 120))
    except queue.Empty:
        raise RuntimeError(f"{kind}: a worker did not report") from None
    finally:
        for process in processes:
            process.join(timeout=30)
    errors = [error for *_, error in reports if error]
    if errors:
        raise RuntimeError(f"{kind} worker failed: {errors[0]}")
    total = sum(done for done, *_ in reports)
    return total / max(elapsed for _, elapsed, *_ in reports), any(r[2] for r in reports)


def section_postgres(args: argparse.Namespace, items: Items, receiver: Receiver) -> bool | None:
    print(f"2. PostgreSQL run_once, worker processes each with its own connection:"
          f" {args.pg_rounds} alternating rounds of {args.pg_seconds:g} s per figure,"
          f" table refilled with {args.pg_items:,} due items before each")
    try:
        from lifecycles.stores.postgres import connect

        with connect(args.dsn, connect_timeout=5) as admin:
            schema = f"lc_bench_{secrets.token_hex(6)}"
            admin.execute(f"CREATE SCHEMA {schema}")  # the name is ours: lc_bench_ + hex
    except Exception as error:  # no driver, or no server
        reason = (str(error).strip().splitlines() or [""])[0]
        print(f"   skipped: PostgreSQL not reachable at {args.dsn} ({type(error).__name__}:"
              f" {reason})")
        return None
    worker_counts = (1, 4, 8)
    names = ("lifecycles", "raw")
    rates: dict[tuple[str, int], list[float]] = {}
    short: set[tuple[str, int]] = set()
    try:
        with connect(args.dsn, options=f"-c search_path={schema}") as setup:
            lifecycles_monitor.DurableTerminalProcessingMonitor(setup, CAPABILITIES)
        # Forked workers: no connection is open in this process while they run.
        context = multiprocessing.get_context("fork")
        for round_number in range(args.pg_rounds):
            for workers in worker_counts:
                kinds = [*names, "run_many"] if workers == 4 else names
                for kind in alternating(kinds, round_number + workers):
                    rate, ran_out = pg_measure(
                        context, kind, args.dsn, schema, workers, args.pg_seconds,
                        items, args.pg_items, receiver,
                    )
                    rates.setdefault((kind, workers), []).append(rate)
                    if ran_out:
                        short.add((kind, workers))
            # The ceiling: longer runs, as 1.5 s at 4 workers on 2 cores scatter widely.
            for kind in alternating(["raw", "checked", "verified"], round_number):
                rate, ran_out = pg_measure(
                    context, kind, args.dsn, schema, 4, args.pg_ceiling_seconds, items,
                    args.pg_items, receiver,
                )
                rates.setdefault((f"{kind} (ceiling)", 4), []).append(rate)
                if ran_out:
                    short.add(("ceiling", 4))
    finally:
        with connect(args.dsn) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(f"   (server {args.dsn.rsplit('@', 1)[-1]}, schema {schema}, dropped)")
    print(f"   {'workers':<9}{'lifecycles':>12}{'raw':>12}{'ratio':>8}   cycles/s, medians")
    ratios: dict[int, float] = {}
    for workers in worker_counts:
        ours, raw = rates[("lifecycles", workers)], rates[("raw", workers)]
        ratios[workers] = statistics.median(a / b for a, b in zip(ours, raw, strict=True))
        flag = "  (ran out of items: a floor; raise --pg-items)" if any(
            (kind, workers) in short for kind in names
        ) else ""
        print(f"   {workers:<9}{statistics.median(ours):>12.0f}{statistics.median(raw):>12.0f}"
              f"{ratios[workers]:>8.2f}{flag}")
    passed = ratios[4] >= RAW_TARGET
    print(f"   lifecycles/raw at 4 workers {ratios[4]:.2f}  target >= {RAW_TARGET}"
          f"  {verdict(passed)}")
    checked = ceiling("checked/raw at 4 workers", [a / b for a, b in zip(
        rates[("checked (ceiling)", 4)], rates[("raw (ceiling)", 4)], strict=True)],
        f"rounds of {args.pg_ceiling_seconds:g} s")
    verified = ceiling("verified/raw at 4 workers", [a / b for a, b in zip(
        rates[("verified (ceiling)", 4)], rates[("raw (ceiling)", 4)], strict=True)],
        f"rounds of {args.pg_ceiling_seconds:g} s", loop="the checked loop refusing before"
        " it commits what the reference refuses (rule verdicts, no lease expired, schema"
        " guards, in its statements)")
    if ("ceiling", 4) in short:
        print("   (a ceiling run ran out of items: a floor of its rate; raise --pg-items)")
    print(f"   lifecycles/checked at 4 workers {ratios[4] / checked:.2f},"
          f" lifecycles/verified {ratios[4] / verified:.2f}")
    batches, single = (statistics.median(rates[(kind, 4)]) for kind in ("run_many", "raw"))
    print(f"   run_many(limit={BATCH_LIMIT}) at 4 workers: {batches:.0f} items/s,"
          f" {batches / single:.1f}x the raw loop's single items (no target: the way to"
          " more items per second on PostgreSQL)")
    return passed


# --- 3. run_many batches at default settings ----------------------------------------------


def batch_cycles(monitor: Any, receiver: Receiver, now: float) -> Callable[[int], int]:
    """``run_many(limit=50)`` until ``count`` items are done; returns how many were."""

    def run(count: int) -> int:
        done = 0
        while done < count:
            outcomes = monitor.run_many(
                receiver, WORKER, now=now, lease_seconds=LEASE_SECONDS,
                limit=min(BATCH_LIMIT, count - done),
            )
            if not outcomes:
                break
            for outcome in outcomes:
                if outcome.status != "watching":
                    raise RuntimeError(f"{outcome.event_id} ended {outcome.status}")
            done += len(outcomes)
        return done

    return run


def drain_rate(cycle: Cycle, count: int) -> Callable[[], float]:
    return lambda: count / drain(cycle, count)


def batch_rate(batches: Callable[[int], int], count: int) -> Callable[[], float]:
    def rate() -> float:
        started = time.perf_counter()
        done = batches(count)
        seconds = time.perf_counter() - started
        if done != count:
            raise RuntimeError(f"run_many did {done} of {count} items")
        return done / seconds

    return rate


def batch_round(
    directory: Path, items: Items, receiver: Receiver, count: int, round_number: int,
    with_run_many: bool,
) -> dict[str, float]:
    now = due_time(count)
    runs: dict[str, Callable[[], float]] = {}
    opened: list[sqlite3.Connection] = []
    contestants = [
        ("reference", reference, "run_once"),
        ("lifecycles run_once", lifecycles_monitor, "run_once"),
        *([("lifecycles run_many", lifecycles_monitor, "run_many")] if with_run_many else []),
    ]
    for name, module, method in contestants:
        connection = sqlite3.connect(directory / f"{method}-{module.__name__}-{round_number}.db")
        opened.append(connection)
        monitor = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        items.fill(connection, count, "?")
        if method == "run_once":
            runs[name] = drain_rate(monitor_cycle(monitor, receiver, now), count)
        else:
            runs[name] = batch_rate(batch_cycles(monitor, receiver, now), count)
    # The batch loops (loops.py) at the same settings (their own BEGIN and COMMIT change
    # neither the journal nor synchronous), on lifecycles' schema without the indexes
    # they have no use for.
    for name in ("raw batches", "checked batches"):
        connection = sqlite3.connect(
            directory / f"{name.split()[0]}-batches-{round_number}.db", isolation_level=None)
        opened.append(connection)
        monitor = lifecycles_monitor.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        drop_unused_indexes(connection)
        items.fill(connection, count, "?")
        loop = (RawBatchSQLite(connection, receiver, now) if name == "raw batches" else
                CheckedBatchSQLite(connection, Checks(monitor, receiver, now, WORKER,
                                                      LEASE_SECONDS)))
        runs[name] = batch_rate(loop_batches(loop.batch), count)
    try:
        return {name: runs[name]() for name in alternating(list(runs), round_number)}
    finally:
        for connection in opened:
            connection.close()


def loop_batches(batch: Callable[[int], int]) -> Callable[[int], int]:
    """A batch loop's ``batch(limit)`` until ``count`` items are done, as ``batch_cycles``."""

    def run(count: int) -> int:
        done = 0
        while done < count and (finished := batch(min(BATCH_LIMIT, count - done))):
            done += finished
        return done

    return run


def section_batches(args: argparse.Namespace, items: Items, receiver: Receiver) -> bool:
    with_run_many = callable(
        getattr(lifecycles_monitor.DurableTerminalProcessingMonitor, "run_many", None)
    )
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as directory:
        for round_number in range(args.batch_rounds):
            rounds.append(batch_round(
                Path(directory), items, receiver, args.batch_items, round_number, with_run_many
            ))
    print(f"3. batches, SQLite file at default settings (rollback journal, synchronous=FULL):"
          f" {args.batch_rounds} alternating rounds of {args.batch_items} items each")
    for name in rounds[0]:
        print(f"   {name:<22}{statistics.median(r[name] for r in rounds):>10.0f} items/s")
    if not with_run_many:
        print("   run_many: not available in this build  FAIL")
        return False
    ratio = statistics.median(r["lifecycles run_many"] / r["reference"] for r in rounds)
    passed = ratio >= BATCH_TARGET
    print(f"   run_many(limit={BATCH_LIMIT})/reference run_once {ratio:.1f}x"
          f"  target >= {BATCH_TARGET:g}x  {verdict(passed)}")
    floor = statistics.median(r["raw batches"] / r["reference"] for r in rounds)
    print(f"   raw batches/reference run_once {floor:.1f}x: the same batches, no checks")
    ceiling("checked batches/reference run_once",
            [r["checked batches"] / r["reference"] for r in rounds], "rounds",
            BATCH_TARGET, "x")
    kept = statistics.median(r["lifecycles run_many"] / r["checked batches"] for r in rounds)
    print(f"   run_many/checked batches {kept:.2f}: what lifecycles' machinery keeps of the"
          " checked batches' rate")
    return passed


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1_000, help="WAL: items per round")
    parser.add_argument("--rounds", type=int, default=5, help="WAL: alternating rounds")
    parser.add_argument("--pg-seconds", type=float, default=1.5, help="PostgreSQL: per figure")
    parser.add_argument("--pg-ceiling-seconds", type=float, default=5.0,
                        help="PostgreSQL: per run of the checked and raw loops at 4 workers")
    parser.add_argument("--pg-rounds", type=int, default=3, help="PostgreSQL: rounds")
    parser.add_argument("--pg-items", type=int, default=20_000, help="PostgreSQL: table size")
    parser.add_argument("--dsn", default=os.environ.get(DSN_VARIABLE) or LOCAL_DSN)
    parser.add_argument("--batch-items", type=int, default=1_000, help="batches: items per round")
    parser.add_argument("--batch-rounds", type=int, default=11, help="batches: rounds")
    parser.add_argument("--sections", nargs="*", default=["wal", "postgres", "batches"],
                        choices=["wal", "postgres", "batches"])
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args()
    most = max(args.items, args.pg_items, args.batch_items)
    items, receiver = Items(most), Receiver(most)
    sections: dict[str, Callable[[argparse.Namespace, Items, Receiver], bool | None]] = {
        "wal": section_wal, "postgres": section_postgres, "batches": section_batches,
    }
    failed = False
    for name in args.sections:
        started = time.perf_counter()
        passed = sections[name](args, items, receiver)
        failed = failed or passed is False
        print(f"   ({time.perf_counter() - started:.0f} s)", flush=True)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
