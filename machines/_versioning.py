"""What a lifecycle's version covers besides its table: the code that decides.

A page pinned to a table version must describe the code that runs. The version
(:attr:`~lifecycles.machines._core.Lifecycle.table_version`) therefore digests, beside
the table, :func:`code_material`: the source text of every guard, effect, invariant,
step invariant and function declared beside the table, and the declared form of every
field rule and expressed invariant (the expression tree, constants included, since the
compiled predicate's text names its constants instead of holding them). A changed body,
pattern or bound changes the version, so ``lifecycles diagrams --check`` fails until the
pages are regenerated.

Source text, not bytecode: the same code gives the same version on every Python
version. A comment or a blank line changes it too (a page is regenerated for nothing,
never left stale). Code whose source cannot be read (a function built at run time, an
installation without ``.py`` files) is covered by its qualified name only, and the
material says so. A building block's function (:mod:`lifecycles.machines._blocks`) is
generated code: its own source text, kept on it, is what is digested.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import textwrap
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.invariants._core import field_rules

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle

__all__ = ["code_material", "digest_of", "table_version"]


def table_version(lifecycle: Lifecycle[Any, Any]) -> str:
    """A short digest of the table, its declarations and the code that decides."""
    material = {
        "table": [dict(row) for row in lifecycle.table],
        "statuses": [s.value for s in lifecycle.statuses],
        "initial": lifecycle.initial.value,
        "final": sorted(s.value for s in lifecycle.final),
        "invariants": [rule.name for rule in lifecycle.invariants],
        "step_invariants": [rule.name for rule in lifecycle.invariants.steps],
        "field_rules": [[name, rule.name] for name, rule in field_rules(lifecycle.record_type)],
        "writes": {name: list(e.writes) for name, e in sorted(lifecycle.effects.items())},
        "refusals": {name: g.refusal_code for name, g in sorted(lifecycle.guards.items())},
        "not_allowed": lifecycle.not_allowed_code,
        "key": lifecycle.key_field,
        "lease": attrs.asdict(lifecycle.lease) if lifecycle.lease else None,
        **({"handling": {"renewal": lifecycle.handling.renewal,
                         "renew_at": lifecycle.handling.renew_at,
                         "holder": lifecycle.handling.holder}}
           if lifecycle.handling is not None else {}),
        "code": code_material(lifecycle),
    }
    rendered = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(rendered.encode()).hexdigest()[:12]


def code_material(lifecycle: Lifecycle[Any, Any]) -> dict[str, str]:
    """A digest per piece of deciding code, named by what it is: ``guard <name>``,
    ``effect <name>``, ``invariant <name>``, ``step <name>``, ``field <field> <rule>``,
    ``beside <module>.<qualname>``."""
    pieces: dict[str, str] = {}
    for name, declared in sorted(lifecycle.guards.items()):
        pieces[f"guard {name}"] = digest_of(declared.test)
    for name, change in sorted(lifecycle.effects.items()):
        pieces[f"effect {name}"] = digest_of(change.compute)
    for rule in lifecycle.invariants:
        pieces[f"invariant {rule.name}"] = digest_of(
            rule.expression if rule.expression is not None else rule.holds)
    for step in lifecycle.invariants.steps:
        pieces[f"step {step.name}"] = digest_of(step.holds)
    for field, field_rule in field_rules(lifecycle.record_type):
        pieces[f"field {field} {field_rule.name}"] = digest_of(
            field_rule.expression if field_rule.expression is not None else field_rule.check)
    for function in lifecycle.beside_the_table:
        pieces[f"beside {_qualified(function)}"] = digest_of(function)
    handling = lifecycle.handling
    if handling is not None:  # what a worker's result fires is code that decides too
        for role in ("inputs", "finish", "attempt"):
            part = getattr(handling, role)
            if part is not None:
                pieces[f"handling {role}"] = digest_of(part)
    return pieces


def digest_of(item: object) -> str:
    """A short digest of :func:`canonical` text."""
    return hashlib.sha256(canonical(item).encode()).hexdigest()[:16]


def canonical(item: object, depth: int = 0) -> str:
    """Text that changes when what ``item`` decides may change, and only then: the
    source of a function, the fields of an expression node, the pattern of a regular
    expression, the sorted members of a set (never an address or a hash order)."""
    if depth > 20:
        return "..."  # a cycle in a declaration: what is above already tells it apart
    deeper = depth + 1
    match item:
        case None | bool() | int() | float() | str() | bytes():
            return repr(item)
        case re.Pattern():
            return f"re({item.pattern!r}, {item.flags})"
        case tuple() | list():
            return "[" + ", ".join(canonical(value, deeper) for value in item) + "]"
        case frozenset() | set():
            return "{" + ", ".join(sorted(canonical(value, deeper) for value in item)) + "}"
        case Mapping():
            pairs = (f"{canonical(k, deeper)}: {canonical(v, deeper)}" for k, v in item.items())
            return "{" + ", ".join(sorted(pairs)) + "}"
    kind = type(item)
    if attrs.has(kind):  # narrows kind to an attrs class
        fields = (f"{field.name}={canonical(getattr(item, field.name), deeper)}"
                  for field in attrs.fields(kind))
        return f"{type(item).__qualname__}({', '.join(fields)})"
    bound_to = getattr(item, "__self__", None)
    if isinstance(bound_to, re.Pattern):  # a compiled rule's matcher
        return f"{getattr(item, '__name__', '?')} of {canonical(bound_to, deeper)}"
    if callable(item):
        return _function_text(item, deeper)
    return f"<{type(item).__qualname__}>"


def _function_text(function: Callable[..., Any], depth: int) -> str:
    generated = getattr(function, "__lifecycles_source__", None)
    if generated is not None:  # a building block's code, its field names and bounds in it
        return f"generated {generated}"
    compiled = getattr(function, "__python_source__", None)
    if compiled is not None:  # compiled from an expression: its text names its constants
        constants = {name: value for name, value in getattr(function, "__globals__", {}).items()
                     if name.startswith("_k")}
        return f"compiled {compiled} with {canonical(constants, depth)}"
    expression = getattr(function, "expression", None)  # a compiled predicate's builder
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return f"no source: {_qualified(function)}"
    if expression is not None and callable(expression) and expression is not function:
        source += _function_text(expression, depth)
    return source + _closure_text(function, depth)


def _closure_text(function: Callable[..., Any], depth: int) -> str:
    """What a function made by another one (a factory's inner function) was made with: the
    values its closure holds, which its source names without holding (``outcomes(success=
    "succeed", ...)`` gives the same source whatever triggers it names)."""
    cells = getattr(function, "__closure__", None) or ()
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    held = []
    for name, cell in zip(names, cells, strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue
        held.append(f"{name}={canonical(value, depth + 1)}")
    return f" closing over {', '.join(held)}" if held else ""


def _qualified(function: object) -> str:
    module = getattr(function, "__module__", None) or "?"
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}.{name}"

