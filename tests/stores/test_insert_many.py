"""``Store.insert_many``, on every lifecycle and every store of the conformance suite.

A batch answers, record by record, what ``insert`` of each in turn would: the new record,
or the one stored under its key (a record earlier in the same batch included); a record
duplicating another unique value (the monitor's notification_id, on its exact schemas)
is that record's ``UniqueViolation`` and never undoes the others; a record that breaks an
invariant raises, naming its key, and nothing of the batch is written. PostgreSQL does it
set-based (tests/stores/test_postgres_batches.py); the others insert each.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from support.store_kinds import Opened, StoreKind
from test_conformance import ALL, Driver, fire_steps, opened, snapshot

from lifecycles.invariants._core import InvariantViolation
from lifecycles.stores._base import UniqueViolation

__all__ = ["opened"]  # the conformance suite's fixture, used by name

MONITOR_SCHEMAS = [case for case in ALL if case.id.startswith("monitor-")
                   and case.id.endswith("-monitor-schema")]


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_a_batch_answers_what_inserting_each_in_turn_would(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    # Stored and moved on: an existing key's answer is the record as stored, not as sent.
    stored = fire_steps(store, store.insert(driver.new(1)), driver.prepare)
    batch = [driver.new(2), driver.new(1), driver.new(3), driver.new(2), driver.new(4)]
    answers = store.insert_many(batch)
    assert answers == [driver.new(2), stored, driver.new(3), driver.new(2), driver.new(4)]
    assert list(store.scan()) == sorted(
        [stored, driver.new(2), driver.new(3), driver.new(4)], key=lifecycle.key_of)
    for number in (2, 3, 4):
        assert store.get(lifecycle.key_of(driver.new(number))) == driver.new(number)


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_a_record_breaking_an_invariant_writes_nothing_of_its_batch(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    store.insert(driver.new(1))
    before = snapshot(store)
    field, value = driver.corruption
    broken = attrs.evolve(driver.new(3), **{field: value})
    with pytest.raises(InvariantViolation) as raised:
        store.insert_many([driver.new(2), broken, driver.new(4)])
    assert raised.value.code == lifecycle.invariants.code
    assert raised.value.keys == (lifecycle.key_of(broken),)
    assert snapshot(store) == before


@pytest.mark.parametrize(("driver", "kind"), ALL)
def test_an_empty_batch_answers_nothing_and_changes_nothing(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store = opened.store
    store.insert(driver.new(1))
    before = snapshot(store)
    assert store.insert_many([]) == []
    assert snapshot(store) == before


def clashing(driver: Driver, key: int, notification_of: int) -> Any:
    """Record ``key`` holding the notification_id of record ``notification_of``."""
    return attrs.evolve(driver.new(key), notification_id=driver.new(notification_of)
                        .notification_id)


@pytest.mark.parametrize(("driver", "kind"), MONITOR_SCHEMAS)
def test_a_duplicate_unique_value_is_that_records_refusal_alone(
    driver: Driver, kind: StoreKind, opened: Opened
) -> None:
    store, lifecycle = opened.store, driver.lifecycle
    store.insert(driver.new(1))
    batch = [
        driver.new(2),
        clashing(driver, 90, 1),  # a stored record's notification_id
        driver.new(3),
        clashing(driver, 91, 2),  # the notification_id of a record earlier in the batch
        clashing(driver, 90, 92),  # the first's key again, now with a free value
    ]
    answers = store.insert_many(batch)
    assert answers[0] == driver.new(2) and answers[2] == driver.new(3)
    for refused in (answers[1], answers[3]):
        assert isinstance(refused, UniqueViolation)
        assert refused.code == "lifecycles.unique_violation"
    assert answers[4] == batch[4]  # as a later insert finds the key free, it is written
    assert [lifecycle.key_of(r) for r in store.scan()] == ["e01", "e02", "e03", "e90"]
    assert store.get("e90") == batch[4]
    assert store.get("e91") is None
