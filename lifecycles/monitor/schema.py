"""The monitor's reference schema, kept by the monitor itself rather than by the stores.

The reference ``terminal_processing_monitor`` fixed a schema: two tables, a meta row
binding the database to one capabilities hash (version 2), a migration from version
1, CHECK constraints. Databases written by either implementation must open in the
other, so this schema is pinned here, beside the monitor's public face; the stores
stay generic and receive it as a :class:`~lifecycles.stores._sql.SQLSchema` whose
:class:`MonitorBinding` creates, migrates and binds it.

The statements are named SQL blocks in ``schema.sql`` (procrastinate's
``queries.sql`` style), parsed once at import. A file rather than Python constants:
the schema reads, diffs and reviews as SQL, each block names itself and says what it
is for, and the dialect-specific pieces stand out as ``{placeholders}``. Those are
filled once per dialect: type names from the dialect, the status list and the leased
status from the monitor's table (``MONITOR.statuses``, the lease trigger's dest), so
no status is ever typed out in SQL.

``open_monitor_store(connection, capabilities_sha256)`` is what the monitor facade
calls, for a ``sqlite3`` or a ``psycopg`` connection alike.
"""

from __future__ import annotations

import sqlite3
from importlib import resources
from typing import Any

from lifecycles.invariants.monitor import COLUMNS, MonitorRecord
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.machines.monitor import CODE, MONITOR
from lifecycles.stores._base import SchemaMismatch
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_dialect import Column, Dialect
from lifecycles.stores._sql_schema import Catalogue, SQLSchema
from lifecycles.stores.sqlite import SQLiteStore

__all__ = [
    "META",
    "QUERIES",
    "SCHEMA_VERSION",
    "TABLE",
    "MonitorBinding",
    "MonitorSchema",
    "open_monitor_store",
    "parse_named_blocks",
    "render",
]

TABLE = "cms_source_terminal_processing"
META = "cms_source_terminal_processing_meta"
SCHEMA_VERSION = 2


