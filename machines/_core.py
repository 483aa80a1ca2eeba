"""A lifecycle: the declared table, its guards, effects and invariants, as one object.

:class:`Lifecycle` gathers a declaration (its pieces are in
:mod:`lifecycles.machines._declaration`), reads the literal table into rows, runs the
definition checks (:mod:`lifecycles.machines._checks`) and derives the sets that are never
listed twice (claimable, leased, each trigger's sources and dests). Firing a trigger is
the engine's (:mod:`lifecycles.machines._engine`); building records fast is the generated
code's (:mod:`lifecycles.machines._builders`).

The declaration's pieces are importable from here too, since most code that declares or
reads a lifecycle wants them with it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from lifecycles.invariants._core import InvariantSet
from lifecycles.machines._builders import builder
from lifecycles.machines._checks import run_definition_checks
from lifecycles.machines._declaration import (
    DefinitionError,
    Effect,
    Guard,
    Lease,
    Row,
    TransitionRefused,
    expand_table,
)
from lifecycles.machines._engine import Engine
from lifecycles.machines._versioning import table_version as _table_version

if TYPE_CHECKING:
    from lifecycles.machines._work import Handling

__all__ = [
    "Lifecycle",
]

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle


class Lifecycle(Engine[R, I]):
    """A declared lifecycle: its table, its guards and effects, its invariants; it fires
    its triggers through :class:`~lifecycles.machines._engine.Engine`."""

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
        module: str | None = None,
        declared_in: Sequence[str] = (),
    ) -> None:
        # The module that declares the table (``module=__name__``), and the modules where
        # the tools find what is declared beside it (its Exploration, audit notes, an
        # app's hooks): names, not imports, since those modules import the table.
        if not isinstance(module, str) or not module:
            raise DefinitionError(
                "module_declared", f"{name}: pass module=__name__, the module that declares "
                "the table: the tools find what is declared beside it from there")
        self.module = module
        self.declared_in = tuple(declared_in)

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
        """How workers run its records (:mod:`lifecycles.machines._work`): what the
        handler's result fires, and the renewal row; ``None`` when none is declared."""
        self.description = description
        self.status_meanings = dict(status_meanings or {})
        self.beside_the_table = tuple(beside_the_table)
        self.rows = tuple(
            expand_table(self.table, tuple(status.value for status in self.statuses))
        )
        run_definition_checks(self)
        self._prepare_firing()
        self.build: Callable[..., R] = builder(self.record_type)
        """``record_type(**values)``, as generated code
        (:func:`~lifecycles.machines._builders.builder`): how stores build the records they
        read."""

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
        (:func:`lifecycles.machines._versioning.table_version`)."""
        return _table_version(self)

    # -- running ---------------------------------------------------------------

    def status_of(self, record: R) -> StrEnum:
        return self.statuses(getattr(record, self.status_field))

    def key_of(self, record: R) -> str:
        return str(getattr(record, self.key_field))

    def create(self, record: R) -> R:
        """A new record entering the lifecycle: built at the initial status, then checked
        (every invariant)."""
        if self.status_of(record) != self.initial:
            raise TransitionRefused(
                self.creation, str(self.status_of(record)), guard=None, code=self.not_allowed_code
            )
        return self.invariants.check(record)

    def check(self, record: R) -> R:
        """Every invariant holds on ``record`` (returned unchanged) or it is refused."""
        return self.invariants.check(record)

    def writes(self, row: Row) -> tuple[str, ...]:
        """The fields a row writes: its status plus its effect's declared fields."""
        effect_writes = self.effects[row.effect].writes if row.effect else ()
        return (self.status_field, *effect_writes)

    def __repr__(self) -> str:
        return f"<Lifecycle {self.name} v{self.table_version}>"
