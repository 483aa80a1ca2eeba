"""`lifecycles list|status|health|explain`: any lifecycle, on any store, for operators.

``list`` names every lifecycle known here (shipped, and those of ``--module``): its
statuses, whether workers lease it, its table version and the module declaring it.

``status NAME [KEY]``, ``health NAME`` and ``explain NAME KEY`` read one store of the
lifecycle: a SQLite file (``--db FILE``, table ``lifecycle_<name>``), a PostgreSQL
database (``--dsn DSN``, the same table in the connection's ``current_schema()``) or a
files store (``--root DIR``, one directory per status). The monitor keeps its own table
(``cms_source_terminal_processing``) and the outbox its own layout (``--root`` is then
the ``close-outbox`` directory).

* ``status NAME``: the records per status, the due ones, the expired leases;
  ``status NAME KEY``: one record's fields (a lease token only as "set");
* ``health NAME``: those figures and every rule on every record; exit 1 when blocked
  (an expired lease, a broken record, the engine's own complaint).
  ``--format prometheus`` prints them as the Prometheus text exposition, for the node
  exporter's textfile collector; ``--format json`` the same figures;
* ``explain NAME KEY``: the record's status, every row open from it with each guard
  true or false for the inputs assumed now, the row each trigger would fire, every rule
  it keeps or breaks; a broken record is explained, not refused. ``--mermaid`` draws its
  status and the rows leaving it.

Read-only: nothing is created, migrated or moved (no database file, table, index,
trigger, directory or lock file). Errors are one line on stderr; with ``--json`` also
``{"error": CODE, "message": ...}`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from lifecycles._app_hooks import hooks_of
from lifecycles._explain import (
    Explanation,
    InputsNow,
    explain,
    inputs_now_for,
    print_explanation,
    shown_now,
)
from lifecycles._explain_stored import StoredEntry, files_entry, sql_values
from lifecycles.cli import CommandError, add_command, exit_code_table
from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.stores._base import SchemaMismatch, StoreDamaged, StoreError, StoreUnavailable

AnyLifecycle = Lifecycle[Any, Any]

# The exit codes of every ops command: `lifecycles monitor` answers with the same ones.
EXIT_OK = 0
EXIT_BLOCKED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_NO_DATABASE = 4
EXIT_UNREADABLE = 5
EXIT_NOT_A_DATABASE = 6
EXIT_LOCKED = 7
EXIT_CAPABILITIES_DIFFER = 8
EXIT_UNREACHABLE = 9
EXIT_INTERNAL = 70

EXIT_CODES = (
    (EXIT_OK, "answered (health: status ok; explain: the record keeps every rule)"),
    (EXIT_BLOCKED, "health answered `blocked`: expired leases, broken records or the "
                   "engine's own complaints; explain answered: the record breaks rules "
                   "(named in the output), or the lifecycle's code raised building the "
                   "inputs assumed now (its file:line printed)"),
    (EXIT_USAGE, "usage error: a missing or malformed argument (`usage`, "
                 "`unknown_lifecycle`, `no_lifecycle`, `dsn_invalid`, a --module that does "
                 "not import: `module_not_found`, `module_import_failed`, ...)"),
    (EXIT_REFUSED, "the store refused: `missing` (no record under KEY), `state_invalid` "
                   "(status KEY of a broken record: explain it; health, when a rule with no "
                   "SQL form finds one), `schema_altered` (the table "
                   "is not the one the lifecycle's store writes), `database_integrity`"),
    (EXIT_NO_DATABASE, "no database or store at the path, or it holds no store of this "
                       "lifecycle (`no_database`, `no_table`, `no_store`)"),
    (EXIT_UNREADABLE, "the file or directory cannot be opened: not what it must be, a "
                      "symbolic link, or no permission (`unreadable`, `unsafe_path`)"),
    (EXIT_NOT_A_DATABASE, "the file is not a SQLite database, or it is corrupt "
                          "(`not_a_database`)"),
    (EXIT_LOCKED, "the SQLite database is locked past --timeout (`database_locked`), or "
                  "cannot be read right now (`database_unreachable`)"),
    (EXIT_CAPABILITIES_DIFFER, "monitor only: the database is bound to other capabilities "
                               "(`capabilities_differ`)"),
    (EXIT_UNREACHABLE, "the PostgreSQL server cannot be reached (`database_unreachable`)"),
    (EXIT_INTERNAL, "an unexpected error: a bug in lifecycles (`internal_error`)"),
)

FORMATS = ("text", "json", "prometheus")


def register(subparsers: Any) -> None:
    """``lifecycles list``; :func:`register_status`, :func:`register_health` and
    :func:`register_explain` add the others (one command module each, see
    ``lifecycles.cli.COMMAND_MODULES``)."""
    listing = add_command(subparsers, "list", "every lifecycle known here, one line each",
                          __doc__, EXIT_CODES)
    _add_modules(listing)
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.set_defaults(handler=_list)


def _store_command(subparsers: Any, name: str, summary: str) -> argparse.ArgumentParser:
    """A command reading one store of the lifecycle NAME."""
    command: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=f"{summary}.\n\n{__doc__}",
        epilog=exit_code_table(EXIT_CODES), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("name", metavar="NAME", help="the lifecycle (see `lifecycles list`)")
    where = command.add_mutually_exclusive_group()  # none: the default store (_default_store)
    where.add_argument("--db", type=Path, metavar="FILE", help="a SQLite file")
    where.add_argument("--dsn", metavar="DSN",
                       help="a PostgreSQL connection string (needs lifecycles[postgres])")
    where.add_argument("--root", type=Path, metavar="DIR", help="a files store's directory")
    _add_modules(command)
    command.add_argument("--now", type=float, default=None, metavar="SECONDS",
                         help="the time to answer for, in UNIX seconds (default: the clock)")
    command.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                         help="how long to wait for a locked SQLite database or to reach the "
                              "PostgreSQL server (default 5)")
    command.add_argument("--json", action="store_true", help="print JSON for machines")
    return command


def register_status(subparsers: Any) -> None:
    command = _store_command(subparsers, "status", "the records per status, due and "
                                                   "expired; with KEY one record")
    command.add_argument("key", metavar="KEY", nargs="?", default=None)
    command.set_defaults(handler=_status)


def register_health(subparsers: Any) -> None:
    command = _store_command(subparsers, "health", "the figures and every rule on every "
                                                   "record; exit 1 when blocked")
    command.add_argument("--format", choices=FORMATS, default=None,
                         help="text (default), json (as --json), or the Prometheus text "
                              "exposition")
    command.set_defaults(handler=_health)


def register_explain(subparsers: Any) -> None:
    command = _store_command(subparsers, "explain", "one record: its status, the rows open "
                                                    "from it and which of their guards hold "
                                                    "now, the rules it keeps")
    command.add_argument("key", metavar="KEY")
    command.add_argument("--mermaid", action="store_true",
                         help="draw the record's status and the rows leaving it as Mermaid "
                              "(with --json: a `mermaid` key)")
    command.set_defaults(handler=_explain)


def _add_modules(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--module", action="append", default=[], metavar="M",
                        help="a module declaring lifecycles (dotted name or .py path); "
                             "repeat for more")


# --- which lifecycle ---------------------------------------------------------------


def _lifecycles(modules: Sequence[str]) -> dict[str, AnyLifecycle]:
    """Every lifecycle known here by name (:func:`lifecycles.project.available`)."""
    from lifecycles._loading import CheckerError
    from lifecycles.project import available

    try:
        return available(modules)
    except CheckerError as error:
        raise CommandError(EXIT_USAGE, error.error, error.message) from error


def _default_store(args: argparse.Namespace) -> None:
    """With no --db, --dsn or --root, the ``store`` of the project's [tool.lifecycles]."""
    from lifecycles._loading import CheckerError
    from lifecycles.project import find_project

    if args.db is not None or args.dsn is not None or args.root is not None:
        return
    try:
        project = find_project()
    except CheckerError as error:
        raise CommandError(EXIT_USAGE, error.error, error.message) from error
    store = project.store if project is not None else None
    if store is None:
        raise CommandError(EXIT_USAGE, "usage", f"{args.command}: no store: pass --db FILE, "
                           "--dsn DSN or --root DIR")
    if store.kind == "sqlite":
        args.db = store.path
    elif store.kind == "files":
        args.root = store.path
    else:
        args.dsn = store.location


