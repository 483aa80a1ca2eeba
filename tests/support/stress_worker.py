"""Concurrency stress for the monitor: worker processes, each with several workers.

Used at small scale by tests/monitor/test_monitor_stress.py and at full scale by
benchmarks/bench_stress.py. Run as a script it is one worker process (the parent
starts several, SIGKILLs one mid-lease and starts a replacement); imported, it is the
harness: :func:`prepare` builds the database and its audit trail, :func:`run` runs the
processes, :func:`verify` checks the history.

The audit trail is one table, ``lease_events``, with one sequence, in the monitor's
database:

* ``granted``: written by the store's ``on_lease`` hook inside the claim's own
  transaction, so a lease exists exactly when its grant row does;
* ``completed`` / ``recovered``: written by a database trigger inside the very
  transaction that ended the lease (a worker's completion, or expiry recovery by any
  worker), with the token the lease had.

Per item, rows of one item are serialised by the item's row lock, so their ids give
the order in which they committed. Workers also keep an append-only journal of what
the facade told them (accepted, or refused with which code).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parents[1]  # tests/: the child imports support.*
CAPABILITIES = "c" * 64
REFUSAL_CODES = frozenset(
    "terminal_processing_monitor." + name
    for name in ("claim_lost", "lease_expired", "completion_lost", "failure_lost")
)
LEASE_EXPIRED = "terminal_processing_monitor.lease_expired"
TIMING = {"poll_interval_seconds": 0.05, "base_delay_seconds": 0.05, "max_delay_seconds": 0.2}

SQLITE_AUDIT = (
    """CREATE TABLE IF NOT EXISTS lease_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, event_id TEXT NOT NULL,
        token TEXT NOT NULL, worker TEXT NOT NULL, logical_time REAL NOT NULL,
        expires_at REAL NOT NULL, wall_time REAL NOT NULL)""",
    """CREATE TRIGGER IF NOT EXISTS lease_ended
        AFTER UPDATE OF status ON cms_source_terminal_processing
        WHEN OLD.status = 'leased' AND NEW.status <> 'leased'
        BEGIN
            INSERT INTO lease_events
                (kind, event_id, token, worker, logical_time, expires_at, wall_time)
            VALUES (CASE WHEN NEW.last_error_code = 'terminal_processing_monitor.lease_expired'
                         THEN 'recovered' ELSE 'completed' END,
                    OLD.event_id, OLD.lease_token, OLD.lease_owner, NEW.updated_at,
                    OLD.lease_expires_at, (julianday('now') - 2440587.5) * 86400.0);
        END""",
)
SQLITE_GRANT = (
    "INSERT INTO lease_events (kind, event_id, token, worker, logical_time, expires_at,"
    " wall_time) VALUES ('granted', ?, ?, ?, ?, ?, (julianday('now') - 2440587.5) * 86400.0)"
)

POSTGRES_AUDIT = (
    """CREATE TABLE IF NOT EXISTS lease_events (
        id bigserial PRIMARY KEY, kind text NOT NULL, event_id text NOT NULL,
        token text NOT NULL, worker text NOT NULL, logical_time double precision NOT NULL,
        expires_at double precision NOT NULL, wall_time double precision NOT NULL)""",
    """CREATE OR REPLACE FUNCTION record_lease_end() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.status = 'leased' AND NEW.status <> 'leased' THEN
                INSERT INTO lease_events
                    (kind, event_id, token, worker, logical_time, expires_at, wall_time)
                VALUES (CASE WHEN NEW.last_error_code = 'terminal_processing_monitor.lease_expired'
                             THEN 'recovered' ELSE 'completed' END,
                        OLD.event_id, OLD.lease_token, OLD.lease_owner, NEW.updated_at,
                        OLD.lease_expires_at, extract(epoch FROM clock_timestamp()));
            END IF;
            RETURN NULL;
        END $$""",
    """CREATE OR REPLACE TRIGGER lease_ended AFTER UPDATE ON cms_source_terminal_processing
        FOR EACH ROW EXECUTE FUNCTION record_lease_end()""",
)
POSTGRES_GRANT = (
    "INSERT INTO lease_events (kind, event_id, token, worker, logical_time, expires_at,"
    " wall_time) VALUES ('granted', %s, %s, %s, %s, %s, extract(epoch FROM clock_timestamp()))"
)


@attrs.frozen
class Target:
    """Where the monitor lives: ``sqlite`` (a file path) or ``postgres`` (DSN + schema)."""

    kind: str
    place: str  # the SQLite file, or the PostgreSQL schema
    dsn: str | None = None

    def connect(self) -> Any:
        if self.kind == "sqlite":
            connection = sqlite3.connect(self.place, timeout=60)
            connection.execute("PRAGMA journal_mode = WAL")  # set here, by the test
            return connection
        import psycopg

        assert self.dsn is not None
        return psycopg.connect(
            self.dsn, autocommit=True, options=f"-c search_path={self.place}"
        )

    def arguments(self) -> list[str]:
        return [self.kind, self.place, self.dsn or ""]


def monitor_on(connection: Any) -> Any:
    from lifecycles.monitor.facade import DurableTerminalProcessingMonitor

    return DurableTerminalProcessingMonitor(connection, CAPABILITIES, **TIMING)


def audited(monitor: Any, target: Target) -> Any:
    """Write every lease grant to lease_events inside the claim's own transaction."""
    connection = monitor.connection
    statement = SQLITE_GRANT if target.kind == "sqlite" else POSTGRES_GRANT

    def record_grant(record: Any) -> None:
        connection.execute(statement, (
            record.event_id, record.lease_token, record.lease_owner, record.updated_at,
            record.lease_expires_at,
        ))

    monitor.store.on_lease = record_grant
    return monitor


