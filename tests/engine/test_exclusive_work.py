"""ExclusiveWork, the worker's pass for a lifecycle without a lease (the outbox's replay),
on the memory store and the files store: every intake durable before the first handler
call, the outcomes written together after the last, and a BaseException stopping the
pass after the outcomes so far are written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.deliveries import DELIVERIES, Message, MessageInputs, MessageStatus, finish_delivery

from lifecycles._worker_steps import ExclusiveWork
from lifecycles.stores._base import Store
from lifecycles.stores._files import FilesStore
from lifecycles.stores._memory import MemoryStore


@pytest.fixture(params=["memory", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store[Message]]:
    opened: Store[Message] = (MemoryStore(DELIVERIES) if request.param == "memory"
                              else FilesStore(DELIVERIES, tmp_path / "messages"))
    for n in range(3):
        opened.insert(Message(f"m{n}", MessageStatus.PENDING))
    yield opened


WORK = ExclusiveWork(DELIVERIES, "attempt", finish_delivery)


def stored(store: Store[Message]) -> dict[str, tuple[str, int, str | None]]:
    return {m.message_id: (str(m.status), m.attempts, m.last_error) for m in store.scan()}


def test_every_attempt_is_stored_before_the_first_handler_call(store: Store[Message]) -> None:
    seen: list[dict[str, tuple[str, int, str | None]]] = []

    def handler(message: Message) -> None:
        seen.append(stored(store))
        if message.message_id == "m1":
            raise TimeoutError("the peer did not answer")

    records = sorted(store.scan(), key=lambda m: m.message_id)
    outcomes = WORK.run(store, records, handler, MessageInputs())
    assert seen[0] == {f"m{n}": ("pending", 1, None) for n in range(3)}
    assert [(o.key, o.trigger, o.status) for o in outcomes] == [
        ("m0", "deliver", "delivered"), ("m1", "fail", "pending"), ("m2", "deliver", "delivered")]
    assert stored(store) == {"m0": ("delivered", 1, None), "m1": ("pending", 1, "TimeoutError"),
                             "m2": ("delivered", 1, None)}


def test_a_keyboard_interrupt_writes_the_outcomes_so_far_then_stops(store: Store[Message]) -> None:
    def handler(message: Message) -> None:
        if message.message_id == "m1":
            raise KeyboardInterrupt

    records = sorted(store.scan(), key=lambda m: m.message_id)
    with pytest.raises(KeyboardInterrupt):
        WORK.run(store, records, handler, MessageInputs())
    # m0's outcome is written; m1 and m2 keep their counted attempt, still pending.
    assert stored(store) == {"m0": ("delivered", 1, None), "m1": ("pending", 1, None),
                             "m2": ("pending", 1, None)}


def test_nothing_to_take_calls_nothing(store: Store[Message]) -> None:
    called: list[Message] = []
    assert WORK.run(store, [], called.append, MessageInputs()) == []
    assert called == [] and stored(store) == {f"m{n}": ("pending", 0, None) for n in range(3)}

