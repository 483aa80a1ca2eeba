"""The engine: illegal transitions raise an error and nothing happens.

Then: a false guard refuses with its own code and name, an effect cannot write a field
it did not declare, a result that breaks an invariant is refused naming the rule, the
derived sets match the table, and one ``transitions`` machine serves every record.

On the tests' leased tasks (tests/support/tasks.py) and tiny lifecycles declared here; the
same refusals and sets as the monitor's table declares them are in
tests/monitor/test_monitor_engine.py.
"""

from __future__ import annotations

import copy
import gc
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import Any

import attrs
import pytest
from support.tasks import TABLE, TASKS, Task, TaskInputs, TaskStatus, new_task
from transitions import Machine

from lifecycles.invariants._core import InvariantSet, InvariantViolation, invariant
from lifecycles.machines import _engine as engine
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import (
    Changes,
    EffectContractError,
    TransitionRefused,
    effect,
    guard,
)

T0 = 1_000.0
WORKER, TOKEN = "worker-1", "token-1"
NOT_ALLOWED = "tasks.not_allowed"
STATE_INVALID = "tasks.state_invalid"


def held(now: float, **changes: Any) -> TaskInputs:
    """Inputs at ``now`` from the worker holding the lease ``TOKEN``."""
    return TaskInputs(now=now, **{"worker_id": WORKER, "lease_token": TOKEN, **changes})


# --- task records in every status, made by firing real transitions -------------


def records_by_status() -> dict[TaskStatus, Task]:
    queued = new_task("task-1", now=T0)
    running = TASKS.fire("claim", queued, held(T0))
    done = T0 + 1
    return {
        TaskStatus.QUEUED: queued,
        TaskStatus.RUNNING: running,
        TaskStatus.SUCCEEDED: TASKS.fire("succeed", running, held(done)),
        TaskStatus.FAILED: TASKS.fire(
            "fail", running, held(done, error="worker.crashed", retryable=False)
        ),
    }


RECORDS = records_by_status()


def friendly_inputs(record: Task) -> TaskInputs:
    """Inputs under which every guard of every row would pass if the row existed."""
    return held(T0 + 2, error="worker.timeout", retryable=True)


def _table_sources(row: dict[str, Any]) -> list[str]:
    source = row["source"]
    if source == "*":  # the transitions notation for every declared status
        return [status.value for status in TaskStatus]
    return [source] if isinstance(source, str) else list(source)


# Read straight from the literal table, not through the engine's own derivations.
ALLOWED = {(row["trigger"], source) for row in TABLE for source in _table_sources(row)}
TRIGGERS = list(dict.fromkeys(row["trigger"] for row in TABLE))
REFUSED_PAIRS = [
    (trigger, status)
    for trigger in dict.fromkeys([*TRIGGERS, "submit", "no_such_trigger"])
    for status in TaskStatus
    if (trigger, status.value) not in ALLOWED
]


def test_every_status_has_a_record_built_by_real_transitions() -> None:
    assert {record.status for record in RECORDS.values()} == set(TaskStatus)
    for status, record in RECORDS.items():
        assert record.status == status
        assert TASKS.check(record) is record


def test_the_refused_pairs_cover_the_whole_grid() -> None:
    # 5 table triggers, the creation trigger (submit, outside the table) and 1 unknown
    # trigger, on 4 statuses, less the 5 allowed pairs (claim from queued, the other four
    # from running).
    assert len(ALLOWED) == 5
    assert len(REFUSED_PAIRS) == 7 * 4 - 5


@pytest.mark.parametrize(
    ("trigger", "status"), REFUSED_PAIRS, ids=[f"{t}-{s.value}" for t, s in REFUSED_PAIRS]
)
def test_illegal_transitions_raise_an_error_and_nothing_happens(
    trigger: str, status: TaskStatus
) -> None:
    record = RECORDS[status]
    before = copy.deepcopy(record)
    inputs = friendly_inputs(record)
    with pytest.raises(TransitionRefused) as refused:
        TASKS.fire(trigger, record, inputs)
    assert refused.value.code == NOT_ALLOWED
    assert refused.value.guard is None
    assert refused.value.trigger == trigger
    assert refused.value.status == status.value
    assert "not allowed from this status" in str(refused.value)
    assert record == before
    assert attrs.asdict(record) == attrs.asdict(before)
    with pytest.raises(TransitionRefused):
        TASKS.select_row(trigger, record, inputs)
    assert record == before


