"""What a lifecycle is declared from, and the table read into rows.

A lifecycle is:

* a status ``Enum`` (``StrEnum``), an initial status and the final statuses;
* a table of rows in the ``transitions`` library's format
  (``trigger``, ``source``, ``dest``, ``conditions``, ``unless``, ``after``), where
  ``conditions``/``unless`` name guards and ``after`` names the effect;
* guards, ``(record, inputs) -> bool``, each with the stable error code it raises
  when it blocks a trigger;
* effects, ``(record, inputs) -> changes``, each declaring the fields it writes;
* the invariants every record obeys.

This module holds the pieces (guards, effects, the lease, the errors) and
:func:`expand_table`, which reads the literal table into one :class:`Row` per source.
It imports nothing of the engine, so the definition checks, the graph functions and the
engine can all read rows without importing :class:`~lifecycles.machines._core.Lifecycle`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

__all__ = [
    "Changes", "DefinitionError", "Effect", "EffectContractError", "Guard", "Lease",
    "LifecycleError", "Row", "TransitionRefused", "effect", "expand_table", "guard",
]

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle

Changes = Mapping[str, Any]


class LifecycleError(Exception):
    """Base of the engine's errors; ``code`` is stable and safe to match on."""

    code = "lifecycles.error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class DefinitionError(LifecycleError):
    """A lifecycle's declaration is inconsistent; raised when its table is built."""

    code = "lifecycles.definition_invalid"

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check


class TransitionRefused(LifecycleError):
    """A trigger was not allowed from the record's status, or every guard said no.

    ``guard`` names the first guard that blocked (``None`` when the trigger is not
    allowed from the current status at all); ``unless`` says it is an ``unless`` guard,
    which blocks by holding. ``candidates``, read only when the message is (refusals are
    the checker's commonest event), gives each row that could have fired and the value of
    each of its guards. Nothing was changed.
    """

    code = "lifecycles.transition_refused"

    def __init__(
        self, trigger: str, status: str, *, guard: str | None, code: str | None,
        unless: bool = False,
        candidates: Callable[[], tuple[tuple[str, tuple[tuple[str, bool, bool], ...]], ...]]
        | None = None,
    ) -> None:
        if guard is None:
            reason = "not allowed from this status"
        elif unless:
            reason = f"guard {guard} holds, and the row fires unless it does"
        else:
            reason = f"guard {guard} is false"
        super().__init__(f"{trigger} from {status}: {reason}", code=code)
        self.trigger = trigger
        self.status = status
        self.guard = guard
        self.unless = unless
        self._candidates = candidates

    @property
    def candidates(self) -> tuple[tuple[str, tuple[tuple[str, bool, bool], ...]], ...]:
        """Each candidate row's label, with each guard as (name, wanted, actual)."""
        return self._candidates() if self._candidates is not None else ()

    def __str__(self) -> str:
        rows = self.candidates
        if len(rows) < 2:
            return super().__str__()
        shown = "; ".join(
            f"{label}: " + ", ".join(
                ("" if wanted else "!") + f"{name} {'holds' if actual else 'is false'}"
                for name, wanted, actual in guards)
            for label, guards in rows)
        return f"{super().__str__()}; no row fires, of {len(rows)}: {shown}"

    def __reduce__(self) -> tuple[Any, ...]:
        # The candidates are a closure over the record: another process gets the text.
        return (_refusal, (self.trigger, self.status, self.guard, self.code, self.unless,
                           str(self)))


def _refusal(trigger: str, status: str, guard: str | None, code: str, unless: bool,
             text: str) -> TransitionRefused:
    refused = TransitionRefused(trigger, status, guard=guard, code=code, unless=unless)
    refused.args = (text,)
    return refused


class EffectContractError(LifecycleError):
    """An effect wrote a field it did not declare: a bug in the lifecycle, not in input."""

    code = "lifecycles.effect_contract"


@attrs.frozen
class Guard(Generic[R, I]):
    """A named condition on a transition. ``refusal_code`` is raised when it blocks."""

    name: str
    test: Callable[[R, I], bool]
    refusal_code: str
    meaning: str


@attrs.frozen
class Effect(Generic[R, I]):
    """A named, pure change: returns the new values of exactly the fields in ``writes``."""

    name: str
    compute: Callable[[R, I], Changes]
    writes: tuple[str, ...]
    meaning: str


def _meaning(function: Callable[..., Any]) -> str:
    lines = (function.__doc__ or "").strip().splitlines()
    if not lines:
        raise TypeError(f"{function.__name__} needs a one-line docstring: auditors read it")
    return lines[0]


def guard(refusal_code: str) -> Callable[[Callable[[R, I], bool]], Guard[R, I]]:
    """Declare a guard named after the function, blocking with ``refusal_code``."""

    def declare(function: Callable[[R, I], bool]) -> Guard[R, I]:
        return Guard(function.__name__, function, refusal_code, _meaning(function))

    return declare


def effect(*writes: str) -> Callable[[Callable[[R, I], Changes]], Effect[R, I]]:
    """Declare an effect named after the function that writes exactly ``writes``."""

    def declare(function: Callable[[R, I], Changes]) -> Effect[R, I]:
        return Effect(function.__name__, function, tuple(writes), _meaning(function))

    return declare


@attrs.frozen(cache_hash=True)  # a dict key on every firing (coverage, apply_row)
class Row:
    """One resolved row of a table: a single source, guards split into if/unless."""

    index: int
    trigger: str
    source: str
    dest: str
    conditions: tuple[str, ...]
    unless: tuple[str, ...]
    effect: str | None

    @property
    def label(self) -> str:
        """``trigger [guard, !other]``: how diagrams and coverage reports name the row."""
        guards = [*self.conditions, *(f"!{name}" for name in self.unless)]
        return f"{self.trigger} [{', '.join(guards)}]" if guards else self.trigger


@attrs.frozen
class Lease:
    """How a lifecycle leases records to workers, for stores and diagrams.

    ``trigger`` is the claiming trigger: its sources are the claimable statuses and
    its dest is the leased status, both derived from the table. ``due_field`` is
    the time at which a claimable record becomes due; ``order_by`` the fields that
    decide which due record is claimed first.
    """

    trigger: str
    token_field: str
    expires_field: str
    due_field: str
    order_by: tuple[str, ...]
    expiry_trigger: str


def _names(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(str(v) for v in value)
    return (str(value),)


def expand_table(table: Sequence[Mapping[str, Any]], statuses: Sequence[str]) -> Iterator[Row]:
    """One :class:`Row` per (table row, source), keeping table order.

    As in ``transitions``, source ``"*"`` is every declared status and dest ``"="`` is
    the row's own source (a row that keeps the status).
    """
    for index, entry in enumerate(table):
        effects = _names(entry.get("after"))
        if len(effects) > 1:
            raise DefinitionError("one_effect_per_row", f"row {index} names {effects}")
        sources = _names(entry.get("source"))
        for source in statuses if sources == ("*",) else sources:
            dest = str(entry["dest"])
            yield Row(
                index=index,
                trigger=str(entry["trigger"]),
                source=source,
                dest=source if dest == "=" else dest,
                conditions=_names(entry.get("conditions")),
                unless=_names(entry.get("unless")),
                effect=effects[0] if effects else None,
            )
