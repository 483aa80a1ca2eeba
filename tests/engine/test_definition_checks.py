"""Each definition check refuses a table that breaks exactly its rule, and names what is wrong.

Every broken declaration below is also built with the checks switched off and run
through each check on its own, to show it breaks that one rule and no other: a
test that tripped an earlier check by accident would prove nothing about its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

import attrs
import pytest
from support.tasks import TASKS

from lifecycles.invariants._core import InvariantSet
from lifecycles.machines import _checks as checks
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import (
    Changes,
    DefinitionError,
    Effect,
    Guard,
    Lease,
    effect,
    guard,
)


class Job(StrEnum):
    NEW = "new"
    RUNNING = "running"
    DONE = "done"


@attrs.frozen
class JobRecord:
    key: str
    status: Job
    runs: int = 0
    lease_token: str | None = None
    lease_expires_at: float | None = None
    due_at: float = 0.0


@guard(refusal_code="demo.not_ready")
def is_ready(r: JobRecord, i: object) -> bool:
    """The job may start."""
    return True


@guard(refusal_code="demo.unused")
def never_named(r: JobRecord, i: object) -> bool:
    """A guard no row names."""
    return True


@effect("runs")
def count_run(r: JobRecord, i: object) -> Changes:
    """Count one run."""
    return {"runs": r.runs + 1}


@effect("runs")
def reset_runs(r: JobRecord, i: object) -> Changes:
    """Forget the runs."""
    return {"runs": 0}


def valid_table() -> list[dict[str, Any]]:
    return [
        {"trigger": "start", "source": "new", "dest": "running",
         "conditions": ["is_ready"], "after": "count_run"},
        {"trigger": "finish", "source": "running", "dest": "done"},
    ]


def declaration(**changes: Any) -> dict[str, Any]:
    """The keyword arguments of a valid lifecycle, with ``changes`` applied."""
    arguments: dict[str, Any] = {
        "module": __name__,
        "name": "demo",
        "statuses": Job,
        "table": valid_table(),
        "initial": Job.NEW,
        "final": [Job.DONE],
        "creation": "create",
        "guards": [is_ready],
        "effects": [count_run],
        "invariants": InvariantSet("demo.invalid", []),
        "record_type": JobRecord,
        "key_field": "key",
        "not_allowed_code": "demo.not_allowed",
    }
    arguments.update(changes)
    return arguments


@contextmanager
def checks_switched_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Build a lifecycle without running its checks or its machine (for a broken table)."""
    with monkeypatch.context() as patch:
        patch.setattr(checks, "DEFINITION_CHECKS", ())
        patch.setattr(Lifecycle, "_build_machine", lambda self: None)
        yield


def broken_checks(monkeypatch: pytest.MonkeyPatch, arguments: Mapping[str, Any]) -> list[str]:
    """The names of every check that ``arguments`` breaks, each check run on its own."""
    with checks_switched_off(monkeypatch):
        lifecycle: Lifecycle[Any, Any] = Lifecycle(**arguments)
    broken = []
    for check in checks.DEFINITION_CHECKS:
        try:
            check(lifecycle)
        except DefinitionError as error:
            broken.append(error.check)
    return broken


def assert_refused(
    monkeypatch: pytest.MonkeyPatch,
    arguments: Mapping[str, Any],
    check: str,
    *named: str,
    alone: bool = True,
) -> None:
    """Building refuses with ``check``, naming ``named``; with ``alone``, no other check fails."""
    with pytest.raises(DefinitionError) as refused:
        Lifecycle(**arguments)
    assert refused.value.check == check
    assert refused.value.code == "lifecycles.definition_invalid"
    message = str(refused.value)
    assert message.startswith(f"{check}: ")
    for name in named:
        assert name in message, f"{name!r} not named in {message!r}"
    if alone:
        assert broken_checks(monkeypatch, arguments) == [check]


CHECK_NAMES = {
    checks.check_statuses_declared: "statuses_declared",
    checks.check_one_initial_status: "one_initial_status",
    checks.check_guards_and_effects_declared: "guards_and_effects_declared",
    checks.check_effects_write_record_fields: "effects_write_record_fields",
    checks.check_no_exit_from_final: "no_exit_from_final",
    checks.check_every_status_reachable: "every_status_reachable",
    checks.check_no_trap_status: "no_trap_status",
    checks.check_rows_distinguishable: "rows_distinguishable",
    checks.check_lease_declared: "lease_declared",
}


def test_every_definition_check_has_a_test_here() -> None:
    assert set(checks.DEFINITION_CHECKS) == set(CHECK_NAMES)
    for check in checks.DEFINITION_CHECKS:
        assert check.__doc__, f"{check.__name__} needs a docstring saying its rule"


