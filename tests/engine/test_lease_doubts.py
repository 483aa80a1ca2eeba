"""What a worker's doubt resolves to (machines/lease.py ``resume``), without any store.

A doubt is the tokens of a write that failed unconfirmed. Given what a store found
leased under them, the worker takes up again exactly the records it still holds (its
token, its name as holder, a live lease), in claim order and at most as many as it
asked for; the rest of those stay in doubt; everything else is settled. The same
decision on every store: the memory store's generic ``leased_under`` answers here too.
The records are the tests' own leased tasks (tests/support/tasks.py).
"""

from __future__ import annotations

from typing import Any

from support.tasks import TASKS, TaskInputs, new_task

from lifecycles.machines import lease
from lifecycles.stores._memory import MemoryStore

LEASE_SECONDS = 30.0


def pending(i: int) -> Any:
    return new_task(f"e{i}", now=float(i))


def leased_to(i: int, worker: str, token: str, now: float = 10.0) -> Any:
    inputs = TaskInputs(now=now, worker_id=worker, lease_token=token,
                        lease_seconds=LEASE_SECONDS)
    return TASKS.fire("claim", pending(i), inputs)


def doubt(*tokens: str, worker: str = "w1", expires_at: float = 40.0) -> lease.Doubt:
    return lease.Doubt(frozenset(tokens), expires_at, (("worker_id", worker),))


def test_the_records_still_held_are_taken_in_claim_order_up_to_the_limit() -> None:
    found = [leased_to(2, "w1", "t2"), leased_to(0, "w1", "t0"), leased_to(1, "w1", "t1")]
    resumed = lease.resume(TASKS, doubt("t0", "t1", "t2"), found, now=20.0, limit=2)
    assert [r.task_id for r in resumed.taken] == ["e0", "e1"]
    # The one not taken stays in doubt, alone, until its own lease's end.
    assert resumed.left == doubt("t2", expires_at=10.0 + LEASE_SECONDS)


def test_every_token_not_found_held_is_settled() -> None:
    """Its claim never committed, or its completion did: nothing is left in doubt."""
    resumed = lease.resume(TASKS, doubt("t0", "gone"), [leased_to(0, "w1", "t0")],
                           now=20.0, limit=5)
    assert [r.lease_token for r in resumed.taken] == ["t0"]
    assert resumed.left is None
    assert lease.resume(TASKS, doubt("gone"), [], now=20.0, limit=1) == lease.Resumed([], None)


def test_a_record_the_worker_no_longer_holds_is_never_taken() -> None:
    expired = leased_to(0, "w1", "t0", now=0.0)  # its lease ends at 30
    other_holder = leased_to(1, "w2", "t1")  # the same token under another name
    other_token = leased_to(2, "w1", "t9")
    finished = pending(3)  # no lease at all
    found = [expired, other_holder, other_token, finished]
    resumed = lease.resume(TASKS, doubt("t0", "t1", "t2"), found, now=30.0, limit=5)
    assert resumed == lease.Resumed([], None)
    assert not lease.holds(TASKS, expired, doubt("t0"), now=30.0)
    assert lease.holds(TASKS, expired, doubt("t0"), now=29.5)


def test_a_doubt_is_spent_once_its_last_lease_has_run_out() -> None:
    assert not lease.doubt_is_spent(doubt("t0", expires_at=40.0), 39.9)
    assert lease.doubt_is_spent(doubt("t0", expires_at=40.0), 40.0)


def test_the_generic_store_query_finds_the_live_leases_under_the_tokens() -> None:
    store = MemoryStore(TASKS)
    for record in (leased_to(1, "w1", "t1"), leased_to(0, "w2", "t0"), pending(2),
                   leased_to(3, "w1", "t3", now=3.0)):  # t3 ends at 33
        store.insert(record)
    assert [r.task_id for r in store.leased_under({"t0", "t1", "t3", "t9"}, 35.0)] == [
        "e0", "e1"]  # live at 35, in claim order; t3's lease ended at 33
    assert store.leased_under(set(), 35.0) == []