def test_records_are_frozen() -> None:
    record = RECORDS[TaskStatus.QUEUED]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        record.status = TaskStatus.RUNNING  # type: ignore[misc]
    assert record.status == TaskStatus.QUEUED


# --- false guards ------------------------------------------------------------

EXPIRY = T0 + 30  # the lease RECORDS[RUNNING] holds: T0 + lease_seconds

GUARD_CASES = [
    # (trigger, status, inputs, blocking guard, code)
    ("claim", TaskStatus.QUEUED, held(T0 - 1), "is_due", "tasks.not_due"),
    ("expire", TaskStatus.RUNNING, held(EXPIRY - 1), "lease_has_expired", "tasks.lease_live"),
    ("renew", TaskStatus.RUNNING, held(T0 + 1, worker_id="worker-2"),
     "lease_is_held", "tasks.lease_lost"),
    ("succeed", TaskStatus.RUNNING, held(T0 + 1, lease_token="token-2"),
     "lease_is_held", "tasks.lease_lost"),
    ("succeed", TaskStatus.RUNNING, held(EXPIRY), "lease_is_live", "tasks.lease_expired"),
    ("fail", TaskStatus.RUNNING, held(EXPIRY, error="worker.timeout", retryable=True),
     "lease_is_live", "tasks.lease_expired"),
    ("fail", TaskStatus.RUNNING,
     TaskInputs(now=T0 + 1, worker_id=None, lease_token=None, error="worker.timeout"),
     "lease_is_held", "tasks.lease_lost"),
]


@pytest.mark.parametrize(
    ("trigger", "status", "inputs", "blocking", "code"),
    GUARD_CASES,
    ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(GUARD_CASES)],
)
def test_a_false_guard_refuses_with_its_code_and_name(
    trigger: str, status: TaskStatus, inputs: TaskInputs, blocking: str, code: str
) -> None:
    record = RECORDS[status]
    before = copy.deepcopy(record)
    with pytest.raises(TransitionRefused) as refused:
        TASKS.fire(trigger, record, inputs)
    assert refused.value.guard == blocking
    assert refused.value.code == code == TASKS.guards[blocking].refusal_code
    assert f"guard {blocking} is false" in str(refused.value)
    assert record == before


def test_spent_attempts_block_a_claim_from_the_queue() -> None:
    record = attrs.evolve(RECORDS[TaskStatus.QUEUED], attempts=3, max_attempts=3)
    with pytest.raises(TransitionRefused) as refused:
        TASKS.fire("claim", record, held(T0 + 10_000))
    assert refused.value.guard == "an_attempt_is_left"
    assert refused.value.code == "tasks.no_attempt_left"


# A tiny lifecycle to test the engine's rules apart from any lease: guards given as
# conditions and unless, an effect writing what it did not declare, a plain invariant.


class Step(StrEnum):
    NEW = "new"
    RUNNING = "running"
    DONE = "done"


@attrs.frozen
class Counter:
    key: str
    status: Step
    count: int = 0


@guard(refusal_code="demo.not_ready")
def is_ready(r: Counter, i: dict[str, Any]) -> bool:
    """The caller says the counter is ready."""
    return bool(i.get("ready"))


@guard(refusal_code="demo.cancelled")
def is_cancelled(r: Counter, i: dict[str, Any]) -> bool:
    """The caller cancelled the counter."""
    return bool(i.get("cancelled"))


@effect("count")
def bump(r: Counter, i: dict[str, Any]) -> Changes:
    """Add one to the count."""
    return {"count": r.count + 1}


@effect("count")
def sneaky(r: Counter, i: dict[str, Any]) -> Changes:
    """Add one to the count, and also (wrongly) rename the record."""
    return {"count": r.count + 1, "key": "renamed"}


