"""What one ``run_once`` costs on SQLite: statements, row reads, invariant checks.

Measured with ``connection.set_trace_callback``, counting what SQLite reports (a line
starting with ``--`` is a statement SQLite runs inside another, here the
``PRAGMA schema_version`` behind ``pragma_schema_version``, and is not one of ours).

Before issue 11: 12 statements, the row read 3 times, the invariants checked 7 times.
Now 3 statements, the row read and decoded once, the invariants checked 3 times::

    claim (machines/lease.py ``claim_at_a_glance``), outside any transaction:
      1 SELECT ... glance           whether any lease has expired, and the first due row
      2 UPDATE ... lease it         a transaction of its own: compare-and-set on the whole
                                    row as read, the schema version and the meta row
    the reader runs here
    complete (the facade's ``_finish``), outside any transaction:
      3 UPDATE ... the poll's step  the same compare-and-set, on the row as claimed
    (no statement after: the outcome is built from the record the store wrote)

Each UPDATE is SQLite's own autocommit transaction, as durable as a ``COMMIT``. When
a compare-and-set matches nothing (another worker, an altered schema, a row changed or
broken while the reader ran), or the glance sees an expired lease, the step is taken
again the way the reference takes it, in a ``BEGIN IMMEDIATE`` transaction with the
schema probe and a strict re-read; the tests at the end show each such case.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.monitor import CAPABILITIES, ReaderError, answer, notification

from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, LeaseLost, StateInvalid

TOP_LEVEL_STATEMENTS = 3
ROW_READS = 1
INVARIANT_CHECKS = 3


@pytest.fixture
def monitor() -> Iterator[DurableTerminalProcessingMonitor]:
    connection = sqlite3.connect(":memory:")
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    for index in range(3):
        monitor.register(*notification(index), now=10)
    yield monitor
    connection.close()


def traced(monitor: DurableTerminalProcessingMonitor, call: Callable[[], Any]) -> list[str]:
    """The statements SQLite reports while ``call`` runs, whitespace collapsed."""
    seen: list[str] = []
    monitor.connection.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    try:
        call()
    finally:
        monitor.connection.set_trace_callback(None)
    return seen


def raising(e: str, s: str) -> Any:
    raise ReaderError("cms.timeout", retryable=True)


READERS: dict[str, Callable[[str, str], Any]] = {
    "answer": lambda e, s: answer(e, s, "pending"),
    "refused answer": lambda e, s: answer(e, s, "pending", schema="other"),
    "poison answer": lambda e, s: answer(e, s, "failed", last_error_code=None),
    "reader error": raising,
}


@pytest.mark.parametrize("kind", READERS)
def test_run_once_runs_three_statements_and_nothing_after(
    monitor: DurableTerminalProcessingMonitor, kind: str
) -> None:
    outcome: list[Any] = []
    seen = traced(monitor, lambda: outcome.append(
        monitor.run_once(READERS[kind], "w1", now=20)))
    ours = [sql for sql in seen if not sql.startswith("--")]
    assert len(ours) == TOP_LEVEL_STATEMENTS, "\n".join(ours)
    assert [sql.split()[0] for sql in ours] == ["SELECT", "UPDATE", "UPDATE"]
    glance, lease, complete = ours
    assert "status = 'leased' AND lease_expires_at <=" in glance  # the expired-lease probe
    for update in (lease, complete):  # the whole row, the schema version, the meta row
        assert "WHERE event_id = 'e0' AND" in update and "updated_at IS" in update
        assert "FROM pragma_schema_version" in update
        assert "FROM cms_source_terminal_processing_meta" in update
    status = monitor.status("e0", now=20)
    assert (outcome[0].status, outcome[0].attempt, outcome[0].error_code) == (
        status.status, status.poll_attempts, status.last_error_code)
    assert not monitor.connection.in_transaction


def test_run_once_reads_the_row_once_and_checks_the_invariants_three_times(
    monitor: DurableTerminalProcessingMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    checks: list[str] = []
    record_from, check = monitor.store.record_from, MONITOR.invariants.check

    def counting_record_from(values: Any) -> Any:
        reads.append(str(values["event_id"]))
        return record_from(values)

    def counting_check(record: Any) -> Any:
        checks.append(record.event_id)
        return check(record)

    monkeypatch.setattr(monitor.store, "record_from", counting_record_from)
    monkeypatch.setattr(MONITOR.invariants, "check", counting_check)
    outcome = monitor.run_once(READERS["answer"], "w1", now=20)
    assert outcome is not None and outcome.status == "watching"
    assert reads == ["e0"] * ROW_READS  # by the glance; the completion reads nothing
    # The row as read, the leased record, the completed record: once per write each.
    assert checks == ["e0"] * INVARIANT_CHECKS


@pytest.mark.parametrize("index", [0, 7], ids=["repeated", "new"])
def test_register_runs_one_transaction_and_nothing_after(
    monitor: DurableTerminalProcessingMonitor, index: int
) -> None:
    """The status ``register`` returns is built from the record the store returned."""
    returned: list[Any] = []
    seen = traced(monitor, lambda: returned.append(
        monitor.register(*notification(index), now=10)))
    ours = [sql for sql in seen if not sql.startswith("--")]
    assert [sql.split()[0] for sql in ours].count("BEGIN") == 1
    assert ours[-1] == "COMMIT", "\n".join(ours)
    assert returned[0] == monitor.status(f"e{index}", now=10)


# --- when the compare-and-set matches nothing: the reference's way, in a transaction ---


def while_reading(monitor: DurableTerminalProcessingMonitor, sql: str) -> Callable[[str, str], Any]:
    """A reader that, while it runs, changes the database behind the monitor's back."""
    path = monitor.connection.execute("PRAGMA database_list").fetchone()[2]

    def reader(event_id: str, site_id: str) -> Any:
        other = sqlite3.connect(path)
        with other:
            other.execute(sql, (event_id,))
        other.close()
        return answer(event_id, site_id, "pending")
    return reader