def _lifecycle(name: str, modules: Sequence[str]) -> AnyLifecycle:
    """The lifecycle ``name`` (:func:`lifecycles.project.resolve`)."""
    from lifecycles._loading import CheckerError
    from lifecycles.project import resolve

    try:
        return resolve(name, modules)
    except CheckerError as error:
        raise CommandError(EXIT_USAGE, error.error, error.message) from error


# --- opening a store without creating anything ----------------------------------------


def fail(exit_code: int, error: str, message: str) -> CommandError:
    return CommandError(exit_code, error, message)


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def read_error_hint(where: str) -> str:
    # SQLite reports a read that failed with EIO as SQLITE_CORRUPT (its CORRUPTFS), so a
    # passing device fault looks like damage: only a check once the device is healthy tells.
    return (f"SQLite reports a failed read (EIO) as corruption too: once the device is "
            f"healthy, sqlite3 {where} 'PRAGMA integrity_check' answers ok if the file is "
            "not damaged")


def sqlite_error(error: sqlite3.Error, where: str) -> CommandError:
    """What a ``sqlite3`` error means to an ops command."""
    text = str(error)
    name = getattr(error, "sqlite_errorname", None) or ""
    if "locked" in text or "busy" in text:
        return fail(EXIT_LOCKED, "database_locked",
                    f"{where} is locked by another connection; retry, or raise --timeout")
    if name.startswith(("SQLITE_IOERR", "SQLITE_FULL")):
        # A full disk, or a device failing its I/O: the file may be fine (workers answer
        # database_unreachable for the same cause), so not "not a database".
        return fail(EXIT_LOCKED, "database_unreachable",
                    f"{where} cannot be read or written right now ({text}): a full disk or a "
                    "failing device; free space or check the kernel log, then retry")
    if isinstance(error, sqlite3.OperationalError) and "unable to open" in text:
        return fail(EXIT_UNREADABLE, "unreadable",
                    f"cannot open {where} ({text}); check the path and its permissions")
    if isinstance(error, sqlite3.DatabaseError):
        hint = f"; {read_error_hint(where)}" if name.startswith("SQLITE_CORRUPT") else ""
        return fail(EXIT_NOT_A_DATABASE, "not_a_database",
                    f"{where} is not a usable SQLite database ({text}); check the path{hint}")
    return fail(EXIT_REFUSED, "database_error", f"{where}: {text}")


