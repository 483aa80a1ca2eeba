"""The monitor's exploration caches (lifecycles.machines._memo) return what the uncached work
returns; the memo itself is tested in tests/engine/test_checker_memo.py.

Each memoized ``choices`` is keyed on the fields it declares it reads: on every record the
search reaches (the monitor at max_failures 1..8, in the order found, so each cached value
was computed from an earlier record with the same key) it must equal the choices computed
afresh from that very record. The same holds for the answers parsed, the poll steps and
the read failures computed once per notification.
That the whole search is unchanged (every state, edge, count and trace, on the monitor, the
outbox, the examples and the planted defects) is tests/engine/test_exploration_pinned.py.
"""

from __future__ import annotations

import attrs
import pytest
from support.observers import Counting

from lifecycles.machines import explore
from lifecycles.machines._memo import memoized
from lifecycles.machines.monitor import parse_answer, poll_step, reader_error_code
from lifecycles.machines.monitor.inputs import Poll, ReadFailure, monitor_exploration
from lifecycles.machines.monitor.responses import CAPABILITIES_SHA256

WIDE = monitor_exploration(max_failures=(1, 8))
RECORDS = explore(WIDE, keep_records=True).records


@pytest.mark.parametrize("move", [move.name for move in WIDE.moves])
def test_each_memoized_choice_list_is_the_one_computed_afresh(move: str) -> None:
    choices = WIDE.move(move).choices
    uncached = getattr(choices, "uncached", None)
    assert uncached is not None, f"{move}'s choices are not memoized"
    for record in RECORDS:
        assert choices(record) == tuple(uncached(record)), record


@pytest.mark.parametrize("kinds", ["progress", "success", "failure", "rejected"])
def test_the_responses_built_once_per_notification_are_the_ones_built_afresh(
        kinds: str) -> None:
    from lifecycles.machines.monitor import inputs as monitor_inputs
    from lifecycles.machines.monitor import responses as monitor_responses

    afresh = getattr(monitor_responses, f"{kinds}_responses")
    once = memoized(monitor_inputs.IDENTITY, afresh)
    for record in RECORDS:
        assert once(record) == tuple(afresh(record))


def test_each_answer_parsed_once_is_the_one_parsed_afresh() -> None:
    completion = WIDE.move("observe_progress").run
    (once,) = [cell.cell_contents for cell in completion.__closure__ or ()
               if type(cell.cell_contents).__name__ == "_Once"]
    explore(WIDE)  # the search warms the cache, in its order
    assert len(once.polled) > 0
    polls = failures = 0
    for record in RECORDS:
        for move in WIDE.moves:
            for choice in move.choices(record):
                if isinstance(choice, Poll):
                    polls += 1
                    answer = parse_answer(choice.response, record, CAPABILITIES_SHA256)
                    assert once.parse(choice.response, record) == answer
                    assert once.step(choice, answer) == poll_step(choice.inputs, answer)
                    assert once.answered(choice, record) == poll_step(choice.inputs, answer)
                elif isinstance(choice, ReadFailure):
                    failures += 1
                    code, retryable = reader_error_code(choice.error)
                    assert once.failure(choice) == (code, retryable, attrs.evolve(
                        choice.inputs, error_code=code, retryable=retryable))
    assert polls > 10_000 and failures > 1_000


def test_a_repeated_fire_is_told_to_every_observer_as_the_engine_tells_it() -> None:
    """The search fires each (trigger, inputs) once per state; a repeat is still an attempt
    (and a row fired) for every observer, as before: the pinned coverage counts them."""
    from lifecycles.machines.monitor.inputs import EXPLORATION

    counting = Counting()
    with EXPLORATION.lifecycle.observing(counting):
        result = explore(EXPLORATION)
    assert result.coverage is not None
    assert counting.attempts == result.coverage.attempts == 4186
    assert counting.rows == sum(result.coverage.row_fires.values())
