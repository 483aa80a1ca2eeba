"""Rules as small expressions: declared once, read by Python and by SQL.

A field rule or an invariant written here is a tree of a dozen node kinds (a
comparison, ``and``, a type test, a full match against a character-class pattern,
...). The tree is never interpreted: :func:`python_function` compiles it once, at
declaration, into the source of one Python ``lambda`` (as fast as a hand-written
predicate), and :mod:`lifecycles.stores._sql_rules` renders the same tree as one SQL
boolean expression in a store's dialect, so that a SQL store checks every stored
record in one query (health) with the very rule the Python reads apply. A property
test keeps the two forms in agreement, value by value.

Writing one::

    @expressed
    def failures_within_max(r: Fields[MonitorRecord]) -> Expr:
        \"\"\"Failures never exceed the item's max_failures.\"\"\"
        return r.failures <= r.max_failures

``r.failures`` is a node, ``<=`` builds one. Python's ``and``, ``or``, ``not``, ``in``,
``is None`` and chained comparisons cannot be overloaded, so a rule spells them
``&``, ``|``, ``~``, :meth:`Expr.is_in`, :meth:`Expr.is_none` and one comparison at a
time; a node used as a truth value raises ``TypeError`` at declaration, so a slip
cannot pass silently.

Semantics are Python's, on the values a record holds: ``==`` between ``None`` and a
value is false (the SQL form uses null-safe equality), ``is_in`` is membership in a
frozen set, the type tests are ``type(v) is str``, ``isinstance(v, int)`` without
``bool`` and so on. A node that SQL cannot state (:class:`PythonOnly`, wrapping any
Python callable) leaves its rule without an SQL form, and says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar, cast

import attrs

R = TypeVar("R")

__all__ = [
    "AllOf",
    "AnyOf",
    "Arith",
    "Attr",
    "Compare",
    "Const",
    "Expr",
    "Fields",
    "Finite",
    "FullMatch",
    "IfElse",
    "In",
    "Input",
    "Inputs",
    "IsNone",
    "Length",
    "Not",
    "Predicate",
    "PythonOnly",
    "TypeIs",
    "Var",
    "all_of",
    "any_of",
    "compiled",
    "finite",
    "full_match",
    "if_else",
    "int_not_bool",
    "lift",
    "number_not_bool",
    "python_function",
    "str_exactly",
    "str_instance",
]


class Expr:
    """A node of a rule. Operators build nodes; nothing is evaluated here."""

    __slots__ = ()

    def __bool__(self) -> bool:
        raise TypeError(
            "a rule expression has no truth value: write & | ~ for and/or/not, "
            ".is_in() for in, .is_none() for `is None`, and one comparison at a time"
        )

    def __hash__(self) -> int:
        return id(self)

    # A node is no text: a function evaluated symbolically that formats one (an
    # f-string, str()) would build a wrong constant silently; it fails instead.
    def __str__(self) -> str:
        raise TypeError("a rule expression is no text")

    def __format__(self, spec: str) -> str:
        raise TypeError("a rule expression is no text")

    # Sums and differences, for the values an effect writes (``r.attempts + 1``).
    def __add__(self, other: object) -> Expr:
        return Arith("+", self, lift(other))

    def __radd__(self, other: object) -> Expr:
        return Arith("+", lift(other), self)

    def __sub__(self, other: object) -> Expr:
        return Arith("-", self, lift(other))

    def __rsub__(self, other: object) -> Expr:
        return Arith("-", lift(other), self)

    # Comparisons build nodes (mypy: these deliberately do not return bool).
    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return Compare("==", self, lift(other))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return Compare("!=", self, lift(other))

    def __lt__(self, other: object) -> Expr:
        return Compare("<", self, lift(other))

    def __le__(self, other: object) -> Expr:
        return Compare("<=", self, lift(other))

    def __gt__(self, other: object) -> Expr:
        return Compare(">", self, lift(other))

    def __ge__(self, other: object) -> Expr:
        return Compare(">=", self, lift(other))

    def __and__(self, other: Expr) -> Expr:
        return all_of(self, other)

    def __or__(self, other: Expr) -> Expr:
        return any_of(self, other)

    def __invert__(self) -> Expr:
        return Not(self)

    def is_none(self) -> Expr:
        return IsNone(self)

    def is_not_none(self) -> Expr:
        return Not(IsNone(self))

    def is_in(self, choices: Iterable[object]) -> Expr:
        return In(self, frozenset(choices))

    @property
    def key(self) -> tuple[Any, ...]:
        """The node's structure, comparable and hashable (``==`` builds a node instead)."""
        parts: list[Any] = [type(self).__name__]
        for field in attrs.fields(cast(Any, type(self))):
            value = getattr(self, field.name)
            if isinstance(value, Expr):
                value = value.key
            elif isinstance(value, tuple):
                value = tuple(part.key if isinstance(part, Expr) else part for part in value)
            parts.append(value)
        return tuple(parts)

    def nodes(self) -> Iterable[Expr]:
        """This node and every node under it."""
        yield self
        for field in attrs.fields(cast(Any, type(self))):
            value = getattr(self, field.name)
            children = value if isinstance(value, tuple) else (value,)
            for child in children:
                if isinstance(child, Expr):
                    yield from child.nodes()


