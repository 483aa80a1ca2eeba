"""Named rules that every stored record obeys.

Two kinds of rule, each with a name callers and auditors can read:

* field rules check one field and run as attrs validators when a record is
  built, so a record with a malformed field cannot exist at all;
* invariants are cross-field predicates, declared once per lifecycle and checked
  before every write, on every read, after every Hypothesis step and in every
  state the checker reaches.

Either kind of violation surfaces as :class:`InvariantViolation`, which names
every broken rule and carries the lifecycle's stable public error code.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import attrs

from lifecycles.invariants._expressions import (
    Expr,
    Fields,
    Var,
    all_of,
    compiled,
    finite,
    full_match,
    int_not_bool,
    number_not_bool,
    python_function,
    str_instance,
)

if TYPE_CHECKING:
    from lifecycles.invariants._store import StoreInvariant, StoreView

R = TypeVar("R")


class FieldRuleViolation(ValueError):
    """A single field broke its named rule while a record was being built."""

    def __init__(self, rule: str, field: str, value: object) -> None:
        super().__init__(f"{field} breaks {rule}: {value!r:.80}")
        self.rule = rule
        self.field = field


class InvariantViolation(Exception):
    """A record breaks one or more named rules; ``code`` is the stable public code."""

    def __init__(self, code: str, rules: Iterable[str], keys: Iterable[str] = ()) -> None:
        self.rules = tuple(rules)
        self.code = code
        self.keys = tuple(keys)
        """The keys of the stored records found broken, when a store read them."""
        super().__init__(f"{code}: {', '.join(self.rules)}")


class StepViolation(InvariantViolation):
    """A transition would break a step invariant: a table's mistake, never bad input (a
    fallback for an invalid answer must not hide it)."""


def canonical_json(value: object) -> bytes:
    """The one canonical JSON of a value, in UTF-8: sorted keys, no spaces, no ASCII
    escaping, no NaN. Digests, record files and JSON columns are all made of it."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


# --- field rules -------------------------------------------------------------
# Declared as expressions (lifecycles.invariants._expressions): each yields its Python
# predicate, compiled once, and the SQL form a SQL store checks in bulk.


@compiled
def is_integer(value: Expr) -> Expr:
    """An int that is not a bool (``True`` is an int in Python; never in a record)."""
    return int_not_bool(value)


@compiled
def is_time(value: Expr) -> Expr:
    """A finite, non-negative number of seconds that a float can hold (bools excluded)."""
    # An int too large for a float (a 400-digit JSON number) is no time: a store's REAL
    # column cannot hold it (Finite says so).
    return number_not_bool(value) & finite(value) & (value >= 0)


VALUE = Var("v")
"""The value a field rule checks, in its expression."""


