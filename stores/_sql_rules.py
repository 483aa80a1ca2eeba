"""A lifecycle's rules in SQL; the health query built from them is in ``sql_health``.

Every field rule and invariant declared as an expression
(:mod:`lifecycles.invariants._expressions`) is rendered here, from that one declaration,
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

A rule with a node SQL cannot state (:class:`~lifecycles.invariants._expressions.PythonOnly`,
or a rule declared as a bare Python callable) has no SQL form (:class:`NoSQLForm`); so
has any rule when a column's value is decoded on its way to Python (JSON, booleans in
SQLite). Health then checks every row in Python as well
(:attr:`~lifecycles.stores._sql_health.HealthQueries.python_only` names why), so it never
says less than a read would.

Health (:meth:`~lifecycles.stores._sql_health.HealthQueries.run`), after the engine's own
check (``PRAGMA quick_check`` in SQLite): one statement reads every row once and counts
the rows, the rows breaking some rule (every rule in one condition, which the engine
evaluates with short cuts),
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
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, cast

import attrs

from lifecycles.invariants._expressions import (
    AllOf,
    AnyOf,
    Arith,
    Attr,
    Compare,
    Connectives,
    Const,
    Expr,
    Finite,
    FullMatch,
    IfElse,
    In,
    Input,
    IsNone,
    Length,
    Not,
    PythonOnly,
    TypeIs,
    Var,
    connective,
)

if TYPE_CHECKING:
    from lifecycles.stores._sql_dialect import Column, Dialect

__all__ = [
    "BROKEN_ROWS_SHOWN",
    "NoRules",
    "NoSQLForm",
    "PostgresRules",
    "RuleSQL",
    "SQLiteRules",
    "bind_inputs",
    "character_classes",
    "input_marker",
    "rules_in_sql",
]

SQL_CONNECTIVES = Connectives(" AND ", " OR ", "(NOT {})", "({} IS NULL)", "({} IS NOT NULL)")

BROKEN_ROWS_SHOWN = 5
"""How many broken rows health names (the first ones, in key order)."""


class NoSQLForm(Exception):
    """A rule, or a node of one, that SQL cannot state in this store."""


_INPUT = re.compile("\x00input:([^\x00]+)\x00")


def input_marker(name: str) -> str:
    """Where input ``name`` goes in rendered SQL, until :func:`bind_inputs` places it."""
    return f"\x00input:{name}\x00"


def bind_inputs(sql: str, param: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with each input marker replaced by the parameter marker ``param``, and
    the inputs' names in the order their values must be passed."""
    names = tuple(_INPUT.findall(sql))
    return _INPUT.sub(lambda _: param, sql), names


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
            case AllOf() | AnyOf() | Not() | IsNone():
                return connective(node, r, SQL_CONNECTIVES,
                                  lambda parts: self.conjunction(parts, subject))
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
            case Arith(op, left, right):
                return f"({r(left)} {op} {r(right)})"
            case Input(name):
                return input_marker(name)
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
            listed = sorted(self.constant(value) for value in values)
            return f"({sql} IS NOT NULL AND {self.one_of(sql, listed)})"
        if all(isinstance(value, str) for value in values):
            kind = "str"
        elif all(isinstance(value, int) and not isinstance(value, bool) for value in values):
            kind = "number"
        else:
            raise NoSQLForm(f"a set of mixed types {sorted(map(repr, values))}")
        listed = sorted(self.constant(value) for value in values)
        return f"({self.type_test(operand, sql, kind, subject)} AND {self.one_of(sql, listed)})"

    def one_of(self, sql: str, listed: list[str]) -> str:
        """``sql`` equal to one of the constants ``listed`` (already SQL)."""
        return f"{sql} IN ({', '.join(listed)})"


class SQLiteRules(RuleSQL):
    """SQLite: ``typeof()`` for types, ``9e999`` for infinity, ``GLOB`` for classes."""

    keep_apart = " LIMIT -1"  # SQLite does not flatten a LIMITed subquery into an aggregate
    false = "0"
    _TYPES: ClassVar[dict[str, str]] = {
        "exact_str": "= 'text'", "str": "= 'text'", "int": "= 'integer'",
    }

    def type_test(self, operand: Expr, sql: str, kind: str, subject: str | None) -> str:
        self.column(operand, subject)
        if kind == "number":
            return self.one_of(f"typeof({sql})", ["'integer'", "'real'"])
        return f"(typeof({sql}) {self._TYPES[kind]})"

    def one_of(self, sql: str, listed: list[str]) -> str:
        # x IN (a, b) is x = +a OR x = +b (SQLite's own definition; constants carry no
        # affinity, so the + changes nothing), but builds a lookup table on every run of
        # its statement: in the rules index every write would pay it for every list.
        return "(" + " OR ".join(f"{sql} = {value}" for value in listed) + ")"

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