# --- the nodes ------------------------------------------------------------------------
# attrs classes without eq (Expr's operators build nodes) and frozen.


@attrs.frozen(eq=False)
class _Named(Expr):
    name: str


@attrs.frozen(eq=False)
class Var(_Named):
    """A value passed in: the checked value of a field rule (``v``), or a parameter."""


@attrs.frozen(eq=False)
class Attr(_Named):
    """A field of the record an invariant checks (a column, in SQL)."""


@attrs.frozen(eq=False)
class Input(_Named):
    """A field of a transition's inputs (a statement parameter, in SQL)."""


@attrs.frozen(eq=False)
class _Binary(Expr):
    op: str
    left: Expr
    right: Expr


@attrs.frozen(eq=False)
class Arith(_Binary):
    """``left op right`` for ``op`` ``+`` or ``-``, on numbers."""


@attrs.frozen(eq=False)
class Const(Expr):
    """A constant: a number, a string, ``None``, an enum member (its value, in SQL)."""

    value: object


@attrs.frozen(eq=False)
class Compare(_Binary):
    """``left op right``; ``==`` and ``!=`` treat ``None`` as Python does (null-safe)."""


@attrs.frozen(eq=False)
class AllOf(Expr):
    parts: tuple[Expr, ...]


@attrs.frozen(eq=False)
class AnyOf(Expr):
    parts: tuple[Expr, ...]


@attrs.frozen(eq=False)
class Not(Expr):
    part: Expr


@attrs.frozen(eq=False)
class IsNone(Expr):
    operand: Expr


@attrs.frozen(eq=False)
class In(Expr):
    """Membership in a fixed set, as a Python ``in`` on a frozen set; an unhashable value
    is no member. (A record's field is not tested for hashability: it holds a value its
    field rule admitted, and an invariant only reads records.)"""

    operand: Expr
    choices: frozenset[object]


TYPE_TESTS = {
    "exact_str": "(type({0}) is str)",
    "str": "isinstance({0}, str)",
    "int": "(isinstance({0}, int) and not isinstance({0}, bool))",
    "number": "(isinstance({0}, (int, float)) and not isinstance({0}, bool))",
}
"""The type tests, in Python: exactly ``str``; a ``str``; an ``int`` that is no ``bool``;
an ``int`` or ``float`` that is no ``bool``."""


@attrs.frozen(eq=False)
class TypeIs(Expr):
    """The operand's type is ``kind``, one of :data:`TYPE_TESTS`."""

    operand: Expr
    kind: str = attrs.field(validator=attrs.validators.in_(TYPE_TESTS))


@attrs.frozen(eq=False)
class Finite(Expr):
    """A number a float can hold, neither infinite nor NaN (after a number test)."""

    operand: Expr


@attrs.frozen(eq=False)
class FullMatch(Expr):
    """A string fully matching a regular expression (after a string test)."""

    operand: Expr
    pattern: str


