"""What differs between SQL databases, as text: the SQL store builds every statement
from a :class:`Dialect`'s pieces and never writes a database's name
(:mod:`lifecycles.stores.sqlite`, :mod:`lifecycles.stores.postgres` hold the two).

The bottom of the SQL store's modules: a dialect renders a table it is shown
(:class:`StoredTable`, which :class:`~lifecycles.stores._sql_schema.SQLSchema` is) and
knows nothing of how the schema is derived, created or verified."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import attrs

from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.stores._base import SchemaMismatch
from lifecycles.stores._codecs import as_is, from_json_or_none, json_or_none, plain

__all__ = ["Codec", "Column", "Dialect", "MetaTable", "StoredTable"]

Codec = Callable[[Any], Any]


@attrs.frozen
class Column:
    """One column: its name and its kind (``text``, ``integer``, ``bigint``, ``real``,
    ``boolean``, ``json`` for containers, ``other`` for any other hint); the dialect
    turns the kind into a type name and a codec."""

    name: str
    kind: str


class MetaTable(Protocol):
    """What a dialect reads of a schema's meta table: its name, columns and rows."""

    @property
    def meta_table(self) -> str: ...

    @property
    def meta_columns(self) -> tuple[Column, ...]: ...

    @property
    def meta_rows(self) -> list[tuple[Any, ...]]: ...


class StoredTable(Protocol):
    """What a dialect reads of the table a lifecycle's records live in."""

    @property
    def lifecycle(self) -> Lifecycle[Any, Any]: ...

    @property
    def table(self) -> str: ...

    @property
    def columns(self) -> tuple[Column, ...]: ...

    @property
    def binding(self) -> MetaTable | None:
        """The meta table binding the database to something, if the schema keeps one."""
        ...

    def mismatch(self, message: str) -> SchemaMismatch:
        """``schema_altered``, under the schema's error prefix."""
        ...


