"""Declare a lifecycle as a literal transition table, and run it as a pure function.

A lifecycle is:

* a status ``Enum`` (``StrEnum``), an initial status and the final statuses;
* a table of rows in the ``transitions`` library's format
  (``trigger``, ``source``, ``dest``, ``conditions``, ``unless``, ``after``), where
  ``conditions``/``unless`` name guards and ``after`` names the effect;
* guards, ``(record, inputs) -> bool``, each with the stable error code it raises
  when it blocks a trigger;
* effects, ``(record, inputs) -> changes``, each declaring the fields it writes;
* the invariants every record obeys.

Firing a trigger is :meth:`Lifecycle.fire`: a record and its inputs in, a new record
out, nothing else touched. The row is chosen over the ``transitions`` machine's own
table (one machine per lifecycle, never ``add_model``); the engine then applies its
effect, sets the status from its ``dest`` and checks every invariant and step invariant.
A trigger not allowed, or whose guards all fail, raises :class:`TransitionRefused`.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

import attrs
from transitions import Machine, MachineError

from lifecycles.invariants.core import (
    FieldRule,
    FieldRuleViolation,
    InvariantSet,
    InvariantViolation,
)
from lifecycles.machines.versioning import table_version as _table_version

if TYPE_CHECKING:
    from lifecycles.machines.work import Handling

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
    allowed from the current status at all). Nothing was changed.
    """

    code = "lifecycles.transition_refused"

    def __init__(
        self, trigger: str, status: str, *, guard: str | None, code: str | None
    ) -> None:
        reason = f"guard {guard} is false" if guard else "not allowed from this status"
        super().__init__(f"{trigger} from {status}: {reason}", code=code)
        self.trigger = trigger
        self.status = status
        self.guard = guard


class EffectContractError(LifecycleError):
    """An effect wrote a field it did not declare: a bug in the lifecycle, not in input."""

    code = "lifecycles.effect_contract"


# --- declarations ------------------------------------------------------------


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


class TransitionObserver(Protocol):
    """Sees every firing of a lifecycle it observes (coverage, tracing); must not change it.

    ``attempted`` is called when a trigger is tried on a record, before any guard
    runs; ``fired`` when a row's new record has passed every invariant. An observer that
    evaluates every guard of :meth:`Lifecycle.guard_plan` may return their outcomes (the
    bits after a leading 1, the first guard's highest): the engine chooses from those."""

    def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                  inputs: Any) -> int | None: ...

    def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any, after: Any) -> None: ...


# --- the engine --------------------------------------------------------------


Candidate = tuple[Row, tuple[tuple[Callable[[Any, Any], object], bool], ...]]


class GuardPlan(NamedTuple):
    """One (trigger, status), compiled once: the machine's candidate rows, each with the guard
    tests that must give their targets (True for conditions, False for unless), which
    select_row runs; all those guards in table order as (name, test, target), which coverage
    evaluates and blocking_guard reads; as bits, ``wanted`` their targets and ``spans``
    each candidate's (shift, mask, targets), to read outcomes an observer returned."""

    candidates: tuple[Candidate, ...]
    checks: tuple[tuple[str, Callable[[Any, Any], object], bool], ...]
    spans: tuple[tuple[Row, int, int, int], ...]
    wanted: int


class _Adapter:
    """What ``transitions`` sees during one firing: a status plus what guards read."""

    __slots__ = ("fired", "inputs", "record", "state")

    def __init__(self, state: str, record: object, inputs: object) -> None:
        self.state = state
        self.record = record
        self.inputs = inputs
        self.fired: Row | None = None


