"""A row's symbolic form (its guards and effect as expressions) against its Python functions.

lifecycles.machines.symbolic calls a row's guard and effect functions once on symbolic
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

from lifecycles.machines.core import Lifecycle
from lifecycles.machines.declaration import Row
from lifecycles.machines.exhaustive import explore
from lifecycles.machines.exploration import Exploration
from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.inputs import EXPLORATION as MONITOR_EXPLORATION
from lifecycles.machines.outbox import OUTBOX
from lifecycles.machines.outbox.inputs import EXPLORATION as OUTBOX_EXPLORATION
from lifecycles.machines.symbolic import NoSymbolicForm, SymbolicRow, symbolic_row
from lifecycles.stores.sql import SQLStore
from lifecycles.stores.sql_rules import bind_inputs, rules_in_sql
from lifecycles.stores.sqlite import SQLiteStore

EXPLORATIONS: list[tuple[Lifecycle[Any, Any], Exploration[Any]]] = [
    (MONITOR, MONITOR_EXPLORATION), (OUTBOX, OUTBOX_EXPLORATION),
]


def forms() -> list[tuple[Lifecycle[Any, Any], Exploration[Any], SymbolicRow]]:
    found = []
    for lifecycle, exploration in EXPLORATIONS:
        for row in lifecycle.rows:
            try:
                found.append((lifecycle, exploration, symbolic_row(lifecycle, row)))
            except NoSymbolicForm:
                continue
    return found


FORMS = forms()
REACHED = {
    exploration.lifecycle.name: explore(exploration, keep_records=True).records
    for _, exploration in EXPLORATIONS
}


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


def statement(store: SQLStore[Any], form: SymbolicRow) -> tuple[str, tuple[str, ...]]:
    """One SELECT of the stored record: does the row fire, and what would it write."""
    renderer = rules_in_sql(store.dialect, store.schema.columns,
                            frozenset(store.schema.column_names))
    fires = " AND ".join(f"({renderer.render(c)})" for c in form.conditions) or "1 = 1"
    values = ", ".join(renderer.render(value) for value in form.assignments.values())
    key = store.dialect.quote(store.lifecycle.key_field)
    sql = (f"SELECT CASE WHEN {fires} THEN 1 ELSE 0 END, {values}"
           f" FROM {store.dialect.quote(store.schema.table)} WHERE {key} = ")
    return bind_inputs(sql, store.dialect.param)[0] + store.dialect.param, bind_inputs(
        sql, store.dialect.param)[1]


def agree(store: SQLStore[Any], data: st.DataObject, lifecycle: Lifecycle[Any, Any],
          exploration: Exploration[Any], form: SymbolicRow) -> None:
    row: Row = form.row
    sources = [r for r in REACHED[lifecycle.name]
               if str(getattr(r, lifecycle.status_field)) == row.source]
    record = data.draw(st.sampled_from(sources), label="record")
    inputs = data.draw(exploration.move(row.trigger).draw_from(record), label="inputs")
    python_fires = all(lifecycle.guards[n].test(record, inputs) for n in row.conditions) and (
        not any(lifecycle.guards[n].test(record, inputs) for n in row.unless)
    )
    sql, names = statement(store, form)
    store.run(f"DELETE FROM {store.dialect.quote(store.schema.table)}")
    store.insert(record)
    ((fires, *written),) = store.run(
        sql, [*(getattr(inputs, name) for name in names), lifecycle.key_of(record)]
    )
    assert bool(fires) == python_fires
    if python_fires:
        changes = dict(lifecycle.effects[row.effect].compute(record, inputs)) if row.effect else {}
        changes[lifecycle.status_field] = lifecycle.statuses(row.dest)
        expected = [store._encoders[field](changes[field]) for field in form.assignments]
        assert written == expected


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
    lifecycle, exploration, form = FORMS[index]
    agree(sqlite_stores[lifecycle.name], data, lifecycle, exploration, form)


def test_postgres_decides_and_writes_as_the_functions() -> None:
    require_postgres()
    from lifecycles.stores.postgres import PostgresStore

    with temporary_schema() as schema, connect_in(schema) as connection:
        stores = {lc.name: PostgresStore(lc, connection) for lc, _ in EXPLORATIONS}

        @settings(max_examples=40, deadline=None)
        @given(data=st.data(), index=st.sampled_from(range(len(FORMS))))
        def check(data: st.DataObject, index: int) -> None:
            lifecycle, exploration, form = FORMS[index]
            agree(stores[lifecycle.name], data, lifecycle, exploration, form)

        check()
