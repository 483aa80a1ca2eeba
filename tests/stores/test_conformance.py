"""One conformance suite: every lifecycle on every store, through the same tests.

The store contract (stores/_base.py) promises atomicity, compare-and-set, idempotent
creation, validation on read and, for leased lifecycles, claim order and expiry
recovery. Each test below runs for every (lifecycle, store) pair: the lifecycles
this installation registers (plus the outbox when its module exists but is not yet
registered), and the stores in tests/store_kinds.py (memory, SQLite file on disk,
files, PostgreSQL; the monitor also on its exact production schemas). A pair that
cannot run here is listed with ``-unavailable`` in its id and the reason, except the
PostgreSQL pairs: without LIFECYCLES_TEST_POSTGRES_DSN they are left out and
``test_the_postgresql_stores_run_with_a_server`` skips once, so the reason is reported
once (tests/support/postgres.py).

A lifecycle gets a :class:`Driver`: how to build its record number ``i``, one step
that changes a record's status, a rival step from the same record, and a stored
value that breaks an invariant. A registered lifecycle without a driver fails
``test_every_registered_lifecycle_has_a_driver``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from conftest import POSTGRES_DSN_VARIABLE
from support.postgres import DSN, SKIP_REASON, require_postgres
from support.store_kinds import Opened, StoreKind, kinds_for

from lifecycles._registry import registered
from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import TransitionRefused
from lifecycles.stores._base import StaleRecord, Store

Step = tuple[str, Any]  # (trigger, inputs)


@attrs.frozen
class Driver:
    """What the suite needs to know about one lifecycle to exercise its store."""

    lifecycle: Lifecycle[Any, Any]
    new: Callable[[int], Any]
    prepare: Sequence[Step]  # steps after creation that lead to where `change` applies
    change: Step  # changes the record's status (or lease token)
    rival: Step  # a different step from the same record
    corruption: tuple[str, Any]  # (field, value) that passes field rules, breaks an invariant
    claim: Callable[[float, str], Any] | None = None  # claim inputs at (now, token)
    creation_time: Callable[[int], float] | None = None


def monitor_driver() -> Driver:
    from lifecycles.machines.monitor import MONITOR, MonitorInputs, new_record

    def new(i: int) -> Any:
        # created_at falls as i rises, so lease order (created_at, event_id) is not key order.
        return new_record(
            event_id=f"e{i:02d}", notification_id=f"n{i}", site_id="site-1",
            terminal_status="published", notification_sha256="a" * 64, max_failures=3,
            now=100.0 - i,
        )

    return Driver(
        lifecycle=MONITOR,
        new=new,
        prepare=(),
        change=("claim", MonitorInputs(now=200.0, worker_id="w1", lease_token="t1")),
        rival=("claim", MonitorInputs(now=200.0, worker_id="w2", lease_token="t2")),
        corruption=("failures", 99),
        claim=lambda now, token: MonitorInputs(
            now=now, worker_id="w-" + token, lease_token=token, lease_seconds=30.0
        ),
        creation_time=lambda i: 100.0 - i,
    )


def outbox_driver() -> Driver:
    from lifecycles.invariants.outbox import OutboxRecord, entry_id_for
    from lifecycles.machines.outbox import OUTBOX, OutboxInputs

    def new(i: int) -> Any:
        run, transaction = f"run-{i}", f"tx-{i}"
        return OutboxRecord(
            version="1", run_id=run, transaction_id=transaction, action="complete",
            result={"item": i, "note": "é ☃", "ratio": 0.1, "list": [1, None, True]},
            error="", reopen=False, entry_id=entry_id_for(run, transaction),
            state="pending", attempts=0, created_at=f"2026-01-01T00:00:{i:02d}+00:00",
            last_attempt_at=None, last_error=None,
        )

    later = "2026-01-02T00:00:00+00:00"
    return Driver(
        lifecycle=OUTBOX,
        new=new,
        prepare=(("attempt", OutboxInputs(now=later)),),
        change=("deliver", OutboxInputs(now=later)),
        rival=("quarantine", OutboxInputs(now=later, reason="cannot be trusted")),
        corruption=("action", "fail"),
    )


DRIVERS: dict[str, Callable[[], Driver]] = {"monitor": monitor_driver, "outbox": outbox_driver}


def lifecycle_names() -> list[str]:
    names = list(registered())
    if "outbox" not in names and importlib.util.find_spec("lifecycles.machines.outbox"):
        names.append("outbox")  # written, not yet registered: run it anyway
    return names


def cases(leased_only: bool = False) -> Iterator[Any]:
    for name in lifecycle_names():
        if name not in DRIVERS:
            continue  # reported by test_every_registered_lifecycle_has_a_driver
        driver = DRIVERS[name]()
        if leased_only and driver.lifecycle.lease is None:
            continue
        for kind in kinds_for(name):
            if kind.postgres and DSN is None:
                continue  # see test_the_postgresql_stores_run_with_a_server
            if kind.missing:
                yield pytest.param(driver, kind, id=f"{name}-{kind.name}-unavailable",
                                   marks=pytest.mark.skip(reason=kind.missing))
            else:
                yield pytest.param(driver, kind, id=f"{name}-{kind.name}")


ALL = list(cases())
LEASED = list(cases(leased_only=True))


@pytest.fixture
def opened(driver: Driver, kind: StoreKind) -> Iterator[Opened]:
    store = kind.open(driver.lifecycle)
    try:
        yield store
    finally:
        store.close()


def snapshot(store: Store[Any]) -> tuple[list[Any], dict[str, int]]:
    return list(store.scan()), store.count_by_status()


def fire_steps(store: Store[Any], record: Any, steps: Sequence[Step]) -> Any:
    for trigger, inputs in steps:
        with store.transaction():
            record = store.fire(record, trigger, inputs)
    return record


def test_every_registered_lifecycle_has_a_driver() -> None:
    assert set(registered()) <= set(DRIVERS)


def test_the_postgresql_stores_run_with_a_server() -> None:
    """Stands in for the PostgreSQL pairs left out without a server: skips, with the reason."""
    require_postgres()
    kinds = [value for case in ALL for value in case.values if isinstance(value, StoreKind)]
    assert {kind.name for kind in kinds if kind.postgres} == {"postgres",
                                                               "postgres-monitor-schema"}


def test_without_a_server_the_postgresql_skip_is_reported_once() -> None:
    """Without the DSN, ``pytest -ra`` over the PostgreSQL suites names the reason once."""
    root = Path(__file__).resolve().parents[2]
    environment = {name: value for name, value in os.environ.items()
                   if name != POSTGRES_DSN_VARIABLE}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider",
         "-k", "not reported_once", "tests/stores/test_postgres_store.py",
         "tests/stores/test_conformance.py"],
        cwd=root, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = run.stdout.partition("short test summary info")[2]
    mentions = [line for line in summary.splitlines() if "PostgreSQL" in line]
    assert len(mentions) == 1, run.stdout
    assert re.fullmatch(r"SKIPPED \[\d+\] tests/support/postgres\.py:\d+: (.*)", mentions[0])
    assert mentions[0].endswith(": " + SKIP_REASON) and POSTGRES_DSN_VARIABLE in SKIP_REASON


# --- the contract, for every lifecycle on every store ------------------------------


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_an_inserted_record_reads_back_equal(driver: Driver, kind: StoreKind,
                                             opened: Opened) -> None:
    store, record = opened.store, driver.new(1)
    assert store.insert(record) == record
    assert store.get(driver.lifecycle.key_of(record)) == record
    assert store.get(driver.lifecycle.key_of(driver.new(2))) is None


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_inserting_an_existing_key_returns_what_is_stored_and_changes_nothing(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store = opened.store
    stored = fire_steps(store, store.insert(driver.new(1)), driver.prepare)
    before = snapshot(store)
    assert store.insert(driver.new(1)) == stored
    assert snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_an_exception_inside_a_transaction_leaves_nothing(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store = opened.store
    record = fire_steps(store, store.insert(driver.new(1)), driver.prepare)
    before = snapshot(store)
    trigger, inputs = driver.change
    with pytest.raises(RuntimeError, match="abandon"), store.transaction():
        store.insert(driver.new(2))
        store.fire(record, trigger, inputs)
        raise RuntimeError("abandon the transaction")
    assert snapshot(store) == before
    assert store.get(driver.lifecycle.key_of(driver.new(2))) is None


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_a_stale_write_is_refused_and_changes_nothing(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    read = fire_steps(store, store.insert(driver.new(1)), driver.prepare)
    fire_steps(store, read, [driver.change])  # someone else moved on
    before = snapshot(store)
    trigger, inputs = driver.rival
    row = lifecycle.select_row(trigger, read, inputs)
    with pytest.raises(StaleRecord) as raised:
        store.write(read, lifecycle.apply_row(row, read, inputs), row)
    assert raised.value.code == "lifecycles.stale_record"
    assert snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_a_write_that_breaks_an_invariant_is_refused_and_changes_nothing(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    read = fire_steps(store, store.insert(driver.new(1)), driver.prepare)
    before = snapshot(store)
    trigger, inputs = driver.change
    row = lifecycle.select_row(trigger, read, inputs)
    field, value = driver.corruption
    broken = attrs.evolve(lifecycle.apply_row(row, read, inputs), **{field: value})
    with pytest.raises(InvariantViolation) as raised:
        store.write(read, broken, row)
    assert raised.value.code == lifecycle.invariants.code
    assert snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_a_refused_transition_changes_nothing(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    record = fire_steps(store, store.insert(driver.new(1)), [*driver.prepare, driver.change])
    before = snapshot(store)
    trigger, inputs = driver.change  # already taken: not allowed from the new status
    with pytest.raises(TransitionRefused) as raised, store.transaction():
        store.fire(record, trigger, inputs)
    assert raised.value.code == lifecycle.not_allowed_code
    assert snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_a_corrupted_stored_record_is_refused_on_read(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    store.insert(driver.new(2))
    record = store.insert(driver.new(1))
    kind.corrupt(store, record, *driver.corruption)
    with pytest.raises(InvariantViolation) as raised:
        store.get(lifecycle.key_of(record))
    assert raised.value.code == lifecycle.invariants.code
    with pytest.raises(InvariantViolation):
        list(store.scan())
    assert store.get(lifecycle.key_of(driver.new(2))) == driver.new(2)


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_scan_yields_every_record_once_in_key_order(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    records = [driver.new(i) for i in (3, 1, 12, 0, 7)]
    for record in records:
        store.insert(record)
    fire_steps(store, records[2], [*driver.prepare, driver.change])
    keys = [lifecycle.key_of(r) for r in store.scan()]
    assert keys == sorted(lifecycle.key_of(r) for r in records)


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_counts_by_status_name_every_status(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    assert store.count_by_status() == {s.value: 0 for s in lifecycle.statuses}
    for i in range(3):
        store.insert(driver.new(i))
    moved = fire_steps(store, driver.new(0), [*driver.prepare, driver.change])
    expected = {s.value: 0 for s in lifecycle.statuses}
    expected[lifecycle.initial.value] += 2
    expected[str(lifecycle.status_of(moved))] += 1
    assert store.count_by_status() == expected


# --- leases: claim order, expiry recovery, fencing -------------------------------------


def claim(driver: Driver, store: Store[Any], now: float, token: str) -> Any:
    assert driver.claim is not None
    return store.claim(driver.claim(now, token))


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_claims_follow_the_lease_order_and_take_only_due_records(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    assert driver.creation_time is not None
    for i in (0, 1, 2, 3):
        store.insert(driver.new(i))
    # Record i is due from creation_time(i): at that moment only the earlier-due ones are.
    due_now = driver.creation_time(2)
    claimed = [claim(driver, store, due_now, f"t{n}") for n in range(3)]
    assert [lifecycle.key_of(r) for r in claimed[:2]] == [
        lifecycle.key_of(driver.new(3)), lifecycle.key_of(driver.new(2))
    ]
    assert claimed[2] is None
    later = [claim(driver, store, due_now + 20, f"u{n}") for n in range(3)]  # leases still live
    assert [lifecycle.key_of(r) for r in later[:2]] == [
        lifecycle.key_of(driver.new(1)), lifecycle.key_of(driver.new(0))
    ]
    assert later[2] is None
    assert store.count_by_status()[str(lifecycle.leased)] == 4


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_an_expired_lease_is_recovered_by_the_next_claim(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    assert lifecycle.lease is not None
    store.insert(driver.new(0))
    first = claim(driver, store, 200.0, "t1")
    expiry = getattr(first, lifecycle.lease.expires_field)
    assert store.count_expired(expiry - 0.5) == 0
    assert store.expired_leases(expiry - 0.5) == []
    assert store.count_expired(expiry) == 1
    assert store.expired_leases(expiry) == [first]
    assert store.count_due(expiry) == 0
    second = claim(driver, store, expiry, "t2")
    assert lifecycle.key_of(second) == lifecycle.key_of(first)
    assert store.token_of(second) == "t2"
    assert store.count_expired(expiry) == 0


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_a_write_under_a_superseded_lease_token_is_refused(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    assert lifecycle.lease is not None
    store.insert(driver.new(0))
    first = claim(driver, store, 200.0, "t1")
    expiry = getattr(first, lifecycle.lease.expires_field)
    claim(driver, store, expiry, "t2")  # recovers t1's lease, grants t2
    before = snapshot(store)
    recovery = attrs.evolve(driver.claim(expiry, "t3"))  # type: ignore[misc]
    row = lifecycle.select_row(lifecycle.lease.expiry_trigger, first, recovery)
    with pytest.raises(StaleRecord):
        store.write(first, lifecycle.apply_row(row, first, recovery), row)
    assert snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_on_lease_sees_each_grant_and_its_failure_undoes_the_claim(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    store.insert(driver.new(0))
    store.insert(driver.new(1))
    seen: list[Any] = []
    store.on_lease = seen.append
    granted = claim(driver, store, 200.0, "t1")
    assert seen == [granted]
    before = snapshot(store)

    def refuse(record: Any) -> None:
        raise RuntimeError("the audit trail is unavailable")

    store.on_lease = refuse
    with pytest.raises(RuntimeError, match="audit"):
        claim(driver, store, 200.0, "t2")
    assert snapshot(store) == before
    assert store.count_due(200.0) == 1
    assert lifecycle.key_of(granted) == lifecycle.key_of(driver.new(1))


def cycled(driver: Driver, store: Store[Any], read: Any, at: float) -> tuple[Any, float]:
    """``read`` claimed and its lease rescued: back in a claimable status, no token."""
    lifecycle = driver.lifecycle
    assert driver.claim is not None and lifecycle.lease is not None
    leased = store.claim(driver.claim(at, f"cycle-{at}"))
    assert leased is not None and lifecycle.key_of(leased) == lifecycle.key_of(read)
    expiry = float(getattr(leased, lifecycle.lease.expires_field))
    (rescued,) = store.recover_expired(driver.claim(expiry, "rescuer"))
    return rescued, expiry


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_a_write_outside_a_transaction_matches_the_whole_record(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    """Status and token came back as they were (claimed, rescued, twice); the record did not."""
    store, lifecycle = opened.store, driver.lifecycle
    store.insert(driver.new(0))
    once, at = cycled(driver, store, driver.new(0), 200.0)
    twice, at = cycled(driver, store, once, at)
    assert lifecycle.status_of(twice) == lifecycle.status_of(once)
    assert store.token_of(twice) is None and store.token_of(once) is None and twice != once
    before = snapshot(store)
    assert driver.claim is not None
    inputs = driver.claim(at, "late")
    row = lifecycle.select_row(lifecycle.lease.trigger, once, inputs)  # type: ignore[union-attr]
    with pytest.raises(StaleRecord):
        store.write(once, lifecycle.apply_row(row, once, inputs), row)
    assert snapshot(store) == before
    store.write(twice, lifecycle.apply_row(row, twice, inputs), row)  # the current one is written


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_a_glance_answers_what_the_protocol_would_over_the_stored_records(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    from lifecycles.machines import lease

    store, lifecycle = opened.store, driver.lifecycle
    assert driver.creation_time is not None
    for i in (0, 1, 2):
        store.insert(driver.new(i))
    first = claim(driver, store, 200.0, "t1")
    expiry = float(getattr(first, lifecycle.lease.expires_field))  # type: ignore[union-attr]
    for now in (driver.creation_time(2) - 1, driver.creation_time(1), 200.0, expiry):
        seen = store.glance(now)
        if seen is None:  # a store that offers no glance: every claim takes a transaction
            assert kind.name != "memory" and not kind.name.startswith("sqlite"), kind.name
            continue
        records = list(store.scan())
        assert seen == lease.Glance(bool(lease.expired_among(lifecycle, records, now)),
                                    lease.first_due(lifecycle, records, now))


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_claim_many_leases_due_records_in_claim_order_each_with_its_own_token(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    assert driver.creation_time is not None and driver.claim is not None
    for i in (0, 1, 2, 3):
        store.insert(driver.new(i))
    due_now = driver.creation_time(1)  # records 3, 2, 1 are due, in that claim order
    tokens = iter(["t0", "t1", "t2", "t3"])
    granted = store.claim_many(lambda n: driver.claim(due_now, next(tokens)), 2)  # type: ignore[misc]
    assert [lifecycle.key_of(r) for r in granted] == [
        lifecycle.key_of(driver.new(3)), lifecycle.key_of(driver.new(2))]
    assert [store.token_of(r) for r in granted] == ["t0", "t1"]
    assert [store.get(lifecycle.key_of(r)) for r in granted] == granted
    rest = store.claim_many(lambda n: driver.claim(due_now, f"u{n}"), 10)  # type: ignore[misc]
    assert [lifecycle.key_of(r) for r in rest] == [lifecycle.key_of(driver.new(1))]
    assert store.claim_many(lambda n: driver.claim(due_now, f"v{n}"), 10) == []  # type: ignore[misc]


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_claim_many_commits_all_its_leases_or_none(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store = opened.store
    assert driver.claim is not None
    for i in (0, 1, 2):
        store.insert(driver.new(i))
    before = snapshot(store)
    seen: list[Any] = []

    def audit(record: Any) -> None:
        seen.append(record)
        if len(seen) == 3:
            raise RuntimeError("the audit trail is unavailable")

    store.on_lease = audit
    with pytest.raises(RuntimeError, match="audit"):
        store.claim_many(lambda n: driver.claim(200.0, f"t{n}"), 3)  # type: ignore[misc]
    assert len(seen) == 3 and snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), LEASED)
def test_due_answers_the_first_due_records_in_claim_order(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    from lifecycles.machines import lease

    store, lifecycle = opened.store, driver.lifecycle
    assert driver.creation_time is not None
    for i in range(5):
        store.insert(driver.new(i))
    claim(driver, store, driver.creation_time(4), "t1")  # one leased: never due
    keys = [lifecycle.key_of(driver.new(i)) for i in range(5)]
    for now in (driver.creation_time(4) - 1, driver.creation_time(2), 200.0):
        for limit in (1, 2, 10):
            for exclude in (frozenset(), frozenset(keys[1:3])):
                expected = lease.due_in_order(lifecycle, list(store.scan()), now, limit, exclude)
                assert store.due(now, limit, exclude) == expected, (now, limit, exclude)
