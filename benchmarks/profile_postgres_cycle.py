"""Where one PostgreSQL run_once cycle spends its CPU: in the worker, or in its server process.

    python benchmarks/profile_postgres_cycle.py [--items 2000] [--rounds 3] [--dsn DSN]

One worker drains ``--items`` due items with lifecycles' ``run_once``, then with the raw
SKIP LOCKED loop of ``bench_throughput.py``, each on a table filled (and ANALYZEd) just
before, in a throw-away schema. Per cycle it prints the wall time, the worker's CPU
(``time.process_time``) and the CPU of the server process serving its connection
(``/proc/<pid>/stat``, so the server must run on this machine). A third row,
``statements``, replays the exact statements and parameters lifecycles sent (recorded
on an identical table, same order, same tokens) with no Python around them: the cost of
lifecycles' SQL alone, which no work on the Python side can go below. A fourth,
``unchecked``, replays them with their checks cut out: the schema guards (catalogue and
meta rows) become conditions on their own parameters and the rule verdicts become 0
(what statements doing the same work without lifecycles' checks would cost); adding
the Python measured as ``lifecycles - statements`` to it says what the ratio could reach
if every check in the SQL were free. ``no guards`` and ``no verdicts`` cut one kind of
check each, to say which costs what. With W workers on C
cores and W >= C, throughput is bounded by CPU per cycle, so ``raw CPU / lifecycles
CPU`` bounds bench_throughput.py's PostgreSQL ratio at 4 workers on 2 cores. Not a
``bench_*`` file: ``run.py`` does not run it.

A last row, ``checked``, is the raw loop with lifecycles' checks added and nothing else
(``loops.py``): ``raw CPU / checked CPU`` is the most any implementation that
makes those checks can reach.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

import psycopg
from bench_throughput import DSN_VARIABLE, LOCAL_DSN, Items, Receiver, due_time, monitor_cycle
from loops import LEASE_SECONDS, TABLE, CheckedPostgres, Checks, RawPostgres, VerifiedPostgres
from support.monitor import CAPABILITIES

from lifecycles.monitor.facade import DurableTerminalProcessingMonitor
from lifecycles.stores.postgres import connect


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) of server process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Sent = list[tuple[str, Any, bool]]  # (statement, params, whether it is $-numbered)


def recorded(connection: Any, items: Items, count: int, receiver: Receiver) -> list[Sent]:
    """The statements of each lifecycles run_once draining ``count`` items, per cycle."""
    refill(connection, items, count)
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    cycle = monitor_cycle(monitor, receiver, due_time(count))
    cycles: list[Sent] = []
    original = psycopg.Cursor.execute

    def execute(cursor: Any, query: Any, params: Any = None, **options: Any) -> Any:
        cycles[-1].append((query, params, isinstance(cursor, psycopg.RawCursor)))
        return original(cursor, query, params, **options)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        while True:
            cycles.append([])
            if not cycle():
                return cycles[:-1]  # the last found nothing due
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


def refill(connection: Any, items: Items, count: int) -> None:
    connection.execute(f"TRUNCATE {TABLE}")
    items.fill(connection, count, "%s")
    connection.execute(f"ANALYZE {TABLE}")


def replay(connection: Any, cycles: list[Sent]) -> Any:
    """A cycle that sends the next recorded cycle's statements as recorded."""
    pending = iter(cycles)
    raw = psycopg.RawCursor(connection)
    plain = connection.cursor()

    def cycle() -> bool:
        sent = next(pending, None)
        if sent is None:
            return False
        for query, params, numbered in sent:
            (raw if numbered else plain).execute(query, params, prepare=True)
        return True

    return cycle


GUARD = re.compile(r" AND ARRAY\(SELECT a\.attname .*?\) = \$(\d+)::text\[\]")
META = re.compile(r" AND \(SELECT count\(\*\) FROM \S+\) = 1 AND EXISTS \(SELECT 1 FROM \S+ WHERE"
                  r" [^()]*\)")
VERDICT = re.compile(r", CASE WHEN .*? AS verdict")
BROKEN = re.compile(r" OR \(CASE WHEN .*? THEN 0 ELSE 1 END\) = 1\)")


def unchecked(statement: str, guards: bool = True, verdicts: bool = True) -> str:
    """``statement`` without its schema guards and/or its rule verdicts, its parameters
    kept."""

    def kept(text: str) -> str:
        return " AND " + " AND ".join(
            f"{marker}::text IS NOT NULL" for marker in re.findall(r"\$\d+", text))

    cut = statement
    if guards:
        cut = GUARD.sub(lambda match: kept(match.group(0)), cut)
        cut = META.sub(lambda match: kept(match.group(0)), cut)
    if verdicts:
        cut = VERDICT.sub(", 0 AS verdict", cut)
        cut = BROKEN.sub(")", cut)
    return cut


def without_checks(cycles: list[Sent], guards: bool = True, verdicts: bool = True,
                   ) -> list[Sent]:
    cut = [[(unchecked(query, guards, verdicts), params, numbered)
            for query, params, numbered in sent] for sent in cycles]
    if any((guards and (GUARD.search(query) or META.search(query)))
           or (verdicts and "THEN 0 ELSE" in query)
           for sent in cut for query, _, _ in sent) or cut == cycles:
        raise SystemExit("the statements changed shape: update unchecked()")
    return cut