def open_sqlite(path: Path, timeout: float, what: str = "a SQLite file") -> sqlite3.Connection:
    """A connection to the existing SQLite file at ``path``; never creates it."""
    if not path.exists():
        raise fail(EXIT_NO_DATABASE, "no_database",
                   f"no database at {path}; an ops command never creates one: check --db")
    if not path.is_file():
        raise fail(EXIT_UNREADABLE, "unreadable",
                   f"{path} is not a regular file; --db names {what}")
    if not os.access(path, os.R_OK | os.W_OK):
        raise fail(EXIT_UNREADABLE, "unreadable",
                   f"no permission to open {path} for reading and writing; run as its owner")
    try:
        # mode=rw: never create the file; a URI built from the absolute path quotes '?', '#'.
        connection = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=timeout
        )
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as error:
        raise sqlite_error(error, str(path)) from None
    return connection


def open_postgres(dsn: str, timeout: float) -> Any:
    """An autocommit connection to ``dsn`` (:func:`lifecycles.stores.postgres.connect`)."""
    try:
        from lifecycles.stores.postgres import connect
    except ImportError:
        raise fail(EXIT_USAGE, "postgres_unavailable",
                   "--dsn needs the PostgreSQL extra: pip install 'lifecycles[postgres]'"
                   ) from None
    try:
        return connect(dsn, connect_timeout=max(1, round(timeout)),
                       application_name="lifecycles-cli")
    except ValueError as error:  # a malformed connection string (connect() says so)
        raise fail(EXIT_USAGE, "dsn_invalid",
                   f"--dsn is not a valid connection string ({first_line(error)})") from None
    except StoreError as error:
        raise fail(EXIT_UNREACHABLE, "database_unreachable",
                   f"{first_line(error)}; check --dsn and that the server runs") from None


def query(connection: Any, sql: str) -> list[tuple[Any, ...]]:
    cursor = connection.cursor()
    try:
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def table_exists(connection: Any, table: str) -> bool:
    if isinstance(connection, sqlite3.Connection):
        sql = f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{table}'"
    else:
        sql = f"SELECT 1 WHERE to_regclass('{table}') IS NOT NULL"
    return bool(query(connection, sql))


