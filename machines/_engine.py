"""The engine: firing a trigger on a record, as a pure function.

Firing is :meth:`Engine.fire`: a record and its inputs in, a new record out, nothing else
touched. The row is chosen over the ``transitions`` machine's own table (one machine per
lifecycle, never ``add_model``), through guard plans compiled once per (trigger, status);
the engine then applies the row's effect, sets the status from its ``dest`` and checks
every invariant and step invariant. A trigger not allowed, or whose guards all fail,
raises :class:`~lifecycles.machines._declaration.TransitionRefused`.

:class:`Engine` is the half of :class:`~lifecycles.machines._core.Lifecycle` that runs the
declaration; it is a base class rather than an object the lifecycle holds so that a
firing costs no extra call (the checker fires millions of times).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar, cast

from transitions import Machine, MachineError

from lifecycles.invariants._core import FieldRuleViolation, InvariantSet, InvariantViolation
from lifecycles.machines._builders import evolver
from lifecycles.machines._declaration import (
    Effect,
    EffectContractError,
    Guard,
    Row,
    TransitionRefused,
)

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle

__all__ = ["Engine", "GuardPlan", "TransitionObserver"]

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle


class TransitionObserver(Protocol):
    """Sees every firing of a lifecycle it observes (coverage, tracing); must not change it.

    ``attempted`` is called when a trigger is tried on a record, before any guard
    runs; ``fired`` when a row's new record has passed every invariant. An observer that
    evaluates every guard of :meth:`Lifecycle.guard_plan` may return their outcomes (the
    bits after a leading 1, the first guard's highest): the engine chooses from those."""

    def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                  inputs: Any) -> int | None: ...

    def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any, after: Any) -> None: ...


Candidate = tuple[Row, tuple[tuple[Callable[[Any, Any], object], bool], ...]]


class GuardPlan(NamedTuple):
    """One (trigger, status), compiled once: the machine's candidate rows, each with the guard
    tests that must give their targets (True for conditions, False for unless), which
    select_row runs; all those guards in table order as (name, test, target), which coverage
    evaluates and a refusal reads; as bits, ``targets`` their targets and
    ``row_slices`` each candidate's (shift, mask, targets), to read the outcomes an observer
    returned."""

    candidates: tuple[Candidate, ...]
    checks: tuple[tuple[str, Callable[[Any, Any], object], bool], ...]
    row_slices: tuple[tuple[Row, int, int, int], ...]
    targets: int


class _Adapter:
    """What ``transitions`` sees during one firing: a status plus what guards read."""

    __slots__ = ("fired", "inputs", "record", "state")

    def __init__(self, state: str, record: object, inputs: object) -> None:
        self.state = state
        self.record = record
        self.inputs = inputs
        self.fired: Row | None = None


def _mark_fired(row: Row) -> Callable[[Any], None]:
    def mark(event: Any) -> None:
        event.model.fired = row

    mark.row = row  # type: ignore[attr-defined]  # read back by Lifecycle.guard_plan
    return mark


def _lifecycle(engine: Engine[Any, Any]) -> Lifecycle[Any, Any]:
    """The lifecycle an engine runs, as observers see it (every engine is a Lifecycle)."""
    return cast("Lifecycle[Any, Any]", engine)


