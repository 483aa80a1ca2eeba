"""A lifecycle's rules as named PostgreSQL CHECK constraints (lifecycles.stores.postgres_rules).

Generated from the same declarations as the Python predicates and the health query: the
server then refuses, from any writer, exactly the rows Python refuses. Installing is
idempotent, replaces a changed rule, drops a rule that is gone, never touches a
constraint that is not lifecycles', and refuses with nothing changed while stored rows
break a rule. The store works unchanged on a table carrying them. Shown on the generic
table of the tests' tasks (tests/support/tasks.py), every rule of which has an SQL form;
the monitor's reference schema, facade and ``monitor constraints`` command with them are
tests/monitor/test_monitor_rule_constraints.py.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.postgres import Connect, connect_in, pg_connect, pg_schema, require_postgres
from support.tasks import TASKS, Task, TaskInputs, TaskStatus, new_task

from lifecycles._loading import import_target
from lifecycles.invariants._core import InvariantViolation, build_record, field_rules
from lifecycles.stores._postgres_dialect import PostgresDialect
from lifecycles.stores._sql_schema import SQLSchema
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.postgres_rules import (
    MAX_NAME,
    constraint_name,
    install_rule_constraints,
    installed_rule_constraints,
    rule_constraints,
)
from lifecycles.stores.sqlite import SQLiteStore

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

require_postgres()

pytestmark = pytest.mark.postgres

STATE_INVALID_CODE = "tasks.state_invalid"
TABLE = "lifecycle_tasks"
COLUMNS = tuple(field.name for field in attrs.fields(Task))


def store_with(connection: Any, items: int) -> PostgresStore[Task]:
    """A store of the tasks holding t0..t<items - 1>, queued and due at 10."""
    store = PostgresStore(TASKS, connection)
    for index in range(items):
        store.insert(TASKS.create(new_task(f"t{index}", now=10.0)))
    return store


def rows(connection: Any) -> list[tuple[Any, ...]]:
    return connection.execute(  # type: ignore[no-any-return]
        f"SELECT * FROM {TABLE} ORDER BY task_id").fetchall()


def other_constraints(connection: Any) -> list[tuple[str, str]]:
    return connection.execute(  # type: ignore[no-any-return]
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = to_regclass(%s) AND NOT starts_with(conname, 'lc_')"
        " ORDER BY conname", (TABLE,),
    ).fetchall()


def claim(worker: str, token: str, now: float = 20.0, lease_seconds: float = 30.0) -> TaskInputs:
    return TaskInputs(now=now, worker_id=worker, lease_token=token, lease_seconds=lease_seconds)


def test_every_rule_becomes_one_named_constraint_and_installing_again_changes_nothing(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    store = store_with(connection, 3)
    declared = rule_constraints(store)
    assert declared.left_out == {}  # every rule of the tasks has an SQL form
    field_rules_found = {(c.field, c.rule) for c in declared.constraints if c.field}
    invariants = {c.rule for c in declared.constraints if c.field is None}
    assert invariants == {rule.name for rule in TASKS.invariants}
    assert {field for field, _ in field_rules_found} == set(COLUMNS)
    theirs = other_constraints(connection)
    assert theirs == [(f"{TABLE}_pkey", "PRIMARY KEY (task_id)")]

    first = install_rule_constraints(store)
    assert sorted(first.added) == sorted(c.name for c in declared.constraints)
    assert (first.replaced, first.removed, first.kept) == ((), (), ())
    assert set(installed_rule_constraints(store)) == set(first.added)
    second = install_rule_constraints(store)
    assert (second.added, second.replaced, second.removed) == ((), (), ())
    assert sorted(second.kept) == sorted(first.added)
    assert other_constraints(connection) == theirs  # the table's own, untouched


def test_the_store_works_unchanged_on_a_table_carrying_them(pg_connect: Connect) -> None:
    """Every kind of write the table declares, on a table whose server checks every rule."""
    store = store_with(pg_connect(), 0)
    install_rule_constraints(store)
    for index in range(4):
        store.insert(TASKS.create(new_task(f"t{index}", now=10.0)))
    leased = [store.claim(claim("w1", f"k{index}", lease_seconds=10 + index))
              for index in range(4)]
    assert [task.task_id for task in leased if task is not None] == ["t0", "t1", "t2", "t3"]
    assert store.claim(claim("w1", "k9")) is None  # nothing due
    t0, t1, t2, t3 = (task for task in leased if task is not None)
    store.fire(t0, "succeed", TaskInputs(now=21.0, worker_id="w1", lease_token="k0"))
    store.fire(t1, "fail", TaskInputs(now=21.0, worker_id="w1", lease_token="k1",
                                      error="x.y"))
    store.fire(t2, "fail", TaskInputs(now=21.0, worker_id="w1", lease_token="k2",
                                      error="x.z", retryable=False))
    renewed = store.fire(t3, "renew", TaskInputs(now=22.0, worker_id="w1", lease_token="k3",
                                                 lease_seconds=5.0))
    assert renewed.lease_expires_at == 33.0
    assert [task.task_id for task in store.recover_expired(claim("w2", "k8", now=40.0))] == [
        "t3"]
    assert store.health(40.0).counts == {
        "queued": 2, "running": 0, "succeeded": 1, "failed": 1}


def test_only_a_postgresql_store_has_rule_constraints() -> None:
    sqlite_store = SQLiteStore(TASKS, sqlite3.connect(":memory:"))
    with pytest.raises(TypeError, match="PostgreSQL"):
        rule_constraints(sqlite_store)


def test_a_foreign_write_breaking_a_rule_is_refused_by_the_server(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    store = store_with(connection, 2)
    install_rule_constraints(store)
    before = rows(connection)
    for statement, constraint in [
        (f"UPDATE {TABLE} SET attempts = 9 WHERE task_id = 't0'", "lc_attempts_within_max"),
        (f"UPDATE {TABLE} SET last_error = 'Not a code!' WHERE task_id = 't1'",
         "lc_last_error__error_code_syntax"),
        (f"UPDATE {TABLE} SET worker_id = 'w1' WHERE task_id = 't1'",
         "lc_lease_fields_iff_running"),
    ]:
        with pytest.raises(psycopg.errors.CheckViolation) as raised:
            connection.execute(statement)
        assert raised.value.diag.constraint_name == constraint
    assert rows(connection) == before


def test_installing_over_broken_rows_is_refused_and_adds_nothing(pg_connect: Connect) -> None:
    connection = pg_connect()
    store = store_with(connection, 3)
    connection.execute(f"UPDATE {TABLE} SET attempts = 9 WHERE task_id = 't2'")
    connection.execute(f"UPDATE {TABLE} SET worker_id = 'w1' WHERE task_id = 't0'")
    before = rows(connection)
    with pytest.raises(InvariantViolation) as raised:
        install_rule_constraints(store)
    assert raised.value.code == STATE_INVALID_CODE
    # in the order the rules are declared
    assert raised.value.rules == ("lease_fields_iff_running", "attempts_within_max")
    assert raised.value.keys == ("t0", "t2")
    assert installed_rule_constraints(store) == {}
    assert rows(connection) == before


def test_a_changed_rule_is_replaced_and_a_rule_gone_is_dropped(pg_connect: Connect) -> None:
    connection = pg_connect()
    store = store_with(connection, 1)
    install_rule_constraints(store)
    connection.execute(f"COMMENT ON CONSTRAINT lc_attempts_within_max ON {TABLE} IS 'older'")
    connection.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT lc_retired_rule CHECK (true)")
    connection.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT task_short CHECK"
                       " (char_length(task_id) < 200)")  # an operator's own: kept
    changes = install_rule_constraints(store)
    assert changes.replaced == ("lc_attempts_within_max",)
    assert changes.removed == ("lc_retired_rule",)
    assert changes.added == ()
    assert "lc_retired_rule" not in installed_rule_constraints(store)
    assert ("task_short", "CHECK ((char_length(task_id) < 200))") in other_constraints(
        connection)


def test_long_names_are_shortened_to_what_postgresql_keeps_and_stay_distinct() -> None:
    first = constraint_name("a_rule_with_a_very_long_name_indeed", "a_field_with_a_long_name")
    second = constraint_name("a_rule_with_a_very_long_name_indeed", "a_field_with_a_long_nam")
    assert len(first.encode()) <= MAX_NAME and len(second.encode()) <= MAX_NAME
    assert first != second and first.startswith("lc_a_field")
    assert constraint_name("short", None) == "lc_short"


# --- hostile rows: the server against Python ------------------------------------------

# A valid task in every status (and a queued one back from a failed attempt).
TEMPLATES = [attrs.asdict(task, value_serializer=lambda _, __, v: (
    v.value if isinstance(v, TaskStatus) else v)) for task in (
    Task("t", TaskStatus.QUEUED, 0, 3, 10.0, None, None, None, None, 10.0),
    Task("t", TaskStatus.RUNNING, 0, 3, 10.0, "w1", "k1", 50.0, None, 20.0),
    Task("t", TaskStatus.QUEUED, 1, 3, 22.0, None, None, None, "x.y", 21.0),
    Task("t", TaskStatus.SUCCEEDED, 1, 3, 10.0, None, None, None, None, 30.0),
    Task("t", TaskStatus.FAILED, 3, 3, 10.0, None, None, None, "lease_expired", 30.0),
)]
ODD_TEXT = [
    "", "5", " 5", "inf", "NaN", "-1", "a b", "A" * 128, "A" * 129, "a" * 64, "a" * 65,
    "queued", "Queued", "queued ", "running", "failed", "succeeded", "retry_wait", "a.b",
    "_a", "A", "1a", "x:y-z.w_1", "[", "*", "%", "'", "-", "é", "ß", "\uff21", "a\x7f", "a/b",
]
KINDS = {column.name: column.kind for column in SQLSchema(TASKS).columns}


def postgres_values(kind: str) -> st.SearchStrategy[Any]:
    """What a typed PostgreSQL column can hold: no NUL in text, 64-bit integers."""
    if kind == "text":
        text = sorted({v for row in TEMPLATES for v in row.values() if isinstance(v, str)})
        return st.one_of(st.sampled_from(text), st.sampled_from(ODD_TEXT), st.none(),
                         st.text(st.characters(blacklist_characters="\x00"), max_size=10))
    if kind == "bigint":
        return st.one_of(
            st.sampled_from([0, 1, 2, 3, 4, 10, 11, -1, 2**63 - 1, -(2**63)]), st.none(),
            st.integers(-(2**63), 2**63 - 1))
    return st.one_of(
        st.sampled_from([0.0, -0.0, 10.0, 50.0, 1e300, -1.0, math.inf, -math.inf, math.nan]),
        st.none(), st.floats())


def one_change() -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(COLUMNS).flatmap(
        lambda name: st.dictionaries(st.just(name), postgres_values(KINDS[name]), max_size=1))


POSTGRES_ROWS = st.lists(
    st.tuples(st.sampled_from(TEMPLATES), one_change(), one_change()), min_size=1, max_size=8,
).map(lambda drawn: [
    {**base, "task_id": f"t{index:03d}", **first, **second}
    for index, (base, first, second) in enumerate(drawn)
])
CONVERTERS = {field.name: field.converter for field in attrs.fields(Task)}


def python_broken(values: dict[str, Any]) -> tuple[set[str], set[str] | None]:
    """The field rules Python finds broken in the row, and its broken invariants (None:
    not asked, a field breaks a rule; the record cannot be built)."""
    fields = set()
    for field, rule in field_rules(Task):
        value = values[field]
        converter = CONVERTERS[field]
        if converter is not None:
            value = converter(value)  # type: ignore[operator]
        if not ((value is None and rule.optional) or rule.check(value)):
            fields.add(rule.name)
    if fields:
        return fields, None
    record = build_record(Task, values, STATE_INVALID_CODE)
    return set(), set(TASKS.invariants.broken(record))


def test_the_templates_are_valid_tasks() -> None:
    assert [python_broken(row) for row in TEMPLATES] == [(set(), set())] * len(TEMPLATES)


def test_the_server_refuses_exactly_the_rows_python_refuses(pg_schema: str) -> None:
    """Hostile rows (valid tasks with up to two columns replaced by odd values) written
    one by one into a plain table carrying the constraints: accepted exactly when Python
    finds no rule broken; when refused, the constraint named is one of a rule Python
    finds broken."""
    dialect = PostgresDialect()
    setup = connect_in(pg_schema)
    store = store_with(setup, 0)
    declared = rule_constraints(store).constraints
    columns = ", ".join(dialect.column_definition(column, False)
                        for column in store.schema.columns)
    setup.execute(f"CREATE TABLE plain_rows (id serial PRIMARY KEY, {columns})")
    for constraint in declared:
        setup.execute(f"ALTER TABLE plain_rows ADD CONSTRAINT {constraint.name}"
                      f" CHECK (({constraint.check}) IS TRUE)")
    rule_of = {constraint.name: constraint for constraint in declared}
    insert = (f"INSERT INTO plain_rows ({', '.join(dialect.quote(n) for n in COLUMNS)})"
              f" VALUES ({', '.join('%s' for _ in COLUMNS)})")

    @given(POSTGRES_ROWS)
    def check(drawn: list[dict[str, Any]]) -> None:
        for values in drawn:
            fields, invariants = python_broken(values)
            try:
                setup.execute(insert, [values[name] for name in COLUMNS])
            except psycopg.errors.CheckViolation as error:
                named = rule_of[str(error.diag.constraint_name)]
                if named.field is not None:  # a field rule: Python finds it broken too
                    assert named.rule in fields, values
                else:  # an invariant: broken in Python, or some field is
                    assert invariants is None or named.rule in invariants, values
            else:
                assert (fields, invariants) == (set(), set()), values

    try:
        check()
    finally:
        setup.close()


def test_a_claim_the_server_refuses_is_decided_again_and_refused_as_state_invalid(
    pg_connect: Connect,
) -> None:
    """A constraint added NOT VALID (by an operator) leaves a broken row stored: the
    one-statement claim meets the server's refusal first, decides again in its
    transaction, and the read refuses the stored record as any read does."""
    connection = pg_connect()
    store = store_with(connection, 1)
    install_rule_constraints(store)
    connection.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT lc_last_error__error_code_syntax")
    connection.execute(f"UPDATE {TABLE} SET last_error = 'Not a code' WHERE task_id = 't0'")
    check = next(c.check for c in rule_constraints(store).constraints
                 if c.name == "lc_last_error__error_code_syntax")
    connection.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT lc_last_error__error_code_syntax"
                       f" CHECK (({check}) IS TRUE) NOT VALID")
    before = rows(connection)
    with pytest.raises(InvariantViolation) as raised:
        store.claim(claim("w1", "k1"))
    assert raised.value.code == STATE_INVALID_CODE
    assert "error_code_syntax" in raised.value.rules
    assert rows(connection) == before


def test_any_lifecycle_gets_constraints_for_its_rules_with_an_sql_form(
    pg_connect: Connect,
) -> None:
    """The review example on a derived table: its library field rules become constraints;
    its rules written as Python functions stay Python-only, each with the reason."""
    import_target(str(Path(__file__).resolve().parents[2] / "examples" / "review" / "lifecycle.py"))
    from examples.review.lifecycle import REVIEW

    store = PostgresStore(REVIEW, pg_connect())
    declared = rule_constraints(store)
    python_only = {"decision_known", *(rule.name for rule in REVIEW.invariants)}
    assert set(declared.left_out) == python_only
    assert all(why for why in declared.left_out.values())
    assert {c.rule for c in declared.constraints} & python_only == set()
    assert {(c.field, c.rule) for c in declared.constraints} >= {
        ("doc_id", "token_syntax"), ("revision", "revision_bounds"),
        ("due_at", "time_finite_non_negative")}
    changes = install_rule_constraints(store)
    assert sorted(changes.added) == sorted(installed_rule_constraints(store))
    assert len(changes.added) == len(declared.constraints)
