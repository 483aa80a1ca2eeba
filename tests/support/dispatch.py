"""What the dispatch tests share: every lifecycle to compare, and a row or refusal as a value."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lifecycles._loading import find_exploration
from lifecycles._registry import registered
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row, TransitionRefused

ROOT = Path(__file__).resolve().parents[2]


def every_lifecycle() -> list[Lifecycle[Any, Any]]:
    """The registered lifecycles and the review example."""
    sys.path.insert(0, str(ROOT))  # examples/ imports as from a clone's root
    from examples.review.lifecycle import REVIEW

    return [*registered().values(), REVIEW]


def decided(select: Callable[[str, Any, Any], Row], trigger: str, record: Any,
            inputs: Any) -> Row | tuple[str, str | None]:
    """The row ``select`` chooses, or its refusal as (code, blocking guard)."""
    try:
        return select(trigger, record, inputs)
    except TransitionRefused as refusal:
        return (refusal.code, refusal.guard)


def firings_asked(lifecycle: Lifecycle[Any, Any], depth: int) -> Iterator[tuple[Any, Any]]:
    """Every (record, inputs) the lifecycle's exploration moves fire with, ``depth`` moves
    deep from its initial records (a refusal or a broken record ends a move; what it
    asked is yielded anyway)."""
    found = find_exploration(lifecycle)
    assert found is not None
    exploration = found[0]
    frontier, seen = list(exploration.initial()), set()
    for _ in range(depth):
        reached: list[Any] = []
        for record in frontier:
            if exploration.abstraction(record) in seen:
                continue
            seen.add(exploration.abstraction(record))
            for move in exploration.moves:
                for choice in move.choices(record):
                    asked: list[tuple[Any, Any]] = []

                    def fire(trigger: str, current: Any, inputs: Any,
                             asked: list[tuple[Any, Any]] = asked) -> Any:
                        asked.append((current, inputs))
                        return lifecycle.fire(trigger, current, inputs)

                    with contextlib.suppress(Exception):
                        reached.append(move.perform(fire, record, choice))
                    yield from asked
        frontier = reached
