"""`lifecycles worker NAME`: run a leased lifecycle's records through a handler.

    lifecycles worker refund --module refunds/lifecycle.py --handler refunds/pay.py:pay \\
        --db refunds.db --concurrency 4 --processes 2

The handler is a function ``handler(record, lease)`` (or ``async def``): it does the work
and returns ``None`` or an ``Outcome``, or raises; the lifecycle's declared handling
turns that into the row that ends the lease. The worker claims due records (``--batch``
at a time in one transaction), runs ``--concurrency`` handlers at once in each of
``--processes`` processes, writes every finished lease compare-and-set, renews long
leases where the table declares a renewal row, and waits when nothing is due.

SIGTERM or SIGINT stops gracefully: no new claims, the handlers in flight finish and
their leases are written (after ``--stop-timeout`` seconds those still running are left
to expire, never half-written); a second signal stops at once. A process that dies is
started again. ``--until-idle`` returns once nothing is due and no handler runs.

Stores: ``--db FILE`` (SQLite, WAL), ``--dsn DSN`` (PostgreSQL), ``--root DIR`` (the
crash-safe files store), each holding the lifecycle's own table or directory; without
one, the ``store`` of the project's ``[tool.lifecycles]`` (``sqlite:PATH``,
``postgresql://...``, ``files:DIR``; paths relative to its pyproject.toml).

NAME is looked for among the ``--module`` lifecycles, the project's (the ``modules`` of
``[tool.lifecycles]`` in the nearest pyproject.toml, from any of its directories) and
the installed ones, so in a project ``lifecycles worker NAME --handler ...`` needs no
``--module``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lifecycles._loading import CheckerError
from lifecycles._registry import import_target
from lifecycles._worker import Idle, Worker
from lifecycles._worker_lease import WorkOutcome
from lifecycles.cli import CommandError, add_command
from lifecycles.machines._core import Lifecycle
from lifecycles.project import find_project, resolve
from lifecycles.stores._base import Store, StoreError

EXIT_OK, EXIT_USAGE, EXIT_STORE = 0, 2, 4
EXIT_CODES = (
    (EXIT_OK, "stopped: by SIGTERM / SIGINT, or idle with --until-idle"),
    (EXIT_USAGE, "usage: a bad argument; no store given or configured; unknown_lifecycle, "
                 "no_lifecycle,\n       duplicate_name, project_invalid (as for `check`); a "
                 "module or handler that cannot be loaded;\n       a lifecycle that declares "
                 "no lease or handling"),
    (EXIT_STORE, "the store cannot be opened (`store_unavailable`)"),
    (70, "an unexpected error: a bug; LIFECYCLES_TRACEBACK=1 shows the traceback"),
)
# How long a supervisor waits before starting a process that died again, at most.
RESTART_DELAY_MAX = 30.0


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "worker", "run a leased lifecycle's records through a "
                         "handler", __doc__, EXIT_CODES)
    parser.add_argument("name", metavar="NAME", help="the lifecycle to run")
    parser.add_argument("--module", action="append", default=[], metavar="MODULE",
                        help="a module declaring the lifecycle (dotted name or .py path; "
                             "not needed for the project's or installed lifecycles)")
    parser.add_argument("--handler", dest="handler_spec", required=True,
                        metavar="MODULE:FUNCTION",
                        help="the handler, handler(record, lease) (module may be a .py path)")
    where = parser.add_mutually_exclusive_group()  # default: the project's store
    where.add_argument("--db", type=Path, metavar="FILE",
                       help="a SQLite database file (default: the project's store)")
    where.add_argument("--dsn", metavar="DSN", help="a PostgreSQL connection string")
    where.add_argument("--root", type=Path, metavar="DIR", help="a files store directory")
    parser.add_argument("--concurrency", type=int, default=1, metavar="N",
                        help="handlers running at once in each process (default 1)")
    parser.add_argument("--processes", type=int, default=1, metavar="M",
                        help="worker processes (default 1)")
    parser.add_argument("--batch", type=int, default=1, metavar="K",
                        help="records claimed in one transaction, at most (default 1)")
    parser.add_argument("--lease-seconds", type=float, default=60.0, metavar="S",
                        help="each lease's length (default 60)")
    parser.add_argument("--worker-id", default=None, metavar="ID",
                        help="this worker's id (default host:pid; -1, -2... per process)")
    parser.add_argument("--poll-interval", type=float, default=1.0, metavar="S",
                        help="when nothing is due, look again at least this often (default 1; "
                             "PostgreSQL also wakes workers at once when work arrives)")
    parser.add_argument("--stop-timeout", type=float, default=None, metavar="S",
                        help="how long a graceful stop waits for running handlers "
                             "(default: the lease length)")
    parser.add_argument("--synchronous", default="full", choices=("full", "normal"),
                        help="SQLite durability of each commit (default full)")
    parser.add_argument("--until-idle", action="store_true",
                        help="stop once nothing is due and no handler runs")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    _check_numbers(args)
    _default_store(args)
    lifecycle = _lifecycle(args.name, args.module)
    if lifecycle.lease is None or lifecycle.handling is None:
        raise CommandError(EXIT_USAGE, "not_runnable",
                           f"{lifecycle.name} declares no lease and handling: a worker runs "
                           "only leased lifecycles that declare Handling(...) beside the table")
    _load_handler(args.handler_spec)  # fail here, once, rather than in every process
    if args.processes == 1:
        return _run_worker(args, index=None)
    return _supervise(args)


def _check_numbers(args: argparse.Namespace) -> None:
    for name, low, high in (("concurrency", 1, 1000), ("processes", 1, 64), ("batch", 1, 1000)):
        value = getattr(args, name)
        if not low <= value <= high:
            raise CommandError(EXIT_USAGE, "usage", f"--{name} must be in {low}..{high}")
    if not 0 < args.lease_seconds <= 86_400:
        raise CommandError(EXIT_USAGE, "usage", "--lease-seconds must be in (0, 86400]")
    if not 0 < args.poll_interval <= 3600:
        raise CommandError(EXIT_USAGE, "usage", "--poll-interval must be in (0, 3600]")


def _default_store(args: argparse.Namespace) -> None:
    """With no --db, --dsn or --root, the ``store`` of the project's [tool.lifecycles]."""
    if args.db is not None or args.dsn is not None or args.root is not None:
        return
    try:
        project = find_project()
    except CheckerError as error:
        raise CommandError(EXIT_USAGE, error.error, error.message) from error
    store = project.store if project is not None else None
    if store is None:
        raise CommandError(EXIT_USAGE, "usage", "worker: no store: pass --db FILE, --dsn DSN "
                           "or --root DIR, or set store = \"sqlite:PATH\" in [tool.lifecycles] "
                           "of the project's pyproject.toml")
    if store.kind == "sqlite":
        args.db = store.path
    elif store.kind == "files":
        args.root = store.path
    else:
        args.dsn = store.location


