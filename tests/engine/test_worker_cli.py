"""`lifecycles worker`: processes that share one store, one of them killed mid-run.

The task lifecycle (tests/support/tasks.py) runs under the command with a handler file
that logs each call; one worker process is killed with SIGKILL while the others drain.
Its leases expire and are rescued (each counted as a failed attempt), every task ends
final, and each handler call is accounted for by a lease: a task was called at most once
per attempt it was charged, plus the call that finished it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest
from support.tasks import TASKS, new_task

from lifecycles.stores.sqlite import SQLiteStore

TASKS_MODULE = Path(__file__).parents[1] / "support" / "tasks.py"
HANDLER = """\
import os, time

def handle(task, lease):
    with open(os.environ["TASKS_LOG"], "a") as log:
        log.write(f"{task.task_id} {os.getpid()}\\n")
    time.sleep(0.005)
"""


def worker_processes(pid: int) -> list[int]:
    """The worker processes ``pid`` started (not multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and b"spawn_main" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def final_counts(path: Path) -> Counter[str]:
    connection = sqlite3.connect(path)
    try:
        return Counter(status for (status,) in connection.execute(
            "SELECT status FROM lifecycle_tasks"))
    finally:
        connection.close()


def lease_holders(path: Path) -> set[int]:
    """The process ids of the workers holding a lease now (a worker id is host:pid)."""
    connection = sqlite3.connect(path)
    try:
        return {int(worker.rsplit(":", 1)[1]) for (worker,) in connection.execute(
            "SELECT worker_id FROM lifecycle_tasks WHERE status = 'running'")}
    finally:
        connection.close()


def worker_command(*options: str) -> list[str]:
    return [sys.executable, "-m", "lifecycles", "worker", "tasks",
            "--module", str(TASKS_MODULE), *options]


@pytest.mark.slow
def test_four_processes_drain_every_task_to_a_final_status_with_one_killed(
        tmp_path: Path) -> None:
    database = tmp_path / "tasks.db"
    store = SQLiteStore(TASKS, sqlite3.connect(database))
    count = 300
    for n in range(count):
        store.insert(new_task(f"task-{n:03d}", now=0.0, max_attempts=5))
    store.connection.close()
    (tmp_path / "handler.py").write_text(HANDLER)
    log = tmp_path / "calls.log"
    supervisor = subprocess.Popen(
        worker_command("--handler", f"{tmp_path / 'handler.py'}:handle", "--db", str(database),
                       "--processes", "4", "--concurrency", "2", "--lease-seconds", "1.5",
                       "--poll-interval", "0.05"),
        env={**os.environ, "TASKS_LOG": str(log)}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while (not log.exists() or len(log.read_text().splitlines()) < 40) and (
                time.monotonic() < deadline):
            time.sleep(0.02)
        children = worker_processes(supervisor.pid)
        assert len(children) == 4
        # Mid-run, a process holding a lease (one waiting for SQLite's write lock holds
        # none, and its death would rescue nothing): its leases are left to expire.
        victim = None
        while victim is None and time.monotonic() < deadline:
            holders = lease_holders(database)
            victim = next((pid for pid in children if pid in holders), None)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        while final_counts(database)["succeeded"] < count and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        _, errors = supervisor.communicate(timeout=30)
    assert supervisor.returncode == 0, errors
    assert "died" in errors  # the supervisor saw the kill and started the process again
    assert final_counts(database) == Counter({"succeeded": count})
    calls = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert set(calls) == {f"task-{n:03d}" for n in range(count)}
    connection = sqlite3.connect(database)
    attempts = dict(connection.execute("SELECT task_id, attempts FROM lifecycle_tasks"))
    connection.close()
    for task, called in calls.items():
        assert 1 <= called <= attempts[task] + 1, task
    assert 0 < sum(attempts.values()) <= 2  # only the killed process's leases were rescued


def test_an_unknown_handler_is_a_usage_error_and_touches_nothing(tmp_path: Path) -> None:
    database = tmp_path / "tasks.db"
    result = subprocess.run(
        worker_command("--handler", f"{tmp_path / 'missing.py'}:handle", "--db", str(database)),
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("lifecycles: cannot import") or "handler" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not database.exists()


def test_until_idle_drains_and_returns(tmp_path: Path) -> None:
    database = tmp_path / "tasks.db"
    store = SQLiteStore(TASKS, sqlite3.connect(database))
    for n in range(20):
        store.insert(new_task(f"task-{n:03d}"))
    store.connection.close()
    (tmp_path / "handler.py").write_text(HANDLER)
    result = subprocess.run(
        worker_command("--handler", f"{tmp_path / 'handler.py'}:handle", "--db", str(database),
                       "--concurrency", "4", "--batch", "4", "--until-idle"),
        env={**os.environ, "TASKS_LOG": str(tmp_path / "calls.log")},
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert final_counts(database) == Counter({"succeeded": 20})
    assert "stopped; 20 succeeded" in result.stderr


class DeadOnArrival:
    """A stand-in process that died of SIGKILL as soon as it started (the crash under test)."""

    started: ClassVar[list[int]] = []

    def __init__(self, target: object, args: tuple[object, int], name: str) -> None:
        self.index = args[1]
        self.pid: int | None = None
        self.exitcode: int | None = None

    def start(self) -> None:
        DeadOnArrival.started.append(self.index)
        self.exitcode = -signal.SIGKILL

    def is_alive(self) -> bool:
        return False


def test_a_stop_while_a_dead_process_waits_to_be_started_again_is_a_clean_stop(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Found in a bare clone's run: SIGTERM during the restart delay made the supervisor exit
    1, the crash it had already reported counted again as a failure of the stop."""
    import argparse
    import multiprocessing
    import threading

    from lifecycles import _cli_worker as cli_worker

    class Context:
        Process = DeadOnArrival

    DeadOnArrival.started = []
    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Context())
    # A SIGTERM before the supervisor's handler is in place must not end pytest: swallow it,
    # and send it again until the supervisor has returned.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    returned = threading.Event()

    def stop_it() -> None:
        while not returned.wait(0.3):
            os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=stop_it)
    sender.start()
    try:
        code = cli_worker._supervise(argparse.Namespace(processes=1))
    finally:
        returned.set()
        sender.join()
        signal.signal(signal.SIGTERM, previous)
    assert code == 0
    assert DeadOnArrival.started == [0]  # never started again once the stop came
    assert "process 1 died (-9); starting it again in 1 s" in capsys.readouterr().err
