"""The batch statements of a SQL store, written once from the table, the schema and a dialect.

A batch of ``n`` records costs a constant number of statements, not ``n`` of them (nor
``n`` savepoints): the values of the whole batch travel together, as a ``COPY`` into a
staging table or as one array parameter per column, and one statement does the work of
every record with the same answer, record by record, as the one-record statements.
PostgreSQL runs them (:mod:`lifecycles.stores._postgres_batch`); the text is here,
derived as every other statement is, with parameters for every value:

* **insert** (:class:`InsertStatements`): the batch is copied into a temporary staging
  table (``COPY``, whose rows psycopg formats in C: 1.07 times the rate of one binary
  array per column on the task lifecycle's ten columns and 1.28 times on the monitor's
  25, with a third less client CPU, ten alternating rounds; ``benchmarks/bench_batches.py``
  measures both), then one ``INSERT ...
  SELECT ... ORDER BY`` the batch's own order ``ON CONFLICT DO NOTHING RETURNING`` the
  keys inserted, which also empties the staging table. ``DO NOTHING`` without a target
  skips a row whose key *or any other unique value* is taken, in batch order, as one
  insert after another would; which of the two it was is told by reading the keys not
  inserted (:attr:`InsertStatements.existing`).
* **compare-and-set** (:class:`CompareAndSetStatements`): one ``UPDATE ... FROM unnest(...)
  WITH ORDINALITY`` setting every column to the record as it will be stored where the
  row matches the record as it was read, whole, null-safe, as :meth:`SQLStore.put`
  compares; it returns the batch positions it wrote. Outside a transaction the statement
  is one of its own and also matches the schema as verified.
* **claim** (:class:`ClaimStatements`): the common batch claim (no lease expired) as one
  ``WITH picked AS (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) ... UPDATE ... RETURNING``,
  from the claim row's symbolic form (:func:`lifecycles.stores._sql_claim.claim_form`):
  the first ``n`` due records in claim order that the guards grant (or that are broken),
  numbered in that order and joined by number to one lease's inputs each (the inputs a
  grant reads and the pick does not, such as the token, passed as arrays); every rule
  checked on each record as it was and as written before the statement commits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.stores._sql_claim import ClaimForm, claim_form, numbered, verdict
from lifecycles.stores._sql_lease import expired_clause
from lifecycles.stores._sql_rules import bind_inputs, input_marker

if TYPE_CHECKING:
    from lifecycles.stores._sql_dialect import Dialect
    from lifecycles.stores._sql_schema import SQLSchema
    from lifecycles.stores._sql_statements import TableStatements

__all__ = [
    "AT",
    "ClaimStatements",
    "CompareAndSetStatements",
    "InsertStatements",
    "array_type",
]

AT = "lc_batch_at"
"""The column numbering a batch's records (from 1, in batch order) in staging tables and
unnested arrays; no record field is expected to share the name."""

# What the names of a batch claim's bound values start with (after ``input_marker``):
# arrays of per-grant inputs, the schema guards' parameters, the batch size.
_ARRAY, _GUARD, _LIMIT = "lc_array:", "lc_guard:", "lc_limit"


def array_type(dialect: Dialect, kind: str) -> str:
    """The SQL type of an array of a column kind's values (``text[]``...)."""
    return f"{dialect.type_names[kind]}[]"


def _guarded(dialect: Dialect, schema: SQLSchema) -> str:
    """The schema guards of a statement of its own (the catalogue as verified, the meta
    rows): a statement outside any transaction changes nothing in an altered database."""
    meta, _ = dialect.meta_guard(schema)
    return dialect.catalogue_guard(schema) + (f" AND {meta}" if meta else "")


