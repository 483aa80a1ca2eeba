"""A row's symbolic form (its guards and effect as expressions) against its Python functions.

lifecycles.machines._symbolic calls a row's guard and effect functions once on symbolic
arguments. Rendered as SQL by the rules' renderer, the form must decide exactly what
the functions decide: whether the row fires, and then every value it writes. Records
are every state the checker reaches in the row's source status, inputs are drawn by
the lifecycle's own exploration; SQLite always, PostgreSQL with a server. Rows whose
functions test identity or take an expression for a truth value have no form, and say
why. On the tests' leased tasks (tests/support/tasks.py); the shipped lifecycles' rows
are held to the same in tests/stores/test_shipped_symbolic_rows.py.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

from hypothesis import given, settings
from hypothesis import strategies as st
from support.postgres import connect_in, require_postgres, temporary_schema
from support.symbolic_rows import agree, forms, reached
from support.tasks import TASKS
from support.tasks_inputs import EXPLORATION as TASKS_EXPLORATION

from lifecycles.machines._symbolic import NoSymbolicForm, symbolic_row
from lifecycles.stores.sqlite import SQLiteStore

EXPLORATIONS = [(TASKS, TASKS_EXPLORATION)]
FORMS = forms(EXPLORATIONS)
REACHED = reached(EXPLORATIONS)


def test_the_claim_row_has_a_symbolic_form() -> None:
    (claim,) = [form for _, _, form in FORMS if form.row.trigger == "claim"]
    assert claim.row.source == "queued"
    assert set(claim.assignments) == {
        "status", "worker_id", "lease_token", "lease_expires_at", "updated_at"}


def test_rows_that_test_identity_or_truth_have_none_and_say_why() -> None:
    reasons = {}
    for row in TASKS.rows:
        try:
            symbolic_row(TASKS, row)
        except NoSymbolicForm as why:
            reasons[row.trigger] = str(why)
    assert "lease_has_expired tests identity" in reasons["expire"]
    assert "lease_is_held: TypeError: a rule expression has no truth value" in reasons["renew"]
    assert set(reasons) == {"renew", "succeed", "fail", "expire"}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), index=st.sampled_from(range(len(FORMS))))
def test_sqlite_decides_and_writes_as_the_functions(data: st.DataObject, index: int) -> None:
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as connection:
        agree(SQLiteStore(TASKS, connection), data, REACHED, FORMS[index])


def test_postgres_decides_and_writes_as_the_functions() -> None:
    require_postgres()
    from lifecycles.stores.postgres import PostgresStore

    with temporary_schema() as schema, connect_in(schema) as connection:
        store = PostgresStore(TASKS, connection)

        @settings(max_examples=40, deadline=None)
        @given(data=st.data(), index=st.sampled_from(range(len(FORMS))))
        def check(data: st.DataObject, index: int) -> None:
            agree(store, data, REACHED, FORMS[index])

        check()