def _lifecycle(name: str, modules: list[str]) -> Lifecycle[Any, Any]:
    """The lifecycle ``name``: among the --module ones, the project's and the installed
    ones (:func:`lifecycles.project.resolve`)."""
    try:
        return resolve(name, modules)
    except CheckerError as error:  # the user's module or project: where and what is wrong
        raise CommandError(EXIT_USAGE, error.error, error.message) from error


def _load_handler(spec: str) -> Callable[..., Any]:
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute:
        raise CommandError(EXIT_USAGE, "handler_not_found",
                           f"--handler {spec!r} is not MODULE:FUNCTION or PATH.py:FUNCTION")
    try:
        handler = getattr(import_target(module), attribute, None)
    except Exception as error:
        raise CommandError(EXIT_USAGE, "handler_not_found",
                           f"cannot import {module}: {type(error).__name__}: {error}") from error
    if not callable(handler):
        raise CommandError(EXIT_USAGE, "handler_not_found",
                           f"{module} has no function {attribute!r}")
    return handler  # type: ignore[no-any-return]


def store_opener(lifecycle: Lifecycle[Any, Any], args: argparse.Namespace,
                 worker_id: str) -> Callable[[], Store[Any]]:
    """How each process opens its store (again after it became unavailable)."""
    if args.db is not None:
        from lifecycles.stores.sqlite import SQLiteStore, connect

        return lambda: SQLiteStore(lifecycle, connect(args.db, synchronous=args.synchronous))
    if args.dsn is not None:
        from lifecycles.stores.postgres import PostgresStore
        from lifecycles.stores.postgres import connect as pg_connect

        return lambda: PostgresStore(
            lifecycle, pg_connect(args.dsn, application_name=f"lifecycles {worker_id}"[:63]))
    from lifecycles.stores._files import FilesStore

    return lambda: FilesStore(lifecycle, args.root)


