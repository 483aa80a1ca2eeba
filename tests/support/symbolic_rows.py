"""Holding a row's symbolic form to its Python functions: the SQL a form renders must
decide, on a stored record, whether the row fires and what it writes exactly as the
guard and effect functions do. Shared by the framework's test on the tests' tasks
(tests/engine/test_symbolic_rows.py) and the shipped lifecycles' own
(tests/stores/test_shipped_symbolic_rows.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration
from lifecycles.machines._symbolic import NoSymbolicForm, SymbolicRow, symbolic_row
from lifecycles.stores._sql import SQLStore
from lifecycles.stores._sql_rules import bind_inputs, rules_in_sql

Explorations = Sequence[tuple[Lifecycle[Any, Any], Exploration[Any]]]
Form = tuple[Lifecycle[Any, Any], Exploration[Any], SymbolicRow]


def forms(explorations: Explorations) -> list[Form]:
    """Every row of the lifecycles that has a symbolic form, with its exploration."""
    found = []
    for lifecycle, exploration in explorations:
        for row in lifecycle.rows:
            try:
                found.append((lifecycle, exploration, symbolic_row(lifecycle, row)))
            except NoSymbolicForm:
                continue
    return found


def reached(explorations: Explorations) -> dict[str, list[Any]]:
    """Every record each exploration reaches, by lifecycle name."""
    return {exploration.lifecycle.name: list(explore(exploration, keep_records=True).records)
            for _, exploration in explorations}


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


def agree(store: SQLStore[Any], data: st.DataObject, records: dict[str, list[Any]],
          form: Form) -> None:
    """On a record reached in the row's source status and inputs its move draws, the SQL
    decides and writes as the functions."""
    lifecycle, exploration, symbolic = form
    row: Row = symbolic.row
    sources = [r for r in records[lifecycle.name]
               if str(getattr(r, lifecycle.status_field)) == row.source]
    record = data.draw(st.sampled_from(sources), label="record")
    inputs = data.draw(exploration.move(row.trigger).draw_from(record), label="inputs")
    python_fires = all(lifecycle.guards[n].test(record, inputs) for n in row.conditions) and (
        not any(lifecycle.guards[n].test(record, inputs) for n in row.unless)
    )
    sql, names = statement(store, symbolic)
    store.run(f"DELETE FROM {store.dialect.quote(store.schema.table)}")
    store.insert(record)
    ((fires, *written),) = store.run(
        sql, [*(getattr(inputs, name) for name in names), lifecycle.key_of(record)]
    )
    assert bool(fires) == python_fires
    if python_fires:
        changes = dict(lifecycle.effects[row.effect].compute(record, inputs)) if row.effect else {}
        changes[lifecycle.status_field] = lifecycle.statuses(row.dest)
        expected = [store._encoders[field](changes[field]) for field in symbolic.assignments]
        assert written == expected
