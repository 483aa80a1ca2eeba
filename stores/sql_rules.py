"""A lifecycle's rules in SQL, and the health query built from them.

Every field rule and invariant declared as an expression
(:mod:`lifecycles.invariants.expressions`) is rendered here, from that one declaration,
as one SQL boolean expression in a store's dialect: true for a stored row whose value
the Python rule admits, false (never NULL) for one it refuses. Nothing about a
particular rule is written here; this module knows the dozen node kinds and how each
database states them:

* **types.** SQLite keeps any value in any column (a text in an ``INTEGER`` column
  stays text when it is not numeric), so a type test is ``typeof()``: ``'text'`` is a
  Python ``str``, ``'integer'`` an ``int`` (a float that is integral is ``'real'``, and
  Python's ``int`` test refuses it too; a ``bool`` is stored as an integer and read
  back as one), ``'real'`` a ``float``. PostgreSQL's columns are typed: a type test
  is decided by the column's type, and is ``col IS NOT NULL`` or false.
* **NULL.** ``==`` and ``!=`` are null-safe (``IS``, ``IS NOT DISTINCT FROM``), as
  Python compares with ``None``, and so is a membership test; every other test sits
  behind a type test that is false for NULL. A field rule's form is never NULL; an
  invariant's is never NULL on a row whose fields hold, the only rows Python checks it
  on (the property test checks both). Health counts a NULL verdict as broken anyway.
* **numbers.** A finite number of at least ``low`` is one ``+x BETWEEN low AND
  1.7976931348623157e308`` in SQLite: the unary ``+`` strips the column's affinity, so
  a text or a blob compares above every number and fails, and infinity lies above the
  largest float. PostgreSQL: ``x > '-Infinity' AND x < 'Infinity'`` (its NaN sorts
  above infinity, so it fails too; SQLite stores a NaN as NULL).
* **patterns.** A full match of a sequence of character classes
  (``[A-Za-z0-9_.:-]{1,256}``, ``[a-z][a-z0-9_.-]{0,127}``, ``[0-9a-f]{64}``), every
  piece of fixed length but the last. SQLite has no ``REGEXP``: a fixed length is one
  ``GLOB`` of classes (and the length in bytes: ``GLOB`` stops at a NUL); otherwise the
  length in bytes (as many as characters once the ASCII classes hold), no NUL
  (``instr``), the fixed prefix as a ``GLOB`` and the rest as ``NOT GLOB '?..?*[^class]*'``.
  PostgreSQL: ``char_length`` and ``~`` (its regex bounds stop at 255, so the length is
  separate).

A rule with a node SQL cannot state (:class:`~lifecycles.invariants.expressions.PythonOnly`,
or a rule declared as a bare Python callable) has no SQL form (:class:`NoSQLForm`); so
has any rule when a column's value is decoded on its way to Python (JSON, booleans in
SQLite). Health then checks every row in Python as well (:attr:`HealthQueries.python_only`
names why), so it never says less than a read would.

Health, :meth:`HealthQueries.run`, after the engine's own check (``PRAGMA quick_check``
in SQLite): one statement reads every row once and counts the rows, the rows breaking
some rule (every rule in one condition, which the engine evaluates with short cuts),
the rows in each status, the due and the expired ones. Only when some row is broken do
two more statements count the rows breaking each rule (a field rule: rows where some
field it guards breaks it; an invariant: rows whose fields all hold and which break it)
and fetch the first broken rows in key order with each rule's verdict, naming per row
what a read of it would name: the first broken field rule in field order, or else every
broken invariant. A field's converter (the monitor's status becomes its enum) must not
change its rule's verdict; the property test holds the monitor to it.

Cost (SQLite, the monitor's 24 field checks and 13 invariants): about 5 us a row on the
machine this was written on, three fifths of it in ``GLOB`` (some 30 ns a character
for ``'*[^class]*'``, 17 for a fixed pattern) over the ids, the SHA-256 and the error
codes; ``PRAGMA quick_check`` adds about 1.2 us a row, most of it the table's CHECK
constraints (``benchmarks/bench_health.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, cast

import attrs

from lifecycles.invariants.core import (
    FieldRule,
    Invariant,
    InvariantViolation,
    field_rules,
)
from lifecycles.invariants.expressions import (
    AllOf,
    AnyOf,
    Attr,
    Compare,
    Const,
    Expr,
    Finite,
    FullMatch,
    IfElse,
    In,
    IsNone,
    Length,
    Not,
    PythonOnly,
    TypeIs,
    Var,
)
from lifecycles.machines import lease as lease_protocol

if TYPE_CHECKING:
    from lifecycles.machines.core import Lifecycle
    from lifecycles.stores.sql import Column, Dialect, SQLSchema, SQLStore

__all__ = [
    "BROKEN_ROWS_SHOWN",
    "Health",
    "HealthQueries",
    "NoRules",
    "NoSQLForm",
    "PostgresRules",
    "RuleSQL",
    "SQLiteRules",
    "character_classes",
    "rules_in_sql",
]

BROKEN_ROWS_SHOWN = 5
"""How many broken rows health names (the first ones, in key order)."""


class NoSQLForm(Exception):
    """A rule, or a node of one, that SQL cannot state in this store."""


# --- patterns ------------------------------------------------------------------------


@attrs.frozen
class ClassPiece:
    """``[members]{low,high}`` of a pattern; ``high`` None: unbounded."""

    members: str  # the class's text between the brackets, '-' last
    low: int
    high: int | None


_LARGEST_FLOAT = "1.7976931348623157e308"
_PIECE = re.compile(r"\[([^\]\\\[^][^\]\\\[]*)\](?:\{(\d+)(,(\d*))?\}|([*+?]))?")
_PRINTABLE_ASCII = re.compile(r"[ -~]+\Z")
_QUANTIFIERS: dict[str, tuple[int, int | None]] = {"*": (0, None), "+": (1, None), "?": (0, 1)}


def _members(text: str, pattern: str) -> str:
    """A class's members, rewritten so that GLOB and PostgreSQL read them as Python does:
    ranges, then single characters, ``^`` never first and ``-`` last."""
    if not _PRINTABLE_ASCII.match(text):
        raise NoSQLForm(f"pattern {pattern!r} has a class that is not printable ASCII")
    ranges: list[str] = []
    singles: list[str] = []
    at = 0
    while at < len(text):
        if at + 2 < len(text) and text[at + 1] == "-":
            if text[at] > text[at + 2]:
                raise NoSQLForm(f"pattern {pattern!r} has a reversed range")
            ranges.append(text[at : at + 3])
            at += 3
        else:
            singles.append(text[at])
            at += 1
    plain = [c for c in dict.fromkeys(singles) if c not in "^-"]
    members = "".join(ranges) + "".join(plain) + ("^" if "^" in singles else "")
    if not members or members.startswith("^"):
        raise NoSQLForm(f"pattern {pattern!r} has a class SQL cannot spell")
    return members + ("-" if "-" in singles else "")


def character_classes(pattern: str) -> list[ClassPiece]:
    """``pattern`` as a sequence of ASCII character classes with counts; anything else
    (a group, an escape, a negated class, a literal outside brackets) has no SQL form."""
    pieces: list[ClassPiece] = []
    at = 0
    while at < len(pattern):
        found = _PIECE.match(pattern, at)
        if found is None:
            raise NoSQLForm(f"pattern {pattern!r} is not a sequence of character classes")
        text, low, comma, high, symbol = found.groups()
        if symbol:
            bounds = _QUANTIFIERS[symbol]
        elif low is None:
            bounds = (1, 1)
        else:
            bounds = (int(low), int(low) if comma is None else (int(high) if high else None))
        pieces.append(ClassPiece(_members(text, pattern), *bounds))
        at = found.end()
    if not pieces:
        raise NoSQLForm("an empty pattern")
    if any(piece.low != piece.high for piece in pieces[:-1]):
        raise NoSQLForm(f"pattern {pattern!r}: only its last class may vary in length")
    return pieces


# --- rendering -------------------------------------------------------------------------


class RuleSQL:
    """Renders rule expressions as SQL for one table of one dialect.

    ``columns`` are the table's columns by field name; ``as_stored`` names the fields
    whose values reach Python exactly as the database returns them (no decoding), the
    only ones whose types SQL can speak for.
    """

    #: Appended to a subquery so that the planner keeps it apart (each of its expressions
    #: is then computed once per row, not once per use).
    keep_apart: ClassVar[str]
    false: ClassVar[str]

    def __init__(
        self, dialect: Dialect, columns: Sequence[Column], as_stored: frozenset[str]
    ) -> None:
        self.dialect = dialect
        self.columns = {column.name: column for column in columns}
        self.as_stored = as_stored

    # -- what differs -------------------------------------------------------------------

    def type_test(self, operand: Expr, sql: str, kind: str, subject: str | None) -> str:
        raise NotImplementedError

    def infinity(self) -> str:
        raise NotImplementedError

    def length(self, sql: str) -> str:
        raise NotImplementedError

    def full_match(self, sql: str, pieces: list[ClassPiece]) -> str:
        raise NotImplementedError

    # -- what is the same ---------------------------------------------------------------

    def column(self, node: Expr, subject: str | None) -> Column:
        """The column a type test reads (a field's value, decoded as stored)."""
        name = node.name if isinstance(node, Attr) else subject if isinstance(node, Var) else None
        if name is None or name not in self.columns:
            raise NoSQLForm(f"a type test of {node!r}, which is no column")
        if name not in self.as_stored:
            raise NoSQLForm(f"{name} is decoded on its way to Python")
        return self.columns[name]

    def constant(self, value: object) -> str:
        if isinstance(value, Enum):
            value = value.value
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            raise NoSQLForm("a boolean constant")
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            if math.isnan(value):
                raise NoSQLForm("NaN")
            if math.isinf(value):
                return self.infinity() if value > 0 else f"-{self.infinity()}"
            return repr(value)
        if isinstance(value, str):
            return self.dialect.literal(value)
        raise NoSQLForm(f"the constant {value!r}")

    def render(self, node: Expr, subject: str | None = None) -> str:
        """``node`` as SQL; ``subject`` is the field a field rule's value lives in."""
        def r(part: Expr) -> str:
            return self.render(part, subject)

        match node:
            case Var(name):
                if subject is None:
                    raise NoSQLForm(f"the value {name} outside a field rule")
                return self.dialect.quote(subject)
            case Attr(name):
                if name not in self.columns:
                    raise NoSQLForm(f"{name} is no column")
                return self.dialect.quote(name)
            case Const(value):
                return self.constant(value)
            case Compare("==", left, right):
                return f"({r(left)} {self.dialect.null_safe_equal} {r(right)})"
            case Compare("!=", left, right):
                return f"(NOT ({r(left)} {self.dialect.null_safe_equal} {r(right)}))"
            case Compare(op, left, right) if op in ("<", "<=", ">", ">="):
                return f"({r(left)} {op} {r(right)})"
            case AllOf(parts):
                return "(" + " AND ".join(dict.fromkeys(self.conjunction(parts, subject))) + ")"
            case AnyOf(parts):
                return "(" + " OR ".join(dict.fromkeys(map(r, parts))) + ")"
            case Not(IsNone(operand)):
                return f"({r(operand)} IS NOT NULL)"
            case Not(part):
                return f"(NOT {r(part)})"
            case IsNone(operand):
                return f"({r(operand)} IS NULL)"
            case In(operand, choices):
                return self.member(operand, r(operand), choices, subject)
            case TypeIs(operand, kind):
                return self.type_test(operand, r(operand), kind, subject)
            case Finite(operand):
                value, infinity = r(operand), self.infinity()
                return f"({value} > -{infinity} AND {value} < {infinity})"
            case FullMatch(operand, pattern):
                return self.full_match(r(operand), character_classes(pattern))
            case Length(operand):
                return self.length(r(operand))
            case IfElse(condition, then, otherwise):
                return f"(CASE WHEN {r(condition)} THEN {r(then)} ELSE {r(otherwise)} END)"
            case PythonOnly(_, _, why):
                raise NoSQLForm(why)
        raise NoSQLForm(f"no SQL form for {node!r}")

    def conjunction(self, parts: tuple[Expr, ...], subject: str | None) -> list[str]:
        """The parts of an ``AllOf``, rendered; a dialect may fuse some of them."""
        return [self.render(part, subject) for part in parts]

    def member(
        self, operand: Expr, sql: str, choices: frozenset[object], subject: str | None
    ) -> str:
        """Python's ``in`` on a frozen set: a value of another type is never a member
        (``'1'`` is not in ``{1}``, ``1.0`` is), so the type is tested first; but not a
        record's field in an invariant, which holds what its field rule admitted (as the
        Python form, which tests no hashability there either)."""
        values = [choice.value if isinstance(choice, Enum) else choice for choice in choices]
        if None in values:
            return f"({sql} IS NULL OR {self.member(operand, sql, choices - {None}, subject)})"
        if not values:
            return self.false
        if isinstance(operand, Attr):  # IS NOT NULL: NULL IN (...) is NULL, None in {...} False
            listed = ", ".join(sorted(self.constant(value) for value in values))
            return f"({sql} IS NOT NULL AND {sql} IN ({listed}))"
        if all(isinstance(value, str) for value in values):
            kind = "str"
        elif all(isinstance(value, int) and not isinstance(value, bool) for value in values):
            kind = "number"
        else:
            raise NoSQLForm(f"a set of mixed types {sorted(map(repr, values))}")
        listed = ", ".join(sorted(self.constant(value) for value in values))
        return f"({self.type_test(operand, sql, kind, subject)} AND {sql} IN ({listed}))"


class SQLiteRules(RuleSQL):
    """SQLite: ``typeof()`` for types, ``9e999`` for infinity, ``GLOB`` for classes."""

    keep_apart = " LIMIT -1"  # SQLite does not flatten a LIMITed subquery into an aggregate
    false = "0"
    _TYPES: ClassVar[dict[str, str]] = {
        "exact_str": "= 'text'", "str": "= 'text'", "int": "= 'integer'",
        "number": "IN ('integer', 'real')",
    }

    def type_test(self, operand: Expr, sql: str, kind: str, subject: str | None) -> str:
        self.column(operand, subject)
        return f"(typeof({sql}) {self._TYPES[kind]})"

    def infinity(self) -> str:
        return "9e999"

    def length(self, sql: str) -> str:
        return f"length({sql})"

    def conjunction(self, parts: tuple[Expr, ...], subject: str | None) -> list[str]:
        """A finite number (``Finite``, with its number test and a lower bound beside it)
        becomes one ``+x BETWEEN low AND <largest float>``: the unary ``+`` strips the
        column's affinity, so a text or blob compares above every number and fails, and
        infinity is above the largest float. (Three tests and ``typeof`` cost twice as
        much per row.)"""
        fused: dict[int, str] = {}
        dropped: set[int] = set()
        for at, part in enumerate(parts):
            if not isinstance(part, Finite):
                continue
            key = part.operand.key
            low = f"-{_LARGEST_FLOAT}"
            for other_at, other in enumerate(parts):
                if isinstance(other, TypeIs) and other.kind == "number" and (
                    other.operand.key == key
                ):
                    dropped.add(other_at)
                elif (
                    isinstance(other, Compare) and other.op == ">=" and other.left.key == key
                    and isinstance(other.right, Const) and type(other.right.value) in (int, float)
                    and math.isfinite(cast(float, other.right.value))
                ):
                    dropped.add(other_at)
                    low = self.constant(other.right.value)
            value = self.render(part.operand, subject)
            fused[at] = f"({value} IS NOT NULL AND +{value} BETWEEN {low} AND {_LARGEST_FLOAT})"
        return [
            fused[at] if at in fused else self.render(part, subject)
            for at, part in enumerate(parts) if at not in dropped
        ]

    def full_match(self, sql: str, pieces: list[ClassPiece]) -> str:
        low = sum(piece.low for piece in pieces)
        literal = self.dialect.literal
        if all(piece.low == piece.high for piece in pieces):
            # A fixed length: one pattern of classes, no '*' (GLOB's fast path). A NUL,
            # where GLOB stops, would leave it fewer characters than bytes: no match.
            classes = "".join(f"[{piece.members}]" * piece.low for piece in pieces)
            return f"(length(CAST({sql} AS BLOB)) = {low} AND {sql} GLOB {literal(classes)})"
        high = pieces[-1].high
        bound = f"BETWEEN {low} AND {low - pieces[-1].low + high}" if high is not None else (
            f">= {low}"
        )
        tests = [
            # In bytes (as many as characters once the classes, all ASCII, hold), and no
            # NUL: GLOB stops at one.
            f"length(CAST({sql} AS BLOB)) {bound}",
            f"instr({sql}, char(0)) = 0",
        ]
        *fixed, last = pieces
        prefix = sum(piece.low for piece in fixed)
        if fixed:
            classes = "".join(f"[{piece.members}]" * piece.low for piece in fixed)
            tests.append(f"{sql} GLOB {literal(classes + '*')}")
        # After the prefix, no character outside the last class.
        tests.append(f"{sql} NOT GLOB {literal('?' * prefix + '*[^' + last.members + ']*')}")
        return "(" + " AND ".join(tests) + ")"


class PostgresRules(RuleSQL):
    """PostgreSQL: types from the columns' types, ``'Infinity'``, ``~`` for classes."""

    keep_apart = " OFFSET 0"  # PostgreSQL does not pull up a subquery with an OFFSET
    false = "FALSE"
    # The Python type a value of each column kind arrives as.
    _ARRIVES_AS: ClassVar[dict[str, str]] = {
        "text": "str", "other": "str", "integer": "int", "bigint": "int", "real": "float",
        "boolean": "bool",
    }
    _ADMITS: ClassVar[dict[str, frozenset[str]]] = {
        "exact_str": frozenset({"str"}), "str": frozenset({"str"}), "int": frozenset({"int"}),
        "number": frozenset({"int", "float"}),
    }

    def type_test(self, operand: Expr, sql: str, kind: str, subject: str | None) -> str:
        column = self.column(operand, subject)
        arrives = self._ARRIVES_AS.get(column.kind)
        if arrives is None:
            raise NoSQLForm(f"no Python type known for column kind {column.kind}")
        return f"({sql} IS NOT NULL)" if arrives in self._ADMITS[kind] else self.false

    def infinity(self) -> str:
        return "'Infinity'::float8"

    def length(self, sql: str) -> str:
        return f"char_length({sql})"

    def full_match(self, sql: str, pieces: list[ClassPiece]) -> str:
        low = sum(piece.low for piece in pieces)
        high = None if pieces[-1].high is None else sum(p.high or 0 for p in pieces)
        bound = f"BETWEEN {low} AND {high}" if high is not None else f">= {low}"
        parts = []
        for index, piece in enumerate(pieces):
            if index == len(pieces) - 1 and piece.low != piece.high:
                parts.append(f"[{piece.members}]*")
            elif piece.low > 255:  # the largest bound a PostgreSQL regex takes
                raise NoSQLForm("a fixed class longer than 255 characters")
            else:
                parts.append(f"[{piece.members}]{{{piece.low}}}")
        regex = self.dialect.literal("^" + "".join(parts) + "$")
        return f"(char_length({sql}) {bound} AND {sql} ~ {regex})"


class NoRules(RuleSQL):
    """A dialect without a renderer: every rule is checked in Python."""

    keep_apart = ""
    false = "(1 = 0)"

    def render(self, node: Expr, subject: str | None = None) -> str:
        raise NoSQLForm(f"no rules renderer for dialect {self.dialect.name}")


RULE_DIALECTS: dict[str, type[RuleSQL]] = {"sqlite": SQLiteRules, "postgres": PostgresRules}


def rules_in_sql(
    dialect: Dialect, columns: Sequence[Column], as_stored: frozenset[str]
) -> RuleSQL:
    """The renderer for ``dialect`` (by its name); :class:`NoRules` for another."""
    return RULE_DIALECTS.get(dialect.name, NoRules)(dialect, columns, as_stored)


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
        self._build(schema)

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
        d, quote = self.dialect, self.dialect.quote
        lifecycle = self.lifecycle
        table = quote(schema.table)
        status = quote(lifecycle.status_field)
        fields = [check for check in self.field_checks if check.sql is not None]
        invariants = [check for check in self.invariant_checks if check.sql is not None]
        self.row_fields = fields
        self.invariant_names = [c.invariant.name for c in invariants]
        verdicts = [f"({c.sql})" for c in fields] + [f"({c.sql})" for c in invariants]
        every_rule = " AND ".join(verdicts) or "1 = 1"

        def count_when(condition: str) -> str:
            return f"sum(CASE WHEN {condition} THEN 1 ELSE 0 END)"

        # 1. Every row, once: broken or not (every rule in one condition, which the
        # engine evaluates with short cuts), the statuses, the due and the expired.
        sums = [f"sum(CASE WHEN {every_rule} THEN 0 ELSE 1 END)"]
        self.statuses = [s.value for s in lifecycle.statuses]
        sums += [count_when(f"{status} = {d.literal(s)}") for s in self.statuses]
        lease = lifecycle.lease
        self.leased = lease is not None
        if lease is not None:
            sums.append(count_when(
                f"{d.claimable_clause(lifecycle)} AND {quote(lease.due_field)} <= {_NOW}"
            ))
            sums.append(count_when(
                f"{status} = {d.literal(lease_protocol.leased_status(lifecycle))}"
                f" AND {quote(lease.expires_field)} <= {_NOW}"
            ))
        self.aggregate = f"SELECT count(*), {', '.join(sums)} FROM {table}"

        # 2. Only when some row is broken: the rows breaking each rule. A field rule's
        # verdict over its fields is computed once per row, in a subquery the planner
        # keeps apart; an invariant counts the rows whose fields all hold.
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
        inner = f"SELECT {', '.join(columns)} FROM {table}{self.renderer.keep_apart}"
        fields_hold = " AND ".join(f"{m} = 1" for m in marks) or "1 = 1"
        rule_sums = [f"sum(1 - {m})" for m in marks] + [
            f"sum(CASE WHEN {fields_hold} THEN (CASE WHEN {c.sql} THEN 0 ELSE 1 END) ELSE 0 END)"
            for c in invariants
        ]
        self.per_rule = f"SELECT {', '.join(rule_sums) or '0'} FROM ({inner}) AS checked"

        # 3. Only when some row is broken: the first broken rows, each rule's verdict.
        key = quote(lifecycle.key_field)
        verdict_columns = "".join(f", CASE WHEN {v} THEN 1 ELSE 0 END" for v in verdicts)
        self.broken_rows = (
            f"SELECT {key}{verdict_columns} FROM {table}"
            f" WHERE (CASE WHEN {every_rule} THEN 0 ELSE 1 END) = 1"
            f" ORDER BY {key} LIMIT {BROKEN_ROWS_SHOWN}"
        )
        # With parameters, psycopg reads any other % as a placeholder (the other two
        # statements take none, and are sent as they are).
        if "%" in d.param:
            self.aggregate = self.aggregate.replace("%", "%%")
        self.aggregate = self.aggregate.replace(_NOW, d.param)

    def run(self, store: SQLStore[Any], fetch: Fetch, now: float) -> Health:
        """The storage engine's own check first; then every count in one statement, and
        only when some rule is broken the rows breaking each rule and the first broken
        rows. Rules without an SQL form here are checked first by reading every row in
        Python (``store.scan()``), which raises on the first broken one as any read does."""
        code = self.lifecycle.invariants.code
        problems = store.integrity_problems()
        if problems:
            return Health(code, integrity=tuple(problems))
        if self.python_only:
            for _ in store.scan():
                pass
        (row,) = fetch(self.aggregate, [now, now] if self.leased else [])
        total, broken, *numbers = (int(value or 0) for value in row)
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
            python_only=self.python_only,
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
