"""The facade's own promises: at-least-once, nesting, threads, error types and codes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from lifecycles.outbox.facade import (
    CloseOutbox,
    CloseOutboxError,
    CloseRequest,
    EnqueueReceipt,
    InvalidCloseRequestError,
    OutboxConflictError,
    OutboxCorruptError,
    OutboxReentryError,
    OutboxUnsafePathError,
    ReplayReport,
)


def request(i: int, **changes: object) -> CloseRequest:
    fields: dict[str, object] = {
        "run_id": f"run-{i}", "transaction_id": "tx", "action": "complete", "result": {"i": i}
    }
    fields.update(changes)
    return CloseRequest(**fields)  # type: ignore[arg-type]


def stored(outbox: CloseOutbox, directory: str, entry_id: str) -> dict[str, object]:
    path = outbox.root / directory / f"{entry_id}.json"
    value: dict[str, object] = json.loads(path.read_text())
    return value


def test_errors_have_the_reference_types_and_stable_codes() -> None:
    for error_type in (InvalidCloseRequestError, OutboxConflictError, OutboxCorruptError,
                       OutboxUnsafePathError, OutboxReentryError):
        assert issubclass(error_type, CloseOutboxError)
    assert issubclass(CloseOutboxError, RuntimeError)
    assert [e.code for e in (CloseOutboxError, InvalidCloseRequestError, OutboxConflictError,
                             OutboxCorruptError, OutboxUnsafePathError)] == [
        "close_outbox.error", "close_outbox.request_invalid", "close_outbox.conflict",
        "close_outbox.record_invalid", "close_outbox.unsafe_path",
    ]
    assert str(CloseOutboxError("plain message")) == "plain message"


def test_the_attempt_is_on_disk_before_deliver_and_an_interrupt_keeps_it(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    item = request(1)
    outbox.enqueue(item)

    def interrupted(delivered: CloseRequest) -> None:
        record = stored(outbox, "pending", delivered.entry_id)
        assert (record["attempts"], record["last_error"]) == (1, None)
        assert record["last_attempt_at"] is not None
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        outbox.replay(interrupted)
    assert stored(outbox, "pending", item.entry_id)["attempts"] == 1
    report = CloseOutbox(state_dir=tmp_path).replay(lambda delivered: None)
    assert report == ReplayReport(attempted=1, delivered=1, remaining=0)
    assert stored(outbox, "delivered", item.entry_id)["attempts"] == 2


def test_deliver_gets_a_detached_copy(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    item = request(1, result={"nested": {"list": [1]}})
    outbox.enqueue(item)
    item.result["nested"]["list"].append("changed after enqueue")  # type: ignore[index]

    def deliver(delivered: CloseRequest) -> str:
        assert delivered.result == {"nested": {"list": [1]}}
        delivered.result["nested"]["list"].append(2)
        return "the return value is ignored"

    assert outbox.replay(deliver).delivered == 1
    assert stored(outbox, "delivered", item.entry_id)["result"] == {"nested": {"list": [1]}}


def test_deliver_may_enqueue_through_any_outbox_object_without_deadlock(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    other = CloseOutbox(state_dir=tmp_path)
    outbox.enqueue(request(1))
    outbox.enqueue(request(2))
    follow_ups = iter([request(10), request(11)])

    def deliver(delivered: CloseRequest) -> None:
        receipt = other.enqueue(next(follow_ups))
        assert receipt.created
        assert outbox.enqueue(delivered) == EnqueueReceipt(delivered.entry_id, False, "pending")

    report = outbox.replay(deliver, limit=2)
    assert (report.delivered, report.remaining) == (2, 2)
    assert report.remaining == outbox.pending_count()


@pytest.mark.parametrize("same_object", [True, False], ids=["same-object", "other-object"])
def test_replay_from_inside_deliver_is_refused_with_an_outbox_error(
    tmp_path: Path, same_object: bool
) -> None:
    """A nested replay would deliver the outer call's entries again and overwrite its
    outcomes (it raised the store's internal StaleRecord): it is refused, the outer
    call goes on and counts that delivery as failed, as for any exception of deliver."""
    outbox = CloseOutbox(state_dir=tmp_path)
    nested = outbox if same_object else CloseOutbox(state_dir=tmp_path)
    items = sorted((request(i) for i in range(2)), key=lambda item: item.entry_id)
    for item in items:
        outbox.enqueue(item)
    refusals: list[CloseOutboxError] = []

    def deliver(delivered: CloseRequest) -> None:
        if delivered.entry_id == items[0].entry_id:
            with pytest.raises(OutboxReentryError) as refused:
                nested.replay(lambda inner: pytest.fail("delivered from a nested replay"))
            refusals.append(refused.value)
            nested.replay(lambda inner: None)  # raises again: the outer call counts it

    report = outbox.replay(deliver)
    assert (report.attempted, report.delivered, report.failed) == (2, 1, 1)
    assert report.remaining == outbox.pending_count() == 1
    assert isinstance(refusals[0], CloseOutboxError)
    assert refusals[0].code == "close_outbox.replay_reentered"
    failed = stored(outbox, "pending", items[0].entry_id)
    assert (failed["attempts"], failed["last_error"]) == (
        1, "OutboxReentryError: close delivery failed"
    )
    assert outbox.replay(lambda delivered: None).delivered == 1  # and it is free again


def test_replay_takes_entries_in_name_order_up_to_the_limit(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    items = [request(i) for i in range(7)]
    for item in items:
        outbox.enqueue(item)
    seen: list[str] = []
    report = outbox.replay(lambda delivered: seen.append(delivered.entry_id), limit=3)
    assert seen == sorted(item.entry_id for item in items)[:3]
    assert report == ReplayReport(attempted=3, delivered=3, remaining=4)


def test_a_failed_delivery_stays_pending_with_a_bounded_error(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    item = request(1)
    outbox.enqueue(item)

    class VeryLongNamedError(Exception):
        pass

    VeryLongNamedError.__name__ = "E" * 1200

    def deliver(delivered: CloseRequest) -> None:
        raise VeryLongNamedError("secret details never stored")

    assert outbox.replay(deliver) == ReplayReport(attempted=1, failed=1, remaining=1)
    record = stored(outbox, "pending", item.entry_id)
    assert record["last_error"] == "E" * 1000
    assert "secret" not in json.dumps(record)


def test_concurrent_enqueues_of_one_identity_create_it_once(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    receipts: list[EnqueueReceipt] = []
    barrier = threading.Barrier(6)

    def enqueue() -> None:
        mine = CloseOutbox(state_dir=tmp_path)
        barrier.wait()
        receipts.append(mine.enqueue(request(1)))

    threads = [threading.Thread(target=enqueue) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r.created for r in receipts) == [False] * 5 + [True]
    assert outbox.pending_count() == 1


def test_an_empty_state_dir_means_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REIN_AHARNESS_STATE_DIR", str(tmp_path / "default"))
    assert CloseOutbox(state_dir="").state_dir == tmp_path / "default"  # type: ignore[arg-type]
    assert CloseOutbox(state_dir=tmp_path / "x" / ".." / "y").state_dir == tmp_path / "y"


def test_a_planted_link_is_refused_with_an_outbox_error(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path / "state")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outbox.pending_dir.rmdir()
    os.symlink(elsewhere, outbox.pending_dir)
    with pytest.raises(OutboxUnsafePathError, match="symbolic link"):
        outbox.enqueue(request(1))
    with pytest.raises(OutboxUnsafePathError):
        outbox.replay(lambda delivered: None)
    with pytest.raises(OutboxUnsafePathError):
        outbox.pending_count()
    with pytest.raises(OutboxUnsafePathError):
        CloseOutbox(state_dir=tmp_path / "state")
    assert os.listdir(elsewhere) == []


def test_a_delivered_record_that_is_corrupt_refuses_enqueue_and_is_kept(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    item = request(1)
    outbox.enqueue(item)
    outbox.replay(lambda delivered: None)
    path = outbox.delivered_dir / f"{item.entry_id}.json"
    path.write_text(path.read_text().replace('"state":"delivered"', '"state":"pending"'))
    with pytest.raises(OutboxCorruptError,
                       match="outbox record directory/state mismatch: expected delivered") as error:
        outbox.enqueue(item)
    assert error.value.rules == ("status_matches_directory",)
    assert path.exists() and outbox.replay(lambda delivered: None).quarantined == 0


def test_every_attempt_of_a_replay_is_on_disk_before_the_first_deliver(tmp_path: Path) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    items = sorted((request(i) for i in range(3)), key=lambda item: item.entry_id)
    for item in items:
        outbox.enqueue(item)
    calls: list[str] = []

    def deliver(delivered: CloseRequest) -> None:
        if not calls:
            for item in items:
                assert stored(outbox, "pending", item.entry_id)["attempts"] == 1
        calls.append(delivered.entry_id)
        if delivered.entry_id == items[1].entry_id:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        outbox.replay(deliver)
    assert calls == [items[0].entry_id, items[1].entry_id]
    assert (outbox.delivered_dir / f"{items[0].entry_id}.json").exists()
    # the interrupted and the never-called entry stay pending, their attempt counted
    for item in items[1:]:
        assert stored(outbox, "pending", item.entry_id)["attempts"] == 1


def test_replay_lists_the_pending_directory_once_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outbox = CloseOutbox(state_dir=tmp_path)
    for i in range(30):
        outbox.enqueue(request(i))
    listings: list[object] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def counting_listdir(path: object = ".") -> list[str]:
        listings.append(path)
        return real_listdir(path)  # type: ignore[arg-type]

    def counting_scandir(path: object = ".") -> object:
        listings.append(path)
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "listdir", counting_listdir)
    monkeypatch.setattr(os, "scandir", counting_scandir)
    report = outbox.replay(lambda delivered: None, limit=10)
    assert (report.delivered, report.remaining) == (10, 20)
    assert len(listings) == 1, "the count of what remains comes from the same pass"