@attrs.frozen(repr=False)
class FieldRule:
    """An attrs validator with a name: ``check(value)`` decides, the name explains.

    ``meaning`` says in words what the rule demands (auditor pages show it).
    ``expression``, when the rule is declared as one (:meth:`FieldRule.expressed`), is
    what ``check`` was compiled from and what a SQL store renders; a rule without one
    is checked in Python only.
    """

    name: str
    check: Callable[[Any], bool]
    optional: bool = False
    meaning: str = ""
    expression: Expr | None = attrs.field(default=None, eq=False, kw_only=True)

    @classmethod
    def expressed(
        cls, name: str, build: Callable[[Expr], Expr], *, meaning: str = "",
        optional: bool = False,
    ) -> FieldRule:
        """The rule whose value ``v`` obeys ``build(v)``: one declaration, both forms."""
        expression = build(VALUE)
        check = python_function(
            expression, (VALUE.name,), name=name, doc=build.__doc__, module=build.__module__
        )
        return cls(name, check, optional, meaning, expression=expression)

    def __call__(self, instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and self.optional:
            return
        if not self.check(value):
            raise FieldRuleViolation(self.name, attribute.name, value)

    def __repr__(self) -> str:
        return f"<field rule {self.name}{' (optional)' if self.optional else ''}>"

    def allow_none(self) -> FieldRule:
        """The same rule for a nullable field: ``None`` passes, anything else is checked."""
        return attrs.evolve(self, optional=True)

    def also(self, build: Callable[[Expr], Expr]) -> FieldRule:
        """This rule (same name and meaning) with ``build(v)`` demanded first."""
        if self.expression is None:
            raise TypeError(f"{self.name} is a Python-only rule: it has no expression")
        expression = all_of(build(VALUE), self.expression)
        return attrs.evolve(
            self, check=python_function(expression, (VALUE.name,), name=self.name,
                                        doc=self.check.__doc__, module=self.check.__module__),
            expression=expression,
        )


def matches(name: str, pattern: str) -> FieldRule:
    """A string fully matching ``pattern``."""
    return FieldRule.expressed(
        name, lambda v: str_instance(v) & full_match(v, pattern),
        meaning=f"a string fully matching {pattern}",
    )


def one_of(name: str, allowed: Iterable[object]) -> FieldRule:
    """A value from a fixed set."""
    choices = frozenset(allowed)
    listed = ", ".join(sorted(str(choice) for choice in choices))
    return FieldRule.expressed(name, lambda v: v.is_in(choices), meaning=f"one of: {listed}")


def integer_between(name: str, low: int, high: int) -> FieldRule:
    """An integer (not a bool) within ``[low, high]``."""
    return FieldRule.expressed(
        name, lambda v: int_not_bool(v) & (v >= low) & (v <= high),
        meaning=f"an integer from {low} to {high}",
    )


def non_negative_integer(name: str) -> FieldRule:
    """An integer (not a bool) of at least zero."""
    return FieldRule.expressed(
        name, lambda v: int_not_bool(v) & (v >= 0), meaning="an integer >= 0"
    )


def finite_time(name: str) -> FieldRule:
    """A finite, non-negative number of seconds."""
    return FieldRule.expressed(
        name, is_time.expression, meaning="a finite number of seconds >= 0"
    )


# --- invariants --------------------------------------------------------------


@attrs.frozen
class Invariant(Generic[R]):
    """A named cross-field predicate; its docstring is its one-line meaning.

    ``expression``, for an invariant declared with :func:`expressed`, is what ``holds``
    was compiled from and what a SQL store renders; without one the invariant is
    checked in Python only.
    """

    name: str
    holds: Callable[[R], bool]
    meaning: str
    expression: Expr | None = attrs.field(default=None, eq=False, kw_only=True)

    def __repr__(self) -> str:
        return f"<invariant {self.name}>"


def _meaning(function: Callable[..., Any]) -> str:
    meaning = (function.__doc__ or "").strip().splitlines()
    if not meaning:
        raise TypeError(f"invariant {function.__name__} needs a one-line docstring")
    return meaning[0]


def invariant(function: Callable[[R], bool]) -> Invariant[R]:
    """Declare ``function`` as an invariant named after it, explained by its docstring."""
    return Invariant(function.__name__, function, _meaning(function))


def expressed(build: Callable[[Fields[R]], Expr]) -> Invariant[R]:
    """Declare an invariant as an expression over the record's fields (``r.name``):
    named after ``build``, explained by its docstring; ``holds`` is compiled from it once,
    and SQL stores render the same expression (:mod:`lifecycles.invariants._expressions`)."""
    expression = build(Fields())
    holds = python_function(
        expression, ("r",), name=build.__name__, doc=build.__doc__, module=build.__module__,
        record="r",
    )
    return Invariant(build.__name__, holds, _meaning(build), expression=expression)


@attrs.frozen
class StepInvariant(Generic[R]):
    """A named predicate over one step, the record before a row fires and after it (the
    ``__old__`` of a contract); its docstring is its one-line meaning. With
    ``reads_inputs``, ``holds(before, after, inputs)`` also reads the step's inputs (the
    clock, the caller's lease token): what a lease rule needs to say who may end it when."""

    name: str
    holds: Callable[..., bool]
    meaning: str
    reads_inputs: bool = False

    def __repr__(self) -> str:
        return f"<step invariant {self.name}>"


def step_invariant(function: Callable[..., bool]) -> StepInvariant[R]:
    """Declare ``function(before, after)``, or ``function(before, after, inputs)``, as a
    step invariant named after it, explained by its docstring."""
    reads_inputs = len(inspect.signature(function).parameters) == 3
    return StepInvariant(function.__name__, function, _meaning(function), reads_inputs)


class InvariantSet(Generic[R]):
    """All the invariants of one record type, checked together, the step invariants
    of its transitions (``steps``), checked on every (before, after) pair a row makes,
    and the rules over the whole store (``store``, :mod:`lifecycles.invariants._store`),
    checked wherever every record and the workers are in view."""

    def __init__(
        self, code: str, invariants: Iterable[Invariant[R]],
        steps: Iterable[StepInvariant[R]] = (),
        store: Iterable[StoreInvariant[R]] = (),
    ) -> None:
        self.code = code
        self.invariants: tuple[Invariant[R], ...] = tuple(invariants)
        self.steps: tuple[StepInvariant[R], ...] = tuple(steps)
        self.store: tuple[StoreInvariant[R], ...] = tuple(store)
        names = ([rule.name for rule in self.invariants] + [rule.name for rule in self.steps]
                 + [rule.name for rule in self.store])
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"invariants declared twice: {duplicated}")
        self._all_hold = _conjunction(self.invariants)
        self._steps_hold = _step_conjunction(self.steps, with_inputs=True)
        self._steps_hold_without_inputs = _step_conjunction(self.steps, with_inputs=False)

    def __iter__(self) -> Iterator[Invariant[R]]:
        return iter(self.invariants)

    def __len__(self) -> int:
        return len(self.invariants)

    def broken(self, record: R) -> list[str]:
        """Names of the invariants ``record`` breaks (empty when it is valid).

        First every invariant at once, as one conjunction (:func:`_conjunction`); only
        a record breaking some rule is asked rule by rule, for the names."""
        if self._all_hold(record):
            return []
        return [rule.name for rule in self.invariants if not rule.holds(record)]

    def check(self, record: R) -> R:
        """Return ``record`` unchanged, or raise :class:`InvariantViolation` naming each rule."""
        broken = self.broken(record)
        if broken:
            raise InvariantViolation(self.code, broken)
        return record

    def broken_steps(self, before: R, after: R, inputs: Any = None) -> list[str]:
        """Names of the step invariants the step from ``before`` to ``after`` (made with
        ``inputs``) breaks; without ``inputs`` the rules that read them are not asked."""
        broken = []
        for rule in self.steps:
            if rule.reads_inputs:
                holds = inputs is None or rule.holds(before, after, inputs)
            else:
                holds = rule.holds(before, after)
            if not holds:
                broken.append(rule.name)
        return broken

    def broken_across(self, view: StoreView[R]) -> list[str]:
        """Names of the whole-store invariants ``view`` breaks, among those it can answer
        (a rule about the workers' holdings is not asked without them)."""
        return [rule.name for rule in self.store if rule.asked_of(view) and not rule.holds(view)]

    def check_step(self, before: R, after: R, inputs: Any = None) -> R:
        """Return ``after``, or raise :class:`StepViolation` naming each broken step rule."""
        broken = self.broken_steps(before, after, inputs) if self.steps else ()
        if broken:
            raise StepViolation(self.code, broken)
        return after


