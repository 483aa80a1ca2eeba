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

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import attrs

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


def canonical_json(value: object) -> bytes:
    """The one canonical JSON of a value, in UTF-8: sorted keys, no spaces, no ASCII
    escaping, no NaN. Digests, record files and JSON columns are all made of it."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


# --- field rules -------------------------------------------------------------


def is_integer(value: object) -> bool:
    """An int that is not a bool (``True`` is an int in Python; never in a record)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_time(value: object) -> bool:
    """A finite, non-negative number of seconds that a float can hold (bools excluded)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        # An int too large for a float (a 400-digit JSON number) is no time: a store's
        # REAL column cannot hold it, and math.isfinite would raise on it.
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:
        return False


@attrs.frozen(repr=False)
class FieldRule:
    """An attrs validator with a name: ``check(value)`` decides, the name explains.

    ``meaning`` says in words what the rule demands (auditor pages show it).
    """

    name: str
    check: Callable[[Any], bool]
    optional: bool = False
    meaning: str = ""

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


def matches(name: str, pattern: str) -> FieldRule:
    """A string fully matching ``pattern``."""
    compiled = re.compile(pattern)
    return FieldRule(
        name,
        lambda v: isinstance(v, str) and compiled.fullmatch(v) is not None,
        meaning=f"a string fully matching {pattern}",
    )


def one_of(name: str, allowed: Iterable[object]) -> FieldRule:
    """A value from a fixed set."""
    choices = frozenset(allowed)
    listed = ", ".join(sorted(str(choice) for choice in choices))
    return FieldRule(name, lambda v: _hashable(v) and v in choices, meaning=f"one of: {listed}")


def integer_between(name: str, low: int, high: int) -> FieldRule:
    """An integer (not a bool) within ``[low, high]``."""
    return FieldRule(
        name,
        lambda v: is_integer(v) and low <= v <= high,
        meaning=f"an integer from {low} to {high}",
    )


def non_negative_integer(name: str) -> FieldRule:
    """An integer (not a bool) of at least zero."""
    return FieldRule(name, lambda v: is_integer(v) and v >= 0, meaning="an integer >= 0")


def finite_time(name: str) -> FieldRule:
    """A finite, non-negative number of seconds."""
    return FieldRule(name, is_time, meaning="a finite number of seconds >= 0")


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


# --- invariants --------------------------------------------------------------


@attrs.frozen
class Invariant(Generic[R]):
    """A named cross-field predicate; its docstring is its one-line meaning."""

    name: str
    holds: Callable[[R], bool]
    meaning: str

    def __repr__(self) -> str:
        return f"<invariant {self.name}>"


def invariant(function: Callable[[R], bool]) -> Invariant[R]:
    """Declare ``function`` as an invariant named after it, explained by its docstring."""
    meaning = (function.__doc__ or "").strip().splitlines()
    if not meaning:
        raise TypeError(f"invariant {function.__name__} needs a one-line docstring")
    return Invariant(function.__name__, function, meaning[0])


class InvariantSet(Generic[R]):
    """All the invariants of one record type, checked together."""

    def __init__(self, code: str, invariants: Iterable[Invariant[R]]) -> None:
        self.code = code
        self.invariants: tuple[Invariant[R], ...] = tuple(invariants)
        names = [rule.name for rule in self.invariants]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"invariants declared twice: {duplicated}")

    def __iter__(self) -> Iterator[Invariant[R]]:
        return iter(self.invariants)

    def __len__(self) -> int:
        return len(self.invariants)

    def broken(self, record: R) -> list[str]:
        """Names of the invariants ``record`` breaks (empty when it is valid)."""
        return [rule.name for rule in self.invariants if not rule.holds(record)]

    def check(self, record: R) -> R:
        """Return ``record`` unchanged, or raise :class:`InvariantViolation` naming each rule."""
        broken = self.broken(record)
        if broken:
            raise InvariantViolation(self.code, broken)
        return record


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
