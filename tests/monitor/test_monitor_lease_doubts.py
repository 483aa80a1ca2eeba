"""What a lease doubt costs, and one ``except`` for a worker loop: SQLite, real files.

A doubt is left here the way SQLite leaves one: ``run_once``'s completion meets the
database locked past the busy timeout (``database_unreachable``, ``outcome_unknown``
false: the item is still leased to the worker). Counted with
``connection.set_trace_callback``, as test_monitor_run_once.py counts the common path
(three statements):

* a doubt of another worker, or none, costs no statement;
* the owner's next call pays once: the schema probe and one query over the leased
  records, then polls the lease it took up; its call after that is three statements
  again (the doubt is gone);
* a doubt whose lease has run out is dropped unasked, and the item is rescued by the
  claim as any expired lease is.

The PostgreSQL cases (a commit's answer lost) are in test_monitor_uncertain_commit.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, answer, notification

from lifecycles.machines import LifecycleError
from lifecycles.monitor.facade import (
    DatabaseUnreachable,
    DurableTerminalProcessingMonitor,
    InputInvalid,
    TerminalProcessingMonitorBlocked,
)
from lifecycles.stores import StoreUnavailable
from lifecycles.stores.sqlite import connect

CODE = "terminal_processing_monitor."
LEASE_SECONDS = 600


def opened(path: Path, count: int = 3) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path, timeout=0.05), CAPABILITIES)
    for index in range(count):
        monitor.register(*notification(index), now=100)
    return monitor


def succeeded(event_id: str, site_id: str) -> Any:
    return answer(event_id, site_id, "succeeded")


def leave_a_doubt(monitor: DurableTerminalProcessingMonitor, path: Path, worker: str) -> str:
    """``worker`` claims e0 and its completion finds the file locked: e0 stays leased."""
    holder = sqlite3.connect(path, isolation_level=None)

    def locking(event_id: str, site_id: str) -> Any:
        holder.execute("BEGIN IMMEDIATE")
        return succeeded(event_id, site_id)

    try:
        with pytest.raises(DatabaseUnreachable) as raised:
            monitor.run_once(locking, worker, now=200, lease_seconds=LEASE_SECONDS)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert raised.value.outcome_unknown is False
    (token,) = monitor.connection.execute(
        "SELECT lease_token FROM cms_source_terminal_processing WHERE event_id = 'e0'"
        " AND status = 'leased'").fetchone()
    return str(token)


def traced(monitor: DurableTerminalProcessingMonitor, call: Callable[[], Any]) -> list[str]:
    """Our statements while ``call`` runs (SQLite's nested ``--`` lines left out)."""
    seen: list[str] = []
    monitor.connection.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    try:
        call()
    finally:
        monitor.connection.set_trace_callback(None)
    return [sql for sql in seen if not sql.startswith("--")]


def test_a_doubt_of_another_worker_costs_no_statement(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    leave_a_doubt(monitor, path, "w1")
    ours = traced(monitor, lambda: monitor.run_once(succeeded, "w2", now=201))
    assert [sql.split()[0] for sql in ours] == ["SELECT", "UPDATE", "UPDATE"]  # e1, as ever


def test_the_owner_pays_once_for_its_doubt_then_claims_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path)
    token = leave_a_doubt(monitor, path, "w1")
    fresh = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    outcomes: list[Any] = []
    resuming = traced(fresh, lambda: outcomes.append(fresh.run_once(succeeded, "w1", now=201)))
    assert outcomes[0].event_id == "e0" and outcomes[0].status == "succeeded"
    probe, lookup, completion = resuming
    assert "pragma_schema_version" in probe
    assert "WHERE status = 'leased' AND lease_expires_at > 201.0" in lookup
    assert f"lease_token IN ('{token}')" in lookup
    assert completion.startswith("UPDATE") and f"'{token}'" in completion  # that very lease
    after = traced(fresh, lambda: fresh.run_once(succeeded, "w1", now=202))
    assert [sql.split()[0] for sql in after] == ["SELECT", "UPDATE", "UPDATE"]


def test_a_spent_doubt_is_dropped_unasked_and_its_item_rescued(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = opened(path, count=1)
    leave_a_doubt(monitor, path, "w1")
    later = 200 + LEASE_SECONDS  # e0's lease has run out
    seen = traced(monitor, lambda: monitor.run_once(succeeded, "w1", now=later))
    assert not any("lease_token IN" in sql for sql in seen)
    assert "BEGIN IMMEDIATE" in seen  # the claim's transaction, which rescues it
    status = monitor.status("e0", now=later)
    assert (status.status, status.poll_attempts) == ("succeeded", 2)


def test_one_except_catches_the_monitors_refusals_and_connects_errors(tmp_path: Path) -> None:
    """A worker loop's ``except``: every refusal is a ``LifecycleError`` (still a
    ``RuntimeError`` and a ``TerminalProcessingMonitorBlocked`` with the reference's
    code), and ``database_unreachable`` a ``StoreUnavailable`` like ``connect()``'s."""
    caught: list[LifecycleError] = []
    for call in (
        lambda: connect(tmp_path / "missing" / "monitor.db"),  # no such directory
        lambda: opened(tmp_path / "monitor.db").claim("not a worker id", now=1),
        lambda: DurableTerminalProcessingMonitor(_closed(tmp_path), CAPABILITIES),
    ):
        try:
            call()
        except LifecycleError as error:
            caught.append(error)
    unopened, refused, unreachable = caught
    assert isinstance(unopened, StoreUnavailable)
    assert unopened.code == "lifecycles.database_unreachable"
    assert isinstance(refused, InputInvalid) and not isinstance(refused, StoreUnavailable)
    assert isinstance(unreachable, DatabaseUnreachable) and isinstance(
        unreachable, StoreUnavailable)
    for error in (refused, unreachable):
        assert isinstance(error, TerminalProcessingMonitorBlocked)
        assert isinstance(error, RuntimeError)
    assert (refused.code, unreachable.code) == (
        CODE + "worker_invalid", CODE + "database_unreachable")


def _closed(tmp_path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(tmp_path / "closed.db")
    connection.close()
    return connection