@attrs.frozen
class InsertStatements:
    """The statements of a set-based insert (see the module docstring)."""

    create_stage: str
    copy: str
    insert: str
    existing: str

    @classmethod
    def build(cls, statements: TableStatements) -> InsertStatements:
        d, schema = statements.dialect, statements.schema
        quote = d.quote
        table, key = quote(schema.table), quote(statements.lifecycle.key_field)
        listed = ", ".join(map(quote, schema.column_names))
        # One staging table per table shape, in the session's own temporary schema (named
        # from a digest: it never shadows a table of the search path).
        shape = "\x00".join([schema.table, *schema.column_names])
        stage = quote("lc_stage_" + hashlib.sha256(shape.encode()).hexdigest()[:24])
        return cls(
            create_stage=(f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage}"
                          f" (LIKE {table}, {quote(AT)} bigint NOT NULL)"),
            copy=f"COPY {stage} ({quote(AT)}, {listed}) FROM STDIN",
            # Emptied as it is read: a second batch in the same transaction starts clean.
            insert=(f"WITH staged AS (DELETE FROM {stage} RETURNING *)"
                    f" INSERT INTO {table} ({listed}) SELECT {listed} FROM staged"
                    f" ORDER BY {quote(AT)} ON CONFLICT DO NOTHING RETURNING {key}"),
            existing=f"{statements.select} WHERE {key} = ANY({d.param})",
        )


@attrs.frozen
class CompareAndSetStatements:
    """One compare-and-set ``UPDATE`` for a whole batch: ``inside`` a transaction (which
    probed the schema), ``alone`` as a statement of its own. Parameters: one array of the
    values to store per column, then one of the values compared per column (the key's
    first), each cast to ``types``; ``alone`` then binds the schema guards'."""

    inside: str
    alone: str
    types: tuple[str, ...]

    @classmethod
    def build(cls, statements: TableStatements) -> CompareAndSetStatements:
        d, schema = statements.dialect, statements.schema
        quote, p = d.quote, d.param
        key = statements.lifecycle.key_field
        names = list(schema.column_names)
        kinds = {column.name: column.kind for column in schema.columns}
        types = tuple(array_type(d, kinds[name]) for name in names)
        after = [quote(f"lc_after_{at}") for at in range(len(names))]
        before = [quote(f"lc_before_{at}") for at in range(len(names))]
        arrays = ", ".join(f"{p}::{kind}" for kind in (*types, *types))
        table = quote(schema.table)
        sets = ", ".join(f"{quote(name)} = v.{value}"
                         for name, value in zip(names, after, strict=True) if name != key)
        compared = " AND ".join([f"{table}.{quote(key)} = v.{before[names.index(key)]}", *(
            f"{table}.{quote(name)} {d.null_safe_equal} v.{value}"
            for name, value in zip(names, before, strict=True) if name != key)])
        update = (
            f"UPDATE {table} SET {sets} FROM unnest({arrays}) WITH ORDINALITY"
            f" AS v({', '.join([*after, *before, quote(AT)])}) WHERE {compared}"
        )
        returning = f" RETURNING v.{quote(AT)}"
        return cls(update + returning,
                   f"{update} AND {_guarded(d, schema)}{returning}", types)


@attrs.frozen
class BatchClaim:
    """One batch claim statement (``$n`` markers) and what it binds, in order: each name
    an input of the first grant, ``lc_array:<input>`` that input of every grant,
    ``lc_guard:<i>`` the ``i``-th schema guard parameter, or ``lc_limit``. Its rows, in
    claim order: the grant's number, the record as it was and its verdict, the record as
    written and its verdict; or one row of NULLs when it leased nothing. Every row starts
    with whether a lease has expired and whether the schema is as verified."""

    statement: str
    binds: tuple[str, ...]
    width: int

    def split(self, row: tuple[Any, ...]) -> tuple[int | None, tuple[Any, ...], tuple[Any, ...]]:
        """A row's grant number, the record as it was and as written."""
        w = self.width
        return row[2], row[3 : 3 + w], row[4 + w : 4 + 2 * w]


