"""The shipped lifecycles' rows: their symbolic forms against their Python functions (the
framework's own test, on the tests' tasks, is tests/engine/test_symbolic_rows.py).

lifecycles.machines._symbolic calls a row's guard and effect functions once on symbolic
arguments. Rendered as SQL by the rules' renderer, the form must decide exactly what
the functions decide: whether the row fires, and then every value it writes. Records
are every state the checker reaches in the row's source status, inputs are drawn by
the lifecycle's own exploration strategies; SQLite always, PostgreSQL with a server.
Rows whose functions branch, format or test identity have no form, and say why.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.postgres import connect_in, require_postgres, temporary_schema
from support.symbolic_rows import agree, forms, reached

from lifecycles.machines import Exploration, Lifecycle
from lifecycles.machines._symbolic import NoSymbolicForm, symbolic_row
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION
from lifecycles.machines.outbox import OUTBOX
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION
from lifecycles.stores._sql import SQLStore
from lifecycles.stores.sqlite import SQLiteStore

EXPLORATIONS: list[tuple[Lifecycle[Any, Any], Exploration[Any]]] = [
    (MONITOR, MONITOR_EXPLORATION), (OUTBOX, OUTBOX_EXPLORATION),
]


FORMS = forms(EXPLORATIONS)
REACHED = reached(EXPLORATIONS)


def test_the_claim_rows_have_a_symbolic_form() -> None:
    claims = {form.row.source for lifecycle, _, form in FORMS if lifecycle is MONITOR}
    assert claims == {"pending", "watching", "retry_wait"}
    (claim, *_) = [form for lifecycle, _, form in FORMS if form.row.trigger == "claim"]
    assert set(claim.assignments) == {
        "status", "poll_attempts", "lease_owner", "lease_token", "lease_expires_at",
        "last_error_code", "updated_at",
    }


def test_rows_that_branch_or_test_identity_have_none_and_say_why() -> None:
    reasons = {}
    for row in MONITOR.rows:
        try:
            symbolic_row(MONITOR, row)
        except NoSymbolicForm as why:
            reasons[row.trigger] = str(why)
    assert "lease_has_expired tests identity" in reasons["expire_lease"]
    assert "lease_is_held: TypeError: a rule expression has no truth value" in (
        reasons["observe_progress"]
    )


@pytest.fixture(scope="module")
def sqlite_stores() -> Iterator[dict[str, SQLStore[Any]]]:
    stores = {lc.name: SQLiteStore(lc, sqlite3.connect(":memory:", isolation_level=None))
              for lc, _ in EXPLORATIONS}
    yield stores
    for store in stores.values():
        store.connection.close()


@pytest.mark.parametrize("index", range(len(FORMS)),
                         ids=[f"{lc.name}-{f.row.trigger}-{f.row.source}" for lc, _, f in FORMS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_sqlite_decides_and_writes_as_the_functions(
    sqlite_stores: dict[str, SQLStore[Any]], index: int, data: st.DataObject
) -> None:
    lifecycle = FORMS[index][0]
    agree(sqlite_stores[lifecycle.name], data, REACHED, FORMS[index])


def test_postgres_decides_and_writes_as_the_functions() -> None:
    require_postgres()
    from lifecycles.stores.postgres import PostgresStore

    with temporary_schema() as schema, connect_in(schema) as connection:
        stores = {lc.name: PostgresStore(lc, connection) for lc, _ in EXPLORATIONS}

        @settings(max_examples=40, deadline=None)
        @given(data=st.data(), index=st.sampled_from(range(len(FORMS))))
        def check(data: st.DataObject, index: int) -> None:
            lifecycle = FORMS[index][0]
            agree(stores[lifecycle.name], data, REACHED, FORMS[index])

        check()