def database_error(error: Exception, where: str) -> Exception:
    """A driver's error as the command's error; anything else is left to the caller."""
    if isinstance(error, CommandError):
        return error
    if isinstance(error, sqlite3.Error):
        return sqlite_error(error, where)
    if type(error).__module__.startswith("psycopg"):
        if type(error).__name__ == "OperationalError":
            return fail(EXIT_UNREACHABLE, "database_unreachable",
                        f"{where}: {first_line(error)}; check --dsn and the server")
        return fail(EXIT_REFUSED, "database_error", f"{where}: {first_line(error)}")
    return error


@attrs.frozen
class Opened:
    """One lifecycle's store, opened to read: ``where`` says which, in words."""

    lifecycle: AnyLifecycle
    store: Any
    where: str
    sql: bool

    def close(self) -> None:
        if self.sql:
            self.store.connection.close()


def _reading_schema(lifecycle: AnyLifecycle, connection: Any) -> Any:
    """The schema of the lifecycle's table, which opening only verifies: the table and its
    indexes are never created (an app's own, as its hooks declare, else the table's)."""
    from lifecycles.stores._sql_schema import SQLSchema

    declared = hooks_of(lifecycle).reading_schema
    if declared is not None:
        return declared(connection)

    class ReadingSchema(SQLSchema):
        def ensure(self, catalogue: Any) -> None:
            self.verify(catalogue)

    return ReadingSchema(lifecycle)


def _reading_store(lifecycle: AnyLifecycle, connection: Any) -> Any:
    """The lifecycle's SQL store on ``connection``, creating no index nor trigger: health
    answers the same without its rules indexes, and nothing here listens."""
    schema = _reading_schema(lifecycle, connection)
    if isinstance(connection, sqlite3.Connection):
        from lifecycles.stores.sqlite import SQLiteStore

        class ReadingSQLiteStore(SQLiteStore[Any]):
            def ensure_rules_indexes(self) -> None:
                return None

        return ReadingSQLiteStore(lifecycle, connection, schema)
    from lifecycles.stores.postgres import PostgresStore

    class ReadingPostgresStore(PostgresStore[Any]):
        def ensure_rules_indexes(self) -> None:
            return None

        def _ensure_notifications(self) -> None:
            return None

    return ReadingPostgresStore(lifecycle, connection, schema)


def files_layout(lifecycle: AnyLifecycle) -> Any:
    """The layout the lifecycle's files store keeps (its app's, as its hooks declare,
    else one directory per status)."""
    from lifecycles.stores._files import FilesLayout

    declared = hooks_of(lifecycle).files_layout
    return declared if declared is not None else FilesLayout.for_lifecycle(lifecycle)


def open_store(lifecycle: AnyLifecycle, args: argparse.Namespace) -> Opened:
    """The store ``--db``, ``--dsn`` or ``--root`` names, opened to read only."""
    if args.root is not None:
        return _open_files(lifecycle, args.root)
    where = str(args.db) if args.db is not None else "the PostgreSQL database"
    connection = (open_sqlite(args.db, args.timeout) if args.db is not None
                  else open_postgres(args.dsn, args.timeout))
    try:
        schema = _reading_schema(lifecycle, connection)
        if not table_exists(connection, schema.table):
            raise fail(EXIT_NO_DATABASE, "no_table",
                       f"{where} holds no {lifecycle.name} store (no table {schema.table}); "
                       "check --db or --dsn and NAME (an ops command never creates one)")
        with _store_errors(where, args):
            store = _reading_store(lifecycle, connection)
    except Exception as error:
        connection.close()
        raise database_error(error, where) from None
    return Opened(lifecycle, store, f"{schema.table} in {where}", sql=True)


def _open_files(lifecycle: AnyLifecycle, root: Path) -> Opened:
    from lifecycles.stores._files import FilesStore

    if not root.exists() and not root.is_symlink():
        raise fail(EXIT_NO_DATABASE, "no_store",
                   f"no files store at {root}; an ops command never creates one: check --root")
    with _files_errors(root, lifecycle):
        store = FilesStore(lifecycle, root, files_layout(lifecycle), create=False)
    return Opened(lifecycle, store, f"files store {root}", sql=False)


