"""Where a lifecycle's records live in SQL: columns, the schema, a lifecycle's own binding.

:class:`SQLSchema` derives a table from the record class (one column per field, the
key as primary key); a lifecycle that must keep an exact, pre-existing schema gives it
a :class:`SchemaBinding` (its own DDL, migration and meta rows). Statements are the
dialect's business (:mod:`lifecycles.stores._sql_dialect`, below this module); this
module only says what must exist and checks that it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from lifecycles.machines._core import Lifecycle
from lifecycles.stores._base import SchemaMismatch
from lifecycles.stores._codecs import STRUCTURED, field_origins
from lifecycles.stores._sql_dialect import Column, Dialect

# --- columns -------------------------------------------------------------------------


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

    def unique_column_sets(self, table: str) -> set[frozenset[str]]:
        """The column sets ``table`` keeps unique, each able to arbitrate an insert's
        ``ON CONFLICT``: its primary key, its ``UNIQUE`` constraints and its other unique
        indexes; not partial or expression ones, nor (PostgreSQL) deferred ones, nor
        (SQLite) ones under another collation than ``BINARY``."""
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
    unique_columns: tuple[tuple[str, ...], ...]
    """Column sets of the table, besides the key, that ``prepare`` keeps unique: an
    insert repeating one is :class:`~lifecycles.stores._base.UniqueViolation`."""
    meta_unique_columns: tuple[tuple[str, ...], ...]
    """Column sets of the meta table that keep it to its rows (``prepare``'s insert of the
    binding relies on them)."""
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
        # The key makes an insert idempotent (ON CONFLICT on it) and every compare-and-set
        # one row's; a binding's own unique columns refuse what they must.
        self.unique_columns: tuple[tuple[str, ...], ...] = (
            (lifecycle.key_field,), *(binding.unique_columns if binding else ()),
        )

    def error(self, name: str) -> str:
        """A store error code under this schema's prefix (the monitor keeps its own)."""
        return self.code_prefix + name

    def mismatch(self, message: str) -> SchemaMismatch:
        return SchemaMismatch(message, code=self.error("schema_altered"))

    def ensure(self, catalogue: Catalogue) -> None:
        """Create the schema if absent; refuse a database whose schema differs, before
        anything is created in it."""
        dialect = catalogue.dialect
        if self.binding is not None:
            self.binding.prepare(self, catalogue)
        elif catalogue.tables_present([self.table]):
            self.verify(catalogue)
        else:
            catalogue.run(dialect.create_table(self))
        for statement in dialect.create_indexes(self):
            catalogue.run(statement)
        self.verify(catalogue)

    def verify(self, catalogue: Catalogue) -> None:
        """The whole check: the table's columns and unique keys and, with a binding, the
        meta table's, and its rows; :class:`SchemaMismatch` (``schema_altered``) on any
        difference."""
        dialect = catalogue.dialect
        self.verify_table(catalogue)
        binding = self.binding
        if binding is None:
            return
        # The rows are read only under the expected columns: another meta table is
        # refused as such, not by a statement that no longer fits it.
        meta_columns = tuple(map(dialect.signature, binding.meta_columns))
        found = catalogue.columns_of(binding.meta_table)
        if found != meta_columns:
            raise self.mismatch(
                f"{binding.meta_table} {columns_difference(found, meta_columns)}"
            )
        self.verify_unique(catalogue, binding.meta_table, binding.meta_unique_columns)
        if catalogue.run(
            dialect.select_all(binding.meta_table, binding.meta_columns)
        ) != binding.meta_rows:
            raise self.mismatch(
                f"{binding.meta_table} holds another binding (schema version or capabilities)"
            )

    def verify_table(self, catalogue: Catalogue) -> None:
        """The records' table alone: its columns, then its unique keys."""
        expected = tuple(map(catalogue.dialect.signature, self.columns))
        found = catalogue.columns_of(self.table)
        if found != expected:
            raise self.mismatch(f"{self.table} {columns_difference(found, expected)}")
        self.verify_unique(catalogue, self.table, self.unique_columns)

    def verify_unique(
        self, catalogue: Catalogue, table: str, required: Sequence[Sequence[str]]
    ) -> None:
        """Refuse ``table`` unless it keeps each of ``required`` unique.

        A table made by hand or by an older tool can have the right columns and none of
        the keys: the store would then store a duplicate where it must refuse one (a
        second row for a key, a second record under a unique value), or fail its first
        insert. Checked before anything is created or migrated, and again whenever the
        catalogue changes under an open store.
        """
        present = catalogue.unique_column_sets(table)
        missing = [columns for columns in required if frozenset(columns) not in present]
        if not missing:
            return
        names = " or ".join(", ".join(columns) for columns in missing)
        repairs = " and ".join(
            f"CREATE UNIQUE INDEX {table}_{'_'.join(columns)}_key ON {table} ({', '.join(columns)})"
            for columns in missing
        )
        raise self.mismatch(
            f"{table} does not keep {names} unique: no PRIMARY KEY, UNIQUE constraint or "
            "unique index on exactly that, so a duplicate would be stored instead of refused; "
            f"nothing was changed; add the keys with {repairs} (this fails while the table "
            "holds duplicates: resolve those first)"
        )

def columns_difference(found: Sequence[object], expected: Sequence[object]) -> str:
    """What differs between two column signatures, briefly (a table has dozens)."""
    if not found:
        return "does not exist"
    missing = [column for column in expected if column not in found]
    unexpected = [column for column in found if column not in expected]
    parts = [*(["lacks " + ", ".join(map(str, missing))] if missing else []),
             *(["has other columns " + ", ".join(map(str, unexpected))] if unexpected else [])]
    return "; ".join(parts) or "has its columns in another order"
