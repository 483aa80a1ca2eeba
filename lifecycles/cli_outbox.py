"""`lifecycles outbox status`: what a close outbox holds, for operators and scripts.

Prints the pending, delivered and quarantined counts, the oldest pending intent,
pending or delivered files the outbox cannot trust (the next replay quarantines
pending ones), and every quarantined item with its reason. Reads only: no
directory is created and nothing is moved (the lock file is created if missing).

Exit codes, stable for scripts:

* 0: answered;
* 2: usage error (argparse);
* 4: there is no outbox under the state directory;
* 5: the outbox cannot be used: a directory or the lock file is a symbolic link or
  not what it must be, or it cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from lifecycles.invariants.outbox import OutboxRecord
from lifecycles.machines.outbox import OUTBOX
from lifecycles.outbox import (
    OUTBOX_DIRECTORY,
    OUTBOX_LAYOUT,
    corrupt_message,
    default_state_dir,
)
from lifecycles.stores.files import FilesStore, StoreMissing, UnsafePath, UntrustedRecord

EXIT_OK, EXIT_NO_OUTBOX, EXIT_UNUSABLE = 0, 4, 5
TRUSTED_DIRECTORIES = ("pending", "delivered")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "outbox",
        help="inspect a close outbox directory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="outbox_command", required=True, metavar="COMMAND")
    status = commands.add_parser(
        "status", help="counts, oldest pending intent, untrusted files, quarantine reasons"
    )
    status.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the state directory holding close-outbox/ (default: the outbox's own default: "
        "$REIN_AHARNESS_STATE_DIR, $XDG_STATE_HOME/rein-aharness, ~/.local/state/rein-aharness)",
    )
    status.add_argument("--json", action="store_true", help="print JSON for machines")
    status.set_defaults(handler=_status)


def outbox_status(state_dir: Path) -> dict[str, Any]:
    """The status document of the outbox under ``state_dir`` (see the module docstring)."""
    store: FilesStore[OutboxRecord] = FilesStore(
        OUTBOX, state_dir / OUTBOX_DIRECTORY, OUTBOX_LAYOUT, create=False
    )
    untrusted: list[dict[str, Any]] = []
    oldest: OutboxRecord | None = None
    with store.locked():
        counts = {
            "pending": store.count("pending"),
            "delivered": store.count("delivered"),
            "quarantined": store.count("quarantined"),
        }
        for directory in TRUSTED_DIRECTORIES:
            for name in sorted(store.names(directory)):
                try:
                    record = store.read_named(directory, name)
                except UntrustedRecord as error:
                    untrusted.append(
                        {"directory": directory, "file": name, "reason": corrupt_message(error),
                         "rules": list(error.rules)}
                    )
                    continue
                if directory == "pending" and record is not None and (
                    oldest is None or _created(record) < _created(oldest)
                ):
                    oldest = record
        quarantine = [
            {
                "file": entry.name,
                "entry_id": _text(entry.reason, "entry_id", entry.stem),
                "quarantined_at": _text(entry.reason, "quarantined_at", None),
                "reason": _text(entry.reason, "reason", None),
            }
            for entry in store.quarantine_entries()
        ]
    return {
        "outbox": str(store.root),
        "counts": counts,
        "oldest_pending": None if oldest is None else {
            "entry_id": oldest.entry_id,
            "run_id": oldest.run_id,
            "transaction_id": oldest.transaction_id,
            "created_at": oldest.created_at,
            "attempts": oldest.attempts,
            "last_attempt_at": oldest.last_attempt_at,
            "last_error": oldest.last_error,
        },
        "untrusted": untrusted,
        "quarantine": quarantine,
    }


def _created(record: OutboxRecord) -> datetime:
    return datetime.fromisoformat(record.created_at)  # aware: a field rule guarantees it


def _text(reason: Any, key: str, default: str | None) -> str | None:
    value = reason.get(key) if reason is not None else None
    return value if isinstance(value, str) else default


def _status(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir.expanduser() if args.state_dir else default_state_dir()
    if not (state_dir / OUTBOX_DIRECTORY).exists() and not (
        state_dir / OUTBOX_DIRECTORY
    ).is_symlink():
        return _fail(args, EXIT_NO_OUTBOX, "no_outbox", f"no outbox under {state_dir}")
    try:
        status = outbox_status(state_dir)
    except StoreMissing as error:
        return _fail(args, EXIT_NO_OUTBOX, "no_outbox", f"{state_dir}: {error}")
    except UnsafePath as error:
        return _fail(args, EXIT_UNUSABLE, "unsafe_path", f"{state_dir}: {error}")
    except OSError as error:
        return _fail(args, EXIT_UNUSABLE, "unreadable", f"{state_dir}: {error}")
    if args.json:
        print(json.dumps(status, ensure_ascii=False))
        return EXIT_OK
    counts = status["counts"]
    print(f"outbox: {status['outbox']}")
    for name in ("pending", "delivered", "quarantined"):
        print(f"  {name:<11} {counts[name]}")
    oldest = status["oldest_pending"]
    if oldest is None:
        print("oldest pending: -")
    else:
        print(
            f"oldest pending: {oldest['entry_id']} created {oldest['created_at']} "
            f"attempts {oldest['attempts']} last error {oldest['last_error'] or '-'}"
        )
    if status["untrusted"]:
        print(f"untrusted files: {len(status['untrusted'])} (replay quarantines pending ones)")
        for item in status["untrusted"]:
            print(f"  {item['directory']}/{item['file']}: {item['reason']}")
    if status["quarantine"]:
        print("quarantine:")
        for item in status["quarantine"]:
            print(
                f"  {item['file']}  {item['quarantined_at'] or '-'}  "
                f"{item['reason'] or '(no reason file)'}"
            )
    return EXIT_OK


def _fail(args: argparse.Namespace, code: int, error: str, message: str) -> int:
    if args.json:
        print(json.dumps({"error": error, "message": message}))
    print(f"lifecycles: {message}", file=sys.stderr)
    return code