def parse_named_blocks(text: str) -> dict[str, str]:
    """``-- name: x`` blocks of ``text`` by name; comment lines are left out of each."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("-- name:"):
            name = line.removeprefix("-- name:").strip()
            if name in blocks:
                raise ValueError(f"two SQL blocks are named {name!r}")
            current = blocks[name] = []
        elif current is not None and not line.lstrip().startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in blocks.items()}


QUERIES = parse_named_blocks(
    resources.files("lifecycles.monitor").joinpath("schema.sql").read_text(encoding="utf-8")
)

def render(name: str, dialect: Dialect, lifecycle: Lifecycle[Any, Any] = MONITOR) -> str:
    """Block ``name`` in ``dialect``, its statuses taken from ``lifecycle``'s table.

    Rendered when a store opens (a few microseconds each), so nothing is cached.
    """
    return QUERIES[name].format(
        text=dialect.type_names["text"],
        integer=dialect.type_names["integer"],
        real=dialect.type_names["real"],
        collation=dialect.collation,
        param=dialect.param,
        statuses=", ".join(dialect.literal(status.value) for status in lifecycle.statuses),
        leased=dialect.literal(lease_protocol.leased_status(lifecycle)),
        version=SCHEMA_VERSION,
    )


class MonitorBinding:
    """The monitor's hook into a generic SQL schema: the reference's exact DDL, the meta
    row binding one capabilities hash, and the migration of an empty version-1 database
    (one holding rows is refused, ``legacy_unbound``: nothing says which capabilities
    wrote them).

    An existing table is accepted with the reference's columns and its keys (``event_id``
    and ``notification_id`` unique, the meta table's ``singleton``), whether or not it
    carries the ``NOT NULL`` and ``CHECK`` constraints: every rule those state is checked
    on every row read and before every write, so the constraints only refuse earlier what
    the rules refuse anyway."""

    code_prefix = CODE
    meta_table = META
    meta_columns: tuple[Column, ...] = (
        Column("singleton", "integer"),
        Column("schema_version", "integer"),
        Column("expected_capabilities_sha256", "text"),
    )
    legacy_meta_columns = meta_columns[:2]
    # Without them the reference's guarantees are gone (it registers a second event under
    # one notification id, and adds a second binding row to a keyless meta table, after
    # which it refuses the database for good): such a table is refused, changing nothing.
    unique_columns: tuple[tuple[str, ...], ...] = (("notification_id",),)
    meta_unique_columns: tuple[tuple[str, ...], ...] = (("singleton",),)
    # Its CHECKs (status declared, counts non-negative, max_failures in 1..20, lease
    # fields set exactly while leased) are field rules and the lease invariant; a test
    # breaks each one and expects health to answer as the reference does.
    rules_cover_checks = True

    def __init__(self, capabilities_sha256: str) -> None:
        self.capabilities_sha256 = capabilities_sha256
        self.meta_rows: list[tuple[Any, ...]] = [(1, SCHEMA_VERSION, capabilities_sha256)]

    def prepare(self, schema: SQLSchema, catalogue: Catalogue) -> None:
        dialect = catalogue.dialect
        present = catalogue.tables_present([META, schema.table])
        if len(present) == 1:
            raise schema.mismatch("half of the schema is missing")
        if present:
            if self._is_version_1(schema, catalogue):
                self._migrate_version_1(schema, catalogue)
            else:
                schema.verify(catalogue)
        catalogue.run(render("create_meta", dialect, schema.lifecycle))
        catalogue.run(
            render("bind_meta", dialect, schema.lifecycle),
            (SCHEMA_VERSION, self.capabilities_sha256),
        )
        catalogue.run(render("create_table", dialect, schema.lifecycle))

    def _is_version_1(self, schema: SQLSchema, catalogue: Catalogue) -> bool:
        signature = catalogue.dialect.signature
        return (
            catalogue.columns_of(META) == tuple(map(signature, self.legacy_meta_columns))
            and catalogue.columns_of(schema.table) == tuple(map(signature, schema.columns))
            and catalogue.run(render("legacy_meta", catalogue.dialect)) == [(1, 1)]
        )

    def _migrate_version_1(self, schema: SQLSchema, catalogue: Catalogue) -> None:
        """Version 1 had no capabilities binding: bind an empty one, refuse one with rows
        (``legacy_unbound``, as the reference does) or whose table lacks its keys
        (``schema_altered``, where the reference migrates it and goes on). The table is
        kept as it is, so every check comes before the old meta table is dropped."""
        if catalogue.run(render("any_record", catalogue.dialect)):
            raise SchemaMismatch(
                "a version-1 database with rows cannot be bound to capabilities",
                code=schema.error("legacy_unbound"),
            )
        schema.verify_table(catalogue)
        catalogue.run(render("drop_legacy_meta", catalogue.dialect))


class MonitorSchema(SQLSchema):
    """The reference monitor's schema: the monitor record's columns under the reference's
    table name, 32-bit integer columns, bound to one capabilities hash."""

    VERSION = SCHEMA_VERSION

    def __init__(
        self, capabilities_sha256: str, lifecycle: Lifecycle[Any, Any] = MONITOR
    ) -> None:
        super().__init__(
            lifecycle, TABLE, integer_kind="integer",
            binding=MonitorBinding(capabilities_sha256),
        )
        if self.column_names != COLUMNS:
            raise ValueError("the monitor schema needs the monitor record")


def open_monitor_store(connection: Any, capabilities_sha256: str) -> SQLStore[MonitorRecord]:
    """The monitor's store on ``connection`` (``sqlite3`` or ``psycopg``), schema ensured:
    what ``DurableTerminalProcessingMonitor`` uses."""
    schema = MonitorSchema(capabilities_sha256)
    if isinstance(connection, sqlite3.Connection):
        return SQLiteStore(MONITOR, connection, schema)
    if type(connection).__module__.startswith("psycopg"):
        from lifecycles.stores.postgres import PostgresStore  # the optional extra

        return PostgresStore(MONITOR, connection, schema)
    raise TypeError("connection must be sqlite3.Connection")