def prepare(target: Target, items: int, max_failures: int = 5) -> None:
    """The monitor's schema, the audit trail, and ``items`` registered items."""
    from lifecycles.machines.monitor import MONITOR, new_record

    connection = target.connect()
    monitor = monitor_on(connection)
    for statement in SQLITE_AUDIT if target.kind == "sqlite" else POSTGRES_AUDIT:
        connection.execute(statement)
    if target.kind == "sqlite":
        connection.commit()
    now = time.time()
    with monitor.store.transaction():  # one commit for all of them
        for index in range(items):
            monitor.store.insert(MONITOR.create(new_record(
                event_id=f"e{index}", notification_id=f"n{index}", site_id="site-1",
                terminal_status="published", notification_sha256="a" * 64,
                max_failures=max_failures, now=now,
            )))
    connection.close()


# --- one worker process ---------------------------------------------------------------


class Journal:
    """Append-only lines, one write(2) each, so a SIGKILL loses at most the line in flight."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()

    def write(self, **entry: Any) -> None:
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


class ReaderError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
        self.retryable = True
        self.cms_notification_failure = True


def receiver(worker: str, lease_seconds: float, slow: float, seed: int) -> tuple[
    Callable[[str, str], Any], dict[str, str]
]:
    """A fake CMS receiver: mostly succeeds, sometimes in progress, failing or too slow."""
    from support.monitor import answer

    chance = random.Random(seed)
    last: dict[str, str] = {}

    def read(event_id: str, site_id: str) -> Any:
        last["event_id"] = event_id
        roll = chance.random()
        if roll < slow:
            time.sleep(lease_seconds * 1.6)  # outlive the lease: another worker recovers it
        else:
            time.sleep(chance.uniform(0.0005, 0.003))
        if roll < 0.05:
            raise ReaderError("cms.receiver_busy")
        kind = "pending" if roll < 0.15 else "failed" if roll < 0.17 else "succeeded"
        return answer(event_id, site_id, kind, capabilities_sha256=CAPABILITIES,
                      notification_sha256="a" * 64)

    return read, last


def work(target: Target, worker: str, journal: Journal, lease_seconds: float, slow: float,
         deadline: float) -> None:
    from lifecycles.monitor.facade import LeaseLost

    monitor = audited(monitor_on(target.connect()), target)
    read, last = receiver(worker, lease_seconds, slow, zlib.crc32(worker.encode()))
    while time.time() < deadline:
        try:
            outcome = monitor.run_once(read, worker, now=time.time(), lease_seconds=lease_seconds)
        except LeaseLost as refusal:
            journal.write(w=worker, e=last["event_id"], refused=refusal.code)
            continue
        if outcome is not None:
            journal.write(w=worker, e=outcome.event_id, accepted=outcome.status)
            continue
        counts = monitor.store.count_by_status()  # an aggregate, not health()'s full scan
        if not any(counts[s] for s in ("pending", "leased", "watching", "retry_wait")):
            return  # every item is final
        time.sleep(0.01)


def worker_process(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser(description="one stress worker process")
    parser.add_argument("kind")
    parser.add_argument("place")
    parser.add_argument("dsn")
    parser.add_argument("--name", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--lease-seconds", type=float, default=0.5)
    parser.add_argument("--slow", type=float, default=0.02)
    parser.add_argument("--deadline", type=float, required=True)
    options = parser.parse_args(arguments)
    target = Target(options.kind, options.place, options.dsn or None)
    journal = Journal(options.journal)
    failures: list[BaseException] = []

    def run_worker(number: int) -> None:
        try:
            work(target, f"{options.name}-w{number}", journal, options.lease_seconds,
                 options.slow, options.deadline)
        except BaseException as error:
            failures.append(error)
            raise

    threads = [threading.Thread(target=run_worker, args=(n,)) for n in range(options.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"{len(failures)} worker(s) failed: {failures[0]!r}")


# --- the parent ------------------------------------------------------------------------------


@attrs.frozen
class StressResult:
    store: str
    items: int
    processes: int
    threads: int
    seconds: float
    cycles: int  # claim + accepted completion
    grants: int
    recovered: int
    refusals: dict[str, int]
    killed_mid_lease: int
    final: dict[str, int]

    @property
    def cycles_per_second(self) -> float:
        return self.cycles / self.seconds


def spawn(target: Target, name: str, threads: int, journal: Path, lease_seconds: float,
          slow: float, deadline: float) -> subprocess.Popen[bytes]:
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE), os.environ.get("PYTHONPATH", "")]
    ))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *target.arguments(), "--name", name,
         "--threads", str(threads), "--journal", str(journal),
         "--lease-seconds", str(lease_seconds), "--slow", str(slow),
         "--deadline", str(deadline)],
        env=environment, stderr=subprocess.PIPE,
    )


def run(target: Target, *, items: int, processes: int, threads: int, journal: Path,
        lease_seconds: float = 0.5, slow: float = 0.02, kill: bool = True,
        timeout: float = 300.0) -> StressResult:
    """Run the workers until every item is final; SIGKILL one process mid-way."""
    prepare(target, items)
    started = time.time()
    deadline = started + timeout
    children = {
        f"p{n}": spawn(target, f"p{n}", threads, journal, lease_seconds,
                       1.0 if kill and n == 0 else slow, deadline)
        for n in range(processes)
    }
    killed: list[str] = []
    if kill:
        # p0 reads slowly (it always outlives its lease); once it holds one, kill it.
        victim = "p0"
        wait_for_grants(target, victim, threads + 1, deadline)  # one was refused first
        children[victim].send_signal(signal.SIGKILL)
        children[victim].wait()
        killed.append(victim)
        children["p0r"] = spawn(target, "p0r", threads, journal, lease_seconds, slow, deadline)
    problems = []
    for name, child in children.items():
        _, error = child.communicate(timeout=timeout + 30)
        if name not in killed and child.returncode != 0:
            problems.append(f"{name} exited {child.returncode}: {error.decode()[-2000:]}")
    seconds = time.time() - started
    if problems:
        raise AssertionError("\n".join(problems))
    return verify(target, items, journal, killed, seconds, processes, threads)


def wait_for_grants(target: Target, process: str, wanted: int, deadline: float) -> None:
    with reading(target) as connection:
        while time.time() < deadline:
            (count,) = connection.execute(
                "SELECT count(*) FROM lease_events WHERE kind = 'granted' AND worker LIKE "
                + ("?" if target.kind == "sqlite" else "%s"),
                (process + "-%",),
            ).fetchone()
            if count >= wanted:
                return
            time.sleep(0.02)
    raise AssertionError(f"{process} was never granted {wanted} leases")


# --- the checks ------------------------------------------------------------------------------


@contextmanager
def reading(target: Target) -> Iterator[Any]:
    connection = target.connect()
    try:
        yield connection
    finally:
        connection.close()


def verify(target: Target, items: int, journal: Path, killed: list[str], seconds: float,
           processes: int, threads: int) -> StressResult:
    """Check the whole history; raise AssertionError naming the first broken promise."""
    with reading(target) as connection:
        events = connection.execute(
            "SELECT id, kind, event_id, token, worker, logical_time, expires_at, wall_time"
            " FROM lease_events ORDER BY id"
        ).fetchall()
        monitor = monitor_on(connection)
        final_records = list(monitor.store.scan())
        final = monitor.store.count_by_status()

    # No item lost: every registered item is there, and final.
    assert sorted(r.event_id for r in final_records) == sorted(f"e{i}" for i in range(items))
    unfinished = [r.event_id for r in final_records if r.status not in ("succeeded", "failed")]
    assert unfinished == [], f"items left unfinished: {unfinished[:10]}"

    by_item: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for event in events:
        by_item[event[2]].append(event)
    ends_of_token: Counter[str] = Counter()
    ended_by: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)  # (worker, item)
    for item, history in by_item.items():
        held: tuple[Any, ...] | None = None
        previous_end = float("-inf")
        wall_end = float("-inf")
        for _, kind, _, token, worker, logical, expires, wall in history:
            if kind == "granted":
                # No two leases at once: a grant only ever follows the end of the last one,
                # in commit order, in logical time and on the wall clock.
                assert held is None, f"{item}: {token} granted while {held[3]} was held"
                assert logical >= previous_end, f"{item}: {token} granted before the last end"
                assert wall >= wall_end, f"{item}: {token} granted before the last end (wall)"
                held = (kind, item, logical, token, worker, expires)
                continue
            # An accepted end carries exactly the token that holds the lease: a completion
            # with a stale token was never accepted.
            assert held is not None and held[3] == token, f"{item}: {kind} by stale {token}"
            ends_of_token[token] += 1
            ended_by[(worker, item)][kind] += 1
            if kind == "recovered":
                assert logical >= expires, f"{item}: {token} recovered before it expired"
                previous_end = expires
            else:
                previous_end = logical
            wall_end = wall
            held = None
        assert held is None, f"{item}: still leased at the end"
    assert all(count == 1 for count in ends_of_token.values()), "a token ended twice"

    # What workers were told agrees with the history.
    refusals: Counter[str] = Counter()
    accepted: Counter[tuple[str, str]] = Counter()
    refused: Counter[tuple[str, str]] = Counter()
    for line in journal.read_text().splitlines():
        entry = json.loads(line)
        if "refused" in entry:
            refusals[entry["refused"]] += 1
            refused[(entry["w"], entry["e"])] += 1
        else:
            accepted[(entry["w"], entry["e"])] += 1
    assert set(refusals) <= REFUSAL_CODES, f"unexpected refusal codes {set(refusals)}"
    for pair, count in refused.items():
        # A refusal is only ever for a lease this worker lost to expiry recovery.
        assert count <= ended_by[pair]["recovered"], f"{pair}: refused without losing a lease"
    for pair, count in accepted.items():
        assert count <= ended_by[pair]["completed"], f"{pair}: accepted but not in the history"

    grants = sum(1 for event in events if event[1] == "granted")
    recovered = sum(1 for event in events if event[1] == "recovered")
    killed_mid_lease = sum(
        counts["recovered"] for (worker, _), counts in ended_by.items()
        if worker.split("-")[0] in killed
    )
    cycles = sum(1 for event in events if event[1] == "completed")
    return StressResult(
        store=target.kind, items=items, processes=processes, threads=threads,
        seconds=seconds, cycles=cycles, grants=grants, recovered=recovered,
        refusals=dict(refusals), killed_mid_lease=killed_mid_lease, final=final,
    )


if __name__ == "__main__":
    worker_process(sys.argv[1:])