def drain(connection: Any, kind: str, items: Items, count: int,
          receiver: Receiver, statements: list[Sent]) -> tuple[float, float, float]:
    """(wall, worker CPU, server CPU) per cycle, in microseconds."""
    refill(connection, items, count)
    now = due_time(count)
    if kind == "raw":
        cycle = RawPostgres(connection, receiver, now, "w-raw").cycle
    elif kind in ("checked", "verified", "verdicts", "guards"):
        checks = Checks(DurableTerminalProcessingMonitor(connection, CAPABILITIES), receiver,
                        now, f"w-{kind}", LEASE_SECONDS)
        # "verdicts" and "guards": the verified loop with that kind of check alone.
        cycle = CheckedPostgres(connection, checks).cycle if kind == "checked" else (
            VerifiedPostgres(connection, checks, verdicts=kind != "guards",
                             guards=kind != "verdicts").cycle)
    elif kind == "statements":
        cycle = replay(connection, statements)
    elif kind == "unchecked":
        cycle = replay(connection, without_checks(statements))
    elif kind == "no guards":
        cycle = replay(connection, without_checks(statements, verdicts=False))
    elif kind == "no verdicts":
        cycle = replay(connection, without_checks(statements, guards=False))
    else:
        monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        cycle = monitor_cycle(monitor, receiver, now)
    (pid,) = connection.execute("SELECT pg_backend_pid()").fetchone()
    wall, worker, server, cycles = time.perf_counter(), time.process_time(), server_cpu(pid), 0
    while cycle():
        cycles += 1
    return (
        (time.perf_counter() - wall) / cycles * 1e6,
        (time.process_time() - worker) / cycles * 1e6,
        (server_cpu(pid) - server) / cycles * 1e6,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=os.environ.get(DSN_VARIABLE) or LOCAL_DSN)
    args = parser.parse_args()
    schema = f"lc_profile_{secrets.token_hex(6)}"
    items, receiver = Items(args.items), Receiver(args.items)
    kinds = ("lifecycles", "statements", "no guards", "no verdicts", "unchecked", "verified",
             "verdicts", "guards", "checked", "raw")
    figures: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
    try:
        with connect(args.dsn, connect_timeout=5) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")  # ours: lc_profile_ + hex
    except Exception as error:  # no server here
        print(f"skipped: PostgreSQL not reachable at {args.dsn} ({type(error).__name__})")
        return 0
    try:
        with connect(args.dsn, options=f"-c search_path={schema}") as connection:
            DurableTerminalProcessingMonitor(connection, CAPABILITIES)  # the schema
            statements = recorded(connection, items, args.items, receiver)
            for round_ in range(args.rounds):
                for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
                    figures[kind].append(
                        drain(connection, kind, items, args.items, receiver, statements))
    finally:
        with connect(args.dsn) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(f"PostgreSQL run_once, one worker, {args.items:,} items drained, medians of "
          f"{args.rounds} rounds; microseconds per cycle")
    print(f"{'':>12}{'wall':>8}{'worker CPU':>12}{'server CPU':>12}{'CPU in all':>12}")
    cpu = {}
    for kind, runs in figures.items():
        wall, worker, server = (statistics.median(run[at] for run in runs) for at in range(3))
        cpu[kind] = worker + server
        print(f"{kind:>12}{wall:>8.0f}{worker:>12.0f}{server:>12.0f}{cpu[kind]:>12.0f}")
    print(f"raw CPU / lifecycles CPU = {cpu['raw'] / cpu['lifecycles']:.2f}: what the ratio "
          "can reach once the workers outnumber the cores")
    print(f"raw CPU / statements CPU = {cpu['raw'] / cpu['statements']:.2f}: the most it can reach"
          " with lifecycles' statements as they are, whatever the Python around them costs")
    python = cpu["lifecycles"] - cpu["statements"]
    print(f"raw CPU / (unchecked CPU + Python {python:.0f}) ="
          f" {cpu['raw'] / (cpu['unchecked'] + python):.2f}: the most it can reach if every"
          " check in the SQL cost nothing, with the Python as it is")
    print(f"raw CPU / checked CPU = {cpu['raw'] / cpu['checked']:.2f}: the most any"
          " implementation making lifecycles' checks can reach (loops.py: the raw"
          " loop's statements, the claimed record returned whole, the checks in Python and"
          " nothing else)")
    print(f"raw CPU / verified CPU = {cpu['raw'] / cpu['verified']:.2f}: the most an"
          " implementation can reach that also refuses, before it commits, what the reference"
          " refuses (loops.py: the checked loop plus the rule verdicts, 'no lease expired' and"
          " the schema guards in its statements)")
    for kind in ("verdicts", "guards"):
        print(f"raw CPU / {kind} CPU = {cpu['raw'] / cpu[kind]:.2f}: the verified loop with its"
              f" {kind} alone ('no lease expired' kept)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
