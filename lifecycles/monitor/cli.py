"""`lifecycles monitor health|status|explain|constraints`: the monitor's answers for operators
and scripts.

``explain EVENT_ID`` investigates one item: its status, every row open from it with each
guard true or false for the inputs assumed now (a claim by a new worker, a completion
by the lease holder), the row each trigger would fire, and every rule it keeps or
breaks; a broken item is explained, not refused. ``--mermaid`` draws its status and
the rows leaving it.

The database is a SQLite file (``--db FILE``) or a PostgreSQL database (``--dsn DSN``).
``--capabilities`` is the SHA-256 your workers pass as ``expected_capabilities_sha256``;
``constraints`` (PostgreSQL) lists the monitor's rules as named ``CHECK`` constraints
and whether each is installed; ``--install`` makes the table carry exactly them
(:mod:`lifecycles.stores.postgres_rules`), the one command here that changes the database.
The database records the capabilities it is bound to in
``cms_source_terminal_processing_meta.expected_capabilities_sha256``, e.g.
``sqlite3 FILE 'SELECT expected_capabilities_sha256 FROM cms_source_terminal_processing_meta'``.

Nothing else is ever created: an ops command opens an existing database only. Errors are one
line on stderr; with ``--json`` also ``{"error": CODE, "message": ...}`` on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import attrs

from lifecycles._cli_ops import (
    EXIT_BLOCKED,
    EXIT_CAPABILITIES_DIFFER,
    EXIT_INTERNAL,
    EXIT_LOCKED,
    EXIT_NO_DATABASE,
    EXIT_NOT_A_DATABASE,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    database_error,
    fail,
    first_line,
    open_postgres,
    open_sqlite,
    query,
    read_error_hint,
    table_exists,
)
from lifecycles._explain import Explanation, explain, inputs_now_for, print_explanation
from lifecycles._explain_stored import sql_values
from lifecycles.cli import CommandError, Parser, add_command, exit_code_table
from lifecycles.invariants.monitor import capabilities_rule, event_id_rule
from lifecycles.invariants.monitor import time as time_rule
from lifecycles.machines.monitor import CODE, MONITOR, plain_value
from lifecycles.monitor.errors import blocked, public_errors, refused
from lifecycles.monitor.facade import (
    DurableTerminalProcessingMonitor,
    InputInvalid,
    StateInvalid,
    TerminalProcessingMonitorBlocked,
)
from lifecycles.monitor.schema import META, TABLE
from lifecycles.stores._base import SchemaMismatch, StoreError

__all__ = [
    "EXIT_CODES",
    "register",
]

MONITOR_TABLE, META_TABLE = TABLE, META  # the reference's names, declared in the schema module

# The exit codes and the opening of a database are every ops command's (cli_ops).
EXIT_CODES = (
    (EXIT_OK, "answered (health: status ok)"),
    (EXIT_BLOCKED, "health answered `blocked`: expired leases or failed items; explain "
                   "answered: the item breaks rules (named in the output); constraints: "
                   "some rule constraint is missing or outdated"),
    (EXIT_USAGE, "usage error: a missing or malformed argument (error `usage`, "
                 "`capabilities_invalid`, `time_invalid`, `event_invalid`, `dsn_invalid`, "
                 "`postgres_only`)"),
    (EXIT_REFUSED, "the monitor refused; the code is printed (`missing`, `state_invalid` with "
                   "the event ids and broken rules, `schema_altered`, `legacy_unbound`, "
                   "`database_integrity`)"),
    (EXIT_NO_DATABASE, "no database at the path, or it holds no monitor schema "
                       "(`no_database`, `no_monitor_schema`)"),
    (EXIT_UNREADABLE, "the file cannot be opened: not a regular file, or no permission "
                      "(`unreadable`)"),
    (EXIT_NOT_A_DATABASE, "the file is not a SQLite database, or it is corrupt "
                          "(`not_a_database`)"),
    (EXIT_LOCKED, "another connection holds the database locked past --timeout "
                  "(`database_locked`, or `database_unreachable` when it happens mid-call), "
                  "or the file cannot be read or written right now: a full disk, a failing "
                  "device (`database_unreachable`)"),
    (EXIT_CAPABILITIES_DIFFER, "the database is bound to other capabilities than "
                               "--capabilities (`capabilities_differ`; both prefixes printed)"),
    (EXIT_UNREACHABLE, "the PostgreSQL server cannot be reached (`database_unreachable`)"),
    (EXIT_INTERNAL, "an unexpected error: a bug in lifecycles (`internal_error`)"),
)

# What to do about the input codes an ops command can meet (any InputInvalid but
# `missing` is the caller's own input: a usage error, not a refusal).
_USAGE_HINTS = {
    CODE + "time_invalid": "--now must be a finite, non-negative number of UNIX seconds",
    CODE + "event_invalid": "EVENT_ID must be an event id as registered (1-256 characters "
                            "of letters, digits, '.', '_', ':', '-')",
    CODE + "capabilities_invalid": "--capabilities must be 64 lowercase hex digits",
}


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "monitor", "inspect a terminal-processing monitor database",
                         __doc__, EXIT_CODES)
    commands = parser.add_subparsers(dest="monitor_command", required=True, metavar="COMMAND")
    common = Parser(add_help=False)
    where = common.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", type=Path, metavar="FILE", help="the monitor's SQLite file")
    where.add_argument("--dsn", metavar="DSN",
                       help="a PostgreSQL connection string (needs lifecycles[postgres])")
    common.add_argument(
        "--capabilities", required=True, metavar="SHA",
        help="the capabilities SHA-256 the workers pass (64 lowercase hex digits); the "
             f"database holds its binding in {META_TABLE}.expected_capabilities_sha256",
    )
    common.add_argument("--now", type=float, default=None, metavar="SECONDS",
                        help="the time to answer for, in UNIX seconds (default: the clock)")
    common.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="how long to wait for a locked SQLite database or to reach the "
                             "PostgreSQL server (default 5)")
    common.add_argument("--json", action="store_true", help="print JSON for machines")
    for name, handler, summary in (
        ("health", _health, "counts, due items, expired leases; exit 1 when blocked"),
        ("status", _status, "one item's status"),
        ("explain", _explain, "one item: its status, the rows open from it and which of "
                              "their guards hold now, the invariants it keeps"),
        ("constraints", _constraints, "PostgreSQL: the rules as named CHECK constraints, "
                                      "installed or not; --install adds them"),
    ):
        command = commands.add_parser(
            name, parents=[common], help=summary, description=f"{summary}.\n\n{__doc__}",
            epilog=exit_code_table(EXIT_CODES),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name in ("status", "explain"):
            command.add_argument("event_id", metavar="EVENT_ID")
        if name == "constraints":
            command.add_argument("--install", action="store_true",
                                 help="make the table's lc_ constraints exactly the rules, in "
                                      "one transaction (refused when stored rows break one)")
        if name == "explain":
            command.add_argument("--mermaid", action="store_true",
                                 help="draw the item's status and the rows leaving it as "
                                      "Mermaid (with --json: a `mermaid` key)")
        command.set_defaults(handler=handler)


# --- opening the database without creating anything ----------------------------


def _check_capabilities(value: str) -> None:
    if not capabilities_rule.check(value):  # the monitor's own rule, declared once
        raise fail(
            EXIT_USAGE, "capabilities_invalid",
            "--capabilities must be a SHA-256 in 64 lowercase hex digits: the value the "
            "workers pass as expected_capabilities_sha256",
        )


def _bound_capabilities(connection: Any) -> str | None:
    """The capabilities the database is bound to, or None when the meta row does not
    say (a version-1 database, or an altered one: the monitor then refuses by code)."""
    if not table_exists(connection, META_TABLE):
        return None
    try:
        rows = query(connection, f"SELECT expected_capabilities_sha256 FROM {META_TABLE}")
    except Exception:  # no such column: not ours to judge here, the monitor will refuse
        if not isinstance(connection, sqlite3.Connection):
            connection.rollback()
        return None
    values = {row[0] for row in rows}
    return values.pop() if len(values) == 1 and isinstance(next(iter(values), None), str) else None


def _open(args: argparse.Namespace) -> DurableTerminalProcessingMonitor:
    _check_capabilities(args.capabilities)
    where = str(args.db) if args.db is not None else "the PostgreSQL database"
    connection = (
        open_sqlite(args.db, args.timeout, "the monitor's SQLite file") if args.db is not None
        else open_postgres(args.dsn, args.timeout)
    )
    try:
        if not table_exists(connection, MONITOR_TABLE):
            raise fail(EXIT_NO_DATABASE, "no_monitor_schema",
                        f"{where} holds no monitor schema ({MONITOR_TABLE}); check the path or "
                        "DSN (an ops command never creates one)")
        bound = _bound_capabilities(connection)
        if bound is not None and bound != args.capabilities:
            raise fail(
                EXIT_CAPABILITIES_DIFFER, "capabilities_differ",
                f"{where} is bound to capabilities {bound[:12]}..., not the given "
                f"{args.capabilities[:12]}...; pass the SHA-256 your workers use "
                f"(stored in {META_TABLE}.expected_capabilities_sha256)",
            )
        return DurableTerminalProcessingMonitor(connection, args.capabilities)
    except TerminalProcessingMonitorBlocked as error:
        raise _refused(error, args) from None
    except Exception as error:
        raise database_error(error, where) from None


def _inspect_hint(args: argparse.Namespace, event_id: str) -> str:
    statement = f"SELECT * FROM {MONITOR_TABLE} WHERE event_id = '{event_id}'"
    if args.db is not None:
        return f'sqlite3 {args.db} "{statement}"'
    return f'psql "$DSN" -c "{statement}"'


def _refused(error: TerminalProcessingMonitorBlocked, args: argparse.Namespace) -> CommandError:
    code = error.code
    if isinstance(error, InputInvalid) and code != CODE + "missing":
        what = _USAGE_HINTS.get(code, "check the arguments")
        return fail(EXIT_USAGE, code, f"refused: {code}: {what}")
    if code == CODE + "database_unreachable" and args.db is not None:
        # SQLite answers so when a lock outlasts the timeout during the call itself.
        return fail(EXIT_LOCKED, code, f"refused: {code}: {args.db} is locked or cannot be "
                                        "read right now; retry, or raise --timeout")
    if code == CODE + "database_integrity" and args.db is not None:
        cause = error.__cause__
        found = f" ({first_line(cause)})" if isinstance(cause, StoreError) else ""
        return fail(EXIT_REFUSED, code, f"refused: {code}: SQLite reports damage{found}; "
                                         f"{read_error_hint(str(args.db))}")
    if code == CODE + "database_unreachable":
        return fail(EXIT_UNREACHABLE, code, f"refused: {code}: the database cannot be reached")
    if isinstance(error, StateInvalid):
        ids = ", ".join(error.event_ids) or "(not known)"
        hint = (f"; inspect it with: {_inspect_hint(args, error.event_ids[0])}"
                if error.event_ids else "")
        return fail(
            EXIT_REFUSED, code,
            f"refused: {code}: stored record(s) {ids} break the rules "
            f"{', '.join(error.rules) or '(not named)'}{hint}",
        )
    if code == CODE + "missing":
        return fail(EXIT_REFUSED, code, f"refused: {code}: no item with event id "
                                         f"{getattr(args, 'event_id', '?')!r}")
    if code in (CODE + "schema_altered", CODE + "legacy_unbound"):
        # The public error holds its code only (the reference's contract); what differs,
        # and how to repair it, is in the store's refusal that caused it.
        cause = error.__cause__
        detail = f" ({first_line(cause)})" if isinstance(cause, SchemaMismatch) else ""
        return fail(EXIT_REFUSED, code,
                     f"refused: {code}: the database's schema or meta row is not the one the "
                     f"monitor wrote{detail}; do not use it until it is restored")
    return fail(EXIT_REFUSED, code, f"refused: {code}")


def _answer(args: argparse.Namespace, ask: Any) -> Any:
    monitor = _open(args)
    now = time.time() if args.now is None else args.now
    try:
        return ask(monitor, now)
    except TerminalProcessingMonitorBlocked as error:
        raise _refused(error, args) from None
    except Exception as error:
        raise database_error(error, str(args.db or "the PostgreSQL database")) from None
    finally:
        monitor.connection.close()


# --- the commands ------------------------------------------------------------------


def _health(args: argparse.Namespace) -> int:
    health = _answer(args, lambda monitor, now: monitor.health(now=now))
    if args.json:
        print(json.dumps(dataclasses.asdict(health)))
    else:
        print(f"status: {health.status}")
        for status, count in health.counts.items():
            print(f"  {status:<11} {count}")
        print(f"due now: {health.due}")
        print(f"expired leases: {health.expired_leases}")
        print(f"failed: {health.failed}")
    return EXIT_OK if health.status == "ok" else EXIT_BLOCKED


def _status(args: argparse.Namespace) -> int:
    status = _answer(args, lambda monitor, now: monitor.status(args.event_id, now=now))
    fields = dataclasses.asdict(status)
    if args.json:
        print(json.dumps(fields))
    else:
        width = max(len(name) for name in fields)
        for name, value in fields.items():
            print(f"{name:<{width}}  {'-' if value is None else value}")
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    def ask(monitor: DurableTerminalProcessingMonitor, now: float) -> Explanation:
        key = plain_value(args.event_id)
        if not event_id_rule.check(key):
            raise refused(event_id_rule.name)
        if not time_rule.check(now):
            raise refused(time_rule.name)
        with public_errors(monitor.store):
            values = sql_values(monitor.store, key)
        if values is None:
            raise blocked(CODE + "missing")
        return explain(MONITOR, values, inputs_now_for(MONITOR, float(now)),
                       where=f"{MONITOR_TABLE} in {args.db or 'the PostgreSQL database'}",
                       now=str(now))

    return print_explanation(MONITOR, _answer(args, ask), args.json, args.mermaid)


def _constraints(args: argparse.Namespace) -> int:
    if args.db is not None:
        raise fail(EXIT_USAGE, "postgres_only", "constraints: only PostgreSQL carries the "
                    "rules as CHECK constraints; pass --dsn (SQLite keeps the reference schema)")
    from lifecycles.stores.postgres_rules import (
        ConstraintChanges,
        install_rule_constraints,
        installed_rule_constraints,
        rule_constraints,
    )

    def ask(monitor: DurableTerminalProcessingMonitor, now: float) -> Any:
        with public_errors(monitor.store):
            changes = install_rule_constraints(monitor.store) if args.install else None
            return (changes, rule_constraints(monitor.store),
                    installed_rule_constraints(monitor.store))

    changes, declared, present = _answer(args, ask)
    states = {
        c.name: "installed" if present.get(c.name) == c.digest
        else "outdated" if c.name in present else "missing"
        for c in declared.constraints
    }
    stray = sorted(set(present) - set(states))
    if args.json:
        print(json.dumps({
            "constraints": [{"name": c.name, "rule": c.rule, "field": c.field,
                             "state": states[c.name]} for c in declared.constraints],
            "not_declared": stray, "python_only": declared.left_out,
            **({"changes": attrs.asdict(changes)} if changes is not None else {}),
        }))
    else:
        if isinstance(changes, ConstraintChanges):
            print(f"installed: {len(changes.added)} added, {len(changes.replaced)} replaced,"
                  f" {len(changes.removed)} removed, {len(changes.kept)} kept")
        width = max((len(c.name) for c in declared.constraints), default=0)
        for c in declared.constraints:
            rule = f"{c.rule} on {c.field}" if c.field else f"invariant {c.rule}"
            print(f"  {c.name:<{width}}  {states[c.name]:<9}  {rule}")
        for name in stray:
            print(f"  {name:<{width}}  not declared (a later --install drops it)")
        for rule, why in declared.left_out.items():
            print(f"  Python only: {rule} ({why})")
    current = all(state == "installed" for state in states.values()) and not stray
    return EXIT_OK if current else EXIT_BLOCKED
