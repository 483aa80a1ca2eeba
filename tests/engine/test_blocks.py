"""Retry and lease building blocks (lifecycles.machines._blocks): named guards, effects and
invariants generated for a record's own field names.

Each block must decide what its meaning says, in the author's field names; its code is
generated, so the tests also hold that the table version digests it (a changed field
name, bound or backoff changes the version, in every process, whatever linecache holds),
that the claim row built from ``is_due`` and ``take_lease`` has its symbolic (SQL) form,
that the invariants are expressions SQL health checks, and that a bad declaration is
refused with its check named.
"""

from __future__ import annotations

import hashlib
import inspect
import linecache
import sqlite3
import subprocess
import sys
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles.invariants._core import InvariantSet
from lifecycles.machines._blocks import (
    Backoff,
    InputNames,
    Leasing,
    Retry,
    WorkInputs,
    named_in,
    source_of,
)
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import DefinitionError, Guard, TransitionRefused
from lifecycles.machines._symbolic import symbolic_row
from lifecycles.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


class Status(StrEnum):
    IDLE = "idle"
    HELD = "held"
    WAITING = "waiting"
    DONE = "done"
    DEAD = "dead"


@attrs.frozen
class Task:
    key: str
    status: Status
    tries: int = 0
    most: int = 3
    due_at: float = 0.0
    ready_at: float = 0.0
    owner: str | None = None
    token: str | None = None
    until: float | None = None
    error: str | None = None
    touched: float = 0.0


TABLE: list[dict[str, Any]] = [
    {"trigger": "claim", "source": ["idle", "waiting"], "dest": "held",
     "conditions": ["is_due"], "after": "take_lease"},
    {"trigger": "renew", "source": "held", "dest": "=",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "extend_lease"},
    {"trigger": "finish", "source": "held", "dest": "done",
     "conditions": ["lease_is_held", "lease_is_live"], "after": "end_lease"},
    {"trigger": "fail", "source": "held", "dest": "waiting",
     "conditions": ["lease_is_held", "lease_is_live", "retry_allowed"],
     "after": "schedule_retry"},
    {"trigger": "fail", "source": "held", "dest": "dead",
     "conditions": ["lease_is_held", "lease_is_live"], "unless": ["retry_allowed"],
     "after": "give_up"},
    {"trigger": "rescue", "source": "held", "dest": "waiting",
     "conditions": ["lease_has_expired", "failures_remain"], "after": "retry_after_expiry"},
    {"trigger": "rescue", "source": "held", "dest": "dead",
     "conditions": ["lease_has_expired"], "unless": ["failures_remain"],
     "after": "give_up_after_expiry"},
]

BACKOFF = Backoff(base=10.0, cap=100.0)


def leasing(**changed: Any) -> Leasing:
    declared: dict[str, Any] = dict(owner="owner", token="token", expires="until",
                                    due="due_at", order_by=("due_at", "key"), claim="claim",
                                    expiry="rescue", updated="touched", codes="task.")
    return Leasing(**{**declared, **changed})


def retry(lease: Leasing, **changed: Any) -> Retry:
    declared: dict[str, Any] = dict(failures="tries", max_failures="most", due="due_at",
                                    error="error", backoff=BACKOFF, clears=lease.fields,
                                    updated="touched", codes="task.")
    return Retry(**{**declared, **changed})


def tasks(lease: Leasing | None = None, policy: Retry | None = None,
          table: list[dict[str, Any]] = TABLE) -> Lifecycle[Task, WorkInputs]:
    lease = lease or leasing()
    policy = policy or retry(lease)
    guards, effects = named_in(table, lease, policy)
    return Lifecycle(
        module=__name__,
        name="tasks", statuses=Status, table=table, initial=Status.IDLE,
        final=[Status.DONE, Status.DEAD], creation="create", guards=guards, effects=effects,
        invariants=InvariantSet("task.state_invalid",
                                [*policy.invariants, *lease.invariants(table)],
                                steps=[*lease.step_invariants(table), *policy.steps]),
        record_type=Task, key_field="key", not_allowed_code="task.not_allowed",
        lease=lease.lease,
    )


LEASE = leasing()
RETRY = retry(LEASE)
TASKS = tasks(LEASE, RETRY)