@contextmanager
def _files_errors(root: Path, lifecycle: AnyLifecycle) -> Iterator[None]:
    from lifecycles.stores._files import StoreMissing, UnsafePath

    try:
        yield
    except StoreMissing as error:
        raise fail(EXIT_NO_DATABASE, "no_store",
                   f"{root} holds no {lifecycle.name} files store ({error}); check --root "
                   "and NAME") from None
    except UnsafePath as error:
        raise fail(EXIT_UNREADABLE, "unsafe_path",
                   f"{root}: {error}; the store refuses to use it") from None
    except OSError as error:
        raise fail(EXIT_UNREADABLE, "unreadable",
                   f"cannot read the files store {root}: {error.strerror or error}; check "
                   "its permissions") from None


@contextmanager
def _store_errors(where: str, args: argparse.Namespace) -> Iterator[None]:
    """A store's refusal as the command's error: its code and what to do."""
    try:
        yield
    except InvariantViolation as error:
        keys = f" (records {', '.join(error.keys)})" if error.keys else ""
        raise fail(EXIT_REFUSED, "state_invalid",
                   f"stored record(s){keys} break the rules {', '.join(error.rules)}; "
                   f"explain them with: lifecycles explain {args.name} KEY") from None
    except SchemaMismatch as error:
        raise fail(EXIT_REFUSED, "schema_altered",
                   f"{where}: the table is not the one the {args.name} store writes "
                   f"({first_line(error)}); check NAME, --db or --dsn") from None
    except StoreDamaged as error:
        raise fail(EXIT_REFUSED, "database_integrity",
                   f"{where}: the store reports damage ({first_line(error)})") from None
    except StoreUnavailable as error:
        exit_code = EXIT_UNREACHABLE if args.dsn is not None else EXIT_LOCKED
        raise fail(exit_code, "database_unreachable",
                   f"{where} cannot be read right now ({first_line(error)}); retry, or "
                   "raise --timeout") from None
    except StoreError as error:
        raise fail(EXIT_REFUSED, "database_error", f"{where}: {first_line(error)}") from None


@contextmanager
def _reading(args: argparse.Namespace) -> Iterator[tuple[Opened, float]]:
    """The lifecycle's store and the time to answer for; every store error translated."""
    now = time.time() if args.now is None else args.now
    if not (math.isfinite(now) and now >= 0):
        raise fail(EXIT_USAGE, "time_invalid",
                   "--now must be a finite, non-negative number of UNIX seconds")
    lifecycle = _lifecycle(args.name, args.module)
    _default_store(args)
    opened = open_store(lifecycle, args)
    try:
        if opened.sql:
            with _store_errors(opened.where, args):
                yield opened, now
        else:
            with _files_errors(args.root, lifecycle), _store_errors(opened.where, args):
                yield opened, now
    except Exception as error:
        raise database_error(error, opened.where) from None
    finally:
        opened.close()


# --- what a store holds ------------------------------------------------------------


@attrs.frozen
class Figures:
    """What ``health`` (and ``status`` without a key) answers about one store."""

    lifecycle: str
    leased: bool
    total: int
    counts: Mapping[str, int]
    due: int
    expired: int
    broken: int
    violations: Mapping[str, int] = attrs.field(factory=dict)
    broken_keys: tuple[str, ...] = ()
    broken_rules: tuple[str, ...] = ()
    integrity: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return "blocked" if self.expired or self.broken or self.integrity else "ok"

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, **attrs.asdict(self)}


def figures(opened: Opened, now: float) -> Figures:
    """Counts per status, due, expired and every rule on every record of the store."""
    lifecycle = opened.lifecycle
    leased = lifecycle.lease is not None
    if opened.sql:
        found = opened.store.health(now)
        return Figures(lifecycle.name, leased, found.total, dict(found.counts), found.due,
                       found.expired, found.broken, dict(found.violations),
                       tuple(found.broken_keys), tuple(found.broken_rules),
                       tuple(found.integrity))
    return _files_figures(opened.store, now)