class Lifecycle(Generic[R, I]):
    """A declared lifecycle: its table, its guards and effects, its invariants."""

    def __init__(
        self,
        *,
        name: str,
        statuses: type[StrEnum],
        table: Sequence[Mapping[str, Any]],
        initial: StrEnum,
        final: Iterable[StrEnum],
        creation: str,
        guards: Iterable[Guard[R, I]],
        effects: Iterable[Effect[R, I]],
        invariants: InvariantSet[R],
        record_type: type[R],
        key_field: str,
        status_field: str = "status",
        not_allowed_code: str,
        lease: Lease | None = None,
        handling: Handling[R, I] | None = None,
        description: str = "",
        status_meanings: Mapping[str, str] | None = None,
        beside_the_table: Sequence[Callable[..., Any]] = (),
        module: str,
        declared_in: Sequence[str] = (),
    ) -> None:
        from lifecycles.machines import checks  # the checks read the declaration

        # The module that declares the table (``module=__name__``), and the modules where
        # the tools find what is declared beside it (its Exploration, audit notes, an
        # app's hooks): names, not imports, since those modules import the table.
        self.module = module
        self.declared_in = tuple(declared_in)
        self._observers: tuple[TransitionObserver, ...] = ()

        self.name = name
        self.statuses = statuses
        self.table: tuple[Mapping[str, Any], ...] = tuple(dict(row) for row in table)
        self.initial = initial
        self.final = frozenset(final)
        self.creation = creation
        self.guards = {g.name: g for g in guards}
        self.effects = {e.name: e for e in effects}
        self.invariants = invariants
        self.record_type = record_type
        self.key_field = key_field
        self.status_field = status_field
        self.not_allowed_code = not_allowed_code
        self.lease = lease
        self.handling = handling
        """How workers run its records (:mod:`lifecycles.machines.work`): what the
        handler's result fires, and the renewal row; ``None`` when none is declared."""
        self.description = description
        self.status_meanings = dict(status_meanings or {})
        self.beside_the_table = tuple(beside_the_table)
        self.rows: tuple[Row, ...] = tuple(
            _expand(self.table, tuple(status.value for status in self.statuses))
        )
        checks.run_definition_checks(self)
        self.machine = self._build_machine()
        self._dispatch: dict[tuple[str, str], GuardPlan] = {}
        self._evolve: Callable[[R, dict[str, Any]], R] = evolver(self.record_type)
        self.build: Callable[..., R] = builder(self.record_type)
        """``record_type(**values)``, as generated code (:func:`builder`): how stores
        build the records they read."""
        # apply_row's lookups, once: each effect's declared writes, each status's member.
        self._writes = {name: frozenset(e.writes) for name, e in self.effects.items()}
        self._members = {status.value: status for status in self.statuses}

    # -- derived sets: never listed twice ------------------------------------

    @property
    def triggers(self) -> tuple[str, ...]:
        """Every trigger of the table, in table order."""
        return tuple(dict.fromkeys(row.trigger for row in self.rows))

    def sources(self, trigger: str) -> frozenset[StrEnum]:
        """Statuses from which ``trigger`` may fire."""
        return frozenset(self.statuses(r.source) for r in self.rows if r.trigger == trigger)

    def dests(self, trigger: str) -> frozenset[StrEnum]:
        """Statuses ``trigger`` may lead to."""
        return frozenset(self.statuses(r.dest) for r in self.rows if r.trigger == trigger)

    def allowed_triggers(self, status: StrEnum) -> tuple[str, ...]:
        """Triggers with at least one row out of ``status``."""
        return tuple(dict.fromkeys(r.trigger for r in self.rows if r.source == status.value))

    @property
    def claimable(self) -> frozenset[StrEnum]:
        """Statuses a worker may claim from (the lease trigger's sources)."""
        return self.sources(self.lease.trigger) if self.lease else frozenset()

    @property
    def leased(self) -> StrEnum | None:
        """The status a claimed record holds (the lease trigger's dest)."""
        if self.lease is None:
            return None
        (status,) = self.dests(self.lease.trigger)
        return status

    @functools.cached_property
    def table_version(self) -> str:
        """A short digest of the table, its declarations and the code that decides
        (:func:`lifecycles.machines.versioning.table_version`)."""
        return _table_version(self)

    # -- running ---------------------------------------------------------------

    def status_of(self, record: R) -> StrEnum:
        return self.statuses(getattr(record, self.status_field))

    def key_of(self, record: R) -> str:
        return str(getattr(record, self.key_field))

    def create(self, record: R) -> R:
        """Admit a freshly built record: it must hold the initial status and every invariant."""
        if self.status_of(record) != self.initial:
            raise TransitionRefused(
                self.creation, str(self.status_of(record)), guard=None, code=self.not_allowed_code
            )
        return self.invariants.check(record)

    def check(self, record: R) -> R:
        """Every invariant holds on ``record`` (returned unchanged) or it is refused."""
        return self.invariants.check(record)

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
        told = None
        for observer in self._observers:  # None: it evaluated no guard
            told = observer.attempted(self, trigger, record, inputs) or told
        status = str(getattr(record, self.status_field))
        plan = self._dispatch.get((trigger, status)) or self.guard_plan(trigger, status)
        if not plan.candidates:
            raise TransitionRefused(trigger, status, guard=None, code=self.not_allowed_code)
        if told is not None and told >> len(plan.checks) == 1:  # as many as the plan's
            for row, shift, mask, wanted in plan.spans:  # the candidates' checks, told
                if (told >> shift) & mask == wanted:
                    return row
            wrong = told ^ plan.wanted  # the first guard blocking, as blocking_guard finds it
            raise self._refused(trigger, status, plan.checks[len(plan.checks)
                                                             - wrong.bit_length()][0])
        for row, checks in plan.candidates:
            for test, target in checks:
                if bool(test(record, inputs)) is not target:
                    break
            else:
                return row
        raise self._refused(trigger, status, self.blocking_guard(trigger, record, inputs))

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
            spans, at = [], len(checks)  # the machine lists a row's conditions, then unless
            for row, tests in candidates:
                at -= len(tests)
                spans.append((row, at, (1 << len(tests)) - 1,  # outcomes as bits, first highest
                              int("0" + "".join("01"[target] for _, target in tests), 2)))
            plan = self._dispatch[trigger, status] = GuardPlan(candidates, checks, tuple(
                spans), int("1" + "".join("01"[target] for *_, target in checks), 2))
        return plan

    def _refused(self, trigger: str, status: str, blocking: str | None) -> TransitionRefused:
        code = self.guards[blocking].refusal_code if blocking else self.not_allowed_code
        return TransitionRefused(trigger, status, guard=blocking, code=code)

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
            raise self._refused(trigger, str(status), self.blocking_guard(trigger, record, inputs))
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
            observer.fired(self, row, record, new)
        return new

    def blocking_guard(self, trigger: str, record: R, inputs: I) -> str | None:
        """The first guard that blocks the first row of ``trigger`` out of ``record``'s status."""
        plan = self.guard_plan(trigger, str(getattr(record, self.status_field)))
        return next((name for name, test, target in plan.checks
                     if bool(test(record, inputs)) is not target), None)

    def writes(self, row: Row) -> tuple[str, ...]:
        """The fields a row writes: its status plus its effect's declared fields."""
        effect_writes = self.effects[row.effect].writes if row.effect else ()
        return (self.status_field, *effect_writes)

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

    def __repr__(self) -> str:
        return f"<Lifecycle {self.name} v{self.table_version}>"


