"""The claim decided inside the database: one statement, the rules checked before it commits.

The lease protocol's common claim (no lease has expired; the first due record whose
claim guards hold is leased) needs, written in Python, a read and then a write: two
round trips to a database server, or a transaction of four. A store that can say it in
one statement does so here, from the declarations alone:

* the claim rows' guards and effect as expressions (:mod:`lifecycles.machines._symbolic`,
  the table's own functions called on symbolic arguments), rendered by the rules'
  renderer: the guards pick the record, the effect is the ``SET``;
* every field rule and invariant, rendered the same way (as health renders them), is
  the statement's last step, over the record as it was and, for the rules reading a
  field the claim writes (no other verdict can change), as written: when some rule does
  not hold, the statement fails with an error (a text that no integer reads), so the
  write is undone before it commits, exactly where the Python path would refuse to write;
* the schema guards of any write outside a transaction (the catalogue as verified, the
  meta row) and "no lease has expired" (rescues come first, in the full protocol).

PostgreSQL (``WITH ... UPDATE ... RETURNING``): the candidate is locked ``FOR UPDATE SKIP
LOCKED``, so workers claiming at once take different records; the record as it was
comes back beside the record as written, from the statement's snapshot. The store reads
the record as it was as any read does (field rules, invariants), fires the claim on it
in Python (the table's dispatch and guards, the invariants; the observers are told) and
requires the statement to have written that very record: the Python table stays the
judge of what the statement wrote. Whenever the statement leases nothing (nothing due,
a lease expired, the schema changed, a rule broken), the full protocol decides, in a
transaction, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.machines._symbolic import NoSymbolicForm, symbolic_row
from lifecycles.stores._sql_lease import due_clause, expired_clause
from lifecycles.stores._sql_rules import NoSQLForm, bind_inputs, input_marker, rules_in_sql

if TYPE_CHECKING:
    from lifecycles.stores._sql_dialect import Dialect
    from lifecycles.stores._sql_statements import TableStatements

__all__ = ["ClaimForm", "ClaimInPlace", "claim_form", "claim_in_place", "verdict"]

RULE_BROKEN = "lifecycles: the claimed record breaks a rule"
"""The text the statement fails to read as an integer when the written record breaks a
rule (PostgreSQL's ``invalid_text_representation``, SQLSTATE 22P02)."""


@attrs.frozen
class ClaimInPlace:
    """The one-statement claim of a store: its SQL and the inputs it binds in order (then
    the schema guards' parameters); ``width`` columns per record."""

    statement: str
    inputs: tuple[str, ...]
    width: int

    def split(self, values: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The record as it was and as written, out of the statement's one row (each
        followed by its verdict column)."""
        return values[: self.width], values[self.width + 1 : 2 * self.width + 1]


@attrs.frozen
class ClaimForm:
    """The claim rows of a store's table as SQL text, input markers in place
    (:func:`~lifecycles.stores._sql_rules.input_marker`): which records the claim picks
    (due, and granted or broken), what it sets, and the rules checked on the record as
    it was (``every_rule``) and as written (``written_rules``). Shared by the one-record
    claim below and the batch claim (:mod:`lifecycles.stores._sql_batch`)."""

    picked: str
    assignments: dict[str, str]
    every_rule: str
    written_rules: str
    order: str


def claim_form(statements: TableStatements) -> ClaimForm | str:
    """The claim of a table's ``statements`` in SQL (PostgreSQL), or why there is none."""
    lifecycle, d = statements.lifecycle, statements.dialect
    lease = lifecycle.lease
    if lease is None:
        return "no lease"
    rows = {row.source: row for row in lifecycle.rows if row.trigger == lease.trigger}
    forms = []
    try:
        for row in rows.values():
            forms.append(symbolic_row(lifecycle, row))
    except NoSymbolicForm as why:
        return str(why)
    if len(rows) != sum(row.trigger == lease.trigger for row in lifecycle.rows):
        return "a claimable status has more than one claim row"
    shapes = {(tuple(c.key for c in f.conditions),
               tuple((name, value.key) for name, value in f.assignments.items()))
              for f in forms}
    if len(shapes) != 1:
        return "the claim rows decide or write differently"
    health = statements.health
    if health.python_only:
        return f"rules without an SQL form: {', '.join(health.python_only)}"
    schema = statements.schema
    renderer = rules_in_sql(d, schema.columns, frozenset(schema.column_names))
    form = forms[0]
    try:
        guards = [renderer.render(condition) for condition in form.conditions]
        assignments = {
            name: renderer.render(value) for name, value in form.assignments.items()
        }
    except NoSQLForm as why:
        return str(why)
    every_rule = health.every_rule
    # The record as written differs from the record as it was only in the claim's
    # fields: a rule reading none of them has the same verdict on both, given once.
    written_rules = health.rules_reading(set(lifecycle.writes(next(iter(rows.values())))))
    if any(d.param in text for text in [every_rule, *guards, *assignments.values()]):
        return "a rule's SQL holds the parameter marker"  # it would be numbered as one
    now = input_marker("now")
    # The first due record the guards grant, or a broken one before it: the protocol
    # passes over a record its guards refuse, but refuses a broken one (the rule check
    # of the statement fails it, and the protocol reads it and says so).
    granted = " AND ".join(guards) or "1 = 1"
    broken = f"(CASE WHEN {every_rule} THEN 0 ELSE 1 END) = 1"
    picked = f"{due_clause(d, lifecycle, now)} AND (({granted}) OR {broken})"
    return ClaimForm(picked, assignments, every_rule, written_rules,
                     ", ".join(map(d.quote, lease.order_by)))


def claim_in_place(statements: TableStatements) -> ClaimInPlace | str:
    """The claim statement of a table's ``statements`` (PostgreSQL), or why there is none."""
    form = claim_form(statements)
    if isinstance(form, str):
        return form
    lifecycle, d, schema = statements.lifecycle, statements.dialect, statements.schema
    quote = d.quote
    table, key = quote(schema.table), quote(lifecycle.key_field)
    now = input_marker("now")
    columns = ", ".join(map(quote, schema.column_names))
    meta, _ = d.meta_guard(schema)
    schema_as_verified = d.catalogue_guard(schema) + (f" AND {meta}" if meta else "")

    def holds(source: str, rules: str) -> str:
        """The rows of ``source``, the statement failing on one that breaks one of
        ``rules`` (the record as it was, as a read refuses it; the record as written,
        before commit)."""
        return f"(SELECT {columns}, {verdict(d, key, rules)} AS verdict FROM {source})"

    sets = ", ".join(f"{quote(name)} = {value}" for name, value in form.assignments.items())
    statement = (
        f"WITH pick AS (SELECT {key} FROM {table} WHERE {form.picked}"
        f" ORDER BY {form.order} LIMIT 1{d.skip_locked}),"
        f" was AS (SELECT {columns} FROM {table} WHERE {key} = (SELECT {key} FROM pick)),"
        f" claimed AS (UPDATE {table} SET {sets} WHERE {key} = (SELECT {key} FROM pick)"
        f" AND NOT EXISTS (SELECT 1 FROM {table} AS expired"
        f" WHERE {expired_clause(d, lifecycle, now, 'expired')})"
        f" AND {schema_as_verified} RETURNING {columns})"
        f" SELECT before.*, written.* FROM {holds('was', form.every_rule)} AS before,"
        f" {holds('claimed', form.written_rules)} AS written"
    )
    sql, inputs = bind_inputs(statement, d.param)
    return ClaimInPlace(numbered(sql, d.param), inputs, len(schema.column_names))


def verdict(d: Dialect, key: str, rules: str) -> str:
    """``0`` on a row where ``rules`` hold; on any other, the statement fails (the text
    :data:`RULE_BROKEN` and the row's ``key``, which no integer reads), so what it wrote
    is undone before it commits."""
    refused = f"CAST({d.literal(RULE_BROKEN)} || {key} AS integer)"
    return f"CASE WHEN {rules} THEN 0 ELSE {refused} END"


def numbered(sql: str, param: str) -> str:
    """``sql`` with each ``param`` marker numbered in order (``$1``, ``$2``...): the
    statement runs as written, with no client-side rewriting of its markers."""
    pieces = sql.split(param)
    return "".join(
        piece + (f"${index}" if index < len(pieces) else "")
        for index, piece in enumerate(pieces, start=1)
    )
