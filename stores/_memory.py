"""The in-memory reference store: the contract in a few lines, durable never.

Every real store is compared against this one by the conformance suite, so it
favours obviousness over speed. Its lease queries are the lease protocol's own pure
predicates (:mod:`lifecycles.machines.lease`) applied to the records it holds, so
the SQL stores' generated queries are tied to the protocol through it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.stores._base import StaleRecord, Store

R = TypeVar("R")


class MemoryStore(Store[R]):
    """Records in a dict. A transaction holds a lock and restores a snapshot on error.

    Implements the leasing contract (:class:`~lifecycles.machines.lease.LeasingStore`),
    its glance included, and the counts the shipped stores offer beside it
    (``count_due``, ``count_expired``, ``next_due``); for a lifecycle without a lease
    they raise ``NotLeasable``.
    """

    def __init__(self, lifecycle: Lifecycle[R, Any], records: Iterable[R] = ()) -> None:
        """``records``: what the store holds to begin with (the interleaving search
        starts each step from a world's records); each is checked when it is read."""
        self.lifecycle = lifecycle
        self._records: dict[str, R] = {lifecycle.key_of(record): record for record in records}
        self._lock = threading.RLock()
        self._depth = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            snapshot = dict(self._records)
            self._depth += 1
            try:
                yield
            except BaseException:
                self._records = snapshot
                raise
            finally:
                self._depth -= 1

    def get(self, key: str) -> R | None:
        record = self._records.get(key)
        return None if record is None else self.lifecycle.check(record)

    def insert(self, record: R) -> R:
        with self.transaction():
            key = self.lifecycle.key_of(record)
            existing = self._records.get(key)
            if existing is not None:
                return existing
            self._records[key] = self.lifecycle.check(record)
            return record

    def put(self, before: R, after: R, row: Row) -> None:
        key = self.lifecycle.key_of(before)
        with self.transaction():
            if self._records.get(key) != before:  # compare-and-set on the whole record
                raise StaleRecord(f"{key} changed since it was read")
            self._records[key] = after

    # -- the lease queries: the protocol's own pure answers over the records held ----

    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        found = self.due(now, 1, exclude)
        return found[0] if found else None

    def due(self, now: float, limit: int, exclude: frozenset[str] = frozenset()) -> list[R]:
        found = lease.due_in_order(self.lifecycle, self._records.values(), now, limit, exclude)
        return [self.lifecycle.check(record) for record in found]

    def glance(self, now: float) -> lease.Glance[R]:
        with self.transaction():
            return lease.Glance(
                bool(lease.expired_among(self.lifecycle, self._records.values(), now)),
                self.next_due(now),
            )

    def expired_leases(self, now: float) -> list[R]:
        return [
            self.lifecycle.check(record)
            for record in lease.expired_among(self.lifecycle, self._records.values(), now)
        ]

    def count_by_status(self) -> dict[str, int]:
        counts = {status.value: 0 for status in self.lifecycle.statuses}
        for record in self._records.values():
            counts[str(self.lifecycle.status_of(record))] += 1
        return counts

    def count_due(self, now: float) -> int:
        return sum(lease.is_due(self.lifecycle, r, now) for r in self._records.values())

    def count_expired(self, now: float) -> int:
        return len(self.expired_leases(now))

    def held(self) -> tuple[R, ...]:
        """Every record held, in key order, as stored (unchecked: a world's snapshot)."""
        return tuple(self._records[key] for key in sorted(self._records))

    def scan(self) -> Iterator[R]:
        for key in sorted(self._records):
            yield self.lifecycle.check(self._records[key])