@attrs.frozen(eq=False)
class Length(Expr):
    """The length of a string, in characters."""

    operand: Expr


@attrs.frozen(eq=False)
class IfElse(Expr):
    """``then`` where ``condition`` holds, else ``otherwise``."""

    condition: Expr
    then: Expr
    otherwise: Expr


@attrs.frozen(eq=False)
class PythonOnly(Expr):
    """``function(operand)``, a Python predicate SQL cannot state: its rule has no SQL form."""

    function: Callable[[Any], bool]
    operand: Expr
    why: str


# --- building ------------------------------------------------------------------------


def lift(value: object) -> Expr:
    """A node as it is; any other value as a constant."""
    return value if isinstance(value, Expr) else Const(value)


# A type test that another one implies: (type(v) is str) makes isinstance(v, str) moot.
_IMPLIED = {"exact_str": "str", "int": "number"}


def _flat(kind: type[AllOf] | type[AnyOf], parts: Iterable[Expr]) -> Expr:
    flat: list[Expr] = []
    seen: set[tuple[Any, ...]] = set()
    for part in parts:
        for piece in part.parts if isinstance(part, kind) else (part,):
            if piece.key in seen:  # the same test twice is tested once
                continue
            seen.add(piece.key)
            if kind is AllOf and isinstance(piece, TypeIs) and piece.kind in _IMPLIED:
                seen.add(TypeIs(piece.operand, _IMPLIED[piece.kind]).key)
            flat.append(piece)
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


def all_of(*parts: Expr) -> Expr:
    """Every part holds (Python ``and``, left to right)."""
    return _flat(AllOf, parts)


def any_of(*parts: Expr) -> Expr:
    """Some part holds (Python ``or``, left to right)."""
    return _flat(AnyOf, parts)


def if_else(condition: Expr, then: Expr, otherwise: Expr) -> Expr:
    return IfElse(condition, then, otherwise)


def str_exactly(value: Expr) -> Expr:
    """``type(value) is str``: a ``str`` subclass, whose own methods could lie, is not one."""
    return TypeIs(value, "exact_str")


def str_instance(value: Expr) -> Expr:
    return TypeIs(value, "str")


def int_not_bool(value: Expr) -> Expr:
    return TypeIs(value, "int")


def number_not_bool(value: Expr) -> Expr:
    return TypeIs(value, "number")


def finite(value: Expr) -> Expr:
    return Finite(value)


def full_match(value: Expr, pattern: str) -> Expr:
    re.compile(pattern)  # a bad pattern fails at declaration
    return FullMatch(value, pattern)


class Fields(Generic[R]):
    """The record of an invariant, symbolically: ``r.name`` is the node of field ``name``."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Expr:
        if name.startswith("__"):
            raise AttributeError(name)
        return Attr(name)


class Inputs:
    """A transition's inputs, symbolically: ``i.name`` is the node of input ``name``."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Expr:
        if name.startswith("__"):
            raise AttributeError(name)
        return Input(name)


# --- the Python form ------------------------------------------------------------------


def _finite(value: Any) -> bool:
    try:
        # An int too large for a float (a 400-digit JSON number) is not finite here.
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


_PLAIN_CONSTANTS = (int, str, type(None))


@attrs.frozen
class Connectives:
    """How a target language spells the connectives and the null tests (``{}``: the operand)."""

    all: str
    any: str
    negate: str
    is_null: str
    not_null: str


PYTHON_CONNECTIVES = Connectives(" and ", " or ", "(not {})", "({} is None)", "({} is not None)")


def connective(
    node: Expr, render: Callable[[Expr], str], words: Connectives,
    conjunction: Callable[[tuple[Expr, ...]], list[str]] | None = None,
) -> str:
    """``AllOf``, ``AnyOf``, ``Not`` or ``IsNone`` in ``words``: written once for every
    target (a repeated part is rendered once). ``conjunction`` renders an ``AllOf``'s
    parts where a target fuses some of them."""
    match node:
        case AllOf(parts):
            rendered = conjunction(parts) if conjunction else [render(p) for p in parts]
            return "(" + words.all.join(dict.fromkeys(rendered)) + ")"
        case AnyOf(parts):
            return "(" + words.any.join(dict.fromkeys(map(render, parts))) + ")"
        case Not(IsNone(operand)):
            return words.not_null.format(render(operand))
        case Not(part):
            return words.negate.format(render(part))
        case IsNone(operand):
            return words.is_null.format(render(operand))
    raise TypeError(f"{node!r} is no connective")


