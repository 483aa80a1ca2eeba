"""A row of a table as expressions: its guards as one condition, its effect as assignments.

A store that decides a transition inside the database (a claim as one ``UPDATE ...
RETURNING``) needs the row's guards as a condition and its effect as column
assignments. They are not written a second time: the row's own Python functions are
called once on symbolic arguments (:class:`~lifecycles.invariants._expressions.Fields`
for the record, :class:`~lifecycles.invariants._expressions.Inputs` for the inputs),
and the comparisons and sums they compute build the expression nodes that the SQL
renderer of the rules (:mod:`lifecycles.stores._sql_rules`) writes out.

A function that branches on a value (``and``, ``or``, ``not``, ``if``), formats one, or
calls anything but an operator raises on a symbolic argument, and its row has no
symbolic form: :class:`NoSymbolicForm` says why, and a store keeps the Python path. One
thing an operator cannot see is an identity test (``x is None`` on a node is always
false), so a guard or an effect that uses one has no symbolic form either: the code of
the functions a row runs is read for ``is`` before they are called. The property test
``tests/engine/test_symbolic_rows.py`` holds the two forms equal, value by value, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from lifecycles.invariants._expressions import Const, Expr, Fields, Inputs, Not, lift
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row

__all__ = ["NoSymbolicForm", "SymbolicRow", "symbolic_row"]


class NoSymbolicForm(Exception):
    """A row whose guards or effect cannot be stated as expressions, and why."""


@attrs.frozen
class SymbolicRow:
    """``row`` as expressions: ``conditions`` all hold exactly when it fires (its
    ``unless`` guards negated), and then ``assignments`` give the new value of each field
    it writes, its status included."""

    row: Row
    conditions: tuple[Expr, ...]
    assignments: Mapping[str, Expr]


def _code_objects(function: Callable[..., Any], seen: set[int]) -> Iterator[types.CodeType]:
    """The code of ``function`` and of the module-level functions it calls by name."""
    code = getattr(function, "__code__", None)
    if code is None or id(code) in seen:
        return
    seen.add(id(code))
    yield code
    names = getattr(function, "__globals__", {})
    for name in code.co_names:
        called = names.get(name)
        if isinstance(called, types.FunctionType):
            yield from _code_objects(called, seen)


def _uses_identity(function: Callable[..., Any]) -> bool:
    return any(
        instruction.opname == "IS_OP"
        for code in _code_objects(function, set())
        for instruction in dis.get_instructions(code)
    )


def _symbolic(name: str, function: Callable[[Any, Any], Any]) -> Any:
    if _uses_identity(function):
        raise NoSymbolicForm(f"{name} tests identity (is / is not), which no node can see")
    try:
        return function(Fields(), Inputs())
    except Exception as error:  # any Python the nodes cannot follow: no symbolic form
        raise NoSymbolicForm(f"{name}: {type(error).__name__}: {error}") from error


def symbolic_row(lifecycle: Lifecycle[Any, Any], row: Row) -> SymbolicRow:
    """``row`` of ``lifecycle`` as expressions, or :class:`NoSymbolicForm`."""
    conditions: list[Expr] = []
    for names, negate in ((row.conditions, False), (row.unless, True)):
        for name in names:
            verdict = _symbolic(name, lifecycle.guards[name].test)
            if not isinstance(verdict, Expr):
                raise NoSymbolicForm(f"{name} gives {verdict!r}, not a condition on its arguments")
            conditions.append(Not(verdict) if negate else verdict)
    assignments: dict[str, Expr] = {}
    if row.effect is not None:
        effect = lifecycle.effects[row.effect]
        changes = _symbolic(effect.name, effect.compute)
        if not isinstance(changes, Mapping) or set(changes) - set(effect.writes):
            raise NoSymbolicForm(f"{effect.name} gives no mapping of its declared fields")
        assignments = {field: lift(value) for field, value in changes.items()}
    assignments[lifecycle.status_field] = Const(lifecycle.statuses(row.dest))
    return SymbolicRow(row, tuple(conditions), assignments)
