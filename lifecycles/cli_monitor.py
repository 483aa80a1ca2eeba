"""`lifecycles monitor health|status`: the facade's answers for operators and scripts.

Exit codes, stable for monitoring scripts:

* 0: answered, and (for ``health``) the monitor is ``ok``;
* 1: ``health`` answered ``blocked`` (expired leases or failed items);
* 2: usage error (argparse);
* 3: the monitor refused: the error code is printed (``missing``, ``state_invalid``,
  ``schema_altered``...);
* 4: the database file does not exist or holds no monitor schema. Nothing is
  created: an ops command never initialises a database.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from lifecycles.monitor import DurableTerminalProcessingMonitor, TerminalProcessingMonitorBlocked

EXIT_OK, EXIT_BLOCKED, EXIT_REFUSED, EXIT_NO_DATABASE = 0, 1, 3, 4
MONITOR_TABLE = "cms_source_terminal_processing"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitor",
        help="inspect a terminal-processing monitor database",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="monitor_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", required=True, type=Path, help="the monitor's SQLite file")
    common.add_argument(
        "--capabilities", required=True, metavar="SHA", help="expected capabilities SHA-256"
    )
    common.add_argument(
        "--now", type=float, default=None, help="the time to answer for (default: the clock)"
    )
    common.add_argument("--json", action="store_true", help="print JSON for machines")
    health = commands.add_parser("health", parents=[common], help="counts, due and expired leases")
    health.set_defaults(handler=_health)
    status = commands.add_parser("status", parents=[common], help="one item's status")
    status.add_argument("event_id", metavar="EVENT_ID")
    status.set_defaults(handler=_status)


def _open(args: argparse.Namespace) -> DurableTerminalProcessingMonitor | int:
    path: Path = args.db
    if not path.is_file():
        print(f"lifecycles: no database at {path}", file=sys.stderr)
        return EXIT_NO_DATABASE
    connection = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    known = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MONITOR_TABLE,)
    ).fetchone()
    if known is None:
        print(f"lifecycles: {path} holds no monitor schema", file=sys.stderr)
        return EXIT_NO_DATABASE
    return DurableTerminalProcessingMonitor(connection, args.capabilities)


def _answer(args: argparse.Namespace, ask: Any) -> tuple[Any, int] | int:
    try:
        monitor = _open(args)
        if isinstance(monitor, int):
            return monitor
        now = time.time() if args.now is None else args.now
        return ask(monitor, now), EXIT_OK
    except TerminalProcessingMonitorBlocked as error:
        if args.json:
            print(json.dumps({"error": error.code}))
        print(f"lifecycles: refused: {error.code}", file=sys.stderr)
        return EXIT_REFUSED


def _health(args: argparse.Namespace) -> int:
    answered = _answer(args, lambda monitor, now: monitor.health(now=now))
    if isinstance(answered, int):
        return answered
    health, _ = answered
    if args.json:
        print(json.dumps(dataclasses.asdict(health), sort_keys=False))
    else:
        print(f"status: {health.status}")
        for status, count in health.counts.items():
            print(f"  {status:<11} {count}")
        print(f"due now: {health.due}")
        print(f"expired leases: {health.expired_leases}")
        print(f"failed: {health.failed}")
    return EXIT_OK if health.status == "ok" else EXIT_BLOCKED


def _status(args: argparse.Namespace) -> int:
    answered = _answer(args, lambda monitor, now: monitor.status(args.event_id, now=now))
    if isinstance(answered, int):
        return answered
    status, code = answered
    fields = dataclasses.asdict(status)
    if args.json:
        print(json.dumps(fields))
    else:
        width = max(len(name) for name in fields)
        for name, value in fields.items():
            print(f"{name:<{width}}  {'-' if value is None else value}")
    return code