@invariant
def count_at_most_two(r: Counter) -> bool:
    """The count never passes two."""
    return r.count <= 2


def demo(**changes: Any) -> Lifecycle[Counter, dict[str, Any]]:
    arguments: dict[str, Any] = {
        "module": __name__,
        "name": "demo",
        "statuses": Step,
        "table": [
            {"trigger": "start", "source": "new", "dest": "running",
             "conditions": ["is_ready"], "unless": ["is_cancelled"], "after": "bump"},
            {"trigger": "tick", "source": "running", "dest": "running", "after": "bump"},
            {"trigger": "finish", "source": "running", "dest": "done"},
        ],
        "initial": Step.NEW,
        "final": [Step.DONE],
        "creation": "create",
        "guards": [is_ready, is_cancelled],
        "effects": [bump],
        "invariants": InvariantSet("demo.invalid", [count_at_most_two]),
        "record_type": Counter,
        "key_field": "key",
        "not_allowed_code": "demo.not_allowed",
    }
    arguments.update(changes)
    return Lifecycle(**arguments)


DEMO = demo()


def test_star_source_and_equals_dest_mean_every_status_and_the_same_status() -> None:
    table = [*demo().table, {"trigger": "touch", "source": "*", "dest": "="}]
    touching = demo(table=table)
    touch = [row for row in touching.rows if row.trigger == "touch"]
    assert [(row.source, row.dest) for row in touch] == [
        ("new", "new"), ("running", "running"), ("done", "done")
    ]
    assert {row.index for row in touch} == {len(table) - 1}  # one table entry
    for status in Step:
        record = Counter("k", status)
        assert touching.fire("touch", record, {}) == record


def test_a_false_condition_refuses_with_its_refusal_code() -> None:
    record = Counter("k", Step.NEW)
    with pytest.raises(TransitionRefused) as refused:
        DEMO.fire("start", record, {"ready": False})
    assert (refused.value.guard, refused.value.code) == ("is_ready", "demo.not_ready")
    assert record == Counter("k", Step.NEW)


def test_a_true_unless_guard_refuses_with_its_refusal_code() -> None:
    record = Counter("k", Step.NEW)
    with pytest.raises(TransitionRefused) as refused:
        DEMO.fire("start", record, {"ready": True, "cancelled": True})
    assert (refused.value.guard, refused.value.code) == ("is_cancelled", "demo.cancelled")
    assert DEMO.fire("start", record, {"ready": True}) == Counter("k", Step.RUNNING, 1)


def test_an_effect_writing_an_undeclared_field_is_a_contract_error() -> None:
    table = [dict(row) for row in DEMO.table]
    table[0]["after"] = "sneaky"
    lifecycle = demo(table=table, effects=[sneaky, bump])
    record = Counter("k", Step.NEW)
    with pytest.raises(EffectContractError) as broken:
        lifecycle.fire("start", record, {"ready": True})
    assert broken.value.code == "lifecycles.effect_contract"
    assert "sneaky" in str(broken.value)
    assert "key" in str(broken.value)
    assert record == Counter("k", Step.NEW)


def test_a_result_breaking_an_invariant_is_refused_naming_the_rule() -> None:
    record = DEMO.fire("tick", DEMO.fire("start", Counter("k", Step.NEW), {"ready": True}), {})
    assert record.count == 2
    with pytest.raises(InvariantViolation) as broken:
        DEMO.fire("tick", record, {})
    assert broken.value.rules == ("count_at_most_two",)
    assert broken.value.code == "demo.invalid"
    assert record.count == 2


def test_a_task_result_breaking_an_invariant_names_it_with_state_invalid() -> None:
    # A failure without its error: the effect writes what the inputs carry, nothing.
    running = RECORDS[TaskStatus.RUNNING]
    with pytest.raises(InvariantViolation) as broken:
        TASKS.fire("fail", running, held(T0 + 1, error=None, retryable=False))
    assert broken.value.rules == ("failed_with_an_error",)
    assert broken.value.code == STATE_INVALID