@pytest.fixture
def on_disk(tmp_path: Any) -> Iterator[DurableTerminalProcessingMonitor]:
    connection = sqlite3.connect(tmp_path / "monitor.sqlite3")
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    monitor.register(*notification(0), now=10)
    yield monitor
    connection.close()


def rows(monitor: DurableTerminalProcessingMonitor) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in monitor.connection.execute(
        "SELECT * FROM cms_source_terminal_processing ORDER BY event_id")]


def test_a_row_changed_validly_while_reading_is_completed_from_a_fresh_read(
    on_disk: DurableTerminalProcessingMonitor,
) -> None:
    reader = while_reading(on_disk, "UPDATE cms_source_terminal_processing SET max_failures = 9"
                                    " WHERE event_id = ?")
    seen = traced(on_disk, lambda: on_disk.run_once(reader, "w1", now=20))
    ours = [sql.split()[0] for sql in seen if not sql.startswith("--")]
    # The fast write matched nothing; the probe found the schema as it was; the
    # transaction re-read the row and wrote the completion over what is stored now.
    assert ours == ["SELECT", "UPDATE", "UPDATE", "SELECT", "BEGIN", "SELECT", "SELECT",
                    "UPDATE", "COMMIT"]
    status = on_disk.status("e0", now=20)
    assert (status.status, status.max_failures, status.poll_attempts) == ("watching", 9, 1)


def refused_after_change(
    monitor: DurableTerminalProcessingMonitor, change: str, refusal: type[Exception]
) -> Any:
    """run_once with ``change`` made while the reader runs: the refusal it raises, once
    the table is shown unchanged since the change."""
    reader = while_reading(monitor, f"UPDATE cms_source_terminal_processing SET {change}"
                                    " WHERE event_id = ?")
    before: list[Any] = []

    def remember_then_read(event_id: str, site_id: str) -> Any:
        result = reader(event_id, site_id)
        before.extend(rows(monitor))
        return result

    with pytest.raises(refusal) as raised:
        monitor.run_once(remember_then_read, "w1", now=20)
    assert rows(monitor) == before  # nothing written over what the change left
    return raised.value


def test_a_row_broken_while_reading_is_refused_as_state_invalid_and_left_as_it_is(
    on_disk: DurableTerminalProcessingMonitor,
) -> None:
    refusal = refused_after_change(on_disk, "failures = 99", StateInvalid)
    assert refusal.code == "terminal_processing_monitor.state_invalid"
    assert refusal.rules == ("failures_within_max", "polls_cover_failures")
    assert refusal.event_ids == ("e0",)


def test_a_lease_taken_over_while_reading_is_claim_lost_and_writes_nothing(
    on_disk: DurableTerminalProcessingMonitor,
) -> None:
    refusal = refused_after_change(on_disk, "lease_token = 'someone-else'", LeaseLost)
    assert refusal.code == "terminal_processing_monitor.claim_lost"


def test_a_glance_that_sees_an_expired_lease_claims_in_a_transaction_that_rescues_it(
    monitor: DurableTerminalProcessingMonitor,
) -> None:
    first = monitor.claim("w1", now=20, lease_seconds=5)
    assert first is not None
    seen = traced(monitor, lambda: monitor.claim("w2", now=30))
    ours = [sql.split()[0] for sql in seen if not sql.startswith("--")]
    assert ours[:2] == ["SELECT", "BEGIN"] and ours[-1] == "COMMIT"
    # Rescued (a failure, due at once), then claimed again first in claim order.
    rescued = monitor.status(first["event_id"], now=30)
    assert (rescued.status, rescued.failures, rescued.poll_attempts) == ("leased", 1, 2)
