"""`lifecycles outbox status|explain`: what a close outbox holds, for operators and scripts.

Prints the pending, delivered and quarantined counts, the oldest pending intent,
pending or delivered files the outbox cannot trust (the next replay quarantines
pending ones), and every quarantined item with its reason. Read-only: nothing is
created (not even the lock file), moved, re-moded or removed; the lock is taken
when a writer has ever created it, so the answer is one consistent view.

``explain ENTRY_ID`` investigates one entry, wherever it is (delivered, pending or
quarantined): its status, every row open from it with each guard true or false for
what a replay would pass now, and every rule it keeps or breaks; an entry the outbox
cannot trust is explained, not refused. ``--mermaid`` draws its status and the rows
leaving it. Read-only, like ``status``. A value that such a file holds nested deeper
than the JSON depth bound allows is shown down to one level past it, then ``"..."``
(a note says so): every rule judges it as it would the whole value.

Errors are one line on stderr; with ``--json`` also ``{"error": CODE, "message": ...}``
on stdout.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycles._cli_ops import (
    EXIT_BLOCKED,
    EXIT_INTERNAL,
    EXIT_NO_DATABASE,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    files_layout,
)
from lifecycles._explain import explain, print_explanation
from lifecycles._explain_stored import files_entry
from lifecycles.cli import CommandError, add_command
from lifecycles.invariants.outbox import MAX_JSON_DEPTH, OutboxRecord
from lifecycles.machines.outbox import OUTBOX, iso_timestamp
from lifecycles.outbox.facade import (
    OUTBOX_DIRECTORY,
    corrupt_message,
    default_state_dir,
)
from lifecycles.outbox.hooks import outbox_inputs_now
from lifecycles.stores._files import (
    FilesStore,
    StoreMissing,
    UnsafePath,
    UntrustedRecord,
    printable_name,  # a planted name need not be UTF-8; the output must be
)

__all__ = [
    "ELIDED",
    "EXIT_CODES",
    "SHOWN_LEVELS",
    "TRUSTED_DIRECTORIES",
    "elided",
    "outbox_status",
    "register",
]

# The ops commands' exit codes (lifecycles._cli_ops), under the outbox's own names.
EXIT_UNTRUSTED, EXIT_NO_ENTRY, EXIT_NO_OUTBOX, EXIT_UNUSABLE = (
    EXIT_BLOCKED, EXIT_REFUSED, EXIT_NO_DATABASE, EXIT_UNREADABLE)
EXIT_CODES = (
    (EXIT_OK, "answered: nothing untrusted, nothing quarantined (status ok); explain: the "
              "entry keeps every rule"),
    (EXIT_UNTRUSTED, "answered, and untrusted material is present: files the outbox "
                     "cannot trust, or quarantined items (status untrusted); read them; "
                     "explain: the entry breaks rules, or the outbox cannot trust its file"),
    (EXIT_USAGE, "usage error (error `usage`, `time_invalid`)"),
    (EXIT_NO_ENTRY, "explain: no entry with that id in pending, delivered or quarantine "
                    "(`no_entry`)"),
    (EXIT_NO_OUTBOX, "there is no outbox under the state directory (`no_outbox`)"),
    (EXIT_UNUSABLE, "the outbox cannot be used: a directory or the lock file is a symbolic "
                    "link or not what it must be (`unsafe_path`), or it cannot be read "
                    "(`unreadable`)"),
    (EXIT_INTERNAL, "an unexpected error: a bug in lifecycles (`internal_error`)"),
)
TRUSTED_DIRECTORIES = ("pending", "delivered")


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "outbox", "inspect a close outbox directory", __doc__,
                         EXIT_CODES)
    commands = parser.add_subparsers(dest="outbox_command", required=True, metavar="COMMAND")
    status = add_command(
        commands, "status", "counts, oldest pending intent, untrusted files, quarantine reasons",
        __doc__, EXIT_CODES,
    )
    explain_ = add_command(
        commands, "explain", "one entry: its status, the rows open from it and which of "
        "their guards hold now, the invariants it keeps", __doc__, EXIT_CODES,
    )
    for command in (status, explain_):
        command.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="the state directory holding close-outbox/ (default: the outbox's own "
            "default: $REIN_AHARNESS_STATE_DIR, $XDG_STATE_HOME/rein-aharness, "
            "~/.local/state/rein-aharness)",
        )
        command.add_argument("--json", action="store_true", help="print JSON for machines")
    status.set_defaults(handler=_status)
    explain_.add_argument("entry_id", metavar="ENTRY_ID")
    explain_.add_argument("--now", default=None, metavar="ISO",
                          help="the time to answer for, an ISO timestamp with a timezone "
                               "(default: the clock)")
    explain_.add_argument("--mermaid", action="store_true",
                          help="draw the entry's status and the rows leaving it as Mermaid "
                               "(with --json: a `mermaid` key)")
    explain_.set_defaults(handler=_explain)


def outbox_status(state_dir: Path) -> dict[str, Any]:
    """The status document of the outbox under ``state_dir`` (see the module docstring)."""
    store = _reader(state_dir)
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
                        {"directory": directory, "file": printable_name(name),
                         "reason": corrupt_message(error),
                         "rules": list(error.rules)}
                    )
                    continue
                if directory == "pending" and record is not None and (
                    oldest is None or _created(record) < _created(oldest)
                ):
                    oldest = record
        quarantine = [
            {
                "file": printable_name(entry.name),
                "entry_id": _text(entry.reason, "entry_id", printable_name(entry.stem)),
                "quarantined_at": _text(entry.reason, "quarantined_at", None),
                "reason": _text(entry.reason, "reason", None),
            }
            for entry in store.quarantine_entries()
        ]
    return {
        "status": "untrusted" if untrusted or quarantine else "ok",
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


def _state_dir(args: argparse.Namespace) -> Path:
    state_dir: Path = args.state_dir.expanduser() if args.state_dir else default_state_dir()
    if not (state_dir / OUTBOX_DIRECTORY).exists() and not (
        state_dir / OUTBOX_DIRECTORY
    ).is_symlink():
        raise CommandError(EXIT_NO_OUTBOX, "no_outbox",
                           f"no outbox under {state_dir}; check --state-dir")
    return state_dir


@contextmanager
def _outbox_errors(state_dir: Path) -> Iterator[None]:
    """The store's refusals as the command's errors, the same for every subcommand."""
    try:
        yield
    except StoreMissing as error:
        raise CommandError(EXIT_NO_OUTBOX, "no_outbox",
                           f"{state_dir}: {error}; check --state-dir") from None
    except UnsafePath as error:
        raise CommandError(EXIT_UNUSABLE, "unsafe_path",
                           f"{state_dir}: {error}; the outbox refuses to use it") from None
    except OSError as error:
        raise CommandError(EXIT_UNUSABLE, "unreadable",
                           f"cannot read the outbox under {state_dir}: {error.strerror or error}"
                           "; check its permissions") from None


def _reader(state_dir: Path) -> FilesStore[OutboxRecord]:
    """The outbox's store, opened to read only: nothing created, moved or re-moded."""
    return FilesStore(OUTBOX, state_dir / OUTBOX_DIRECTORY, files_layout(OUTBOX), create=False)


