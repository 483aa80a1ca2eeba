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
long search or a long-lived process never keeps more than that. :class:`Repeats` is the
search's own: each (trigger, inputs) fired once per state.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle
    from lifecycles.machines._declaration import Row

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


def _by_value(inputs: object, known: dict[type, bool] = {}) -> bool:  # noqa: B006 - a cache
    """Whether ``inputs`` hash by value (frozen attrs, tuples, str...): two equal ones are
    the same inputs to a pure transition. Mutable objects hash by identity, or not at all."""
    kind = type(inputs)
    found = known.get(kind)
    if found is None:
        found = known[kind] = kind.__hash__ is not None and kind.__hash__ is not object.__hash__
    return found


class Repeats:
    """``lifecycle.fire`` that fires each (trigger, inputs object) once per state.

    A transition is a pure function of (record, inputs), and a state's moves often fire
    the same inputs (the monitor's rejected answers all fail the attempt alike). On a
    repeat the observers are told exactly what the engine told them the first time (the
    attempt, then the row fired or nothing) and the same record or error comes back.
    Only fires on the state's own record, with inputs that hash by value (frozen ones:
    a mutable object could change between two fires), are kept.
    """

    def __init__(self, lifecycle: Lifecycle[Any, Any], fired: Any) -> None:
        """``fired``: the search's observer; it keeps the last row fired as ``fired.row``."""
        self.lifecycle, self.fired = lifecycle, fired
        self.record: Any = None
        # By id(inputs): (inputs, trigger, row fired or None, record made, error raised)
        self.seen: dict[int, tuple[Any, str, Row | None, Any, BaseException | None]] = {}

    def start(self, record: Any) -> None:
        self.record = record
        self.seen.clear()

    def fire(self, trigger: str, record: Any, inputs: Any) -> Any:
        lifecycle = self.lifecycle
        if record is not self.record:
            return lifecycle.fire(trigger, record, inputs)
        # Keyed on the inputs object (the entry holds it, so its id is not reused): a
        # declaration that makes equal inputs one object (the monitor's) has them found
        # without hashing their value on every fire. Only inputs by value have entries.
        entry = self.seen.get(id(inputs))
        if entry is None:
            if not _by_value(inputs):
                return lifecycle.fire(trigger, record, inputs)
            self.fired.row = None
            try:
                after = lifecycle.fire(trigger, record, inputs)
            except Exception as error:
                self.seen[id(inputs)] = (inputs, trigger, None, None, error)
                raise
            self.seen[id(inputs)] = (inputs, trigger, self.fired.row, after, None)
            return after
        if entry[1] != trigger:  # the same inputs to another trigger: fired as they come
            return lifecycle.fire(trigger, record, inputs)
        _, _, row, after, raised = entry
        observers = lifecycle._observers
        for observer in observers:
            observer.attempted(lifecycle, trigger, record, inputs)
        if raised is not None:
            raise raised.with_traceback(None)
        for observer in observers:
            observer.fired(lifecycle, row, record, after)  # type: ignore[arg-type]
        return after
