"""The SQL files beside the diagrams: every statement a SQL store runs, per dialect.

For each lifecycle a SQL store keeps, ``<name>.sqlite.sql`` and ``<name>.postgres.sql``
list the statements of :mod:`lifecycles.stores.sql_rendered`, rendered from the builders
the stores run, in the schema the lifecycle is stored in: the monitor's own (the
reference's table, :mod:`lifecycles.monitor`), the default one derived from the record
class for every other. The outbox is left out: its facade keeps it in files
(:mod:`lifecycles.outbox`), and no SQL store runs these statements for it.
"""

from __future__ import annotations

from typing import Any

from lifecycles.invariants.monitor import MonitorRecord
from lifecycles.invariants.outbox import OutboxRecord
from lifecycles.machines.core import Lifecycle
from lifecycles.stores.postgres_dialect import PostgresDialect
from lifecycles.stores.sql_dialect import Dialect
from lifecycles.stores.sql_rendered import blocks_of, render
from lifecycles.stores.sql_schema import SQLSchema
from lifecycles.stores.sql_statements import TableStatements
from lifecycles.stores.sqlite import SQLiteDialect

AnyLifecycle = Lifecycle[Any, Any]

# The capabilities hash a monitor database is bound to travels as a parameter: no
# statement's text depends on it, so any hash renders the same file.
_ANY_CAPABILITIES = "0" * 64


def sql_files(name: str, lifecycle: AnyLifecycle) -> dict[str, bytes]:
    """The SQL files of ``lifecycle`` (drawn under ``name``), by file name; none for a
    lifecycle no SQL store keeps."""
    schema = _schema(lifecycle)
    if schema is None:
        return {}
    files = {}
    for label, dialect, in_place_claims in _dialects():
        statements = TableStatements(lifecycle, schema, dialect)
        title = (f"{name}: every statement the {label} store runs on table {schema.table}, "
                 f"in {dialect.name}'s markers.")
        text = render(title, blocks_of(statements, in_place_claims=in_place_claims))
        files[f"{name}.{dialect.name}.sql"] = text.encode()
    return files


def _schema(lifecycle: AnyLifecycle) -> SQLSchema | None:
    """The schema ``lifecycle`` is stored in, told by its record class (not by its
    table, which importing would build: an invalid table is the diagrams command's to
    report, with its own message)."""
    if lifecycle.record_type is OutboxRecord:
        return None
    if lifecycle.record_type is MonitorRecord:
        from lifecycles.monitor import MonitorSchema  # the monitor's own, reference schema

        return MonitorSchema(_ANY_CAPABILITIES, lifecycle)
    return SQLSchema(lifecycle)


def _dialects() -> list[tuple[str, Dialect, bool]]:
    """Each dialect, the store's name, and whether it claims in place (one statement)."""
    return [("SQLite", SQLiteDialect(), False), ("PostgreSQL", PostgresDialect(), True)]
