"""Health in the database: one statement over every stored record, from the rules' SQL forms.

:class:`HealthQueries` builds, for one SQL store, the statement that answers integrity,
broken rows, counts per status, due and expired at once (the rules rendered by
:mod:`lifecycles.stores._sql_rules`), and the follow-up that names the broken rules and
the first broken keys only when a rule is broken. Each whole-store invariant with a SQL
form (:class:`~lifecycles.invariants._store.GroupLimit`) is one more count: the groups
over its limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from lifecycles.invariants._core import (
    FieldRule,
    Invariant,
    InvariantViolation,
    field_rules,
)
from lifecycles.invariants._expressions import Attr
from lifecycles.invariants._store import GroupLimit, StoreView
from lifecycles.stores._sql_lease import due_clause, expired_clause
from lifecycles.stores._sql_rules import BROKEN_ROWS_SHOWN, NoSQLForm, RuleSQL, rules_in_sql

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle
    from lifecycles.stores._sql_dialect import Dialect
    from lifecycles.stores._sql_schema import SQLSchema

__all__ = ["Checked", "Health", "HealthQueries"]


class Checked(Protocol):
    """What health asks of the store it checks, beside its statements' rows."""

    @property
    def schema(self) -> SQLSchema: ...

    def integrity_problems(self, *, constraints: bool = True) -> list[str]:
        """The storage engine's own check (with or without the table's constraints)."""
        ...

    def scan(self) -> Iterator[Any]:
        """Every record, read as any read is: the first broken one raises."""
        ...


# --- health ----------------------------------------------------------------------------


@attrs.frozen
class FieldCheck:
    """One field under one rule, and its SQL form (``None``: Python only, see ``why``)."""

    field: str
    rule: FieldRule
    sql: str | None
    why: str = ""


@attrs.frozen
class InvariantCheck:
    invariant: Invariant[Any]
    sql: str | None
    why: str = ""


@attrs.frozen
class Health:
    """What one health query found in a store.

    ``total``, ``broken``: rows, and rows breaking some rule; ``violations``: rows
    breaking each broken rule (see the module docstring for how
    each kind is counted); ``broken_keys``: the first broken rows in key order, at most
    :data:`BROKEN_ROWS_SHOWN`; ``broken_rules``: what reads of those rows name, in order
    of first appearance. ``integrity``: the storage engine's own complaints (when there
    are any, nothing else was asked). ``python_only``: rules checked by reading every row
    in Python because they have no SQL form here.
    """

    code: str
    total: int = 0
    broken: int = 0
    counts: Mapping[str, int] = attrs.field(factory=dict)
    due: int = 0
    expired: int = 0
    violations: Mapping[str, int] = attrs.field(factory=dict)
    broken_keys: tuple[str, ...] = ()
    broken_rules: tuple[str, ...] = ()
    integrity: tuple[str, ...] = ()
    python_only: tuple[str, ...] = ()
    store_violations: Mapping[str, int] = attrs.field(factory=dict)
    """The whole-store invariants broken (:mod:`lifecycles.invariants._store`): for a rule
    with a SQL form, how many groups are over its limit; for one without, 1."""

    def raise_broken(self) -> None:
        """Raise :class:`InvariantViolation` (the lifecycle's code, the rules, the keys)
        when some stored row breaks a rule, as a read of it would."""
        if self.broken:
            # The later statements may find fewer (a row repaired in between): still broken.
            rules = self.broken_rules or tuple(self.violations)
            raise InvariantViolation(self.code, rules, self.broken_keys)


Fetch = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
_NOW = "\x00now\x00"


