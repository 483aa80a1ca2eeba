"""Every statement of a SQL store, written once from the table, the schema and a dialect.

:class:`TableStatements` holds the text a :class:`~lifecycles.stores._sql.SQLStore` runs:
the reads, the insert, one compare-and-set ``UPDATE`` per table row (writing exactly the
fields that row writes), the lease queries and the health queries. It needs no
connection, so the same object serves the store and the rendering of its SQL into the
checked-in files beside the diagrams (:mod:`lifecycles.stores._sql_rendered`): what a
reader audits there is what the store executes.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.stores._codecs import as_is
from lifecycles.stores._sql_dialect import Dialect
from lifecycles.stores._sql_health import HealthQueries
from lifecycles.stores._sql_lease import LeaseStatements
from lifecycles.stores._sql_schema import SQLSchema

__all__ = ["RowUpdate", "TableStatements"]


class RowUpdate:
    """The compare-and-set statements of one table row, and the fields it writes."""

    __slots__ = ("fields", "inside", "keyed", "outside")

    def __init__(self, inside: str, outside: str, keyed: str, fields: tuple[str, ...]) -> None:
        #: Inside a transaction (which probed the schema): the whole record compared.
        self.inside = inside
        #: A transaction of its own: the whole record compared and the schema as verified.
        self.outside = outside
        #: By the key alone, for a record read under the write lock of the transaction.
        self.keyed = keyed
        self.fields = fields


class TableStatements:
    """The statements of one lifecycle's table in one dialect (see the module docstring).

    Parameters are the dialect's markers, in the order the store binds them: a row's
    update binds the fields it writes, then the compared columns (:attr:`compared`), then
    (outside a transaction) the schema guard's parameters.
    """

    def __init__(self, lifecycle: Lifecycle[Any, Any], schema: SQLSchema, dialect: Dialect) -> None:
        self.lifecycle = lifecycle
        self.schema = schema
        self.dialect = dialect
        d, quote, p = dialect, dialect.quote, dialect.param
        table = quote(schema.table)
        names = list(schema.column_names)
        key, status = quote(lifecycle.key_field), quote(lifecycle.status_field)
        listed = ", ".join(map(quote, names))
        self.key = key
        self.key_at = names.index(lifecycle.key_field)
        self.select = f"SELECT {listed} FROM {table}"
        self.get = f"{self.select} WHERE {key} = {p}"
        # A key already stored is not an error: the stored record is returned instead.
        self.insert = (
            f"INSERT INTO {table} ({listed}) VALUES ({', '.join(p for _ in names)})"
            f" ON CONFLICT ({key}) DO NOTHING"
        )
        self.page = f"{self.select} WHERE {key} > {p} ORDER BY {key} LIMIT {p}"
        self.count_by_status = f"SELECT {status}, count(*) FROM {table} GROUP BY {status}"
        self.probe = d.probe(schema)
        # Compare-and-set on the whole record: a record can leave a status and come back
        # with the same empty token (watching, leased, watching), so nothing less proves
        # that it is still the one the caller read. The key first, as plain equality: the
        # lookup goes through the primary key.
        self.compared: tuple[str, ...] = (lifecycle.key_field, *(
            name for name in names if name != lifecycle.key_field))
        self.compared_at = [names.index(name) for name in self.compared]
        whole = " AND ".join([f"{key} = {p}", *(
            f"{quote(name)} {d.null_safe_equal} {p}" for name in self.compared[1:])])
        meta, self.meta_params = d.meta_guard(schema)
        # Outside a transaction the statement is one of its own: it also checks the schema
        # as verified, which a transaction's probe checks otherwise.
        unprobed = f" AND {d.catalogue_guard(schema)}" + (f" AND {meta}" if meta else "")
        self.updates: dict[Row, RowUpdate] = {}
        self.written_at: dict[Row, list[int]] = {}
        for row in lifecycle.rows:
            fields = lifecycle.writes(row)
            self.written_at[row] = [names.index(name) for name in fields]
            assignments = ", ".join(f"{quote(name)} = {p}" for name in fields)
            inside = f"UPDATE {table} SET {assignments} WHERE {whole}"
            keyed = f"UPDATE {table} SET {assignments} WHERE {key} = {p}"
            self.updates[row] = RowUpdate(inside, inside + unprobed, keyed, fields)
        self.leasing = (
            None if lifecycle.lease is None else LeaseStatements.build(d, schema, self.select)
        )

    def reread(self, count: int) -> str:
        """The records under ``count`` keys, read again in one statement (a batch's
        check under the write lock, ``SQLStore.put_many``)."""
        marks = ", ".join(self.dialect.param for _ in range(count))
        return f"{self.select} WHERE {self.key} IN ({marks})"

    def live_leases_under(self, count: int) -> str:
        """The live leases under ``count`` tokens, in claim order (the lease-expiry
        index): the expiry's bound, then the tokens."""
        assert self.leasing is not None, "a lifecycle without a lease has no leases"
        where, order = self.leasing.live_under
        marks = ", ".join(self.dialect.param for _ in range(count))
        return f"{where}({marks}){order}"

    @cached_property
    def native_columns(self) -> frozenset[str]:
        """The columns stored as the record holds them (no codec decodes them on a read):
        health's rules compare these in SQL."""
        return frozenset(
            column.name for column in self.schema.columns
            if self.dialect.codec(column)[1] is as_is
        )

    @cached_property
    def health(self) -> HealthQueries:
        """Every rule of the lifecycle in SQL, for this table (built on first use: a store
        that never checks health never pays for it)."""
        return HealthQueries(self.lifecycle, self.schema, self.dialect, self.native_columns)
