"""Table mutants: the mistaken rows a lifecycle's author could write, made on purpose.

"If I get a row wrong, will my invariants and the checker tell me?" Each mutant is the
lifecycle with one mistake in its declaration, of one of these kinds:

* ``drop_guard``: one guard removed from one table entry;
* ``flip_guard``: one ``conditions`` guard made ``unless``, or the reverse;
* ``redirect``: one table entry sent to another status;
* ``delete_row``: one table entry removed;
* ``exit_final``: a row added out of a final status (to the initial status);
* ``drop_invariant``: one state invariant or step invariant no longer registered. A
  correct table never breaks its invariants, so such a mutant is killed when the check
  fails on it directly (an answer the exploration feeds would then be accepted), or when
  some other mutant the invariant kills survives without it: the invariant is the one
  check that catches that mistake. One that survives catches no table mistake alone.

A mutant that cannot even be declared (the definition checks refuse it: a status made
unreachable, a row that can never fire) is killed at once. The others are checked as
the lifecycle is (:mod:`lifecycles._checker_mutants`); one the check passes *survives*:
the declarations let that mistake through. A lifecycle may declare a mutant
*equivalent* (it behaves as the original, or the mistake is harmless by design), with
a reason, beside its exploration (:class:`EquivalentMutant`); any other survivor is a
gap in its invariants or exploration.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from lifecycles.invariants._core import InvariantSet
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import DefinitionError

__all__ = ["KINDS", "EquivalentMutant", "Mutant", "mutants", "redeclared", "without_rule"]

KINDS = ("drop_guard", "flip_guard", "redirect", "delete_row", "exit_final", "drop_invariant")


@attrs.frozen
class EquivalentMutant:
    """A mutant declared harmless beside the table, by its name, with the reason shown on
    the auditor page (``lifecycles check --mutants`` lists them and does not fail)."""

    name: str
    reason: str


@attrs.frozen
class Mutant:
    """One mistaken declaration: its stable ``name`` (kind, table entry, detail), what it
    changed in words, and the mutated lifecycle (``None``: the definition checks
    refused it, ``refusal`` says why)."""

    name: str
    kind: str
    change: str
    lifecycle: Lifecycle[Any, Any] | None
    refusal: str | None = None


def _names(value: Any) -> list[str]:
    """A table entry's guard or effect names: none, one string, or a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(name) for name in value]


def _entry_label(number: int, entry: Mapping[str, Any]) -> str:
    return f"row {number} ({entry['trigger']} from {entry['source']})"


def _table_mutants(lifecycle: Lifecycle[Any, Any]
                   ) -> Iterator[tuple[str, str, str, list[dict[str, Any]]]]:
    """(name, kind, change, table) for every table-level mistake."""
    table = [dict(entry) for entry in lifecycle.table]
    statuses = [status.value for status in lifecycle.statuses]
    for number, entry in enumerate(table, 1):
        label = _entry_label(number, entry)
        for key, other in (("conditions", "unless"), ("unless", "conditions")):
            for guard in _names(entry.get(key)):
                dropped = dict(entry, **{key: [g for g in _names(entry.get(key)) if g != guard]})
                yield (f"drop_guard {number} {guard}", "drop_guard",
                       f"{label} without its guard {guard}", _with(table, number, dropped))
                flipped = dict(entry, **{
                    key: [g for g in _names(entry.get(key)) if g != guard],
                    other: [*_names(entry.get(other)), guard]})
                yield (f"flip_guard {number} {guard}", "flip_guard",
                       f"{label} with {guard} as {other}", _with(table, number, flipped))
        for status in statuses:
            if status == entry["dest"]:
                continue
            yield (f"redirect {number} {status}", "redirect", f"{label} sent to {status}",
                   _with(table, number, dict(entry, dest=status)))
        yield (f"delete_row {number}", "delete_row", f"{label} deleted",
               [e for at, e in enumerate(table, 1) if at != number])
    trigger = lifecycle.lease.trigger if lifecycle.lease else table[0]["trigger"]
    for final in sorted(status.value for status in lifecycle.final):
        extra = {"trigger": trigger, "source": final, "dest": lifecycle.initial.value}
        yield (f"exit_final {final}", "exit_final",
               f"a {trigger} row out of the final status {final}", [*table, extra])


def _with(table: list[dict[str, Any]], number: int, entry: dict[str, Any]
          ) -> list[dict[str, Any]]:
    return [entry if at == number else e for at, e in enumerate(table, 1)]


def redeclared(lifecycle: Lifecycle[Any, Any], **changed: Any) -> Lifecycle[Any, Any]:
    """``lifecycle`` declared again with some arguments ``changed`` (``table``,
    ``invariants``, ``guards``...), keeping only the guards and effects its table names
    (an unused declaration is no mistake of the rows)."""
    declared: dict[str, Any] = dict(
        name=lifecycle.name, statuses=lifecycle.statuses, table=lifecycle.table,
        initial=lifecycle.initial, final=lifecycle.final, creation=lifecycle.creation,
        guards=lifecycle.guards.values(), effects=lifecycle.effects.values(),
        invariants=lifecycle.invariants, record_type=lifecycle.record_type,
        key_field=lifecycle.key_field, status_field=lifecycle.status_field,
        not_allowed_code=lifecycle.not_allowed_code, lease=lifecycle.lease,
        handling=lifecycle.handling, description=lifecycle.description,
        status_meanings=lifecycle.status_meanings,
        beside_the_table=lifecycle.beside_the_table, module=lifecycle.module,
        declared_in=lifecycle.declared_in,
    )
    declared.update(changed)
    table = declared["table"]
    named = {g for e in table for key in ("conditions", "unless") for g in _names(e.get(key))}
    effects = {name for e in table for name in _names(e.get("after"))}
    declared["guards"] = [g for g in declared["guards"] if g.name in named]
    declared["effects"] = [e for e in declared["effects"] if e.name in effects]
    return Lifecycle(**declared)


def mutants(lifecycle: Lifecycle[Any, Any], kinds: Sequence[str] = KINDS) -> Iterator[Mutant]:
    """Every mutant of ``lifecycle`` of the given kinds, in a stable order."""
    for name, kind, change, table in _table_mutants(lifecycle):
        if kind in kinds:
            yield _built(name, kind, change, lambda t=table: redeclared(lifecycle, table=t))
    if "drop_invariant" not in kinds:
        return
    declared = lifecycle.invariants
    named = [(rule.name, "invariant") for rule in declared.invariants]
    named += [(step.name, "step invariant") for step in declared.steps]
    for name, kind in named:
        yield _built(f"drop_invariant {name}", "drop_invariant",
                     f"the {kind} {name} not registered",
                     lambda name=name: without_rule(lifecycle, name))


def without_rule(lifecycle: Lifecycle[Any, Any], name: str) -> Lifecycle[Any, Any]:
    """``lifecycle`` with the state or step invariant ``name`` no longer registered."""
    declared = lifecycle.invariants
    fewer = InvariantSet(declared.code, [r for r in declared.invariants if r.name != name],
                         steps=[s for s in declared.steps if s.name != name])
    return redeclared(lifecycle, invariants=fewer)


def _built(name: str, kind: str, change: str, build: Any) -> Mutant:
    try:
        return Mutant(name, kind, change, build())
    except DefinitionError as refused:
        return Mutant(name, kind, change, None, f"definition check {refused}")
