"""Definition checks: run when a lifecycle is built, each naming what is wrong.

``transitions`` accepts a misspelled source or dest and fails only when the trigger
fires; these checks refuse such a table at import time instead. Each check is its
own function so its test can break exactly one rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.machines._declaration import DefinitionError
from lifecycles.machines._graph import reachable_statuses, statuses_reaching

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle

    AnyLifecycle = Lifecycle[Any, Any]


def _declared(lifecycle: AnyLifecycle) -> set[str]:
    return {status.value for status in lifecycle.statuses}


def check_statuses_declared(lifecycle: AnyLifecycle) -> None:
    """Every source and dest in the table is a member of the status enum."""
    declared = _declared(lifecycle)
    named = {row.source for row in lifecycle.rows} | {row.dest for row in lifecycle.rows}
    unknown = sorted(named - declared)
    # A final status must be a member of this very enum, not an equal string or another enum.
    unknown += sorted(
        str(status) for status in lifecycle.final if not isinstance(status, lifecycle.statuses)
    )
    if unknown:
        raise DefinitionError("statuses_declared", f"undeclared statuses in the table: {unknown}")


def check_one_initial_status(lifecycle: AnyLifecycle) -> None:
    """Exactly one initial status, declared, and not final."""
    initial = lifecycle.initial
    if isinstance(initial, (list, tuple, set, frozenset)):
        raise DefinitionError("one_initial_status", f"several initial statuses: {initial}")
    if not isinstance(initial, lifecycle.statuses):
        # A plain string equal to a member is still not a declared status: refuse it by name.
        raise DefinitionError(
            "one_initial_status",
            f"initial status {initial!r} is undeclared: not a member of "
            f"{lifecycle.statuses.__name__}",
        )
    if initial in lifecycle.final:
        raise DefinitionError("one_initial_status", f"initial status {initial} is also final")


def check_guards_and_effects_declared(lifecycle: AnyLifecycle) -> None:
    """Every guard and effect named by a row is declared, and every declared one is used."""
    named_guards = {n for row in lifecycle.rows for n in (*row.conditions, *row.unless)}
    named_effects = {row.effect for row in lifecycle.rows if row.effect}
    guards, effects = set(lifecycle.guards), set(lifecycle.effects)
    missing = sorted((named_guards - guards) | (named_effects - effects))
    if missing:
        raise DefinitionError("guards_and_effects_declared", f"undeclared: {missing}")
    unused = sorted((guards - named_guards) | (effects - named_effects))
    if unused:
        raise DefinitionError("guards_and_effects_declared", f"declared but unused: {unused}")


def check_effects_write_record_fields(lifecycle: AnyLifecycle) -> None:
    """Effects write only fields of the record, and never the status field itself."""
    fields = {field.name for field in attrs.fields(lifecycle.record_type)}
    for effect in lifecycle.effects.values():
        bad = sorted(name for name in effect.writes if name not in fields)
        if bad:
            raise DefinitionError(
                "effects_write_record_fields", f"{effect.name} writes unknown fields {bad}"
            )
        if lifecycle.status_field in effect.writes:
            raise DefinitionError(
                "effects_write_record_fields",
                f"{effect.name} writes {lifecycle.status_field}: only a row's dest may",
            )


def check_no_exit_from_final(lifecycle: AnyLifecycle) -> None:
    """No row leaves a final status (an effect-free self-loop, a pure no-op, is not leaving)."""
    final = {status.value for status in lifecycle.final}
    leaving = sorted(
        {
            f"{r.trigger}: {r.source} -> {r.dest}"
            for r in lifecycle.rows
            if r.source in final and not (r.dest == r.source and r.effect is None)
        }
    )
    if leaving:
        raise DefinitionError("no_exit_from_final", f"rows leave final statuses: {leaving}")


def check_every_status_reachable(lifecycle: AnyLifecycle) -> None:
    """Every declared status can be reached from the initial status."""
    unreachable = sorted(_declared(lifecycle) - reachable_statuses(lifecycle))
    if unreachable:
        raise DefinitionError("every_status_reachable", f"unreachable statuses: {unreachable}")


def check_no_trap_status(lifecycle: AnyLifecycle) -> None:
    """From every non-final status some final status can still be reached."""
    final = {status.value for status in lifecycle.final}
    if not final:
        raise DefinitionError("no_trap_status", "no final status is declared")
    can_finish = final | statuses_reaching(lifecycle, final)
    traps = sorted(_declared(lifecycle) - can_finish)
    if traps:
        raise DefinitionError("no_trap_status", f"statuses that can never finish: {traps}")


def check_rows_distinguishable(lifecycle: AnyLifecycle) -> None:
    """No row is shadowed: an earlier row of the same trigger and source whose guards are a
    subset of a later row's would fire whenever the later one could."""
    seen: dict[tuple[str, str], list[Any]] = {}
    for row in lifecycle.rows:
        earlier = seen.setdefault((row.trigger, row.source), [])
        for before in earlier:
            if set(before.conditions) <= set(row.conditions) and set(before.unless) <= set(
                row.unless
            ):
                raise DefinitionError(
                    "rows_distinguishable",
                    f"{row.trigger} from {row.source}: row {before.index} shadows row "
                    f"{row.index} (its guards are a subset of the later row's)",
                )
        earlier.append(row)