def _conjunction(invariants: tuple[Invariant[R], ...]) -> Callable[[R], bool]:
    """Whether a record holds every one of ``invariants``: one compiled function, which
    evaluates the expressed invariants inline (no call per rule) and then calls the
    others, each in turn until one fails. Its verdict is every rule's together: each
    rule holds iff its own function's value is true, and ``and`` is true iff all are
    (a rule that raises raises here too, or, after a false one, when the rules are then
    asked one by one)."""
    expressed = [rule.expression for rule in invariants if rule.expression is not None]
    space: dict[str, Any] = {}
    calls = []
    if expressed:
        space["together"] = python_function(
            all_of(*expressed), ("r",), name="every_invariant", record="r")
        calls.append("together(r)")
    for number, rule in enumerate(invariants):
        if rule.expression is None:
            space[f"rule{number}"] = rule.holds
            calls.append(f"rule{number}(r)")
    if calls == ["together(r)"]:
        return cast(Callable[[R], bool], space["together"])
    return cast(Callable[[R], bool], eval(f"lambda r: bool({' and '.join(calls) or 'True'})",
                                          space))


def _step_conjunction(
    steps: tuple[StepInvariant[R], ...], *, with_inputs: bool
) -> Callable[..., bool]:
    """Whether a step holds every step invariant (those reading inputs only
    ``with_inputs``): one generated function calling each in turn, without a loop."""
    space: dict[str, Any] = {}
    calls = []
    for number, rule in enumerate(steps):
        if rule.reads_inputs and not with_inputs:
            continue
        space[f"rule{number}"] = rule.holds
        calls.append(f"rule{number}(b, a, i)" if rule.reads_inputs else f"rule{number}(b, a)")
    body = " and ".join(calls) or "True"
    return cast(Callable[..., bool], eval(f"lambda b, a, i=None: bool({body})", space))


def field_rules(record_type: type) -> list[tuple[str, FieldRule]]:
    """Every (field, rule) pair attached to an attrs record class, for docs and diagrams."""
    found: list[tuple[str, FieldRule]] = []
    for field in attrs.fields(record_type):
        validator = field.validator
        if validator is None:
            continue
        parts: Iterable[Any] = getattr(validator, "_validators", (validator,))
        found.extend((field.name, part) for part in parts if isinstance(part, FieldRule))
    return found


def build_record(record_type: Callable[..., R], values: Mapping[str, Any], code: str) -> R:
    """Build a record from stored values; a field that breaks its rule raises ``code``.

    Used on every read, so data a store cannot trust never reaches a transition.
    """
    try:
        return record_type(**values)
    except FieldRuleViolation as error:
        raise InvariantViolation(code, [error.rule]) from error
    except (TypeError, ValueError) as error:
        raise InvariantViolation(code, ["record_shape"]) from error