def held(now: float = 5.0, **changed: Any) -> tuple[Task, WorkInputs]:
    """A task claimed at ``now`` by w1 with lease t1, and the holder's inputs."""
    inputs = WorkInputs(now=now, worker_id="w1", lease_token="t1", lease_seconds=60.0)
    task = TASKS.fire("claim", Task("k", Status.IDLE, **changed), inputs)
    return task, inputs


# --- the backoff ----------------------------------------------------------------------


def test_backoff_is_capped_exponential_as_documented() -> None:
    backoff = Backoff(base=5.0, cap=300.0)
    assert [backoff.delay(n) for n in range(1, 10)] == [
        5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    assert Backoff(2.0, 1000.0, factor=3.0).delay(4) == 54.0
    assert Backoff(7.0, 7.0).delay(1) == Backoff(7.0, 7.0).delay(50) == 7.0
    assert Backoff(0.0, 10.0).delay(30) == 0.0
    assert backoff.delay(100_000) == 300.0  # the exponent stops at the cap: no overflow


def test_the_saturation_exponent_is_the_first_that_reaches_the_cap() -> None:
    for base, cap, factor in [(5.0, 300.0, 2.0), (1.0, 1024.0, 2.0), (0.1, 0.3, 1.5),
                              (3.0, 3.0, 2.0), (1.0, 1e300, 1.0001)]:
        exponent = Backoff(base, cap, factor).saturation
        assert base * factor ** exponent >= cap
        assert exponent == 0 or base * factor ** (exponent - 1) < cap


def test_jitter_is_pure_a_hash_of_the_key_and_the_failure_count() -> None:
    backoff = Backoff(base=30.0, cap=3600.0, jitter=0.2)
    for key in ("rf-1", "rf-2", "ä-3"):
        for n in (1, 2, 5, 12):
            delay = min(3600.0, 30.0 * 2.0 ** (n - 1))
            digest = hashlib.sha256(f"{key}:{n}".encode()).digest()
            spread = int.from_bytes(digest[:8], "big") / 2.0**64
            assert backoff.delay(n, key) == delay * (1.0 - 0.2 * spread)
            assert delay * 0.8 < backoff.delay(n, key) <= delay
            assert backoff.delay(n, key) == backoff.delay(n, key)  # reproducible
    spread_out = {backoff.delay(3, f"rf-{n}") for n in range(50)}
    assert len(spread_out) == 50  # records failing together do not retry together


@pytest.mark.parametrize(("arguments", "said"), [
    ((10.0, 5.0), "base 10 is above cap 5"),
    ((-1.0, 5.0), "base must be a finite number >= 0"),
    ((1.0, float("inf")), "cap must be a finite number >= 0"),
    ((float("nan"), 5.0), "base must be a finite number >= 0"),
    ((1.0, 5.0, 0.5), "factor must be a finite number >= 1"),
    ((1.0, 5.0, 2.0, 1.5), "jitter 1.5 is above 1"),
    ((1.0, 5.0, 2.0, -0.1), "jitter must be a finite number >= 0"),
    ((True, 5.0), "base must be a finite number >= 0"),
    (("1", 5.0), "base must be a finite number >= 0"),
])
def test_a_bad_backoff_is_refused_naming_the_check(arguments: tuple[Any, ...],
                                                   said: str) -> None:
    with pytest.raises(DefinitionError) as refused:
        Backoff(*arguments)
    assert (refused.value.code, refused.value.check) == (
        "lifecycles.definition_invalid", "backoff_declared")
    assert said in str(refused.value)


# --- the retry blocks -------------------------------------------------------------------


def test_failures_remain_and_retry_allowed_count_one_more_failure() -> None:
    lease_held, inputs = held()
    limit_three = attrs.evolve(lease_held, tries=1)
    retryable = attrs.evolve(inputs, error="timeout", retryable=True)
    assert RETRY.failures_remain.test(limit_three, inputs)  # 1 + 1 < 3
    assert not RETRY.failures_remain.test(attrs.evolve(limit_three, tries=2), inputs)
    assert RETRY.retry_allowed.test(limit_three, retryable)
    assert not RETRY.retry_allowed.test(limit_three, inputs)  # not retryable
    assert not RETRY.retry_allowed.test(attrs.evolve(limit_three, tries=2), retryable)
    assert RETRY.failures_remain.meaning == "Another failure is allowed: tries + 1 < most."
    assert (RETRY.failures_remain.refusal_code, RETRY.retry_allowed.refusal_code) == (
        "task.failures_spent", "task.retry_not_allowed")


def test_a_constant_bound_is_written_into_the_code_and_the_meaning() -> None:
    policy = retry(LEASE, max_failures=2)
    assert policy.failures_remain.meaning == "Another failure is allowed: tries + 1 < 2."
    assert "return r.tries + 1 < 2" in (source_of(policy.failures_remain.test) or "")
    task = Task("k", Status.WAITING, tries=1, most=20, error="x")
    assert not policy.failures_remain.test(task, WorkInputs(now=0.0))
    assert not policy.failures_within_max.holds(attrs.evolve(task, tries=3))
    assert policy.failures_within_max.holds(attrs.evolve(task, tries=2))


def test_a_retry_counts_the_failure_waits_the_backoff_and_ends_the_lease() -> None:
    lease_held, inputs = held(now=5.0, tries=1, most=3, error="refused")
    failing = attrs.evolve(inputs, now=20.0, error="timeout", retryable=True)
    waiting = TASKS.fire("fail", lease_held, failing)
    assert (waiting.status, waiting.tries, waiting.error) == ("waiting", 2, "timeout")
    assert waiting.due_at == 20.0 + BACKOFF.delay(2) == 40.0
    assert (waiting.owner, waiting.token, waiting.until, waiting.touched) == (
        None, None, None, 20.0)
    final = TASKS.fire("fail", lease_held, attrs.evolve(failing, retryable=False))
    assert (final.status, final.tries, final.error, final.due_at) == ("dead", 2, "timeout",
                                                                      lease_held.due_at)


def test_an_expired_lease_counts_as_a_failure_with_a_fixed_error() -> None:
    lease_held, _ = held(now=5.0, tries=0, most=2)
    rescuer = WorkInputs(now=65.0, worker_id="w2", lease_token="t2")
    waiting = TASKS.fire("rescue", lease_held, rescuer)
    assert (waiting.status, waiting.tries, waiting.error, waiting.due_at) == (
        "waiting", 1, "lease_expired", 65.0 + 10.0)
    assert (waiting.owner, waiting.token, waiting.until) == (None, None, None)
    spent = TASKS.fire("rescue", attrs.evolve(lease_held, tries=1), rescuer)
    assert (spent.status, spent.tries, spent.error) == ("dead", 2, "lease_expired")
    with pytest.raises(TransitionRefused) as refused:
        TASKS.fire("rescue", lease_held, attrs.evolve(rescuer, now=64.0))
    assert (refused.value.code, refused.value.guard) == ("task.lease_live",
                                                         "lease_has_expired")


def test_each_effect_writes_exactly_what_it_declares() -> None:
    lease_held, inputs = held(tries=1, error="refused")
    failing = attrs.evolve(inputs, error="e", retryable=True)
    for block in (*RETRY.effects, *LEASE.effects):
        changes = block.compute(lease_held, failing)
        assert set(changes) == set(block.writes), block.name


# --- the lease blocks -------------------------------------------------------------------


def test_the_lease_guards_compare_the_holder_and_the_clock() -> None:
    task, inputs = held(now=5.0)  # until 65
    assert (task.owner, task.token, task.until, task.touched) == ("w1", "t1", 65.0, 5.0)
    assert LEASE.lease_is_held.test(task, inputs)
    assert not LEASE.lease_is_held.test(task, attrs.evolve(inputs, worker_id="w2"))
    assert not LEASE.lease_is_held.test(task, attrs.evolve(inputs, lease_token="t0"))
    assert LEASE.lease_is_live.test(task, attrs.evolve(inputs, now=64.9))
    assert not LEASE.lease_is_live.test(task, attrs.evolve(inputs, now=65.0))
    assert LEASE.lease_has_expired.test(task, attrs.evolve(inputs, now=65.0))
    assert not LEASE.lease_has_expired.test(task, attrs.evolve(inputs, now=64.9))
    idle = Task("k", Status.IDLE, due_at=10.0)
    assert not LEASE.is_due.test(idle, WorkInputs(now=9.5))
    assert LEASE.is_due.test(idle, WorkInputs(now=10.0))
    assert not LEASE.lease_is_live.test(idle, WorkInputs(now=0.0))  # no lease at all
    assert not LEASE.lease_has_expired.test(idle, WorkInputs(now=99.0))


def test_a_renewal_keeps_the_holder_and_never_shortens_the_lease() -> None:
    task, inputs = held(now=5.0)  # until 65
    renewed = TASKS.fire("renew", task, attrs.evolve(inputs, now=50.0))
    assert (renewed.status, renewed.owner, renewed.token, renewed.until) == (
        "held", "w1", "t1", 110.0)
    shorter = TASKS.fire("renew", task, attrs.evolve(inputs, now=10.0, lease_seconds=5.0))
    assert shorter.until == 65.0  # max(until, now + lease_seconds)
    for other, code in ((attrs.evolve(inputs, worker_id="w2"), "task.lease_lost"),
                        (attrs.evolve(inputs, now=65.0), "task.lease_expired")):
        with pytest.raises(TransitionRefused) as refused:
            TASKS.fire("renew", task, other)
        assert refused.value.code == code


def test_the_lease_invariant_and_step_invariants_state_the_protocol() -> None:
    (fields,) = LEASE.invariants(TABLE)
    task, inputs = held(now=5.0)
    assert fields.holds(task)
    assert not fields.holds(attrs.evolve(task, token=None))
    assert not fields.holds(attrs.evolve(task, status=Status.WAITING))
    assert fields.holds(Task("k", Status.DONE))
    steps = {rule.name: rule for rule in LEASE.step_invariants(TABLE)}
    idle = Task("k", Status.IDLE, due_at=5.0)
    mint = steps["claim_mints_a_new_token"]
    assert mint.holds(idle, task, inputs)
    assert not mint.holds(attrs.evolve(idle, token="t1"), task, inputs)  # the token before
    assert not mint.holds(idle, task, attrs.evolve(inputs, lease_token="t9"))
    due = steps["claimed_only_when_due"]
    assert due.holds(idle, task, inputs)
    assert not due.holds(attrs.evolve(idle, due_at=6.0), task, inputs)
    keeps = steps["renewal_keeps_the_lease"]
    assert keeps.holds(task, attrs.evolve(task, until=99.0))
    assert not keeps.holds(task, attrs.evolve(task, until=64.0))
    assert not keeps.holds(task, attrs.evolve(task, token="t2"))
    moved = steps["lease_moved_by_holder_or_expiry"]
    done = attrs.evolve(task, status=Status.DONE, owner=None, token=None, until=None)
    assert moved.holds(task, done, attrs.evolve(inputs, now=64.0))  # the holder, live
    assert not moved.holds(task, done, attrs.evolve(inputs, now=65.0))  # the holder, late
    stranger = WorkInputs(now=65.0, worker_id="w2", lease_token="t2")
    assert moved.holds(task, done, stranger)  # another, once expired
    assert not moved.holds(task, done, attrs.evolve(stranger, now=64.0))  # early
    assert {rule.name for rule in LEASE.step_invariants(TABLE)} == set(steps) == {
        "claim_mints_a_new_token", "claimed_only_when_due", "renewal_keeps_the_lease",
        "lease_moved_by_holder_or_expiry"}


def test_the_leased_status_is_derived_from_the_claim_rows() -> None:
    assert LEASE.leased_status(TABLE) == "held" == TASKS.leased
    (rule,) = LEASE.invariants(TABLE)
    assert rule.meaning == "owner, token and until are all set in held, and all empty otherwise."
    for table in ([], [{"trigger": "claim", "source": "idle", "dest": "="}],
                  [*TABLE, {"trigger": "claim", "source": "dead", "dest": "idle"}]):
        with pytest.raises(DefinitionError) as refused:
            LEASE.invariants(table)
        assert refused.value.check == "lease_blocks"


# --- names, inputs, declarations -------------------------------------------------------


def test_two_policies_share_a_lifecycle_by_prefix_or_rename() -> None:
    first = retry(LEASE, prefix="payment_")
    second = retry(LEASE, rename={"schedule_retry": "retry_refund", "give_up": "abandon"})
    assert first.schedule_retry.name == "payment_schedule_retry"
    assert first.failures_within_max.name == "payment_failures_within_max"
    assert (second.schedule_retry.name, second.give_up.name,
            second.retry_after_expiry.name) == ("retry_refund", "abandon", "retry_after_expiry")
    assert second.schedule_retry.compute.__name__ == "retry_refund"
    with pytest.raises(DefinitionError) as refused:
        retry(LEASE, rename={"schedule_retyr": "x"})
    assert refused.value.check == "block_names" and "schedule_retyr" in str(refused.value)


def test_inputs_are_read_under_the_names_declared() -> None:
    @attrs.frozen
    class Polled:
        at: float
        who: str | None = None
        lease: str | None = None
        seconds: float = 60.0
        code: str | None = None
        again: bool = False

    names = InputNames(now="at", worker_id="who", lease_token="lease",
                       lease_seconds="seconds", error="code", retryable="again")
    lease = leasing(inputs=names)
    policy = retry(lease, inputs=names)
    task = Task("k", Status.IDLE)
    taken = lease.take_lease.compute(task, Polled(at=3.0, who="w", lease="t"))
    assert taken == {"owner": "w", "token": "t", "until": 63.0, "touched": 3.0}
    assert policy.retry_allowed.test(task, Polled(at=3.0, again=True))
    assert lease.is_due.meaning == "The record is due: due_at <= i.at."


@pytest.mark.parametrize(("build", "check", "said"), [
    (lambda: retry(LEASE, max_failures=0), "retry_blocks", "an int >= 1"),
    (lambda: retry(LEASE, max_failures=True), "retry_blocks", "an int >= 1"),
    (lambda: retry(LEASE, max_failures="max-failures"), "retry_blocks", "no identifier"),
    (lambda: retry(LEASE, backoff=Backoff(1.0, 2.0, jitter=0.5)), "retry_blocks",
     "needs key="),
    (lambda: retry(LEASE, backoff=5.0), "retry_blocks", "must be a Backoff"),
    (lambda: retry(LEASE, clears=("owner; import os",)), "retry_blocks", "no identifier"),
    (lambda: leasing(due="__class__"), "lease_blocks", "no identifier"),
    (lambda: leasing(owner="class"), "lease_blocks", "no identifier"),
    (lambda: leasing(inputs=InputNames(now="now()")), "lease_blocks", "no identifier"),
    (lambda: retry(LEASE, prefix="1st "), "block_names", "no identifier"),
])
def test_a_bad_declaration_is_refused_naming_the_check(build: Any, check: str,
                                                       said: str) -> None:
    with pytest.raises(DefinitionError) as refused:
        build()
    assert (refused.value.code, refused.value.check) == ("lifecycles.definition_invalid",
                                                         check)
    assert said in str(refused.value)


def test_named_in_gives_what_the_table_names_in_table_order() -> None:
    guards, effects = named_in(TABLE, RETRY, LEASE)
    assert [g.name for g in guards] == ["is_due", "lease_is_held", "lease_is_live",
                                        "retry_allowed", "lease_has_expired",
                                        "failures_remain"]
    assert "extend_lease" in [e.name for e in effects]
    assert [e.name for e in named_in(TABLE[:1], LEASE)[1]] == ["take_lease"]
    other: Guard[Any, Any] = Guard("is_due", lambda r, i: True, "x.no", "Always.")
    with pytest.raises(DefinitionError) as refused:
        named_in(TABLE, LEASE, [other])
    assert refused.value.check == "block_names" and "is_due" in str(refused.value)
    with pytest.raises(TypeError):
        named_in(TABLE, "is_due")


# --- generated code: versions, pages, symbolic form, SQL ------------------------------------


def test_a_blocks_code_is_kept_on_it_and_shown_by_inspect_and_tracebacks() -> None:
    assert source_of(leasing) is None  # written in a module: inspect reads it there
    source = source_of(RETRY.schedule_retry.compute) or ""
    assert "def backoff(n):" in source and "def schedule_retry(r, i):" in source
    assert '"due_at": i.now + backoff(failures)' in source
    lease = leasing()  # generated now: whatever another test did to linecache
    assert inspect.getsource(lease.is_due.test).endswith("return r.due_at <= i.now\n")
    with pytest.raises(AttributeError) as raised:
        lease.is_due.test(Task("k", Status.IDLE), object())
    assert "return r.due_at <= i.now" in "".join(traceback.format_exception(raised.value))


def built(**changes: Any) -> Lifecycle[Task, WorkInputs]:
    lease_changes = {key: value for key, value in changes.items() if key in ("due",)}
    lease = leasing(**lease_changes)
    policy = retry(lease, **{key: value for key, value in changes.items()
                             if key not in lease_changes})
    return tasks(lease, policy)


def version(**changes: Any) -> str:
    return built(**changes).table_version


@pytest.mark.parametrize("changes", [
    {"backoff": Backoff(base=10.0, cap=200.0)},
    {"backoff": Backoff(base=10.0, cap=100.0, factor=3.0)},
    {"backoff": Backoff(base=10.0, cap=100.0, jitter=0.1), "key": "key"},
    {"max_failures": 3},
    {"expired_error": "lost_lease"},
    {"due": "ready_at"},
])
def test_a_changed_field_name_bound_or_backoff_changes_the_version(
        changes: dict[str, Any]) -> None:
    assert version() == TASKS.table_version
    assert version(**changes) != TASKS.table_version


def test_the_version_digests_the_kept_source_whatever_linecache_holds() -> None:
    before = (version(), version(max_failures=3))
    declared = (built(), built(max_failures=3))
    linecache.clearcache()  # inspect can no longer read the generated code
    with pytest.raises(OSError):
        inspect.getsource(declared[0].guards["is_due"].test)
    after = tuple(lifecycle.table_version for lifecycle in declared)
    assert after == before and after[0] != after[1]


def test_the_same_blocks_give_the_same_version_in_another_process() -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from examples.refund.lifecycle import REFUND; print(REFUND.table_version)")
    sys.path.insert(0, str(ROOT))
    try:
        from examples.refund.lifecycle import REFUND
    finally:
        sys.path.remove(str(ROOT))
    there = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True,
                           text=True, check=True, cwd=ROOT / "tests").stdout.strip()
    assert there == REFUND.table_version