def check_lease_declared(lifecycle: AnyLifecycle) -> None:
    """A lease names a trigger with one dest, an expiry out of it, and record fields; a
    handling needs a lease, and its triggers leave the leased status (a renewal keeps it)."""
    lease = lifecycle.lease
    if lease is None:
        if lifecycle.handling is not None:
            raise DefinitionError("lease_declared", "a handling is declared without a lease")
        return
    dests = lifecycle.dests(lease.trigger)
    if len(dests) != 1:
        raise DefinitionError("lease_declared", f"lease trigger {lease.trigger} has dests {dests}")
    expiry_sources = lifecycle.sources(lease.expiry_trigger)
    if expiry_sources != dests:
        raise DefinitionError(
            "lease_declared",
            f"expiry trigger {lease.expiry_trigger} must leave exactly the leased status",
        )
    fields = {field.name for field in attrs.fields(lifecycle.record_type)}
    named = {lease.token_field, lease.expires_field, lease.due_field, *lease.order_by}
    missing = sorted(named - fields)
    if missing:
        raise DefinitionError("lease_declared", f"lease names unknown record fields {missing}")
    if lifecycle.handling is not None:
        _check_handling(lifecycle, dests)


def _check_handling(lifecycle: AnyLifecycle, leased: frozenset[Any]) -> None:
    handling = lifecycle.handling
    assert handling is not None
    finishing = tuple(getattr(handling.finish, "triggers", ()))
    for trigger in finishing:
        if lifecycle.sources(trigger) & leased != leased:
            raise DefinitionError(
                "lease_declared",
                f"handling fires {trigger}, which has no row out of the leased status")
    if handling.renewal is not None and (
            lifecycle.sources(handling.renewal) != leased
            or lifecycle.dests(handling.renewal) != leased):
        raise DefinitionError(
            "lease_declared",
            f"renewal {handling.renewal} must lead from the leased status back to it")


DEFINITION_CHECKS: tuple[Callable[[AnyLifecycle], None], ...] = (
    check_statuses_declared,
    check_one_initial_status,
    check_guards_and_effects_declared,
    check_effects_write_record_fields,
    check_no_exit_from_final,
    check_every_status_reachable,
    check_no_trap_status,
    check_rows_distinguishable,
    check_lease_declared,
)


def run_definition_checks(lifecycle: AnyLifecycle) -> None:
    """Run every definition check; the first failure raises :class:`DefinitionError`."""
    for check in DEFINITION_CHECKS:
        check(lifecycle)
