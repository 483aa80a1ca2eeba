"""Where a lifecycle's records live in SQL: columns, the schema, a lifecycle's own binding.

:class:`SQLSchema` derives a table from the record class (one column per field, the
key as primary key); a lifecycle that must keep an exact, pre-existing schema gives it
a :class:`SchemaBinding` (its own DDL, migration and meta rows). Statements are the
dialect's business (:mod:`lifecycles.stores.sql`); this module only says what must
exist and checks that it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from lifecycles.machines.core import Lifecycle
from lifecycles.stores.base import SchemaMismatch
from lifecycles.stores.codecs import STRUCTURED, field_origins

if TYPE_CHECKING:
    from lifecycles.stores.sql import Dialect

# --- columns -------------------------------------------------------------------------


@attrs.frozen
class Column:
    """One column: its name and its kind (``text``, ``integer``, ``bigint``, ``real``,
    ``boolean``, ``json`` for containers, ``other`` for any other hint); the dialect
    turns the kind into a type name and a codec."""

    name: str
    kind: str


def column_kind(origins: set[Any], integer_kind: str = "bigint") -> str:
    """The kind of column a record field gets, from the base types its hint allows."""
    if origins & STRUCTURED:
        return "json"
    if origins == {bool}:
        return "boolean"
    if origins and origins <= {int}:
        return integer_kind
    if origins and origins <= {int, float}:
        return "real"
    if origins and all(isinstance(o, type) and issubclass(o, str) for o in origins):
        return "text"
    return "other"


# --- the schema ----------------------------------------------------------------------


class Catalogue(Protocol):
    """What schema code may ask of the database: statements in the store's dialect."""

    dialect: Dialect

    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (none for DDL)."""
        ...

    def columns_of(self, table: str) -> tuple[object, ...]:
        """The dialect's signature of each column of ``table``, in order (none: no table)."""
        ...

    def tables_present(self, names: Sequence[str]) -> set[str]:
        """Which of ``names`` are tables in the store's schema."""
        ...


class SchemaBinding(Protocol):
    """A lifecycle's own part of its schema, for a store that must keep a legacy one.

    ``prepare`` creates (or migrates, or refuses) the table and the meta table, in
    the catalogue's dialect, before the store adds its indexes and verifies; the
    meta table must then hold exactly ``meta_rows`` under ``meta_columns``, which
    the store's probe compares on every transaction.
    """

    code_prefix: str
    meta_table: str
    meta_columns: tuple[Column, ...]
    meta_rows: list[tuple[Any, ...]]
    rules_cover_checks: bool
    """Every ``CHECK`` constraint ``prepare`` writes is implied by the lifecycle's rules
    (a row breaking one breaks a rule with an SQL form): health may then skip the
    engine's re-verification of the constraints, the rules' query finding the same rows."""

    def prepare(self, schema: SQLSchema, catalogue: Catalogue) -> None: ...


class SQLSchema:
    """Where one lifecycle's records live: a table, one column per record field.

    The default derives everything from the record class and the lease declaration:
    column kinds from field hints, the key as primary key, an index in lease order.
    ``binding`` hands the creation of the table and a meta table to the lifecycle
    (see :class:`SchemaBinding`); error codes then carry its prefix.
    """

    def __init__(
        self,
        lifecycle: Lifecycle[Any, Any],
        table: str | None = None,
        *,
        integer_kind: str = "bigint",
        binding: SchemaBinding | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.table = table or f"lifecycle_{lifecycle.name}"
        self.columns: tuple[Column, ...] = tuple(
            Column(name, column_kind(origins, integer_kind))
            for name, origins in field_origins(lifecycle.record_type).items()
        )
        self.column_names = tuple(column.name for column in self.columns)
        self.binding = binding
        self.code_prefix = binding.code_prefix if binding else "lifecycles."

    def error(self, name: str) -> str:
        """A store error code under this schema's prefix (the monitor keeps its own)."""
        return self.code_prefix + name

    def mismatch(self, message: str) -> SchemaMismatch:
        return SchemaMismatch(message, code=self.error("schema_altered"))

    def ensure(self, catalogue: Catalogue) -> None:
        """Create the schema if absent; refuse a database whose schema differs."""
        dialect = catalogue.dialect
        if self.binding is not None:
            self.binding.prepare(self, catalogue)
        else:
            catalogue.run(dialect.create_table(self))
        for statement in dialect.create_indexes(self):
            catalogue.run(statement)
        self.verify(catalogue)

    def verify(self, catalogue: Catalogue) -> None:
        """The whole check: the table's columns and, with a binding, the meta table and
        its rows; :class:`SchemaMismatch` (``schema_altered``) on any difference."""
        dialect = catalogue.dialect
        expected = tuple(map(dialect.signature, self.columns))
        found = catalogue.columns_of(self.table)
        if found != expected:
            raise self.mismatch(f"{self.table} has columns {found}, expected {expected}")
        binding = self.binding
        if binding is None:
            return
        # The rows are read only under the expected columns: another meta table is
        # refused as such, not by a statement that no longer fits it.
        meta_columns = tuple(map(dialect.signature, binding.meta_columns))
        if catalogue.columns_of(binding.meta_table) != meta_columns or catalogue.run(
            dialect.select_all(binding.meta_table, binding.meta_columns)
        ) != binding.meta_rows:
            raise self.mismatch("schema or capabilities binding differs")
