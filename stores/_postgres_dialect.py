"""PostgreSQL's dialect: how the SQL store's statements are spelt for PostgreSQL.

Apart from :mod:`lifecycles.stores.postgres` (the store and its driver, psycopg), so the
statements can be written, and rendered into the SQL files beside the diagrams, where
psycopg (the ``postgres`` extra) is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from lifecycles.stores._codecs import from_json_or_none, json_or_none
from lifecycles.stores._sql_dialect import Codec, Column, Dialect, StoredTable

__all__ = ["PostgresDialect"]


# The columns of one table (a parameter: its name) as an array of "name type", in order,
# from the catalogue itself: information_schema.columns costs about ten times more.
_COLUMNS_OF = (
    "ARRAY(SELECT a.attname || ' ' || format_type(a.atttypid, NULL) FROM pg_attribute AS a"
    " WHERE a.attrelid = quote_ident(%s)::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    " ORDER BY a.attnum)"
)


def _array_literal(items: Sequence[str]) -> str:
    """``items`` as the text of a PostgreSQL ``text[]`` (the guard casts it): one string
    parameter, where a list would be dumped element by element on every write."""
    quoted = ('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"' for item in items)
    return "{" + ",".join(quoted) + "}"


def _described(value: Any) -> tuple[tuple[str, str], ...]:
    """An array of ``_COLUMNS_OF`` as (name, type) pairs."""
    return tuple((name, kind) for name, _, kind in (str(item).partition(" ") for item in value))


class PostgresDialect(Dialect):
    """PostgreSQL's ``%s`` markers, quoted identifiers, ``IS NOT DISTINCT FROM``, row locks
    that skip what another worker holds, typed columns."""

    name = "postgres"
    param = "%s"
    null_safe_equal = "IS NOT DISTINCT FROM"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    collation = ' COLLATE "C"'
    # Structured values are canonical JSON text, not jsonb: jsonb rewrites numbers (1e308
    # comes back as an integer) and so would not return the record that was written.
    type_names: ClassVar[dict[str, str]] = {
        "text": "text", "integer": "integer", "bigint": "bigint", "real": "double precision",
        "boolean": "boolean", "json": "text", "other": "text",
    }

    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def column_definition(self, column: Column, key: bool) -> str:
        sql_type = self.type_names[column.kind]
        return (
            f"{self.quote(column.name)} {sql_type}"
            + (self.collation if sql_type == "text" else "")
            + (" PRIMARY KEY" if key else "")
        )

    def signature(self, column: Column) -> object:
        return (column.name, self.type_names[column.kind])

    def excluding(self, key: str, keys: list[str]) -> tuple[str, list[Any]]:
        # One array parameter: the statement's text stays the same whatever is excluded.
        return f" AND NOT ({key} = ANY(%s))", [list(keys)]

    def probe(self, schema: StoredTable) -> tuple[str, tuple[Any, ...]]:
        binding = schema.binding
        if binding is None:
            return f"SELECT {_COLUMNS_OF}", (schema.table,)
        meta = ", ".join(f"m.{self.quote(column.name)}" for column in binding.meta_columns)
        return (
            f"SELECT {meta}, {_COLUMNS_OF}, {_COLUMNS_OF} FROM {self.quote(binding.meta_table)}"
            " AS m",
            (schema.table, binding.meta_table),
        )

    def catalogue_guard(self, schema: StoredTable) -> str:
        guard = f"{_COLUMNS_OF} = %s::text[]"
        return guard if schema.binding is None else f"{guard} AND {guard}"

    def catalogue_params(self, schema: StoredTable, token: object) -> list[Any]:
        watched = [(schema.table, schema.columns)]
        if schema.binding is not None:
            watched.append((schema.binding.meta_table, schema.binding.meta_columns))
        params: list[Any] = []
        for table, columns in watched:
            described = [f"{c.name} {self.type_names[c.kind]}" for c in columns]
            params += [table, _array_literal(described)]
        return params

    def read_probe(self, schema: StoredTable, rows: list[tuple[Any, ...]]) -> object:
        # A dropped or renamed table fails the statement itself (UndefinedTable), which
        # driver_error reports as schema_altered too.
        binding = schema.binding
        width = len(binding.meta_columns) if binding else 0
        watched = [schema.columns, *([binding.meta_columns] if binding else [])]
        expected = [tuple(map(self.signature, columns)) for columns in watched]
        if [tuple(row[:width]) for row in rows] != (binding.meta_rows if binding else [()]) or [
            _described(value) for value in rows[0][width:]
        ] != expected:
            raise schema.mismatch(f"the schema of {schema.table} or its binding changed")
        return None  # no catalogue version: every probe compares the columns themselves

    def codec(self, column: Column) -> tuple[Codec, Codec]:
        if column.kind == "other":  # a hint no column type holds: canonical JSON text
            return json_or_none, from_json_or_none
        return super().codec(column)
