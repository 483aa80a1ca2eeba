"""An uncertain commit is not "nothing changed" (issue 26, item 2): PostgreSQL, a real cut.

A proxy (tests/support/pg_proxy.py) relays the monitor's connection to the server and
cuts it at a chosen message of the wire protocol:

* **after the commit's answer arrived** (the proxy reads it and drops it): the write
  is committed and the worker never learns it. The call raises
  ``database_unreachable`` with ``outcome_unknown`` true; a fresh connection finds the
  write; a retried ``register`` answers what is stored; the worker's next claim, on a
  new connection and a new monitor, takes up the very lease it was granted (same event,
  same token) instead of leasing another item and stranding this one;
* **with the commit dropped unsent to the server**: the client sent it, so the outcome
  is honestly unknown (``outcome_unknown`` true), and in fact nothing changed; the
  worker's next claim finds no lease under its token and claims as usual;
* **before a statement of the transaction reached the server**: the failure came
  before any commit was sent: ``outcome_unknown`` false, and nothing changed.

Every error is also a ``StoreUnavailable`` and a ``LifecycleError``: one ``except`` for
a worker loop (the README's sketch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.monitor import CAPABILITIES, answer, notification
from support.pg_proxy import Cut, Exchange, Proxied, commit_of, proxied_connections, statement
from support.postgres import pg_schema, require_postgres

from lifecycles.machines import LifecycleError
from lifecycles.monitor.facade import (
    DatabaseUnreachable,
    DurableTerminalProcessingMonitor,
    StorageBlocked,
    TerminalProcessingMonitorBlocked,
)
from lifecycles.stores import StoreUnavailable

__all__ = ["pg_schema"]  # a fixture, used by name

require_postgres()  # without a server, the whole module skips: one line in the summary

pytestmark = pytest.mark.postgres

CODE = "terminal_processing_monitor.database_unreachable"
TABLE = "cms_source_terminal_processing"
# The one-statement claim, and the completion written outside a transaction.
CLAIM = "claimed AS (UPDATE"
COMPLETION = f'UPDATE "{TABLE}" SET'


@pytest.fixture
def pg(pg_schema: str) -> Iterator[Proxied]:
    yield from proxied_connections(pg_schema)


def opened(connection: Any) -> DurableTerminalProcessingMonitor:
    return DurableTerminalProcessingMonitor(connection, CAPABILITIES)


def registered(pg: Proxied, count: int) -> None:
    monitor = opened(pg.direct())
    for index in range(count):
        monitor.register(*notification(index), now=100)


def unreachable(action: Callable[[], Any]) -> DatabaseUnreachable:
    """The refusal ``action`` raised: ``database_unreachable``, of every family it belongs to."""
    with pytest.raises(StoreUnavailable) as raised:
        action()
    error = raised.value
    assert isinstance(error, DatabaseUnreachable) and error.code == CODE
    for family in (StorageBlocked, TerminalProcessingMonitorBlocked, RuntimeError,
                   LifecycleError):
        assert isinstance(error, family)
    return error


def rows(pg: Proxied) -> dict[str, tuple[Any, ...]]:
    """event_id -> (status, lease_owner, lease_token), read straight from the server."""
    found = pg.direct().execute(
        f"SELECT event_id, status, lease_owner, lease_token FROM {TABLE} ORDER BY 1").fetchall()
    return {event_id: tuple(rest) for event_id, *rest in found}


def dump(pg: Proxied) -> list[tuple[Any, ...]]:
    return pg.direct().execute(f"SELECT * FROM {TABLE} ORDER BY 1").fetchall()


def in_transaction(text: str) -> Callable[[Exchange], bool]:
    """A statement containing ``text`` inside an open transaction (not the autocommit claim)."""
    return lambda exchange: exchange.state == "T" and exchange.runs(text)


# --- register ----------------------------------------------------------------------


def test_a_register_whose_commit_answer_is_lost_is_unknown_and_safe_to_retry(
    pg: Proxied,
) -> None:
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of("INSERT INTO"), Cut.AFTER_REPLY)
    error = unreachable(lambda: monitor.register(*notification(0), now=100))
    assert pg.proxy.answer_dropped  # the server answered COMMIT; the worker never heard it
    assert error.outcome_unknown is True
    assert rows(pg) == {"e0": ("pending", None, None)}  # the write is there
    retried = opened(pg.through()).register(*notification(0), now=101)
    assert retried == opened(pg.direct()).status("e0", now=101)
    assert (retried.status, len(dump(pg))) == ("pending", 1)


def test_a_register_whose_commit_never_reached_the_server_is_unknown_and_changed_nothing(
    pg: Proxied,
) -> None:
    """The client sent ``COMMIT`` and heard nothing: it cannot know, and says so."""
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of("INSERT INTO"), Cut.BEFORE_FORWARD)
    assert unreachable(lambda: monitor.register(*notification(0), now=100)).outcome_unknown
    assert pg.proxy.cut_at is not None and pg.proxy.cut_at.commits_transaction
    assert dump(pg) == []
    assert opened(pg.through()).register(*notification(0), now=101).status == "pending"


def test_a_register_cut_before_its_insert_reached_the_server_changed_nothing(
    pg: Proxied,
) -> None:
    registered(pg, 1)
    before = dump(pg)
    monitor = opened(pg.through())
    pg.proxy.arm(statement("INSERT INTO"), Cut.BEFORE_FORWARD)
    error = unreachable(lambda: monitor.register(*notification(1), now=100))
    assert error.outcome_unknown is False
    assert dump(pg) == before


# --- claim ---------------------------------------------------------------------------


def test_a_claim_whose_commit_answer_is_lost_is_resumed_by_the_workers_next_claim(
    pg: Proxied,
) -> None:
    registered(pg, 2)
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of(CLAIM), Cut.AFTER_REPLY)
    assert unreachable(lambda: monitor.claim("w1", now=200)).outcome_unknown is True
    assert pg.proxy.answer_dropped
    leased = rows(pg)
    assert leased["e0"][:2] == ("leased", "w1") and leased["e1"] == ("pending", None, None)
    token = leased["e0"][2]

    again = opened(pg.through()).claim("w1", now=201)  # a new connection, a new monitor
    assert again is not None
    assert (again["event_id"], again["lease_token"]) == ("e0", token)  # that very lease
    assert rows(pg) == leased  # no second item leased, nothing stranded
    # Resolved: the next claim leases the next item, under a token of its own.
    after = opened(pg.through()).claim("w1", now=202)
    assert after is not None and after["event_id"] == "e1" and after["lease_token"] != token


def test_a_claim_whose_statement_never_got_an_answer_is_dropped_by_the_next_claim(
    pg: Proxied,
) -> None:
    """The one-statement claim was sent and the connection cut before the server read it:
    unknown to the worker, in fact nothing. Its next claim finds no lease under its token
    and claims as any claim does."""
    registered(pg, 1)
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of(CLAIM), Cut.BEFORE_FORWARD)
    assert unreachable(lambda: monitor.claim("w1", now=200)).outcome_unknown is True
    assert rows(pg) == {"e0": ("pending", None, None)}
    again = opened(pg.through()).claim("w1", now=201)
    assert again is not None and again["event_id"] == "e0"
    assert rows(pg)["e0"][:2] == ("leased", "w1")


def test_a_claim_cut_inside_its_transaction_changed_nothing(pg: Proxied) -> None:
    """With an expired lease to rescue the claim is a transaction; cut before its first
    write reached the server, nothing was committed: ``outcome_unknown`` false."""
    registered(pg, 2)
    opened(pg.direct()).claim("w0", now=100, lease_seconds=10)  # e0's lease ends at 110
    before = dump(pg)
    monitor = opened(pg.through())
    pg.proxy.arm(in_transaction("UPDATE"), Cut.BEFORE_FORWARD)
    assert unreachable(lambda: monitor.claim("w1", now=200)).outcome_unknown is False
    assert dump(pg) == before
    again = opened(pg.through()).claim("w1", now=201)  # no doubt: the protocol as usual
    assert again is not None and again["event_id"] in ("e0", "e1")


# --- run_once, run_many -----------------------------------------------------------------


class Reader:
    """Answers ``succeeded`` for every item, and remembers which it was asked about."""

    def __init__(self, before: Callable[[], None] | None = None) -> None:
        self.asked: list[str] = []
        self.before = before

    def __call__(self, event_id: str, site_id: str) -> Any:
        self.asked.append(event_id)
        if self.before is not None:
            self.before()
        return answer(event_id, site_id, "succeeded")


def test_a_run_once_whose_claim_answer_is_lost_polls_that_lease_on_the_next_call(
    pg: Proxied,
) -> None:
    registered(pg, 2)
    reader = Reader()
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of(CLAIM), Cut.AFTER_REPLY)
    error = unreachable(lambda: monitor.run_once(reader, "w1", now=200))
    assert error.outcome_unknown is True and reader.asked == []
    token = rows(pg)["e0"][2]
    assert token is not None

    outcome = opened(pg.through()).run_once(reader, "w1", now=201)
    assert outcome is not None and (outcome.event_id, outcome.status) == ("e0", "succeeded")
    assert reader.asked == ["e0"]
    assert rows(pg) == {"e0": ("succeeded", None, None), "e1": ("pending", None, None)}


def test_a_run_once_whose_completion_answer_is_lost_goes_on_with_the_next_item(
    pg: Proxied,
) -> None:
    """The completion committed unseen: the item is done, the doubt resolves to nothing,
    and the next call claims the next item (the finished one is not polled again)."""
    registered(pg, 2)
    monitor = opened(pg.through())
    reader = Reader(lambda: pg.proxy.arm(commit_of(COMPLETION), Cut.AFTER_REPLY))
    assert unreachable(lambda: monitor.run_once(reader, "w1", now=200)).outcome_unknown
    assert rows(pg)["e0"] == ("succeeded", None, None)

    outcome = opened(pg.through()).run_once(Reader(), "w1", now=201)
    assert outcome is not None and outcome.event_id == "e1"
    assert rows(pg) == {"e0": ("succeeded", None, None), "e1": ("succeeded", None, None)}


def test_a_run_once_whose_completion_never_reached_the_server_polls_it_again(
    pg: Proxied,
) -> None:
    """The completion was lost: the item is still leased to this worker, and its next
    call takes that lease up again (at-least-once, as after a crash) instead of leaving
    it stranded until the lease expires."""
    registered(pg, 2)
    monitor = opened(pg.through())
    reader = Reader(lambda: pg.proxy.arm(commit_of(COMPLETION), Cut.BEFORE_FORWARD))
    assert unreachable(lambda: monitor.run_once(reader, "w1", now=200)).outcome_unknown
    still = rows(pg)["e0"]
    assert still[:2] == ("leased", "w1")

    again = Reader()
    outcome = opened(pg.through()).run_once(again, "w1", now=201)
    assert outcome is not None and (outcome.event_id, outcome.status) == ("e0", "succeeded")
    assert again.asked == ["e0"]
    assert rows(pg)["e1"] == ("pending", None, None)


def test_a_run_many_whose_claim_answer_is_lost_completes_those_leases_next_time(
    pg: Proxied,
) -> None:
    registered(pg, 3)
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of("UPDATE"), Cut.AFTER_REPLY)  # the batch claim's COMMIT
    reader = Reader()
    error = unreachable(lambda: monitor.run_many(reader, "w1", now=200, limit=2))
    assert error.outcome_unknown is True and reader.asked == []
    held = rows(pg)
    assert [held[e][:2] for e in ("e0", "e1")] == [("leased", "w1")] * 2

    outcomes = opened(pg.through()).run_many(reader, "w1", now=201, limit=5)
    assert [(o.event_id, o.status) for o in outcomes] == [  # type: ignore[union-attr]
        ("e0", "succeeded"), ("e1", "succeeded"), ("e2", "succeeded")]
    assert sorted(reader.asked) == ["e0", "e1", "e2"]
    assert {status for status, _, _ in rows(pg).values()} == {"succeeded"}


def test_the_doubt_is_kept_for_the_worker_that_had_it_only(pg: Proxied) -> None:
    """Another worker's claim neither takes nor drops it."""
    registered(pg, 2)
    monitor = opened(pg.through())
    pg.proxy.arm(commit_of(CLAIM), Cut.AFTER_REPLY)
    unreachable(lambda: monitor.claim("w1", now=200))
    token = rows(pg)["e0"][2]
    other = opened(pg.through()).claim("w2", now=201)
    assert other is not None and other["event_id"] == "e1"
    mine = opened(pg.through()).claim("w1", now=202)
    assert mine is not None and (mine["event_id"], mine["lease_token"]) == ("e0", token)