def _run_worker(args: argparse.Namespace, index: int | None) -> int:
    lifecycle = _lifecycle(args.name, args.module)
    handler = _load_handler(args.handler_spec)
    base = args.worker_id or f"{os.uname().nodename[:64]}:{os.getpid()}"
    worker_id = base if index is None or not args.worker_id else f"{base}-{index + 1}"
    tally: Counter[str] = Counter()
    lock = threading.Lock()

    def count(outcome: WorkOutcome[Any]) -> None:
        with lock:
            tally["refused" if outcome.refusal is not None else str(outcome.status)] += 1

    def on_error(error: BaseException) -> None:
        print(f"lifecycles worker {worker_id}: {getattr(error, 'code', type(error).__name__)}"
              f": {str(error).splitlines()[0] if str(error) else ''} (trying again)",
              file=sys.stderr)

    opener = store_opener(lifecycle, args, worker_id)
    try:
        opener()  # the first open says at once when the store cannot be used
    except StoreError as error:
        raise CommandError(EXIT_STORE, "store_unavailable", f"cannot open the store: {error}"
                           ) from error
    worker = Worker(
        lifecycle, opener, handler, worker_id=worker_id, lease_seconds=args.lease_seconds,
        concurrency=args.concurrency, batch_size=args.batch,
        idle=Idle(poll_interval=args.poll_interval, first=min(0.05, args.poll_interval)),
        on_outcome=count, on_error=on_error, stop_timeout=args.stop_timeout,
    )
    print(f"lifecycles worker {worker_id}: {lifecycle.name}, {args.concurrency} at a time, "
          f"batches of {args.batch}", file=sys.stderr)
    worker.run(until_idle=args.until_idle)
    summary = ", ".join(f"{count} {name}" for name, count in sorted(tally.items())) or "nothing"
    print(f"lifecycles worker {worker_id}: stopped; {summary}", file=sys.stderr)
    return EXIT_OK


def _child(args: argparse.Namespace, index: int) -> None:
    os.setpgrp()  # signals reach it through the supervisor only (Ctrl-C hits the group)
    try:
        code = _run_worker(args, index)
    except CommandError as error:
        print(f"lifecycles: {error.message}", file=sys.stderr)
        code = error.exit_code
    sys.exit(code)


def _supervise(args: argparse.Namespace) -> int:
    """Start ``--processes`` workers, pass signals on, start again one that died."""
    spawn = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    signals = 0

    def on_signal(signum: int, frame: object) -> None:
        nonlocal signals
        signals += 1
        stopping.set()
        for process in processes:
            if process.is_alive() and process.pid:
                os.kill(process.pid, signal.SIGTERM)  # a second one stops them at once

    def start(index: int) -> multiprocessing.process.BaseProcess:
        process = spawn.Process(target=_child, args=(args, index), name=f"worker-{index + 1}")
        process.start()
        return process

    processes = [start(index) for index in range(args.processes)]
    delays = [1.0] * args.processes
    # A process that died, was reported, and was waiting to be started again when the stop
    # came: its crash was handled (its leases expire and are rescued); the stop is clean.
    not_restarted: set[int] = set()
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            for index, process in enumerate(processes):
                if process.is_alive():
                    continue
                if stopping.is_set() or process.exitcode == 0:
                    continue
                print(f"lifecycles worker: process {index + 1} died ({process.exitcode}); "
                      f"starting it again in {delays[index]:.0f} s", file=sys.stderr)
                if stopping.wait(delays[index]):
                    not_restarted.add(index)
                    continue
                delays[index] = min(RESTART_DELAY_MAX, delays[index] * 2)
                processes[index] = start(index)
            if all(not process.is_alive() for process in processes) and (
                    stopping.is_set() or all(process.exitcode == 0 for process in processes)):
                break
            time.sleep(0.1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    failed = [p.exitcode for index, p in enumerate(processes)
              if p.exitcode not in (0, -signal.SIGTERM) and index not in not_restarted]
    return EXIT_OK if not failed else 1