def _files_figures(store: Any, now: float) -> Figures:
    """Every file read as the store reads it, nothing quarantined or moved: a file the
    store cannot trust counts as broken, under the rules it names."""
    from lifecycles.stores._files import UntrustedRecord, printable_name

    lifecycle = store.lifecycle
    layout = store.layout
    counts = {str(status.value): 0 for status in lifecycle.statuses}
    violations: dict[str, int] = {}
    broken: list[str] = []
    seen: set[str] = set()
    due = expired = 0
    statuses = [*layout.search_order, *([layout.quarantine_status]
                                        if layout.quarantine_status else [])]
    with store.locked():
        for status in statuses:
            for name in sorted(store.names(status)):
                try:
                    record = store.read_named(status, name)
                except UntrustedRecord as error:
                    broken.append(printable_name(name))
                    for rule in error.rules:
                        violations[rule] = violations.get(rule, 0) + 1
                    continue
                key = lifecycle.key_of(record) if record is not None else None
                if key is None or key in seen:  # a move's shadowed copy counts once
                    continue
                seen.add(key)
                counts[str(lifecycle.status_of(record))] += 1
                if lifecycle.lease is not None:
                    due += lease_protocol.is_due(lifecycle, record, now)
                    expired += lease_protocol.is_expired(lifecycle, record, now)
    rules = tuple(violations)
    return Figures(lifecycle.name, lifecycle.lease is not None, len(seen) + len(broken),
                   counts, due, expired, len(broken), violations, tuple(sorted(broken)[:10]),
                   rules)


# --- the Prometheus text exposition ----------------------------------------------------


