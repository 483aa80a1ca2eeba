"""The checker's memo (lifecycles.machines._memo), and the observers of a search.

A memo keeps a bounded number of keys and never takes one object for another; a fire the
search repeats in one state is still told to every observer, as the engine tells it. The
monitor's memoized exploration is held to its uncached work in
tests/engine/test_exploration_memo_on_the_monitor.py.
"""

from __future__ import annotations

import attrs
from support.observers import Counting
from support.tasks_inputs import EXPLORATION, claims

from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import trigger_move
from lifecycles.machines._memo import ByIdentity, memoized


def test_a_memo_starts_again_empty_when_full_and_never_confuses_two_objects() -> None:
    calls: list[int] = []

    def compute(record: int) -> list[int]:
        calls.append(record)
        return [record]

    cached = memoized(lambda record: record % 3, compute, limit=2)
    assert cached(1) == (1,) and cached(4) == (1,) and calls == [1]
    cached(2)
    cached(3)  # the third key: the cache starts again with it alone
    assert cached(1) == (1,) and calls == [1, 2, 3, 1]
    by_identity: ByIdentity[int] = ByIdentity(limit=10)
    first, second = [1], [1]  # equal, not the same object
    assert by_identity.get(first, "k", lambda: 1) == 1
    assert by_identity.get(second, "k", lambda: 2) == 2
    assert by_identity.get(first, "k", lambda: 3) == 1


def test_a_repeated_fire_is_told_to_every_observer_as_the_engine_tells_it() -> None:
    """The search fires each (trigger, inputs) once per state; a repeat (here every claim,
    offered by a second move too) is still an attempt, and a row fired, for every
    observer: the coverage counts them."""
    repeating = attrs.evolve(EXPLORATION,
                             moves=(*EXPLORATION.moves, trigger_move("claim", claims)))
    for exploration, attempts in ((EXPLORATION, 198), (repeating, 204)):
        counting = Counting()
        with exploration.lifecycle.observing(counting):
            result = explore(exploration)
        assert result.coverage is not None
        assert counting.attempts == result.coverage.attempts == attempts
        assert counting.rows == sum(result.coverage.row_fires.values())