@pytest.mark.parametrize("module", [None, ""], ids=["missing", "empty"])
def test_a_lifecycle_must_name_the_module_declaring_it(module: str | None) -> None:
    arguments = declaration(module=module)
    if module is None:
        del arguments["module"]
    with pytest.raises(DefinitionError) as refused:
        Lifecycle(**arguments)
    assert refused.value.check == "module_declared"
    assert refused.value.code == "lifecycles.definition_invalid"
    assert "demo: pass module=__name__" in str(refused.value)


def test_a_valid_lifecycle_passes_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    lifecycle: Lifecycle[JobRecord, object] = Lifecycle(**declaration())
    for check in checks.DEFINITION_CHECKS:
        check(lifecycle)
    assert broken_checks(monkeypatch, declaration()) == []
    assert lifecycle.fire("start", JobRecord("k", Job.NEW), object()) == JobRecord(
        "k", Job.RUNNING, runs=1
    )


def test_the_tests_leased_tasks_pass_every_check() -> None:
    """A full lifecycle (lease, handling, step invariants) meets every rule; the shipped
    lifecycles are held to them in their own tests."""
    for check in checks.DEFINITION_CHECKS:
        check(TASKS)


# --- statuses_declared -------------------------------------------------------


def test_statuses_declared_refuses_a_misspelled_dest(monkeypatch: pytest.MonkeyPatch) -> None:
    table = valid_table()
    table[1]["dest"] = "dnoe"
    # The real status stays reachable through a second row, so only the spelling is wrong.
    table.append({"trigger": "abandon", "source": "running", "dest": "done"})
    assert_refused(monkeypatch, declaration(table=table), "statuses_declared", "dnoe")


def test_statuses_declared_refuses_a_misspelled_source(monkeypatch: pytest.MonkeyPatch) -> None:
    table = [*valid_table(), {"trigger": "finish", "source": "runing", "dest": "done"}]
    assert_refused(monkeypatch, declaration(table=table), "statuses_declared", "runing")


def test_statuses_declared_refuses_a_final_status_of_another_enum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A final status outside the status enum is a typo like a misspelled dest; today
    # it is accepted silently.
    arguments = declaration(final=[Job.DONE, Elsewhere.NOWHERE])
    assert_refused(monkeypatch, arguments, "statuses_declared", "nowhere", alone=False)


# --- one_initial_status ------------------------------------------------------


class Elsewhere(StrEnum):
    NOWHERE = "nowhere"


class Only(StrEnum):
    DONE = "done"


def test_one_initial_status_refuses_several(monkeypatch: pytest.MonkeyPatch) -> None:
    # The later checks walk the table from the one initial status, so they cannot even
    # be asked about this declaration: the check must stop it first.
    arguments = declaration(initial=[Job.NEW, Job.RUNNING])
    assert_refused(
        monkeypatch, arguments, "one_initial_status", "several initial statuses", alone=False
    )


def test_one_initial_status_refuses_an_undeclared_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The table never names it, so statuses_declared has nothing to say; the other
    # checks walk from it and cannot judge, so this check must stop the declaration.
    arguments = declaration(initial=Elsewhere.NOWHERE)
    assert_refused(monkeypatch, arguments, "one_initial_status", "nowhere", "undeclared",
                   alone=False)


def test_one_initial_status_refuses_a_plain_string(monkeypatch: pytest.MonkeyPatch) -> None:
    # "new" equals Job.NEW (a StrEnum) and hashes like it, so a membership test lets it
    # through; it must still be refused by name, not crash a later check with
    # AttributeError ('str' object has no attribute 'value').
    arguments = declaration(initial="new")
    assert_refused(monkeypatch, arguments, "one_initial_status", "'new'", alone=False)