def _status(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    with _outbox_errors(state_dir):
        status = outbox_status(state_dir)
    code = EXIT_OK if status["status"] == "ok" else EXIT_UNTRUSTED
    if args.json:
        print(json.dumps(status, ensure_ascii=False))
        return code
    counts = status["counts"]
    print(f"status: {status['status']}")
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
    return code


ELIDED = "..."
# One level past the depth bound: a value cut there still breaks json_depth_bound, as the
# whole value does, and the explanation's printing never recurses thousands deep.
SHOWN_LEVELS = MAX_JSON_DEPTH + 1


def elided(value: Any, levels: int = SHOWN_LEVELS) -> tuple[Any, bool]:
    """``value`` with every list or object nested more than ``levels`` deep replaced by
    ``"..."``, and whether anything was (values come from JSON: lists, objects, scalars)."""
    if not isinstance(value, (list, dict)):
        return value, False
    if levels == 0:
        return ELIDED, True
    if isinstance(value, list):
        items = [elided(item, levels - 1) for item in value]
        return [item for item, _ in items], any(cut for _, cut in items)
    fields = {key: elided(item, levels - 1) for key, item in value.items()}
    return {key: item for key, (item, _) in fields.items()}, any(
        cut for _, cut in fields.values())


def _explain(args: argparse.Namespace) -> int:
    try:
        now = iso_timestamp(args.now if args.now is not None else datetime.now(UTC))
    except ValueError as error:
        raise CommandError(EXIT_USAGE, "time_invalid",
                           f"--now must be an ISO timestamp with a timezone ({error})") from None
    state_dir = _state_dir(args)
    with _outbox_errors(state_dir):
        entry = files_entry(_reader(state_dir), args.entry_id)
    if entry is None:
        raise CommandError(EXIT_NO_ENTRY, "no_entry",
                           f"no entry {args.entry_id!r} in the outbox under {state_dir} "
                           "(pending, delivered or quarantine); check the id and --state-dir")
    values, cut = {}, False
    for field, value in (entry.values or {}).items():
        values[field], deep = elided(value)
        cut = cut or deep
    notes = entry.notes + ((f"values nested more than {SHOWN_LEVELS} levels deep are shown "
                            f"cut there, as {ELIDED!r}",) if cut else ())
    explanation = explain(
        OUTBOX, values, outbox_inputs_now(now), where=entry.where, now=now,
        store_findings=entry.findings, notes=notes, status=entry.status,
    )
    return print_explanation(OUTBOX, explanation, args.json, args.mermaid)
