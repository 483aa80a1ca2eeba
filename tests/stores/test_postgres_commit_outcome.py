"""The generic PostgreSQL store says which failures may have committed (issue 26, item 2).

Through the cutting proxy (tests/support/pg_proxy.py), on the real server, the store
derived from a record (``PostgresStore(TASKS, connection)``, on the tests' task
lifecycle, tests/support/tasks.py; codes ``lifecycles.``):

* a connection lost after ``COMMIT`` (or an autocommit write: ``put`` outside a
  transaction, the one-statement claim) was sent and before its answer came is
  :class:`CommitUncertain` (``outcome_unknown`` true), whether or not the server got
  it; a fresh connection shows which;
* a connection lost before the commit was sent, or found broken before a statement,
  is a plain :class:`StoreUnavailable` (``outcome_unknown`` false), and nothing changed;
* no ``psycopg`` exception leaves the store, nor :func:`connect`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from support.pg_proxy import Cut, Proxied, commit_of, proxied_connections, statement
from support.postgres import pg_schema, require_postgres
from support.task_operations import (
    OPERATION_NAMES,
    TABLE,
    WITHOUT_STATEMENTS,
    claim_inputs,
    failure_inputs,
    filled,
    operations,
    public_methods,
    record,
)
from support.tasks import TASKS

from lifecycles.stores._base import CommitUncertain, StoreUnavailable
from lifecycles.stores.postgres import PostgresStore, connect

__all__ = ["pg_schema"]  # a fixture, used by name

require_postgres()

pytestmark = pytest.mark.postgres

CODE = "lifecycles.database_unreachable"


@pytest.fixture
def pg(pg_schema: str) -> Iterator[Proxied]:
    yield from proxied_connections(pg_schema)


def failed(action: Callable[[], Any]) -> StoreUnavailable:
    """The store's refusal: the driver's error kept as its cause, unless the store found
    the connection broken before sending anything."""
    with pytest.raises(StoreUnavailable) as raised:
        action()
    error = raised.value
    assert error.code == CODE
    assert error.__cause__ is None or isinstance(error.__cause__, psycopg.Error)
    assert isinstance(error, CommitUncertain) is error.outcome_unknown
    return error


def stored(pg: Proxied) -> list[tuple[Any, ...]]:
    return pg.direct().execute(
        f"SELECT task_id, status, lease_token FROM {TABLE} ORDER BY 1").fetchall()


def test_an_insert_whose_commit_answer_is_lost_is_uncertain_and_committed(pg: Proxied) -> None:
    store = PostgresStore(TASKS, pg.through())
    pg.proxy.arm(commit_of("INSERT INTO"), Cut.AFTER_REPLY)
    assert failed(lambda: store.insert(TASKS.create(record(0)))).outcome_unknown is True
    assert stored(pg) == [("t0", "queued", None)]
    again = PostgresStore(TASKS, pg.through())
    assert again.insert(TASKS.create(record(0))) == again.get("t0")  # idempotent: retry


def test_an_insert_whose_commit_was_dropped_is_uncertain_and_not_committed(pg: Proxied) -> None:
    store = PostgresStore(TASKS, pg.through())
    pg.proxy.arm(commit_of("INSERT INTO"), Cut.BEFORE_FORWARD)
    assert failed(lambda: store.insert(TASKS.create(record(0)))).outcome_unknown is True
    assert stored(pg) == []


def test_a_transaction_cut_before_its_commit_was_sent_changed_nothing(pg: Proxied) -> None:
    store = PostgresStore(TASKS, pg.through())
    store.insert(TASKS.create(record(0)))
    pg.proxy.arm(statement("INSERT INTO"), Cut.BEFORE_FORWARD)

    def two_inserts() -> None:
        with store.transaction():
            store.insert(TASKS.create(record(1)))
            store.insert(TASKS.create(record(2)))

    assert failed(two_inserts).outcome_unknown is False
    assert stored(pg) == [("t0", "queued", None)]
    # Broken now: the next call is refused before anything is sent, as certainly.
    for call in (lambda: store.insert(TASKS.create(record(3))), lambda: store.get("t0")):
        assert failed(call).outcome_unknown is False


def test_a_write_outside_a_transaction_whose_answer_is_lost_is_uncertain(pg: Proxied) -> None:
    """``put`` outside a transaction is one autocommit statement: its own commit."""
    store = PostgresStore(TASKS, pg.through())
    store.insert(TASKS.create(record(0)))
    leased = store.claim(claim_inputs("k0"))
    assert leased is not None
    pg.proxy.arm(commit_of(f'UPDATE "{TABLE}" SET'), Cut.AFTER_REPLY)
    error = failed(lambda: store.fire(leased, "fail", failure_inputs()))
    assert error.outcome_unknown is True
    assert stored(pg) == [("t0", "queued", None)]  # it committed


def test_a_claim_whose_answer_is_lost_is_found_by_its_token(pg: Proxied) -> None:
    store = PostgresStore(TASKS, pg.through())
    for index in range(2):
        store.insert(TASKS.create(record(index)))
    pg.proxy.arm(commit_of("claimed AS (UPDATE"), Cut.AFTER_REPLY)
    assert failed(lambda: store.claim(claim_inputs("k0"))).outcome_unknown is True
    assert stored(pg) == [("t0", "running", "k0"), ("t1", "queued", None)]
    fresh = PostgresStore(TASKS, pg.through())
    assert [r.task_id for r in fresh.leased_under({"k0", "k9"}, 21.0)] == ["t0"]
    assert fresh.leased_under({"k0"}, 50.0) == []  # its lease ends at 50


def test_connect_lets_no_driver_exception_out() -> None:
    with pytest.raises(StoreUnavailable) as raised:
        connect("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2)
    assert raised.value.code == CODE and raised.value.outcome_unknown is False
    with pytest.raises(ValueError, match="not a valid PostgreSQL connection string"):
        connect("host")  # no '=': not a connection string


def test_the_operations_listed_are_every_public_one() -> None:
    assert public_methods(PostgresStore) - WITHOUT_STATEMENTS == set(OPERATION_NAMES)


# No statement on PostgreSQL: the location is learnt when the store opens; the rules
# are CHECK constraints here, not indexes; there is no glance, no engine check.
WITHOUT_THE_SERVER = {"locate", "ensure_rules_indexes", "glance", "integrity_problems"}
# Outside a transaction each of these sends a write that is its own commit.
OWN_COMMITS = {"put", "put_many", "write", "fire", "run_write_committed", "claim", "claim_in_place",
               "claim_many_in_place", "claim_many"}


@pytest.mark.parametrize("operation", sorted(set(OPERATION_NAMES) - WITHOUT_THE_SERVER))
@pytest.mark.parametrize("how", ["closed", "broken"])
def test_every_store_operation_on_a_dead_connection_is_database_unreachable(
    pg: Proxied, operation: str, how: str
) -> None:
    """``closed``: the caller closed it; ``broken``: the proxy cut it under the store
    (the next exchange of any kind is dropped), so the store meets it mid-call or finds
    it broken. Either way a ``StoreUnavailable`` (never a ``psycopg`` error), and nothing
    changed."""
    store = filled(PostgresStore(TASKS, pg.through()))
    action = operations(store)[operation]
    before = stored(pg)
    if how == "closed":
        store.connection.close()
    else:
        pg.proxy.arm(lambda exchange: True, Cut.BEFORE_FORWARD)
    error = failed(action)
    # A statement the store sent as its own commit cannot be known not to have run.
    assert error.outcome_unknown is (how == "broken" and operation in OWN_COMMITS)
    assert stored(pg) == before