def test_a_field_rule_broken_by_an_effect_is_reported_as_an_invariant_violation() -> None:
    running = RECORDS[TaskStatus.RUNNING]
    with pytest.raises(InvariantViolation) as broken:
        TASKS.fire("fail", running, held(T0 + 1, error="Not A Code"))
    assert broken.value.rules == ("error_code_syntax",)
    assert broken.value.code == STATE_INVALID


def test_create_admits_only_the_initial_status_with_every_invariant() -> None:
    assert TASKS.create(RECORDS[TaskStatus.QUEUED]) is RECORDS[TaskStatus.QUEUED]
    with pytest.raises(TransitionRefused) as refused:
        TASKS.create(RECORDS[TaskStatus.RUNNING])
    assert (refused.value.trigger, refused.value.code) == ("submit", NOT_ALLOWED)
    broken = attrs.evolve(RECORDS[TaskStatus.QUEUED], attempts=4)
    with pytest.raises(InvariantViolation) as invalid:
        TASKS.create(broken)
    assert invalid.value.rules == ("attempts_within_max",)


def test_select_then_apply_is_fire_and_firing_is_pure() -> None:
    queued = RECORDS[TaskStatus.QUEUED]
    row = TASKS.select_row("claim", queued, held(T0))
    assert (row.trigger, row.source, row.dest, row.effect) == (
        "claim", "queued", "running", "take_lease"
    )
    assert row.label == "claim [is_due, an_attempt_is_left]"
    applied = TASKS.apply_row(row, queued, held(T0))
    assert applied == TASKS.fire("claim", queued, held(T0)) == RECORDS[TaskStatus.RUNNING]
    assert queued == new_task("task-1", now=T0)


def test_rows_name_guards_and_unless_in_their_label() -> None:
    labels = {row.label for row in TASKS.rows if row.trigger == "expire"}
    assert labels == {
        "expire [lease_has_expired, attempts_remain]",
        "expire [lease_has_expired, !attempts_remain]",
    }


# --- table_version ------------------------------------------------------------


def test_table_version_is_stable_for_the_same_declaration() -> None:
    assert demo().table_version == DEMO.table_version
    assert len(TASKS.table_version) == 12
    int(TASKS.table_version, 16)


@pytest.mark.parametrize(
    ("index", "key", "value"),
    [
        (2, "dest", "running"),
        (0, "conditions", []),
        (0, "unless", []),
        (1, "after", None),
        (1, "trigger", "advance"),
    ],
)
def test_table_version_changes_when_a_row_changes(index: int, key: str, value: Any) -> None:
    table = [dict(row) for row in DEMO.table]
    table[index][key] = value
    if key == "dest":  # keep ``done`` reachable so the changed table is still valid
        table.append({"trigger": "close", "source": "running", "dest": "done"})
    guards = [is_ready, is_cancelled]
    if key == "conditions":
        guards = [is_cancelled]
    if key == "unless":
        guards = [is_ready]
    changed = demo(table=table, guards=guards)
    assert changed.table_version != DEMO.table_version


def test_table_version_changes_when_a_row_is_added() -> None:
    table = [*DEMO.table, {"trigger": "abort", "source": "new", "dest": "done"}]
    assert demo(table=table).table_version != DEMO.table_version


def _tasks_with(table: list[dict[str, Any]], **changes: Any) -> Lifecycle[Task, TaskInputs]:
    arguments: dict[str, Any] = {
        "module": __name__,
        "name": TASKS.name, "statuses": TaskStatus, "table": table, "initial": TASKS.initial,
        "final": TASKS.final, "creation": TASKS.creation, "guards": TASKS.guards.values(),
        "effects": TASKS.effects.values(), "invariants": TASKS.invariants,
        "record_type": Task, "key_field": "task_id", "not_allowed_code": NOT_ALLOWED,
        "lease": TASKS.lease, "handling": TASKS.handling,
    }
    arguments.update(changes)
    return Lifecycle(**arguments)


