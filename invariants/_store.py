"""Whole-store invariants: named rules over every stored record at once.

A record's invariants (:mod:`lifecycles.invariants._core`) judge one record. Some rules
of leased work are about all of them together: a key is unique across statuses, at
most K items of one site are leased at once, a worker holds at most one live lease.
Such a rule is a :class:`StoreInvariant`, declared beside the table in the lifecycle's
``InvariantSet(..., store=[...])``, and read from a :class:`StoreView`:

* the interleaving (``lifecycles check``) asks every one in every world it reaches,
  with each worker's holdings;
* the generated tests with workers ask every one after every step, on the real store;
* ``health()`` asks those that do not read the workers (nothing stored says who holds
  what), and on a SQL store counts the ones with a SQL form (:func:`at_most_per`,
  :func:`unique_across`) in one query each;
* the auditor page lists them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

import attrs

from lifecycles.invariants._core import _meaning

R = TypeVar("R")

__all__ = [
    "GroupLimit", "Holding", "StoreInvariant", "StoreView", "at_most_per",
    "store_invariant", "unique_across",
]


@attrs.frozen
class Holding(Generic[R]):
    """A lease a worker holds: the record as the worker claimed (or last renewed) it,
    the lease token, and whether the lease is live (the stored record is leased under
    this token and has not expired)."""

    worker: str
    record: R
    token: str
    live: bool


@attrs.frozen
class StoreView(Generic[R]):
    """What a whole-store invariant reads: every stored record (``status_of`` reads its
    status as a string), the clock, and where
    the workers are modelled (the interleaving, the generated tests) what each holds;
    ``holdings`` is ``None`` where nobody knows (``health()``)."""

    records: tuple[R, ...]
    status_of: Callable[[R], str]
    now: float | None = None
    holdings: tuple[Holding[R], ...] | None = None

    def live_leases_by_worker(self) -> dict[str, list[Holding[R]]]:
        """Each worker's live leases (an empty view when the holdings are unknown)."""
        by_worker: dict[str, list[Holding[R]]] = {}
        for holding in self.holdings or ():
            if holding.live:
                by_worker.setdefault(holding.worker, []).append(holding)
        return by_worker


@attrs.frozen
class GroupLimit:
    """The SQL form of a rule "at most ``limit`` records share ``field`` among
    ``statuses``" (every status when empty): a store counts the groups over the limit."""

    field: str
    limit: int
    statuses: tuple[str, ...] = ()


@attrs.frozen
class StoreInvariant(Generic[R]):
    """A named predicate over the whole store; its docstring is its one-line meaning.

    ``reads_workers``: it reads :attr:`StoreView.holdings`, so only the interleaving
    and the generated tests with workers can ask it. ``sql``: a form a SQL store can
    count instead of reading every record."""

    name: str
    holds: Callable[[StoreView[R]], bool]
    meaning: str
    reads_workers: bool = False
    sql: GroupLimit | None = None

    def asked_of(self, view: StoreView[R]) -> bool:
        """Whether ``view`` can answer this rule (it knows the holdings, or needs none)."""
        return view.holdings is not None or not self.reads_workers

    def __repr__(self) -> str:
        return f"<store invariant {self.name}>"


@overload
def store_invariant(function: Callable[[StoreView[R]], bool], /) -> StoreInvariant[R]: ...
@overload
def store_invariant(
    *, reads_workers: bool = False,
) -> Callable[[Callable[[StoreView[R]], bool]], StoreInvariant[R]]: ...
def store_invariant(
    function: Callable[[StoreView[R]], bool] | None = None, /, *, reads_workers: bool = False,
) -> StoreInvariant[R] | Callable[[Callable[[StoreView[R]], bool]], StoreInvariant[R]]:
    """Declare ``function(view)`` as a whole-store invariant named after it, explained by
    its docstring; ``@store_invariant(reads_workers=True)`` for one about the workers'
    holdings."""
    def declare(function: Callable[[StoreView[R]], bool]) -> StoreInvariant[R]:
        return StoreInvariant(function.__name__, function, _meaning(function), reads_workers)

    return declare if function is None else declare(function)


def at_most_per(name: str, limit: int, field: str, *, statuses: Iterable[str] = (),
                meaning: str | None = None) -> StoreInvariant[Any]:
    """"At most ``limit`` records share a value of ``field``" among the records in
    ``statuses`` (every record when empty): at most K items of one site leased at once.
    Records whose ``field`` is ``None`` belong to no group."""
    wanted = tuple(str(status) for status in statuses)
    if limit < 1:
        raise ValueError(f"{name}: a limit of {limit} leaves no record a place")

    def holds(view: StoreView[Any]) -> bool:
        counts = Counter(
            getattr(record, field) for record in view.records
            if getattr(record, field) is not None
            and (not wanted or view.status_of(record) in wanted))
        return all(count <= limit for count in counts.values())

    among = f" among {', '.join(wanted)}" if wanted else ""
    default = (f"no two records{among} share a {field}" if limit == 1
               else f"at most {limit} records{among} share a {field}")
    return StoreInvariant(name, holds, meaning or default,
                          sql=GroupLimit(field, limit, wanted))


def unique_across(name: str, field: str, *, statuses: Iterable[str] = (),
                  meaning: str | None = None) -> StoreInvariant[Any]:
    """"No two records share a value of ``field``" among ``statuses`` (every status when
    empty): a key of the caller's unique across statuses, say."""
    return at_most_per(name, 1, field, statuses=statuses, meaning=meaning)