def test_a_claim_row_built_from_is_due_and_take_lease_has_a_symbolic_form() -> None:
    claims = [row for row in TASKS.rows if row.trigger == "claim"]
    assert [row.source for row in claims] == ["idle", "waiting"]
    for row in claims:
        form = symbolic_row(TASKS, row)
        assert [condition.key for condition in form.conditions] == [
            ("Compare", "<=", ("Attr", "due_at"), ("Input", "now"))]
        assert {name: value.key for name, value in form.assignments.items()} == {
            "owner": ("Input", "worker_id"), "token": ("Input", "lease_token"),
            "until": ("Arith", "+", ("Input", "now"), ("Input", "lease_seconds")),
            "touched": ("Input", "now"), "status": ("Const", Status.HELD)}


def test_the_invariants_are_expressions_sql_health_checks(tmp_path: Path) -> None:
    assert all(rule.expression is not None for rule in TASKS.invariants)
    connection = sqlite3.connect(tmp_path / "tasks.db")
    store = SQLiteStore(TASKS, connection)
    assert store.rule_queries().python_only == ()
    task, _ = held()
    store.insert(Task("a", Status.IDLE))
    store.insert(attrs.evolve(task, key="b"))
    store.insert(Task("c", Status.IDLE))
    assert store.health(now=0.0).broken == 0
    with connection:  # behind the store's back: what another program could write
        connection.execute("UPDATE lifecycle_tasks SET tries = 5 WHERE key = 'a'")
        connection.execute("UPDATE lifecycle_tasks SET token = NULL WHERE key = 'b'")
        connection.execute("UPDATE lifecycle_tasks SET error = 'e' WHERE key = 'c'")
    health = store.health(now=0.0)
    assert (health.total, health.broken, health.python_only) == (3, 3, ())
    assert dict(health.violations) == {"failures_within_max": 1, "error_iff_failures": 2,
                                       "lease_fields_iff_leased": 1}
    connection.close()