def _label(value: str) -> str:
    """A label value as the exposition format quotes it: backslash, quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: Mapping[str, str], value: int) -> str:
    inside = ",".join(f'{key}="{_label(text)}"' for key, text in labels.items())
    return f"{name}{{{inside}}} {value}"


METRICS = (
    ("lifecycles_records", "Records stored, by lifecycle and status."),
    ("lifecycles_records_due", "Records a worker may claim now (claimable and due)."),
    ("lifecycles_leases_expired", "Leased records whose lease has run out."),
    ("lifecycles_records_broken", "Stored records breaking some rule of their lifecycle."),
    ("lifecycles_rule_violations", "Stored records breaking each broken rule."),
)


def prometheus(found: Sequence[Figures]) -> str:
    """The figures as the Prometheus text exposition format (version 0.0.4): every
    metric a gauge, with its HELP and TYPE lines."""
    samples: dict[str, list[str]] = {name: [] for name, _ in METRICS}
    for f in found:
        one = {"lifecycle": f.lifecycle}
        samples["lifecycles_records"] += [
            _sample("lifecycles_records", {**one, "status": status}, count)
            for status, count in f.counts.items()]
        if f.leased:
            samples["lifecycles_records_due"].append(_sample("lifecycles_records_due", one,
                                                             f.due))
            samples["lifecycles_leases_expired"].append(
                _sample("lifecycles_leases_expired", one, f.expired))
        samples["lifecycles_records_broken"].append(
            _sample("lifecycles_records_broken", one, f.broken))
        samples["lifecycles_rule_violations"] += [
            _sample("lifecycles_rule_violations", {**one, "rule": rule}, count)
            for rule, count in f.violations.items()]
    lines: list[str] = []
    for name, meaning in METRICS:
        lines += [f"# HELP {name} {meaning}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"


# --- the commands ------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = [{"name": lifecycle.name, "statuses": len(lifecycle.statuses),
             "leased": lifecycle.lease is not None, "table_version": lifecycle.table_version,
             "module": lifecycle.module}
            for lifecycle in _lifecycles(args.module).values()]
    if args.json:
        print(json.dumps({"lifecycles": rows}))
        return EXIT_OK
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['statuses']:>2} statuses  "
              f"{'leased    ' if row['leased'] else 'not leased'}  table {row['table_version']}"
              f"  {row['module']}")
    return EXIT_OK


def _health(args: argparse.Namespace) -> int:
    chosen = args.format or ("json" if args.json else "text")
    with _reading(args) as (opened, now):
        found = figures(opened, now)
    code = EXIT_OK if found.status == "ok" else EXIT_BLOCKED
    if chosen == "prometheus":
        print(prometheus([found]), end="")
    elif chosen == "json":
        print(json.dumps(found.as_json(), ensure_ascii=False))
    else:
        print(f"{found.lifecycle}: {found.status} ({opened.where})")
        _print_counts(found)
        print(f"broken records: {found.broken}")
        for rule, count in found.violations.items():
            print(f"  {rule:<24} {count}")
        if found.broken_keys:
            print(f"first broken: {', '.join(found.broken_keys)} (explain them with "
                  f"lifecycles explain {found.lifecycle} KEY)")
        for problem in found.integrity:
            print(f"integrity: {problem}")
    return code


def _print_counts(found: Figures) -> None:
    for status, count in found.counts.items():
        print(f"  {status:<14} {count}")
    if found.leased:
        print(f"due now: {found.due}")
        print(f"expired leases: {found.expired}")


def _status(args: argparse.Namespace) -> int:
    with _reading(args) as (opened, now):
        if args.key is None:
            found = _counts(opened, now)
        else:
            document = _one_status(opened, args.key, now)
    if args.key is None:
        if args.json:
            print(json.dumps({key: value for key, value in found.as_json().items()
                              if key in ("lifecycle", "leased", "total", "counts", "due",
                                         "expired")}))
        else:
            print(f"{found.lifecycle}: {found.total} records ({opened.where})")
            _print_counts(found)
        return EXIT_OK
    if args.json:
        print(json.dumps(document, ensure_ascii=False, default=str))
    else:
        fields = {key: value for key, value in document.items() if key != "values"}
        fields.update(document["values"])
        width = max(len(name) for name in fields)
        for name, value in fields.items():
            print(f"{name:<{width}}  {'-' if value is None else value}")
    return EXIT_OK


def _counts(opened: Opened, now: float) -> Figures:
    """Counts per status, due and expired, without judging every rule."""
    store, lifecycle = opened.store, opened.lifecycle
    if not opened.sql:
        return _files_figures(store, now)
    counts = {str(status): count for status, count in store.count_by_status().items()}
    leased = lifecycle.lease is not None
    due, expired = (store.count_due(now), store.count_expired(now)) if leased else (0, 0)
    return Figures(lifecycle.name, leased, sum(counts.values()), counts, due, expired, 0)


def _stored(opened: Opened, key: str) -> StoredEntry:
    """The values stored under ``key`` as they are, where, and what the store finds wrong
    with them; ``missing`` when there is no such record."""
    if opened.sql:
        values = sql_values(opened.store, key)
        if values is None:
            raise _missing(opened, key)
        status = str(values.get(opened.lifecycle.status_field))
        return StoredEntry(opened.where, status, values)
    entry = files_entry(opened.store, key)
    if entry is None:
        raise _missing(opened, key)
    return entry


def _missing(opened: Opened, key: str) -> CommandError:
    return fail(EXIT_REFUSED, "missing",
                f"no {opened.lifecycle.name} record under key {key!r} in {opened.where}")


def _explained(lifecycle: AnyLifecycle, entry: StoredEntry, inputs_now: InputsNow,
               now: str) -> Explanation:
    return explain(lifecycle, entry.values or {}, inputs_now, where=entry.where, now=now,
                   store_findings=entry.findings, notes=entry.notes, status=entry.status)


def _one_status(opened: Opened, key: str, now: float) -> dict[str, Any]:
    lifecycle = opened.lifecycle
    entry = _stored(opened, key)
    judged = _explained(lifecycle, entry, lambda record: {}, str(now))  # its rules only
    if not judged.trusted:
        rules = ", ".join(judged.broken) or "; ".join(judged.store_findings)
        raise fail(EXIT_REFUSED, "state_invalid",
                   f"the {lifecycle.name} record {key!r} breaks the rules {rules}; explain "
                   f"it with: lifecycles explain {lifecycle.name} {key} ...")
    record = lifecycle.record_type(**(entry.values or {}))
    leased = lifecycle.lease is not None
    return {
        "lifecycle": lifecycle.name, "key": key, "status": judged.status,
        "final": judged.final,
        "due": lease_protocol.is_due(lifecycle, record, now) if leased else None,
        "lease_expired": lease_protocol.is_expired(lifecycle, record, now) if leased else None,
        "values": {name: value for name, value in judged.values.items()
                   if name != lifecycle.status_field},
    }


def _explain(args: argparse.Namespace) -> int:
    with _reading(args) as (opened, now):
        lifecycle = opened.lifecycle
        entry = _stored(opened, args.key)
    explanation = _explained(lifecycle, entry, inputs_now_for(lifecycle, now),
                             shown_now(lifecycle, now))
    return print_explanation(lifecycle, explanation, args.json, args.mermaid)


__all__ = [
    "EXIT_CODES", "FORMATS", "METRICS", "Figures", "Opened", "figures", "files_layout",
    "open_store", "prometheus", "register", "register_explain", "register_health",
    "register_status",
]