def test_one_initial_status_refuses_an_initial_that_is_final(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A one-status lifecycle with no rows breaks nothing else.
    arguments = declaration(
        statuses=Only, table=[], initial=Only.DONE, final=[Only.DONE], guards=[], effects=[]
    )
    assert_refused(monkeypatch, arguments, "one_initial_status", "also final", "done")


# --- guards_and_effects_declared --------------------------------------------


def test_guards_and_effects_declared_refuses_an_undeclared_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = valid_table()
    table[1]["conditions"] = ["is_finished"]
    arguments = declaration(table=table)
    assert_refused(monkeypatch, arguments, "guards_and_effects_declared", "undeclared",
                   "is_finished")


def test_guards_and_effects_declared_refuses_an_undeclared_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = valid_table()
    table[1]["after"] = "archive"
    arguments = declaration(table=table)
    assert_refused(monkeypatch, arguments, "guards_and_effects_declared", "archive")


def test_guards_and_effects_declared_refuses_an_unused_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arguments = declaration(guards=[is_ready, never_named])
    assert_refused(
        monkeypatch, arguments, "guards_and_effects_declared", "declared but unused", "never_named"
    )


def test_guards_and_effects_declared_refuses_an_unused_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arguments = declaration(effects=[count_run, reset_runs])
    assert_refused(monkeypatch, arguments, "guards_and_effects_declared", "reset_runs")


def test_an_undeclared_guard_is_refused_before_the_machine_is_built() -> None:
    # Without the check, building the machine would fail with a bare KeyError instead.
    table = valid_table()
    table[0]["unless"] = ["is_cancelled"]
    with pytest.raises(DefinitionError, match="is_cancelled"):
        Lifecycle(**declaration(table=table))


# --- effects_write_record_fields --------------------------------------------


def _with_effect(writes: tuple[str, ...]) -> Effect[JobRecord, object]:
    @effect(*writes)
    def count_run(r: JobRecord, i: object) -> Changes:
        """Count one run (declared with other writes)."""
        return {"runs": r.runs + 1}

    return count_run


def test_effects_write_record_fields_refuses_an_unknown_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arguments = declaration(effects=[_with_effect(("runs", "colour"))])
    assert_refused(monkeypatch, arguments, "effects_write_record_fields", "count_run", "colour")


def test_effects_write_record_fields_refuses_writing_the_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arguments = declaration(effects=[_with_effect(("runs", "status"))])
    assert_refused(
        monkeypatch, arguments, "effects_write_record_fields", "count_run", "status",
        "only a row's dest may",
    )


# --- no_exit_from_final ------------------------------------------------------


def test_no_exit_from_final_refuses_a_row_out_of_a_final_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [*valid_table(), {"trigger": "reopen", "source": "done", "dest": "running"}]
    assert_refused(
        monkeypatch, declaration(table=table), "no_exit_from_final", "reopen: done -> running"
    )


def test_no_exit_from_final_refuses_a_self_loop_with_an_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [*valid_table(), {"trigger": "rerun", "source": "done", "dest": "done",
                              "after": "count_run"}]
    assert_refused(monkeypatch, declaration(table=table), "no_exit_from_final", "rerun")


def test_no_exit_from_final_allows_an_effect_free_self_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [*valid_table(), {"trigger": "touch", "source": "done", "dest": "done"}]
    lifecycle: Lifecycle[JobRecord, object] = Lifecycle(**declaration(table=table))
    done = JobRecord("k", Job.DONE, runs=3)
    assert lifecycle.fire("touch", done, object()) == done
    assert broken_checks(monkeypatch, declaration(table=table)) == []


# --- every_status_reachable --------------------------------------------------


class WithOrphan(StrEnum):
    NEW = "new"
    RUNNING = "running"
    DONE = "done"
    ORPHAN = "orphan"


def test_every_status_reachable_refuses_an_orphan(monkeypatch: pytest.MonkeyPatch) -> None:
    # The orphan can finish (no trap), but no row leads to it.
    table = [*valid_table(), {"trigger": "finish", "source": "orphan", "dest": "done"}]
    arguments = declaration(statuses=WithOrphan, table=table, initial=WithOrphan.NEW,
                            final=[WithOrphan.DONE])
    assert_refused(monkeypatch, arguments, "every_status_reachable", "orphan")
    assert "running" not in str(_refusal(arguments))


def _refusal(arguments: Mapping[str, Any]) -> DefinitionError:
    with pytest.raises(DefinitionError) as refused:
        Lifecycle(**arguments)
    return refused.value


# --- no_trap_status ----------------------------------------------------------


class WithTrap(StrEnum):
    NEW = "new"
    RUNNING = "running"
    DONE = "done"
    STUCK = "stuck"


def test_no_trap_status_refuses_a_status_that_can_never_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [*valid_table(), {"trigger": "jam", "source": "running", "dest": "stuck"}]
    arguments = declaration(statuses=WithTrap, table=table, initial=WithTrap.NEW,
                            final=[WithTrap.DONE])
    assert_refused(monkeypatch, arguments, "no_trap_status", "stuck")
    assert "running" not in str(_refusal(arguments))


def test_no_trap_status_refuses_a_loop_that_never_reaches_a_final_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [*valid_table(), {"trigger": "jam", "source": "running", "dest": "stuck"},
             {"trigger": "unjam", "source": "stuck", "dest": "stuck"}]
    arguments = declaration(statuses=WithTrap, table=table, initial=WithTrap.NEW,
                            final=[WithTrap.DONE])
    assert_refused(monkeypatch, arguments, "no_trap_status", "stuck")


def test_no_trap_status_refuses_a_lifecycle_without_final_statuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert_refused(monkeypatch, declaration(final=[]), "no_trap_status", "no final status")


# --- rows_distinguishable ----------------------------------------------------


def test_rows_distinguishable_refuses_an_unguarded_row_shadowing_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [
        {"trigger": "start", "source": "new", "dest": "running", "after": "count_run"},
        {"trigger": "start", "source": "new", "dest": "done", "conditions": ["is_ready"]},
        {"trigger": "finish", "source": "running", "dest": "done"},
    ]
    assert_refused(
        monkeypatch, declaration(table=table), "rows_distinguishable", "start from new",
        "shadows",
    )


def test_rows_distinguishable_refuses_a_row_whose_guards_repeat_an_earlier_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The second row needs everything the first needs (and more), so whenever it could
    # fire the first fires instead: it is shadowed just like after an unguarded row.
    table = [
        {"trigger": "start", "source": "new", "dest": "running", "conditions": ["is_ready"],
         "after": "count_run"},
        {"trigger": "start", "source": "new", "dest": "done", "conditions": ["is_ready"]},
        {"trigger": "finish", "source": "running", "dest": "done"},
    ]
    assert_refused(monkeypatch, declaration(table=table), "rows_distinguishable",
                   "start from new", "shadows")


def test_rows_distinguishable_allows_an_unguarded_last_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [
        {"trigger": "start", "source": "new", "dest": "running", "conditions": ["is_ready"],
         "after": "count_run"},
        {"trigger": "start", "source": "new", "dest": "done"},
        {"trigger": "finish", "source": "running", "dest": "done"},
    ]
    assert broken_checks(monkeypatch, declaration(table=table)) == []


# --- lease_declared ----------------------------------------------------------


def _lease(**changes: Any) -> Lease:
    fields: dict[str, Any] = {
        "trigger": "start", "token_field": "lease_token", "expires_field": "lease_expires_at",
        "due_field": "due_at", "order_by": ("due_at", "key"), "expiry_trigger": "expire",
    }
    fields.update(changes)
    return Lease(**fields)


def _leasing_table() -> list[dict[str, Any]]:
    return [*valid_table(), {"trigger": "expire", "source": "running", "dest": "new"}]


def test_lease_declared_accepts_a_consistent_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    arguments = declaration(table=_leasing_table(), lease=_lease())
    lifecycle: Lifecycle[JobRecord, object] = Lifecycle(**arguments)
    assert lifecycle.claimable == {Job.NEW}
    assert lifecycle.leased == Job.RUNNING


def test_lease_declared_refuses_a_lease_trigger_with_two_dests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [*_leasing_table(), {"trigger": "start", "source": "running", "dest": "done",
                                 "conditions": ["is_ready"]}]
    # ``expire`` must leave exactly the lease trigger's dests; give it both so only the
    # dest count is wrong.
    table.append({"trigger": "expire", "source": "done", "dest": "done"})
    arguments = declaration(table=table, lease=_lease())
    assert_refused(monkeypatch, arguments, "lease_declared", "start", "has dests")


def test_lease_declared_refuses_an_expiry_that_does_not_leave_the_leased_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The expiry leaves ``new``, not ``running`` (the lease trigger's dest).
    table = [*valid_table(), {"trigger": "expire", "source": "new", "dest": "new"}]
    arguments = declaration(table=table, lease=_lease())
    assert_refused(monkeypatch, arguments, "lease_declared", "expire")


def test_lease_declared_refuses_unknown_record_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    arguments = declaration(table=_leasing_table(), lease=_lease(due_field="next_run_at"))
    assert_refused(monkeypatch, arguments, "lease_declared", "next_run_at")


# --- one effect per row (checked while the rows are read) -----------------------


def test_a_row_naming_two_effects_is_refused() -> None:
    table = valid_table()
    table[0]["after"] = ["count_run", "reset_runs"]
    with pytest.raises(DefinitionError) as refused:
        Lifecycle(**declaration(table=table, effects=[count_run, reset_runs]))
    assert refused.value.check == "one_effect_per_row"
    assert "count_run" in str(refused.value)
    assert "reset_runs" in str(refused.value)


def test_guards_and_effects_need_a_one_line_meaning() -> None:
    def undocumented(r: JobRecord, i: object) -> bool:
        return True

    declare_guard: Callable[[Callable[[JobRecord, object], bool]], Guard[JobRecord, object]]
    declare_guard = guard("demo.code")
    with pytest.raises(TypeError, match="undocumented"):
        declare_guard(undocumented)