def _parts(validator: object) -> tuple[FieldRule, ...]:
    """The named field rules ``validator`` is made of (``and_`` combines them), in order."""
    return tuple(() if validator is None else getattr(validator, "_validators", (validator,)))


def _value_only(validator: object) -> bool:
    """Whether ``validator`` judges a field's value alone: named field rules (and their
    ``and_`` combinations; not a subclass's own ``__call__``) read nothing else."""
    return all(isinstance(part, FieldRule) and type(part).__call__ is FieldRule.__call__
               for part in _parts(validator))


def evolver(record_type: type[R]) -> Callable[[R, dict[str, Any]], R]:
    """``attrs.evolve`` that converts and validates only the changed fields.

    Every field of a frozen record was converted and validated when it was built; when
    every validator is a named field rule (it judges its value alone), a new record needs
    only its changed fields checked (its invariants are checked whole, afterwards). Any
    other class gets ``attrs.evolve``: a validator that reads other fields, pre/post-init
    hooks, fields outside ``__init__`` or aliased, converters taking the instance or field.
    """
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(record_type)  # type: ignore[arg-type]
    if not _goes_straight(record_type, fields):
        return lambda record, changes: attrs.evolve(record, **changes)  # type: ignore[misc]
    # Straight-line code through the slots, rules inline, once per tuple of changed fields
    # (an effect writes the same ones each time): copying and looping were most of apply_row.
    names = tuple(field.name for field in fields)
    plans = {field.name: (at, field.converter, [(rule.optional, rule.check, rule.name)
             for rule in _parts(field.validator)]) for at, field in enumerate(fields)}

    @functools.lru_cache(maxsize=256)  # bounded: a caller may write ever new sets of fields
    def straight(changed: tuple[str, ...]) -> Callable[[R, dict[str, Any]], R]:
        space: dict[str, Any] = {"new": object.__new__, "kind": record_type, "plans": plans,
                                 "broke": FieldRuleViolation}
        space.update((f"put{at}", _setter(record_type, name)) for at, name in enumerate(names))
        lines = [f"put{at}(made, record.{name})" for at, name in enumerate(names)
                 if name not in changed]
        for number, name in enumerate(changed):
            if name not in plans:  # no such field: as ``plans[name]`` raised, in order
                lines.append(f"plans[{name!r}]")
                break
            at, convert, rules = plans[name]
            space[f"convert{number}"] = convert
            lines.append(f"value = convert{number}(changes[{name!r}])" if convert
                         else f"value = changes[{name!r}]")
            for part, (optional, check, rule) in enumerate(rules):  # FieldRule.__call__
                space[f"check{number}_{part}"] = check
                lines.append(f"if not ({'value is None or ' if optional else ''}check{number}_"
                             f"{part}(value)): raise broke({rule!r}, {name!r}, value)")
            lines.append(f"put{at}(made, value)")
        body = "".join(f"    {line}\n" for line in lines)
        exec(f"def evolve(record, changes):\n    made = new(kind)\n{body}    return made\n",
             space)
        return space["evolve"]  # type: ignore[no-any-return]

    def evolve(record: R, changes: dict[str, Any]) -> R:
        return straight(tuple(changes))(record, changes)

    return evolve