@attrs.frozen
class ClaimStatements:
    """The batch claim of a store: the claim row's form, the inputs the pick reads (one
    value for the whole batch) and those only a grant reads (one per grant, as arrays).
    :meth:`statement` writes the statement for the arrays' SQL types."""

    form: ClaimForm
    shared: tuple[str, ...]
    per_grant: tuple[str, ...]
    statements: TableStatements = attrs.field(eq=False, repr=False)

    @classmethod
    def build(cls, statements: TableStatements) -> ClaimStatements | str:
        """The batch claim of a table's ``statements``, or why there is none (as for one
        claim)."""
        form = claim_form(statements)
        if isinstance(form, str):
            return form
        _, shared = bind_inputs(form.picked, statements.dialect.param)
        _, assigned = bind_inputs(" ".join(form.assignments.values()), statements.dialect.param)
        picks = {"now", *shared}  # the due time and the expiry read `now` too
        per_grant = tuple(dict.fromkeys(name for name in assigned if name not in picks))
        return cls(form, tuple(sorted(picks)), per_grant, statements)

    def statement(self, types: Mapping[str, str]) -> BatchClaim:
        """The statement binding each per-grant input as an array of ``types[name]``."""
        statements, form = self.statements, self.form
        d, schema, lifecycle = statements.dialect, statements.schema, statements.lifecycle
        quote = d.quote
        table, key = quote(schema.table), quote(lifecycle.key_field)
        names = list(schema.column_names)
        columns = ", ".join(map(quote, names))
        now = input_marker("now")
        grant = {name: quote(f"lc_in_{at}") for at, name in enumerate(self.per_grant)}
        sets = []
        for name, value in form.assignments.items():
            for input_name, column in grant.items():
                value = value.replace(input_marker(input_name), f"g.{column}")
            sets.append(f"{quote(name)} = {value}")
        arrays = ", ".join(f"{input_marker(_ARRAY + name)}::{types[name]}[]"
                           for name in self.per_grant)
        guard = _guarded(d, schema)
        guard_count = guard.count(d.param)
        for index in range(guard_count):
            guard = guard.replace(d.param, input_marker(f"{_GUARD}{index}"), 1)
        expired = (f"EXISTS (SELECT 1 FROM {table} AS expired"
                   f" WHERE {expired_clause(d, lifecycle, now, 'expired')})")
        at = quote(AT)
        grants = (f"(SELECT * FROM unnest({arrays}) WITH ORDINALITY"
                  f" AS g({', '.join([*grant.values(), at])}))" if grant
                  else f"(SELECT generate_series(1, {input_marker(_LIMIT)}) AS {at})")
        qualified = ", ".join(f"{table}.{quote(name)}" for name in names)
        b_columns = ", ".join(f"b.{quote(name)}" for name in names)
        w_columns = ", ".join(f"w.{quote(name)}" for name in names)
        # Whether a lease has expired and whether the schema is as verified, asked once:
        # the write needs both, and the answer tells an empty queue from a refusal.
        statement = (
            f"WITH lc_state AS MATERIALIZED (SELECT {expired} AS expired, {guard} AS verified),"
            f" picked AS (SELECT {columns} FROM {table} WHERE {form.picked}"
            f" ORDER BY {form.order} LIMIT {input_marker(_LIMIT)}{d.skip_locked}),"
            f" numbered AS (SELECT {key} AS lc_key, row_number() OVER (ORDER BY {form.order})"
            f" AS {at} FROM picked),"
            f" claimed AS (UPDATE {table} SET {', '.join(sets)}"
            f" FROM lc_state, numbered JOIN {grants} AS g USING ({at})"
            f" WHERE {table}.{key} = numbered.lc_key AND NOT lc_state.expired"
            f" AND lc_state.verified RETURNING numbered.{at}, {qualified})"
            f" SELECT lc_state.expired, lc_state.verified, b.{at}, {b_columns}, b.verdict,"
            f" {w_columns}, w.verdict FROM lc_state LEFT JOIN ("
            f"(SELECT numbered.{at}, {columns}, {verdict(d, key, form.every_rule)} AS verdict"
            f" FROM picked JOIN numbered ON picked.{key} = numbered.lc_key) AS b"
            f" JOIN (SELECT {at}, {columns}, {verdict(d, key, form.written_rules)} AS verdict"
            f" FROM claimed) AS w USING ({at})) ON TRUE ORDER BY b.{at}"
        )
        sql, binds = bind_inputs(statement, d.param)
        return BatchClaim(numbered(sql, d.param), binds, len(names))

    @staticmethod
    def value_of(name: str, first: Any, every: list[Any], guards: list[Any],
                 limit: int) -> Any:
        """The value bound for ``name`` (see :class:`BatchClaim`)."""
        if name == _LIMIT:
            return limit
        if name.startswith(_ARRAY):
            field = name[len(_ARRAY):]
            return [getattr(inputs, field) for inputs in every]
        if name.startswith(_GUARD):
            return guards[int(name[len(_GUARD):])]
        return getattr(first, name)