def test_table_version_follows_the_tasks_table() -> None:
    assert _tasks_with([dict(row) for row in TABLE]).table_version == TASKS.table_version
    cancel = {"trigger": "cancel", "source": "queued", "dest": "failed"}
    assert _tasks_with([*TABLE, cancel]).table_version != TASKS.table_version
    narrower = [dict(row) for row in TABLE]
    narrower[0] = {**narrower[0], "conditions": ["is_due"]}  # the same rows, one guard fewer
    guards = [g for name, g in TASKS.guards.items() if name != "an_attempt_is_left"]
    assert _tasks_with(narrower, guards=guards).table_version != TASKS.table_version


# --- derived sets -------------------------------------------------------------


def test_derived_sets_match_the_literal_table() -> None:
    assert list(TASKS.triggers) == TRIGGERS
    for trigger in TRIGGERS:
        rows = [row for row in TABLE if row["trigger"] == trigger]
        assert {s.value for s in TASKS.sources(trigger)} == {
            source for row in rows for source in _table_sources(row)
        }
        assert {s.value for s in TASKS.dests(trigger)} == {
            source if row["dest"] == "=" else row["dest"]  # "=": the source itself
            for row in rows for source in _table_sources(row)
        }
    for status in TaskStatus:
        expected = [t for t in TRIGGERS if (t, status.value) in ALLOWED]
        assert list(TASKS.allowed_triggers(status)) == expected
    assert TASKS.sources("no_such_trigger") == frozenset()


def test_derived_sets_name_the_claimable_leased_and_final_statuses() -> None:
    # A task is claimed from queued into running; succeeded and failed end it, and
    # nothing leaves them.
    assert TASKS.claimable == {TaskStatus.QUEUED}
    assert TASKS.leased == TaskStatus.RUNNING
    assert TASKS.final == {TaskStatus.SUCCEEDED, TaskStatus.FAILED}
    for status in TASKS.final:
        assert TASKS.allowed_triggers(status) == ()
    assert TASKS.sources("expire") == {TaskStatus.RUNNING}
    assert TASKS.dests("expire") == {TaskStatus.QUEUED, TaskStatus.FAILED}
    assert TASKS.dests("fail") == {TaskStatus.QUEUED, TaskStatus.FAILED}
    assert DEMO.claimable == frozenset()
    assert DEMO.leased is None


def test_writes_are_the_status_plus_the_declared_fields() -> None:
    for row in TASKS.rows:
        declared = TASKS.effects[row.effect].writes if row.effect else ()
        assert TASKS.writes(row) == ("status", *declared)
    finish = next(row for row in DEMO.rows if row.trigger == "finish")
    assert DEMO.writes(finish) == ("status",)


# --- one machine per lifecycle -------------------------------------------------


def test_one_machine_per_lifecycle_and_firing_grows_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = TASKS.machine
    assert isinstance(machine, Machine)
    assert machine.models == []
    assert "to_queued" not in machine.events  # auto_transitions=False

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("firing must not add models or build machines")

    monkeypatch.setattr(Machine, "add_model", forbidden)
    monkeypatch.setattr(Machine, "__init__", forbidden)
    events_before = {name: len(event.transitions) for name, event in machine.events.items()}
    states_before = set(machine.states)

    records = [new_task(f"task-{n}", now=T0) for n in range(2_000)]
    claimed = [TASKS.fire("claim", record, held(T0)) for record in records]
    for record in claimed:
        with pytest.raises(TransitionRefused):
            TASKS.fire("claim", record, held(T0))
    assert all(record.status == TaskStatus.RUNNING for record in claimed)

    assert TASKS.machine is machine
    assert machine.models == []
    assert not machine._transition_queue
    assert {name: len(e.transitions) for name, e in machine.events.items()} == events_before
    assert set(machine.states) == states_before
    gc.collect()
    assert not [obj for obj in gc.get_objects() if isinstance(obj, engine._Adapter)]