def _goes_straight(record_type: type, fields: tuple[attrs.Attribute[Any], ...]) -> bool:
    """Whether generated code may build ``record_type`` as its ``__init__`` would: no
    pre/post-init hooks, every field in ``__init__`` under its own name (code reads
    them), converters of the value alone, validators that are named field rules."""
    return not (
        hasattr(record_type, "__attrs_pre_init__")
        or hasattr(record_type, "__attrs_post_init__")
        or not all(field.init and field.alias == field.name and field.name.isidentifier()
                   and not keyword.iskeyword(field.name) and not field.name.startswith("_lc_")
                   for field in fields)
        or any(isinstance(field.converter, attrs.Converter) for field in fields)
        or not all(_value_only(field.validator) for field in fields)
    )


def builder(record_type: type[R]) -> Callable[..., R]:
    """``record_type(**values)`` as generated code: every field converted in order, then
    every field rule checked in order, as attrs' ``__init__`` does (so the same error
    comes first), without a call per validator; a record read is built this way. The
    fields are the function's parameters, so a missing or unknown one is the same
    ``TypeError``. Any class :func:`evolver` cannot go straight through, or with
    defaults, is built by the class itself."""
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(record_type)  # type: ignore[arg-type]
    if not _goes_straight(record_type, fields) or any(
            field.default is not attrs.NOTHING for field in fields):
        return record_type
    space: dict[str, Any] = {"_lc_new": object.__new__, "_lc_kind": record_type,
                             "_lc_broke": FieldRuleViolation}
    converting, checking, setting = [], [], []
    for at, field in enumerate(fields):
        name = field.name
        if field.converter is not None:
            space[f"_lc_convert{at}"] = field.converter
            converting.append(f"{name} = _lc_convert{at}({name})")
        for part, rule in enumerate(_parts(field.validator)):  # FieldRule.__call__, inline
            space[f"_lc_check{at}_{part}"] = rule.check
            test = f"{'{name} is None or ' if rule.optional else ''}_lc_check{at}_{part}({name})"
            checking.append(f"if not ({test.format(name=name)}):"
                            f" raise _lc_broke({rule.name!r}, {name!r}, {name})")
        space[f"_lc_put{at}"] = _setter(record_type, name)
        setting.append(f"_lc_put{at}(_lc_made, {name})")
    lines = [*converting, *checking, "_lc_made = _lc_new(_lc_kind)", *setting,
             "return _lc_made"]
    body = "".join(f"    {line}\n" for line in lines)
    exec(f"def build({', '.join(field.name for field in fields)}):\n{body}", space)
    return space["build"]  # type: ignore[no-any-return]


def _setter(record_type: type, name: str) -> Callable[[Any, Any], None]:
    """Sets field ``name`` of a new frozen record: through its slot, else past ``__setattr__``."""
    slot = inspect.getattr_static(record_type, name, None)
    if isinstance(slot, types.MemberDescriptorType):
        return slot.__set__
    return lambda new, value: object.__setattr__(new, name, value)


def _mark_fired(row: Row) -> Callable[[Any], None]:
    def mark(event: Any) -> None:
        event.model.fired = row

    mark.row = row  # type: ignore[attr-defined]  # read back by Lifecycle.guard_plan
    return mark


def _names(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(str(v) for v in value)
    return (str(value),)


def _expand(table: Sequence[Mapping[str, Any]], statuses: Sequence[str]) -> Iterable[Row]:
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
