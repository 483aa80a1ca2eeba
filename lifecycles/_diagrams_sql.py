"""The SQL files beside the diagrams: every statement a SQL store runs, per dialect.

For each lifecycle a SQL store keeps, ``<name>.sqlite.sql`` and ``<name>.postgres.sql``
list the statements of :mod:`lifecycles.stores._sql_rendered`, rendered from the builders
the stores run, in the schema the lifecycle is stored in: its app's own where the app
declares one (:class:`~lifecycles._app_hooks.AppHooks`: the monitor keeps the reference's
table), the default one derived from the record class for every other. A lifecycle its
app keeps in files only (the outbox) gets none.
"""

from __future__ import annotations

from typing import Any

from lifecycles._app_hooks import hooks_of
from lifecycles.machines._core import Lifecycle
from lifecycles.stores._postgres_dialect import PostgresDialect
from lifecycles.stores._sql_dialect import Dialect
from lifecycles.stores._sql_rendered import blocks_of, render
from lifecycles.stores._sql_schema import SQLSchema
from lifecycles.stores._sql_statements import TableStatements
from lifecycles.stores.sqlite import SQLiteDialect

AnyLifecycle = Lifecycle[Any, Any]


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
    """The schema ``lifecycle`` is stored in: its app's own (the monitor keeps the
    reference's table), else the default one derived from the record class; ``None`` for a
    lifecycle no SQL store keeps (the outbox, kept in files by its facade)."""
    hooks = hooks_of(lifecycle)
    if not hooks.kept_in_sql:
        return None
    return hooks.sql_schema() if hooks.sql_schema is not None else SQLSchema(lifecycle)


def _dialects() -> list[tuple[str, Dialect, bool]]:
    """Each dialect, the store's name, and whether it claims in place (one statement)."""
    return [("SQLite", SQLiteDialect(), False), ("PostgreSQL", PostgresDialect(), True)]
