"""Caches for the checker's pure work that repeats from state to state.

An exploration's inputs are built from a record (``choices(record)``) and many states
feed the same ones: the monitor's polls depend on the record's clock and lease, not on
its failures or receiver fields. :func:`memoized` computes such a function once per value
of exactly the fields it reads (its ``reads``, declared beside it and held to it by a
test that compares it with the uncached function on every explored record).
:class:`ByIdentity` caches a pure function of an object that is never changed once
built (frozen, or built and kept by the exploration itself), keyed on the object itself:
it holds the object, so its ``id`` cannot be reused while the entry lives.

Both are bounded: a cache that outgrows :data:`LIMIT` entries starts again empty, so a
long search or a long-lived process never keeps more than that.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

R = TypeVar("R")
V = TypeVar("V")

LIMIT = 20_000
"""Entries a cache keeps before it starts again empty."""


def memoized(reads: Callable[[R], Hashable], compute: Callable[[R], Sequence[V]],
             limit: int = LIMIT) -> Callable[[R], tuple[V, ...]]:
    """``compute(record)`` as a tuple, computed once per value of ``reads(record)``.

    ``reads`` must return every field ``compute`` reads (and nothing whose equality is
    looser than the values': the fields are exact ``str``, ``int``, ``float`` or ``None``).
    The tuple is shared by every state with those fields, so nobody may change it.
    """
    cache: dict[Hashable, tuple[V, ...]] = {}

    def cached(record: R) -> tuple[V, ...]:
        key = reads(record)
        found = cache.get(key)
        if found is None:
            if len(cache) >= limit:
                cache.clear()
            found = cache[key] = tuple(compute(record))
        return found

    cached.__name__ = cached.__qualname__ = getattr(compute, "__name__", "cached")
    cached.__doc__ = compute.__doc__
    cached.uncached = compute  # type: ignore[attr-defined]  # for the test against it
    return cached


class ByIdentity(Generic[V]):
    """Results of a pure function of an unchanging object (and a hashable ``extra``)."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._entries: dict[tuple[int, Hashable], tuple[object, V]] = {}
        self._limit = limit

    def get(self, subject: object, extra: Hashable, compute: Callable[[], V]) -> V:
        key = (id(subject), extra)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is subject:
            return entry[1]
        if len(self._entries) >= self._limit:
            self._entries.clear()
        value = compute()
        self._entries[key] = (subject, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)


def identity_of(*fields: str) -> Callable[[Any], tuple[Any, ...]]:
    """The ``reads`` of a function that reads exactly ``fields`` of its record."""
    import operator

    getter = operator.attrgetter(*fields)
    if len(fields) == 1:
        return lambda record: (getter(record),)
    return getter