class Engine(Generic[R, I]):
    """Fires the triggers of a declared table: the declaration it reads is listed below,
    set by :class:`~lifecycles.machines._core.Lifecycle` before :meth:`_prepare_firing`."""

    statuses: type[StrEnum]
    initial: StrEnum
    rows: tuple[Row, ...]
    guards: dict[str, Guard[R, I]]
    effects: dict[str, Effect[R, I]]
    invariants: InvariantSet[R]
    record_type: type[R]
    status_field: str
    not_allowed_code: str

    def _prepare_firing(self) -> None:
        """Compile what every firing reads: the ``transitions`` machine, the guard plans
        (filled on first use), the record evolver, each effect's declared writes and each
        status's member."""
        self._observers: tuple[TransitionObserver, ...] = ()
        self.machine = self._build_machine()
        self._dispatch: dict[tuple[str, str], GuardPlan] = {}
        self._evolve: Callable[[R, dict[str, Any]], R] = evolver(self.record_type)
        self._writes = {name: frozenset(e.writes) for name, e in self.effects.items()}
        self._members = {status.value: status for status in self.statuses}

    @contextmanager
    def observing(self, observer: TransitionObserver) -> Iterator[TransitionObserver]:
        """Let ``observer`` see every attempt and firing until the block exits."""
        self._observers = (*self._observers, observer)
        try:
            yield observer
        finally:
            self._observers = tuple(o for o in self._observers if o is not observer)

    def select_row(self, trigger: str, record: R, inputs: I) -> Row:
        """The row that ``trigger`` fires from ``record`` with ``inputs``, or refuse.

        It runs over the ``transitions`` machine's own transitions and conditions, compiled
        once per (trigger, status): the first row whose conditions hold, as ``Event.trigger``
        decides (:meth:`select_row_by_trigger`), without its event objects and debug logs;
        on the outcomes an observer returned, when one evaluated them all (coverage)."""
        outcomes = None  # the guards' outcomes as bits, when an observer evaluated them all
        for observer in self._observers:  # None: it evaluated no guard
            outcomes = observer.attempted(_lifecycle(self), trigger, record, inputs) or outcomes
        status = str(getattr(record, self.status_field))
        plan = self._dispatch.get((trigger, status)) or self.guard_plan(trigger, status)
        if not plan.candidates:
            raise TransitionRefused(trigger, status, guard=None, code=self.not_allowed_code)
        if outcomes is not None and outcomes >> len(plan.checks) == 1:  # one a plan's check
            for row, shift, mask, targets in plan.row_slices:  # each candidate's outcomes
                if (outcomes >> shift) & mask == targets:
                    return row
            wrong = outcomes ^ plan.targets  # the first guard blocking, as _refusal finds
            name, _, target = plan.checks[len(plan.checks) - wrong.bit_length()]
            raise self._refused(trigger, status, name, not target, plan, record, inputs)
        for row, checks in plan.candidates:
            for test, target in checks:
                if bool(test(record, inputs)) is not target:
                    break
            else:
                return row
        raise self._refusal(trigger, status, plan, record, inputs)

    def guard_plan(self, trigger: str, status: str) -> GuardPlan:
        """The candidates and guards of ``trigger`` out of ``status`` (:class:`GuardPlan`)."""
        plan = self._dispatch.get((trigger, status))
        if plan is None:
            event = self.machine.events.get(trigger)
            candidates = tuple(
                (next(callback.row for callback in transition.after if hasattr(callback, "row")),
                 tuple((getattr(condition.func, "test"), bool(condition.target))  # noqa: B009
                       for condition in transition.conditions))
                for transition in (event.transitions.get(status, ()) if event else ()))
            checks = tuple((name, *check) for row, tests in candidates for name, check in
                           zip((*row.conditions, *row.unless), tests, strict=True))
            row_slices, at = [], len(checks)  # a row's conditions, then its unless
            for row, tests in candidates:
                at -= len(tests)
                row_slices.append((row, at, (1 << len(tests)) - 1,  # as bits, first highest
                                   int("0" + "".join("01"[target] for _, target in tests), 2)))
            plan = self._dispatch[trigger, status] = GuardPlan(candidates, checks, tuple(
                row_slices), int("1" + "".join("01"[target] for *_, target in checks), 2))
        return plan

    def _refusal(self, trigger: str, status: str, plan: GuardPlan, record: R, inputs: I
                 ) -> TransitionRefused:
        """The refusal of a record no candidate row fires: the first guard that blocks."""
        for name, test, target in plan.checks:
            if bool(test(record, inputs)) is not target:
                return self._refused(trigger, status, name, not target, plan, record, inputs)
        return self._refused(trigger, status, None, False, plan, record, inputs)

    def _refused(self, trigger: str, status: str, blocking: str | None, unless: bool,
                 plan: GuardPlan, record: R, inputs: I) -> TransitionRefused:
        code = self.guards[blocking].refusal_code if blocking else self.not_allowed_code

        def candidates() -> tuple[tuple[str, tuple[tuple[str, bool, bool], ...]], ...]:
            # Every candidate row and each of its guards, evaluated again for the message.
            return tuple(
                (row.label, tuple((name, target, bool(test(record, inputs)))
                                  for name, (test, target) in zip(
                                      (*row.conditions, *row.unless), checks, strict=True)))
                for row, checks in plan.candidates)

        return TransitionRefused(trigger, status, guard=blocking, code=code, unless=unless,
                                 candidates=candidates)

    def select_row_by_trigger(self, trigger: str, record: R, inputs: I) -> Row:
        """:meth:`select_row` through ``transitions``' ``Event.trigger``: its tested reference."""
        status = getattr(record, self.status_field)
        adapter = _Adapter(str(status), record, inputs)
        event = self.machine.events.get(trigger)
        if event is None:
            raise TransitionRefused(trigger, str(status), guard=None, code=self.not_allowed_code)
        try:
            moved = event.trigger(adapter)
        except MachineError:
            raise TransitionRefused(trigger, str(status), guard=None,
                                    code=self.not_allowed_code) from None
        if not moved or adapter.fired is None:
            raise self._refusal(trigger, str(status), self.guard_plan(trigger, str(status)),
                                record, inputs)
        return adapter.fired

    def fire(self, trigger: str, record: R, inputs: I) -> R:
        """Fire ``trigger`` on ``record``: the new record, or a refusal with nothing changed."""
        row = self.select_row(trigger, record, inputs)
        return self.apply_row(row, record, inputs)

    def apply_row(self, row: Row, record: R, inputs: I) -> R:
        """Apply ``row``'s effect and dest to ``record``; the result must hold every invariant."""
        changes: dict[str, Any] = {}
        if row.effect is not None:
            effect_ = self.effects[row.effect]
            changes = dict(effect_.compute(record, inputs))
            if not changes.keys() <= self._writes[row.effect]:
                undeclared = sorted(set(changes) - set(effect_.writes))
                raise EffectContractError(f"{effect_.name} wrote undeclared fields {undeclared}")
        changes[self.status_field] = self._members[row.dest]
        try:
            new = self._evolve(record, changes)
        except FieldRuleViolation as error:
            raise InvariantViolation(self.invariants.code, [error.rule]) from error
        self.invariants.check(new)
        self.invariants.check_step(record, new, inputs)
        for observer in self._observers:
            observer.fired(_lifecycle(self), row, record, new)
        return new

    # -- the transitions machine ----------------------------------------------

    def _build_machine(self) -> Machine:
        transitions = [{"trigger": row.trigger, "source": row.source, "dest": row.dest,
                        "conditions": [self._guard_callback(n) for n in row.conditions],
                        "unless": [self._guard_callback(n) for n in row.unless],
                        "after": [_mark_fired(row)]} for row in self.rows]
        return Machine(model=None, states=[status.value for status in self.statuses],
                       initial=self.initial.value, transitions=transitions,
                       auto_transitions=False, send_event=True, ignore_invalid_triggers=False)

    def _guard_callback(self, name: str) -> Callable[[Any], bool]:
        test = self.guards[name].test

        def evaluate(event: Any) -> bool:
            adapter: _Adapter = event.model
            return bool(test(adapter.record, adapter.inputs))  # type: ignore[arg-type]

        evaluate.__name__ = name
        evaluate.test = test  # type: ignore[attr-defined]  # read back by Lifecycle.guard_plan
        return evaluate
