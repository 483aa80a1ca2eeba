"""The search raises the garbage collector's first threshold while it runs, and puts back
what it found when the last search running ends (nested ones included). Any search will
do: the tests' own leased lifecycle (:mod:`support.tasks`) is searched."""

from __future__ import annotations

import gc

from support.tasks_inputs import exploration as tasks_exploration

from lifecycles.machines import _exploration as exploration
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import YOUNG_OBJECTS


def test_the_threshold_is_raised_during_a_search_and_restored_after() -> None:
    found = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []

    def progress(_: object) -> None:
        seen.append(gc.get_threshold())

    original = exploration.PROGRESS_AFTER
    exploration.PROGRESS_AFTER = 0.0  # hear from the search at once
    try:
        gc.set_threshold(700, *found[1:])
        with exploration._COLLECTIONS.fewer():  # an outer search still running
            explore(tasks_exploration(), progress=progress)
            assert gc.get_threshold() == (YOUNG_OBJECTS, *found[1:])
        assert seen and all(threshold[0] == YOUNG_OBJECTS for threshold in seen)
        assert gc.get_threshold() == (700, *found[1:])
        gc.set_threshold(0, *found[1:])  # automatic collection off: left off
        explore(tasks_exploration())
        assert gc.get_threshold() == (0, *found[1:])
    finally:
        exploration.PROGRESS_AFTER = original
        gc.set_threshold(*found)
