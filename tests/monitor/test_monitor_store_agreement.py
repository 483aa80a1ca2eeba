"""The monitor's exact schemas agree with every other store, record for record.

The stores' agreement itself is tested on the tests' tasks
(tests/stores/test_store_agreement.py); here it is held on the monitor's production
schemas, SQLite's and PostgreSQL's, which the reference reads and writes too.

One Hypothesis ``RuleBasedStateMachine`` drives the monitor on all stores at once
(memory, SQLite with the exact monitor schema, files, PostgreSQL with the exact
monitor schema) with the same operations: register, claim, complete with each kind
of receiver answer (and answers that cannot be trusted), fail an attempt, move the
clock so that leases expire, recover expired leases. Each operation must have the
same outcome everywhere (the same new record, or the same refusal code), and after
every step the stores must hold the same records, counts, due and expired numbers.
Lease tokens are injected, so records are compared whole, tokens included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support.postgres import DSN, require_postgres
from support.store_kinds import KINDS, MONITOR_SCHEMA_KINDS, Opened, StoreKind

from lifecycles.invariants import InvariantViolation
from lifecycles.invariants.monitor import MonitorRecord, ReceiverStatus
from lifecycles.machines import TransitionRefused
from lifecycles.machines.monitor import (
    MONITOR,
    MonitorInputs,
    ReceiverAnswer,
    RetryPolicy,
    complete_with_answer,
    new_record,
)
from lifecycles.stores import StaleRecord, Store

BY_NAME = {kind.name: kind for kind in (*KINDS, *MONITOR_SCHEMA_KINDS)}
LOCAL = ("memory", "sqlite-monitor-schema", "files")
EVERY = (*LOCAL, "postgres-monitor-schema")
POLICY = RetryPolicy(poll_interval_seconds=30.0, base_delay_seconds=5.0, max_delay_seconds=60.0)
MAX_ITEMS = 5
WORKERS = ("w1", "w2", "w3")
STALE = st.sampled_from([False, False, False, True])  # a stale token one time in four
ANSWER_KINDS = ("succeeded", "failed", "pending", "leased", "retry_wait", "unfit", "untrusted")

Outcome = tuple[str, Any]


def outcome(action: Callable[[], Any]) -> Outcome:
    """What an operation did: its result, or the stable code it was refused with."""
    try:
        return ("done", action())
    except (TransitionRefused, StaleRecord, InvariantViolation) as refusal:
        return ("refused", refusal.code)


def receiver_answer(kind: str, now: float) -> ReceiverAnswer | None:
    """A receiver answer of ``kind``; ``unfit`` parses but its record would break a rule
    (retry_wait without an error code); ``untrusted`` is one parse_answer refused."""
    if kind == "untrusted":
        return None
    status = ReceiverStatus("retry_wait" if kind == "unfit" else kind)
    return ReceiverAnswer(
        processing_status=status,
        attempts=1,
        max_attempts=3,
        next_attempt_at=now + 5,
        lease_expires_at=now + 60 if status == ReceiverStatus.LEASED else None,
        lease_expired=False,
        last_error_code="cms.receiver_busy" if kind in ("retry_wait", "failed") else None,
        processed_at=now if status == ReceiverStatus.SUCCEEDED else None,
    )


class StoresAgree(RuleBasedStateMachine):
    """The same operations on every store; they must never disagree."""

    kinds: Sequence[StoreKind] = ()

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[Opened] = []
        for kind in self.kinds:
            self.opened.append(kind.open(MONITOR))
        self.stores: list[Store[MonitorRecord]] = [o.store for o in self.opened]
        self.now = 1000.0
        self.items = 0
        self.tokens = 0

    def teardown(self) -> None:
        for opened in self.opened:
            opened.close()

    def same_everywhere(self, act: Callable[[Store[MonitorRecord]], Any]) -> Outcome:
        outcomes = [outcome(lambda store=store: act(store)) for store in self.stores]
        for kind, seen in zip(self.kinds[1:], outcomes[1:], strict=True):
            assert seen == outcomes[0], f"{kind.name} disagrees with {self.kinds[0].name}"
        return outcomes[0]

    def pick(self, data: st.DataObject) -> str:
        """Mostly an item some worker holds (so completions land), sometimes any item."""
        leased = [r.event_id for r in self.stores[0].scan() if r.lease_token is not None]
        anything = [f"e{i}" for i in range(self.items)]
        if leased and data.draw(st.sampled_from([True, True, True, False]), label="leased?"):
            return data.draw(st.sampled_from(leased), label="key")
        return data.draw(st.sampled_from(anything), label="key")

    # -- rules: the verbs -----------------------------------------------------------

    @precondition(lambda self: self.items < MAX_ITEMS)
    @rule(max_failures=st.integers(1, 4))
    def register(self, max_failures: int) -> None:
        record = new_record(
            event_id=f"e{self.items}", notification_id=f"n{self.items}", site_id="site-1",
            terminal_status="published", notification_sha256="a" * 64,
            max_failures=max_failures, now=self.now,
        )
        self.items += 1
        self.same_everywhere(lambda store: store.insert(MONITOR.create(record)))

    @rule(worker=st.sampled_from(WORKERS), lease_seconds=st.sampled_from([5.0, 45.0]))
    def claim(self, worker: str, lease_seconds: float) -> None:
        self.tokens += 1
        inputs = MonitorInputs(
            now=self.now, policy=POLICY, worker_id=worker, lease_token=f"t{self.tokens}",
            lease_seconds=lease_seconds,
        )
        self.same_everywhere(lambda store: store.claim(inputs))

    def lease_of(self, key: str, stale: bool) -> MonitorInputs:
        record = self.stores[0].get(key)
        owner = record.lease_owner if record is not None else None
        token = record.lease_token if record is not None else None
        if stale or token is None:
            return MonitorInputs(now=self.now, policy=POLICY, worker_id=owner or "w1",
                                 lease_token="t-stale")
        return MonitorInputs(now=self.now, policy=POLICY, worker_id=owner, lease_token=token)

    @precondition(lambda self: self.items > 0)
    @rule(data=st.data(), kind=st.sampled_from(ANSWER_KINDS), stale=STALE)
    def complete(self, data: st.DataObject, kind: str, stale: bool) -> None:
        key = self.pick(data)
        lease = self.lease_of(key, stale)
        answer = receiver_answer(kind, self.now)

        def act(store: Store[MonitorRecord]) -> Any:
            with store.transaction():
                record = store.get(key)
                assert record is not None

                def fire(trigger: str, r: MonitorRecord, i: MonitorInputs) -> MonitorRecord:
                    return store.fire(r, trigger, i)

                return complete_with_answer(record, answer, lease, fire)

        self.same_everywhere(act)

    @precondition(lambda self: self.items > 0)
    @rule(data=st.data(), retryable=st.booleans(), stale=STALE)
    def fail(self, data: st.DataObject, retryable: bool, stale: bool) -> None:
        key = self.pick(data)
        lease = self.lease_of(key, stale)
        inputs = MonitorInputs(
            now=self.now, policy=POLICY, worker_id=lease.worker_id,
            lease_token=lease.lease_token, error_code="cms.reader_down", retryable=retryable,
        )

        def act(store: Store[MonitorRecord]) -> Any:
            with store.transaction():
                record = store.get(key)
                assert record is not None
                return store.fire(record, "fail_attempt", inputs)

        self.same_everywhere(act)

    @rule(seconds=st.sampled_from([1.0, 6.0, 40.0, 400.0]))
    def move_the_clock(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def recover_expired(self) -> None:
        inputs = MonitorInputs(now=self.now, policy=POLICY)

        def act(store: Store[MonitorRecord]) -> Any:
            with store.transaction():
                return sorted(store.recover_expired(inputs), key=MONITOR.key_of)

        self.same_everywhere(act)

    # -- after every step: the predicates ---------------------------------------------

    @invariant()
    def every_store_holds_the_same_records(self) -> None:
        self.same_everywhere(lambda store: list(store.scan()))

    @invariant()
    def every_store_counts_the_same(self) -> None:
        self.same_everywhere(lambda store: (
            store.count_by_status(), store.count_due(self.now), store.count_expired(self.now)
        ))


def agreement_cases() -> list[Any]:
    cases = [pytest.param(LOCAL, id="-".join(LOCAL))]
    if DSN is None:
        cases.append(pytest.param(EVERY, id="-".join(EVERY) + "-unavailable"))
    else:
        cases = [pytest.param(EVERY, id="-".join(EVERY))]  # a superset of the local run
    return cases


@pytest.mark.parametrize("names", agreement_cases())
def test_every_store_agrees_record_for_record(names: Sequence[str]) -> None:
    if any(BY_NAME[name].postgres for name in names):
        require_postgres()  # skips from the one shared line without a server
    missing = [BY_NAME[name].missing for name in names if BY_NAME[name].missing]
    assert missing == [], missing  # files exists by now; postgres needs its server

    class Machine(StoresAgree):
        kinds = tuple(BY_NAME[name] for name in names)

    run_state_machine_as_test(Machine)
