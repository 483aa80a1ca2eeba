"""The outbox's replay logs and counts its steps under its own name (``lifecycles.outbox``):
the framework's exclusive pass is tested on the tests' deliveries (tests/engine/test_observe.py);
here the app's own pass, through its facade."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from support.metrics import points, recording

from lifecycles.outbox.facade import CloseOutbox, CloseRequest


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """The SDK's in-memory reader, on a provider lifecycles records through."""
    with recording() as found:
        yield found


def test_the_outbox_replay_logs_and_counts_its_exclusive_steps(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, reader: InMemoryMetricReader) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    for i in range(2):
        outbox.enqueue(CloseRequest(f"run-{i}", "tx", "complete", {"i": i}))
    caplog.set_level(logging.DEBUG, logger="lifecycles")
    failing = CloseRequest("run-0", "tx", "complete", {"i": 0}).entry_id
    outbox.replay(lambda item: 1 / 0 if item.entry_id == failing else None)
    logged = [(record.lifecycle_key, record.lifecycle_trigger,  # type: ignore[attr-defined]
               record.lifecycle_source, record.lifecycle_destination,  # type: ignore[attr-defined]
               record.lifecycle_error)  # type: ignore[attr-defined]
              for record in caplog.records if record.name == "lifecycles.outbox"]
    delivered = CloseRequest("run-1", "tx", "complete", {"i": 1}).entry_id
    # Both intakes in one transaction, then both finishing steps in another.
    assert sorted(logged[:2]) == sorted([(failing, "attempt", "pending", "pending", None),
                                         (delivered, "attempt", "pending", "pending", None)])
    assert sorted(logged[2:]) == sorted([
        (failing, "fail_delivery", "pending", "pending", "ZeroDivisionError"),
        (delivered, "deliver", "pending", "delivered", None)])
    found = points(reader)
    assert sum(point.value for _, point in found["lifecycles.transitions"]) == 4
    errors = sorted(attributes.get("error.type", "-")
                    for attributes, _ in found["messaging.process.duration"])
    assert errors == ["-", "ZeroDivisionError"]
