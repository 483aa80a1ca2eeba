"""The guide's refund lifecycle under `lifecycles worker`: four processes share one store
(a SQLite file, then PostgreSQL), one is killed with SIGKILL mid-run, and every refund
still ends final exactly once: succeeded, paid exactly once by the stand-in provider
(whose idempotency key is the refund), its late or repeated calls accounted for by the
leases that were rescued.

The handler is examples/refund/handler.py: a file of a few lines, no loop of its own.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lifecycles._registry import import_target
from lifecycles.stores._base import Store
from lifecycles.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = ROOT / "examples" / "refund" / "lifecycle.py"
HANDLER = ROOT / "examples" / "refund" / "handler.py"
import_target(str(LIFECYCLE))  # the example is not installed: put its root on the path

from examples.refund.lifecycle import REFUND, new_refund  # noqa: E402

COUNT = 200


def worker_processes(pid: int) -> list[int]:
    """The worker processes ``pid`` started (not multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"spawn_main" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def submitted(store: Store[Any]) -> None:
    for n in range(COUNT):
        store.insert(REFUND.create(new_refund(f"rf-{n:04d}", amount_cents=100 + n,
                                              currency="EUR", now=0.0)))


def run_and_kill_one(where: list[str], ledger: Path, statuses: Callable[[], Counter[str]],
                     leased_by: Callable[[str], list[str]]) -> tuple[str, list[str]]:
    """Start four worker processes on ``where``, kill one while it holds leases once payments
    flow, wait until every refund is final; the supervisor's stderr and the refunds the
    killed process held."""
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "lifecycles", "worker", "refund", "--module", str(LIFECYCLE),
         "--handler", f"{HANDLER}:pay_back", *where, "--processes", "4", "--concurrency", "2",
         "--lease-seconds", "2", "--poll-interval", "0.2"],
        env={**os.environ, "REFUND_LEDGER": str(ledger)}, stderr=subprocess.PIPE, text=True,
        cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while paid(ledger) < COUNT // 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        children = worker_processes(supervisor.pid)
        assert len(children) == 4
        stranded = kill_holding_leases(children, leased_by)  # left to expire, then rescued
        while statuses()["succeeded"] < COUNT and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        _, errors = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 0, errors
    return errors, stranded


def kill_holding_leases(children: list[int], leased_by: Callable[[str], list[str]]
                        ) -> list[str]:
    """SIGKILL one of ``children`` at a moment it holds at least one lease; the refunds it
    held.

    The process is stopped (SIGSTOP) while its leases are read, so what is read is what it
    leaves behind: a handler is a few milliseconds, and a kill timed blindly often finds a
    process between leases, with nothing to rescue. The read waits until every thread has
    stopped (a thread inside a syscall, a commit's write, stops only when it returns) and
    then a moment more, for a COMMIT already sent to a server to be done with."""
    host = os.uname().nodename[:64]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        holding = [pid for pid in children if leased_by(f"{host}:{pid}")]
        if not holding:
            time.sleep(0.001)
            continue
        pid = holding[0]
        os.kill(pid, signal.SIGSTOP)
        while not all_threads_stopped(pid):
            time.sleep(0.001)
        time.sleep(0.1)
        held = leased_by(f"{host}:{pid}")
        if held:
            os.kill(pid, signal.SIGKILL)
            return held
        os.kill(pid, signal.SIGCONT)
    raise AssertionError("no worker process was seen holding a lease in 30 s")


def all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in the stopped state (T) in /proc."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:  # the thread has just ended
            continue
    return all(state == "T" for state in states)


def paid(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    connection = sqlite3.connect(ledger, timeout=30)
    try:
        return int(connection.execute("SELECT count(*) FROM payments").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        connection.close()


def check_every_refund_final_and_paid_once(ledger: Path, statuses: Counter[str],
                                           failures: dict[str, int], stranded: list[str]
                                           ) -> None:
    assert statuses == Counter({"succeeded": COUNT})
    connection = sqlite3.connect(ledger)
    payments = Counter(key for (key,) in connection.execute(
        "SELECT idempotency_key FROM payments"))
    calls = Counter(refund for (refund,) in connection.execute("SELECT refund_id FROM calls"))
    connection.close()
    assert payments == Counter({f"rf-{n:04d}": 1 for n in range(COUNT)})
    # Each call was made under a lease: the one that succeeded, plus at most one per
    # lease the killed process held and a rescue charged as a failure.
    for refund, made in calls.items():
        assert 1 <= made <= failures[refund] + 1, refund
    # The killed process's leases were rescued, each charged as a failure; no others were.
    assert all(failures[refund] >= 1 for refund in stranded), stranded
    assert 0 < len(stranded) <= sum(failures.values()) <= 2


@pytest.mark.slow
def test_four_processes_on_sqlite_one_killed(tmp_path: Path) -> None:
    database = tmp_path / "refunds.db"
    submitted(SQLiteStore(REFUND, sqlite3.connect(database)))

    def statuses() -> Counter[str]:
        connection = sqlite3.connect(database, timeout=30)
        try:
            return Counter(s for (s,) in connection.execute(
                "SELECT status FROM lifecycle_refund"))
        finally:
            connection.close()

    def leased_by(worker: str) -> list[str]:
        connection = sqlite3.connect(database, timeout=30)
        try:
            return [key for (key,) in connection.execute(
                "SELECT refund_id FROM lifecycle_refund WHERE status = 'leased'"
                " AND worker_id = ?", (worker,))]
        finally:
            connection.close()

    errors, stranded = run_and_kill_one(["--db", str(database)], tmp_path / "ledger.db",
                                        statuses, leased_by)
    assert "died" in errors
    connection = sqlite3.connect(database)
    failures = dict(connection.execute("SELECT refund_id, failures FROM lifecycle_refund"))
    connection.close()
    check_every_refund_final_and_paid_once(tmp_path / "ledger.db", statuses(), failures,
                                           stranded)


@pytest.mark.slow
def test_four_processes_on_postgres_one_killed(tmp_path: Path) -> None:
    from support.postgres import connect_in, require_postgres, temporary_schema

    dsn = require_postgres()
    from lifecycles.stores.postgres import PostgresStore

    with temporary_schema() as schema:
        connection = connect_in(schema)
        submitted(PostgresStore(REFUND, connection))

        def statuses() -> Counter[str]:
            return Counter(s for (s,) in connection.execute(
                "SELECT status FROM lifecycle_refund").fetchall())

        separator = "&" if "?" in dsn else "?"
        where = ["--dsn", f"{dsn}{separator}options={quote(f'-c search_path={schema}')}"]
        def leased_by(worker: str) -> list[str]:
            return [key for (key,) in connection.execute(
                "SELECT refund_id FROM lifecycle_refund WHERE status = 'leased'"
                " AND worker_id = %s", (worker,)).fetchall()]

        errors, stranded = run_and_kill_one(where, tmp_path / "ledger.db", statuses, leased_by)
        assert "died" in errors
        failures = dict(connection.execute(
            "SELECT refund_id, failures FROM lifecycle_refund").fetchall())
        check_every_refund_final_and_paid_once(tmp_path / "ledger.db", statuses(), failures,
                                               stranded)
        connection.close()