class _PythonSource:
    """Renders a tree as Python source; constants that have no literal become names."""

    def __init__(self, record: str | None) -> None:
        self.record = record
        self.names: dict[str, object] = {"_finite": _finite, "_hashable": _hashable}

    def constant(self, value: object) -> str:
        name = f"_k{len(self.names)}"
        self.names[name] = value
        return name

    def render(self, node: Expr) -> str:
        r = self.render
        match node:
            case Var(name):
                return name
            case Attr(name):
                if self.record is None:
                    raise TypeError(f"field {name} outside an invariant")
                return f"{self.record}.{name}"
            case Const(value):
                if type(value) in _PLAIN_CONSTANTS or (
                    isinstance(value, float) and math.isfinite(value)
                ):
                    return repr(value)
                return self.constant(value)
            case Compare(op, left, right):
                return f"({r(left)} {op} {r(right)})"
            case AllOf() | AnyOf() | Not() | IsNone():
                return connective(node, r, PYTHON_CONNECTIVES)
            case In(Attr() as operand, choices):
                # A record's field holds a value its field rule admitted: hashable.
                return f"({r(operand)} in {self.constant(choices)})"
            case In(operand, choices):
                value = r(operand)
                return f"(_hashable({value}) and {value} in {self.constant(choices)})"
            case TypeIs(operand, kind):
                return TYPE_TESTS[kind].format(r(operand))
            case Finite(operand):
                return f"_finite({r(operand)})"
            case FullMatch(operand, pattern):
                matcher = self.constant(re.compile(pattern).fullmatch)
                return f"({matcher}({r(operand)}) is not None)"
            case Length(operand):
                return f"len({r(operand)})"
            case Arith(op, left, right):
                return f"({r(left)} {op} {r(right)})"
            case IfElse(condition, then, otherwise):
                return f"({r(then)} if {r(condition)} else {r(otherwise)})"
            case PythonOnly(function, operand, _):
                return f"{self.constant(function)}({r(operand)})"
        raise TypeError(f"no Python form for {node!r}")


def python_function(
    expression: Expr,
    parameters: tuple[str, ...],
    *,
    name: str = "rule",
    doc: str | None = None,
    module: str | None = None,
    record: str | None = None,
) -> Callable[..., bool]:
    """``expression`` compiled once into ``lambda <parameters>: <expression>``.

    ``record`` names the parameter whose attributes the :class:`Attr` nodes read.
    """
    source = _PythonSource(record)
    body = source.render(expression)
    namespace: dict[str, Any] = {"__name__": module or __name__, **source.names}
    code = compile(f"lambda {', '.join(parameters)}: {body}", f"<rule {name}>", "eval")
    function = cast(Callable[..., bool], eval(code, namespace))  # our own source, from the tree
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    function.__module__ = module or __name__
    function.__python_source__ = body  # type: ignore[attr-defined]
    return function


class Predicate(Protocol):
    """A compiled predicate of plain values that also builds its expression
    (``.expression(node, ...)``), so other rules can be written with it."""

    __name__: str

    def __call__(self, *values: Any) -> bool: ...

    @property
    def expression(self) -> Callable[..., Expr]: ...


def compiled(builder: Callable[..., Expr]) -> Predicate:
    """Decorate an expression builder of plain values (one :class:`Var` a parameter):
    the result is the Python predicate, compiled, with the builder kept as ``.expression``.

    The predicate takes the builder's name, parameters and docstring.
    """
    parameters = tuple(builder.__code__.co_varnames[: builder.__code__.co_argcount])
    function = python_function(
        builder(*map(Var, parameters)), parameters, name=builder.__name__,
        doc=builder.__doc__, module=builder.__module__,
    )
    function.expression = builder  # type: ignore[attr-defined]
    return cast(Predicate, function)