def test_the_shared_machine_fires_correctly_from_many_threads() -> None:
    # One machine serves every record, so workers in threads share it: each firing
    # must see only its own record and inputs.
    records = [new_task(f"task-{n}", now=T0 + n % 7) for n in range(400)]

    def fire_all(offset: int) -> list[Task]:
        out = []
        for record in records:
            now = T0 + offset
            try:
                out.append(TASKS.fire("claim", record, TaskInputs(
                    now=now, worker_id=f"worker-{offset}", lease_token=f"t-{record.task_id}")))
            except TransitionRefused as refused:
                assert refused.guard == "is_due"
                out.append(record)
        return out

    offsets = list(range(8))
    expected = [fire_all(offset) for offset in offsets]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(fire_all, offsets)) == expected
    assert TASKS.machine.models == []


# --- records whose attrs validators read other fields ---------------------------------


class Phase(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


def _high_not_below_low(instance: Any, attribute: Any, value: int) -> None:
    if value < instance.low:
        raise ValueError(f"high {value} is below low {instance.low}")


@attrs.frozen
class Window:
    """A record with a plain attrs validator that reads another field."""

    key: str
    status: Phase
    low: int
    high: int = attrs.field(validator=_high_not_below_low)


@effect("high", "low")
def move_window(r: Window, i: dict[str, int]) -> Changes:
    """Move the window to the inputs' bounds."""
    return {"high": i["high"], "low": i["low"]}


WINDOW: Lifecycle[Window, dict[str, int]] = Lifecycle(
    module=__name__,
    name="window", statuses=Phase,
    table=[{"trigger": "move", "source": "open", "dest": "open", "after": "move_window"},
           {"trigger": "close", "source": "open", "dest": "closed"}],
    initial=Phase.OPEN, final=[Phase.CLOSED], creation="create", guards=[],
    effects=[move_window], invariants=InvariantSet("window.invalid", []), record_type=Window,
    key_field="key", not_allowed_code="window.not_allowed",
)


def test_a_transition_validates_like_attrs_evolve_when_validators_read_other_fields() -> None:
    window = Window("w", Phase.OPEN, low=5, high=6)
    # (2, 3) is a valid window: attrs.evolve builds it, so must the engine.
    assert attrs.evolve(window, high=3, low=2) == Window("w", Phase.OPEN, 2, 3)
    assert WINDOW.fire("move", window, {"high": 3, "low": 2}) == Window("w", Phase.OPEN, 2, 3)
    # (7, 6) is not: attrs.evolve refuses it, so must the engine.
    with pytest.raises(ValueError, match="below low"):
        attrs.evolve(window, high=6, low=7)
    with pytest.raises(ValueError, match="below low"):
        WINDOW.fire("move", window, {"high": 6, "low": 7})


def _low_not_above_high(instance: Any, attribute: Any, value: int) -> None:
    if value > instance.high:
        raise ValueError(f"low {value} is above high {instance.high}")


@attrs.frozen
class Range:
    """The validator sits on ``low`` and reads ``high``: a change of ``high`` alone must
    still run it (attrs.evolve runs every validator)."""

    key: str
    status: Phase
    low: int = attrs.field(validator=_low_not_above_high)
    high: int = 0


@effect("high")
def move_high(r: Range, i: dict[str, int]) -> Changes:
    """Move the upper bound."""
    return {"high": i["high"]}


RANGE: Lifecycle[Range, dict[str, int]] = Lifecycle(
    module=__name__,
    name="range", statuses=Phase,
    table=[{"trigger": "move", "source": "open", "dest": "open", "after": "move_high"},
           {"trigger": "close", "source": "open", "dest": "closed"}],
    initial=Phase.OPEN, final=[Phase.CLOSED], creation="create", guards=[],
    effects=[move_high], invariants=InvariantSet("range.invalid", []), record_type=Range,
    key_field="key", not_allowed_code="range.not_allowed",
)


def test_a_transition_runs_validators_of_unchanged_fields_that_read_changed_ones() -> None:
    bounds = Range("r", Phase.OPEN, low=5, high=9)
    with pytest.raises(ValueError, match="above high"):
        attrs.evolve(bounds, high=2)
    with pytest.raises(ValueError, match="above high"):
        RANGE.fire("move", bounds, {"high": 2})
    assert RANGE.fire("move", bounds, {"high": 5}) == Range("r", Phase.OPEN, 5, 5)