class HealthQueries:
    """The health statements of one store's table, written once from its declarations."""

    aggregate: str
    """Every count health reports, in one statement."""
    each_broken_row: str
    """A statement with one row per stored row breaking some rule."""
    field_rule_names: list[str]
    """The field rules with an SQL form, in the order ``per_rule`` counts them."""

    def __init__(
        self, lifecycle: Lifecycle[Any, Any], schema: SQLSchema, dialect: Dialect,
        as_stored: frozenset[str],
    ) -> None:
        self.lifecycle = lifecycle
        self.dialect = dialect
        renderer = rules_in_sql(dialect, schema.columns, as_stored)
        self.renderer = renderer
        self.field_checks = [
            self._field_check(renderer, field, rule)
            for field, rule in field_rules(lifecycle.record_type)
        ]
        self.invariant_checks = [
            self._invariant_check(renderer, rule) for rule in lifecycle.invariants
        ]
        undecoded = sorted(set(schema.column_names) - as_stored)
        self.python_only: tuple[str, ...] = tuple(dict.fromkeys(
            [check.rule.name for check in self.field_checks if check.sql is None]
            + [check.invariant.name for check in self.invariant_checks if check.sql is None]
            + (["record_shape"] if undecoded else [])
        ))
        """Rules health checks by reading every row in Python: no SQL form here."""
        self.reasons = {
            **{c.rule.name: c.why for c in self.field_checks if c.sql is None},
            **{c.invariant.name: c.why for c in self.invariant_checks if c.sql is None},
            **({"record_shape": f"decoded columns {undecoded}"} if undecoded else {}),
        }
        # Whole-store rules, but those about workers' holdings: nothing stored says them.
        across = [rule for rule in lifecycle.invariants.store if not rule.reads_workers]
        self.store_counts = {rule.name: self._groups_over(schema, rule.sql)
                             for rule in across if rule.sql is not None}
        """For each whole-store invariant with a SQL form: the statement counting the
        groups over its limit."""
        self.store_in_python = [rule for rule in across if rule.sql is None]
        self.python_only += tuple(rule.name for rule in self.store_in_python)
        self.reasons.update({rule.name: "declared as a Python function over every record"
                             for rule in self.store_in_python})
        self._build(schema)

    def _groups_over(self, schema: SQLSchema, limit: GroupLimit) -> str:
        d = self.dialect
        column, status = d.quote(limit.field), d.quote(self.lifecycle.status_field)
        among = (f" AND {status} IN ({', '.join(map(d.literal, limit.statuses))})"
                 if limit.statuses else "")
        return (f"SELECT count(*) FROM (SELECT {column} FROM {d.quote(schema.table)} "
                f"WHERE {column} IS NOT NULL{among} GROUP BY {column} "
                f"HAVING count(*) > {int(limit.limit)}) AS over_limit")

    @staticmethod
    def _field_check(renderer: RuleSQL, field: str, rule: FieldRule) -> FieldCheck:
        if rule.expression is None:
            return FieldCheck(field, rule, None, "declared as a Python callable")
        try:
            sql = renderer.render(rule.expression, subject=field)
        except NoSQLForm as why:
            return FieldCheck(field, rule, None, str(why))
        if rule.optional:
            sql = f"({renderer.dialect.quote(field)} IS NULL OR {sql})"
        return FieldCheck(field, rule, sql)

    @staticmethod
    def _invariant_check(renderer: RuleSQL, rule: Invariant[Any]) -> InvariantCheck:
        if rule.expression is None:
            return InvariantCheck(rule, None, "declared as a Python function")
        try:
            return InvariantCheck(rule, renderer.render(rule.expression))
        except NoSQLForm as why:
            return InvariantCheck(rule, None, str(why))

    def _build(self, schema: SQLSchema) -> None:
        """Every health statement of ``schema``'s table, in three steps: the aggregate
        (every count, in one statement), then the two read only when some row is
        broken (how many rows break each rule; the first broken rows)."""
        fields = [check for check in self.field_checks if check.sql is not None]
        invariants = [check for check in self.invariant_checks if check.sql is not None]
        self.row_fields = fields
        self.invariant_names = [c.invariant.name for c in invariants]
        verdicts = [f"({c.sql})" for c in fields] + [f"({c.sql})" for c in invariants]
        self.every_rule = " AND ".join(verdicts) or "1 = 1"
        """Every rule with an SQL form, as one condition on a row's columns."""
        self.statuses = [s.value for s in self.lifecycle.statuses]
        self.leased = self.lifecycle.lease is not None
        self.rules_indexes: dict[str, str] = {}
        """The partial indexes of the rows breaking some rule, by name, with their
        conditions (none where the dialect keeps none): the engine evaluates the rules as
        any connection writes a row, and health reads the broken rows from the indexes
        instead of every rule of every row. A name carries a digest of its rules."""
        if self.dialect.indexes_rules and verdicts:
            where_broken = self._aggregate_from_rules_indexes(schema)
        else:
            where_broken = self._aggregate_over_every_row(schema)
        table, key = self.dialect.quote(schema.table), self.dialect.quote(self.lifecycle.key_field)
        self.create_rules_indexes = [
            f"CREATE INDEX IF NOT EXISTS {self.dialect.quote(name)} ON {table} ({key})"
            f" WHERE {condition}"
            for name, condition in self.rules_indexes.items()
        ]
        self.per_rule = self._rows_breaking_each_rule(schema, fields, invariants, where_broken)
        self.broken_rows = self._first_broken_rows(schema, verdicts, where_broken)
        # With parameters, psycopg reads any other % as a placeholder (the other two
        # statements take none, and are sent as they are).
        if "%" in self.dialect.param:
            self.aggregate = self.aggregate.replace("%", "%%")
        self.aggregate = self.aggregate.replace(_NOW, self.dialect.param)

    def _counted(self) -> list[str]:
        """The conditions the aggregate counts rows under: each status, then (leased
        lifecycles) due and expired at ``_NOW``."""
        d, lifecycle = self.dialect, self.lifecycle
        status = d.quote(lifecycle.status_field)
        counted = [f"{status} = {d.literal(s)}" for s in self.statuses]
        if lifecycle.lease is not None:
            counted += [due_clause(d, lifecycle, _NOW), expired_clause(d, lifecycle, _NOW)]
        return counted

    def _aggregate_from_rules_indexes(self, schema: SQLSchema) -> str:
        """Where the dialect keeps rules indexes: each count from an index (the broken
        rows from the rules indexes, the rest from the lease-order index). Sets the
        indexes, ``each_broken_row`` and ``aggregate``; the condition of a broken row."""
        d, table = self.dialect, self.dialect.quote(schema.table)
        for group in self._index_groups():
            condition = f"(CASE WHEN {' AND '.join(group)} THEN 0 ELSE 1 END) = 1"
            digest = hashlib.sha256(condition.encode()).hexdigest()[:12]
            self.rules_indexes[f"{schema.table}_rules_{digest}"] = condition
        # The planner matches a partial index's WHERE by its text; without the index
        # the same statement scans, and gives the same answer. Rows go by the engine's
        # own id: a key column another program wrote may hold NULLs or duplicates.
        row_id = d.row_id
        self.each_broken_row = " UNION ".join(
            f"SELECT {row_id} FROM {table} WHERE {c}" for c in self.rules_indexes.values())
        counts = [f"(SELECT count(*) FROM ({self.each_broken_row}) AS broken)"] + [
            f"(SELECT count(*) FROM {table} WHERE {c})" for c in self._counted()]
        self.aggregate = f"SELECT (SELECT count(*) FROM {table}), {', '.join(counts)}"
        if len(self.rules_indexes) == 1:
            return next(iter(self.rules_indexes.values()))
        return f"{row_id} IN ({self.each_broken_row})"

    def _aggregate_over_every_row(self, schema: SQLSchema) -> str:
        """Every row, once: broken or not (every rule in one condition, which the engine
        evaluates with short cuts), the statuses, the due and the expired. Sets
        ``each_broken_row`` and ``aggregate``; the condition of a broken row."""
        table = self.dialect.quote(schema.table)
        broken = f"(CASE WHEN {self.every_rule} THEN 0 ELSE 1 END) = 1"  # NULL breaks
        self.each_broken_row = f"SELECT 1 FROM {table} WHERE {broken}"
        sums = [f"sum(CASE WHEN {self.every_rule} THEN 0 ELSE 1 END)"]
        sums += [f"sum(CASE WHEN {condition} THEN 1 ELSE 0 END)" for condition in self._counted()]
        self.aggregate = f"SELECT count(*), {', '.join(sums)} FROM {table}"
        return broken

    def _rows_breaking_each_rule(
        self, schema: SQLSchema, fields: list[FieldCheck], invariants: list[InvariantCheck],
        where_broken: str,
    ) -> str:
        """How many rows break each rule, over the broken rows only. A field rule's
        verdict over its fields is computed once per row, in a subquery the planner keeps
        apart; an invariant counts the rows whose fields all hold."""
        quote, table = self.dialect.quote, self.dialect.quote(schema.table)
        self.field_rule_names = list(dict.fromkeys(c.rule.name for c in fields))
        per_rule = [
            " AND ".join(f"({c.sql})" for c in fields if c.rule.name == name)
            for name in self.field_rule_names
        ]
        marks = [f"rule_{index}" for index in range(len(per_rule))]
        columns = [
            ", ".join(map(quote, schema.column_names)),
            *(f"CASE WHEN {verdict} THEN 1 ELSE 0 END AS {mark}"
              for verdict, mark in zip(per_rule, marks, strict=True)),
        ]
        # Only the broken rows (from the rules index where there is one): every other
        # row holds every rule, and adds nothing to any count.
        inner = (f"SELECT {', '.join(columns)} FROM {table} WHERE {where_broken}"
                 f"{self.renderer.keep_apart}")
        fields_hold = " AND ".join(f"{m} = 1" for m in marks) or "1 = 1"
        rule_sums = [f"sum(1 - {m})" for m in marks] + [
            f"sum(CASE WHEN {fields_hold} THEN (CASE WHEN {c.sql} THEN 0 ELSE 1 END) ELSE 0 END)"
            for c in invariants
        ]
        return f"SELECT {', '.join(rule_sums) or '0'} FROM ({inner}) AS checked"

    def _first_broken_rows(self, schema: SQLSchema, verdicts: list[str], where_broken: str) -> str:
        """The first broken rows' keys, with each rule's verdict."""
        quote = self.dialect.quote
        key, table = quote(self.lifecycle.key_field), quote(schema.table)
        verdict_columns = "".join(f", CASE WHEN {v} THEN 1 ELSE 0 END" for v in verdicts)
        return (
            f"SELECT {key}{verdict_columns} FROM {table}"
            f" WHERE {where_broken} ORDER BY {key} LIMIT {BROKEN_ROWS_SHOWN}"
        )

    @staticmethod
    def _reads(check: FieldCheck | InvariantCheck) -> set[str]:
        """The fields a rule's SQL form reads."""
        if isinstance(check, FieldCheck):
            return {check.field}
        expression = check.invariant.expression
        assert expression is not None  # it has an SQL form
        return {node.name for node in expression.nodes() if isinstance(node, Attr)}

    def _checks(self) -> list[FieldCheck | InvariantCheck]:
        """Every rule with an SQL form, in ``every_rule``'s order."""
        return [*(c for c in self.field_checks if c.sql is not None),
                *(c for c in self.invariant_checks if c.sql is not None)]

    def rules_reading(self, fields: set[str]) -> str:
        """Every rule with an SQL form that reads one of ``fields``, as one condition: a
        write that changes only ``fields`` can break no other."""
        verdicts = [f"({c.sql})" for c in self._checks() if self._reads(c) & fields]
        return " AND ".join(verdicts) or "1 = 1"

    def _index_groups(self) -> list[list[str]]:
        """The verdicts in one group per rules index: those reading a field some row
        writes, and those reading only fields no row writes (an identity, a creation
        time). An UPDATE makes the engine evaluate only the partial indexes whose
        columns it sets, so the second group costs only inserts."""
        lifecycle = self.lifecycle
        written = {name for row in lifecycle.rows for name in lifecycle.writes(row)}
        changing: list[str] = []
        fixed: list[str] = []
        for check in self._checks():
            (changing if self._reads(check) & written else fixed).append(f"({check.sql})")
        return [group for group in (changing, fixed) if group]

    def run(self, store: Checked, fetch: Fetch, now: float) -> Health:
        """The storage engine's own check first; then every count in one statement, and
        only when some rule is broken the rows breaking each rule and the first broken
        rows. Rules without an SQL form here are checked first by reading every row in
        Python (``store.scan()``), which raises on the first broken one as any read does."""
        code = self.lifecycle.invariants.code
        # When the rules imply the table's CHECK constraints, the aggregate below finds
        # every row breaking one; the engine's full check, constraints included, runs
        # only then, so such a row is still reported as the engine would report it.
        binding = store.schema.binding
        covered = bool(binding and binding.rules_cover_checks) and not self.python_only
        problems = store.integrity_problems(constraints=not covered)
        if problems:
            return Health(code, integrity=tuple(problems))
        store_violations: dict[str, int] = {}
        if self.store_in_python:  # every record at once, as the rules read them
            view = StoreView(tuple(store.scan()), lambda r: str(self.lifecycle.status_of(r)),
                             now)
            store_violations.update({rule.name: 1 for rule in self.store_in_python
                                     if not rule.holds(view)})
        elif self.python_only:
            for _ in store.scan():
                pass
        for name, statement in self.store_counts.items():
            ((over,),) = fetch(statement, ())
            if over:
                store_violations[name] = int(over)
        (row,) = fetch(self.aggregate, [now, now] if self.leased else [])
        total, broken, *numbers = (int(value or 0) for value in row)
        if broken and covered:
            problems = store.integrity_problems()
            if problems:
                return Health(code, integrity=tuple(problems))
        counts = dict(zip(self.statuses, numbers, strict=False))
        due, expired = numbers[len(self.statuses):] if self.leased else (0, 0)
        violations: dict[str, int] = {}
        keys: tuple[str, ...] = ()
        rules: tuple[str, ...] = ()
        if broken:
            (per_rule,) = fetch(self.per_rule, ())
            names = [*self.field_rule_names, *self.invariant_names]
            violations = {
                name: int(n) for name, n in zip(names, per_rule, strict=False) if n
            }
            keys, rules = self._first_broken(fetch)
        return Health(
            code, total, broken, counts, due, expired, violations, keys, rules,
            python_only=self.python_only, store_violations=dict(sorted(store_violations.items())),
        )

    def _first_broken(self, fetch: Fetch) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The first broken rows' keys, and what a read of each names (first broken field
        rule in field order, else every broken invariant), in order of first appearance."""
        keys: list[str] = []
        rules: dict[str, None] = {}
        count = len(self.row_fields)
        for key, *verdicts in fetch(self.broken_rows, ()):
            keys.append(str(key))
            field_verdicts, invariant_verdicts = verdicts[:count], verdicts[count:]
            first = next(
                (c.rule.name for c, ok in zip(self.row_fields, field_verdicts, strict=True)
                 if not ok),
                None,
            )
            named = [first] if first else [
                name for name, ok in zip(self.invariant_names, invariant_verdicts, strict=True)
                if not ok
            ]
            rules.update(dict.fromkeys(named))
        return tuple(keys), tuple(rules)