class Dialect(ABC):
    """What differs between SQL databases, as text: the store builds every statement
    from these pieces and never writes a database's name."""

    name: ClassVar[str]
    #: The driver's parameter marker.
    param: ClassVar[str]
    #: Equality that holds between two NULLs (lease tokens are NULL when unleased).
    null_safe_equal: ClassVar[str]
    #: Appended to lease queries: rows another worker holds are passed over, not awaited.
    skip_locked: ClassVar[str] = ""
    #: Type name of each column kind ("" leaves a column untyped).
    type_names: ClassVar[dict[str, str]]
    #: Appended to text columns: code-point order, so key order is the same everywhere.
    collation: ClassVar[str] = ""
    #: A number above every number a column holds (the bound of an empty walk).
    infinity: ClassVar[str] = "'Infinity'::float8"
    #: How many records a claim's walk of the claim order reads before it asks the range
    #: of due times instead (``SQLStore.due``); 0: the walk is not bounded.
    walk_bound: ClassVar[int] = 0
    #: Whether a claim may first glance outside a transaction (see ``SQLStore.glance``):
    #: where writers serialise on the whole database anyway, a lost race is rare and
    #: cheap; where workers claim side by side with row locks, the transaction is better.
    glances: ClassVar[bool] = False
    #: Whether the store keeps partial indexes of the rows breaking a rule, and what
    #: names a row in any table then (``HealthQueries.rules_indexes``).
    indexes_rules: ClassVar[bool] = False
    row_id: ClassVar[str] = ""
    #: Whether the outermost transaction holds the database's write lock from its first
    #: statement, so a row read in it cannot change before it ends but by this connection
    #: (``SQLStore.put`` then writes a record read in it by its key alone).
    write_locked: ClassVar[bool] = False
    #: Whether the status leads the key of the lease-expiry index (the same in all its
    #: rows): a planner without statistics (SQLite's) then prefers it to the lease-order
    #: index, whose key the status also leads; PostgreSQL drops a condition its partial
    #: index implies, and would then scan the whole index for the expiry's range.
    expiry_index_by_status: ClassVar[bool] = False

    @abstractmethod
    def quote(self, identifier: str) -> str:
        """An identifier from a schema declaration, as the database reads it."""

    def literal(self, text: str) -> str:
        """A declared status as an SQL string literal (never input: statuses come from
        the table). Literals, not parameters, so the planner can match partial indexes."""
        return "'" + text.replace("'", "''") + "'"

    @abstractmethod
    def column_definition(self, column: Column, key: bool) -> str:
        """One column of a derived ``CREATE TABLE``."""

    @abstractmethod
    def signature(self, column: Column) -> object:
        """What :meth:`Catalogue.columns_of` reports for ``column`` when it is as declared."""

    @abstractmethod
    def excluding(self, key: str, keys: list[str]) -> tuple[str, list[Any]]:
        """A ``WHERE`` suffix leaving ``keys`` out, and its parameters."""

    @abstractmethod
    def probe(self, schema: StoredTable) -> tuple[str, tuple[Any, ...]]:
        """One cheap statement whose rows :meth:`read_probe` judges."""

    @abstractmethod
    def read_probe(self, schema: StoredTable, rows: list[tuple[Any, ...]]) -> object:
        """Raise ``schema_altered`` when the probe shows a change; else a version token:
        when it differs from the last one, the store runs the whole check again."""

    @abstractmethod
    def catalogue_guard(self, schema: StoredTable) -> str:
        """A condition that holds exactly while the probe would still answer the token
        :meth:`catalogue_params` binds and find the schema as verified: written into a
        statement that runs outside a transaction, so it changes nothing in an altered
        database."""

    @abstractmethod
    def catalogue_params(self, schema: StoredTable, token: object) -> list[Any]:
        """The parameters of :meth:`catalogue_guard` for the probe's last ``token``."""

    def meta_guard(self, schema: StoredTable) -> tuple[str, list[Any]]:
        """A condition that holds exactly while the meta table holds the binding's rows."""
        binding = schema.binding
        if binding is None:
            return "", []
        table = self.quote(binding.meta_table)
        clauses = [f"(SELECT count(*) FROM {table}) = {len(binding.meta_rows)}"]
        params: list[Any] = []
        for row in binding.meta_rows:
            match = " AND ".join(
                f"{self.quote(column.name)} {self.null_safe_equal} {self.param}"
                for column in binding.meta_columns
            )
            clauses.append(f"EXISTS (SELECT 1 FROM {table} WHERE {match})")
            params.extend(row)
        return " AND ".join(clauses), params

    def codec(self, column: Column) -> tuple[Codec, Codec]:
        """How values of ``column`` are encoded into and decoded out of the database."""
        if column.kind == "json":
            return json_or_none, from_json_or_none
        return plain, as_is

    def claim_order_index(self, schema: StoredTable) -> str | None:
        """A partial index of the claimable records in claim order: a claim walks it to the
        first due record instead of sorting every due one (the lease-order index alone
        leaves a sort per claim). Its ``WHERE`` is the claim's own claimable clause, in
        literals: SQLite's planner matches a partial index only on the same text."""
        lifecycle = schema.lifecycle
        if lifecycle.lease is None:
            return None
        # The due time last: records not yet due are passed over within the index.
        lease = lifecycle.lease
        order = ", ".join(map(self.quote, _once(*lease.order_by, lease.due_field)))
        return (
            f"CREATE INDEX IF NOT EXISTS {self.quote(schema.table + '_claim_order')}"
            f" ON {self.quote(schema.table)} ({order})"
            f" WHERE {self.claimable_clause(lifecycle)}"
        )

    def create_table(self, schema: StoredTable) -> str:
        key = schema.lifecycle.key_field
        definitions = ", ".join(
            self.column_definition(column, column.name == key) for column in schema.columns
        )
        return f"CREATE TABLE IF NOT EXISTS {self.quote(schema.table)} ({definitions})"

    def create_indexes(self, schema: StoredTable) -> list[str]:
        """The lease-order index (status, due time, claim order) and the dialect's own."""
        lifecycle = schema.lifecycle
        if lifecycle.lease is None:
            return []
        lease = lifecycle.lease
        order = ", ".join(
            map(self.quote, _once(lifecycle.status_field, lease.due_field, *lease.order_by))
        )
        statements = [
            f"CREATE INDEX IF NOT EXISTS {self.quote(schema.table + '_due')}"
            f" ON {self.quote(schema.table)} ({order})"
        ]
        partial = self.claim_order_index(schema)
        return [*statements, *([] if partial is None else [partial]),
                self.lease_expiry_index(schema)]

    def lease_expiry_index(self, schema: StoredTable) -> str:
        """A partial index of the leased records by expiry: whether a lease has expired
        (asked before every claim) reads the first entry, however many leases are held,
        where the lease-order index would read every leased record. Its ``WHERE`` is the
        expiry queries' own status clause, in literals, as SQLite matches a partial index
        only on the same text (see :attr:`expiry_index_by_status` for its key)."""
        lifecycle = schema.lifecycle
        lease = lease_protocol.declared_lease(lifecycle)
        status = self.quote(lifecycle.status_field)
        key = [status] if self.expiry_index_by_status else []
        return (
            f"CREATE INDEX IF NOT EXISTS {self.quote(schema.table + '_lease_expiry')}"
            f" ON {self.quote(schema.table)} ({', '.join([*key, self.quote(lease.expires_field)])})"
            f" WHERE {status} = {self.literal(lease_protocol.leased_status(lifecycle))}"
        )

    def claimable_clause(self, lifecycle: Lifecycle[Any, Any]) -> str:
        """``status IN ('pending', ...)``: the claimable statuses, from the lease trigger."""
        statuses = ", ".join(map(self.literal, lease_protocol.claimable_statuses(lifecycle)))
        return f"{self.quote(lifecycle.status_field)} IN ({statuses})"

    def due_range_hint(self, schema: StoredTable) -> str:
        """Appended to the table in the due-time range query: the lease-order index, where
        the planner needs telling."""
        return ""

    def likely(self, clause: str) -> str:
        """``clause`` marked as true for most rows, where the planner takes such a hint: a
        claim then walks the claim-order index instead of sorting every due record."""
        return clause

    def select_all(self, table: str, columns: Sequence[Column]) -> str:
        listed = ", ".join(self.quote(column.name) for column in columns)
        return f"SELECT {listed} FROM {self.quote(table)}"


def _once(*columns: str) -> tuple[str, ...]:
    """``columns`` in order, each once: a due field that is also an ``order_by`` key
    (``available_at, refund_id``) is indexed where it first comes, not twice."""
    return tuple(dict.fromkeys(columns))
