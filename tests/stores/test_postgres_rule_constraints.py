"""The monitor's rules as named PostgreSQL CHECK constraints (lifecycles.stores.postgres_rules).

Generated from the same declarations as the Python predicates and the health query: the
server then refuses, from any writer, exactly the rows Python refuses. Installing is
idempotent, replaces a changed rule, drops a rule that is gone, never touches a
constraint that is not lifecycles', and refuses with nothing changed while stored rows
break a rule. The monitor works unchanged on a table carrying them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from support.monitor import CAPABILITIES, answer, notification
from support.postgres import Connect, connect_in, pg_connect, pg_schema, require_postgres
from test_rules_in_sql import POSTGRES_ROWS, python_field_verdicts

from lifecycles._loading import import_target
from lifecycles.cli import main
from lifecycles.invariants._core import InvariantViolation, build_record, field_rules
from lifecycles.invariants.monitor import COLUMNS, STATE_INVALID, MonitorRecord
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid
from lifecycles.monitor.schema import TABLE
from lifecycles.stores._postgres_dialect import PostgresDialect
from lifecycles.stores.postgres_rules import (
    MAX_NAME,
    constraint_name,
    install_rule_constraints,
    installed_rule_constraints,
    rule_constraints,
)

__all__ = ["pg_connect", "pg_schema"]  # fixtures, used by name

require_postgres()

pytestmark = pytest.mark.postgres

STATE_INVALID_CODE = "terminal_processing_monitor.state_invalid"


def monitor_with(connection: Any, items: int) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    for index in range(items):
        value, sha = notification(index)
        monitor.register(value, sha, now=10.0)
    return monitor


def rows(connection: Any) -> list[tuple[Any, ...]]:
    return connection.execute(f"SELECT * FROM {TABLE} ORDER BY event_id").fetchall()  # type: ignore[no-any-return]


def other_constraints(connection: Any) -> list[tuple[str, str]]:
    return connection.execute(  # type: ignore[no-any-return]
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = to_regclass(%s) AND NOT starts_with(conname, 'lc_')"
        " ORDER BY conname", (TABLE,),
    ).fetchall()


def test_every_rule_becomes_one_named_constraint_and_installing_again_changes_nothing(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    monitor = monitor_with(connection, 3)
    declared = rule_constraints(monitor.store)
    assert declared.left_out == {}  # every monitor rule has an SQL form
    field_rules = {(c.field, c.rule) for c in declared.constraints if c.field}
    invariants = {c.rule for c in declared.constraints if c.field is None}
    assert invariants == {rule.name for rule in MONITOR.invariants}
    assert {field for field, _ in field_rules} == set(COLUMNS)
    theirs = other_constraints(connection)

    first = install_rule_constraints(monitor.store)
    assert sorted(first.added) == sorted(c.name for c in declared.constraints)
    assert (first.replaced, first.removed, first.kept) == ((), (), ())
    assert set(installed_rule_constraints(monitor.store)) == set(first.added)
    second = install_rule_constraints(monitor.store)
    assert (second.added, second.replaced, second.removed) == ((), (), ())
    assert sorted(second.kept) == sorted(first.added)
    assert other_constraints(connection) == theirs  # the reference schema's own, untouched


def test_the_monitor_works_unchanged_on_a_table_carrying_them(pg_connect: Connect) -> None:
    monitor = monitor_with(pg_connect(), 0)
    install_rule_constraints(monitor.store)
    for index in range(4):
        value, sha = notification(index)
        monitor.register(value, sha, now=10.0)
    answers = ["pending", "failed", "succeeded", "retry_wait"]

    def reader(event_id: str, site_id: str) -> Any:
        return answer(event_id, site_id, answers[int(event_id[1:])])

    outcomes = [monitor.run_once(reader, "w1", now=20.0) for _ in range(4)]
    assert sorted(o.status for o in outcomes if o is not None) == [
        "failed", "succeeded", "watching", "watching"]
    assert monitor.run_once(reader, "w1", now=20.0) is None
    assert monitor.health(now=20.0).counts["watching"] == 2


def test_only_a_postgresql_store_has_rule_constraints() -> None:
    sqlite_store = DurableTerminalProcessingMonitor(sqlite3.connect(":memory:"), CAPABILITIES)
    with pytest.raises(TypeError, match="PostgreSQL"):
        rule_constraints(sqlite_store.store)


def test_a_foreign_write_breaking_a_rule_is_refused_by_the_server(
    pg_connect: Connect,
) -> None:
    connection = pg_connect()
    monitor = monitor_with(connection, 2)
    install_rule_constraints(monitor.store)
    before = rows(connection)
    for statement, constraint in [
        (f"UPDATE {TABLE} SET failures = 9 WHERE event_id = 'e0'", "lc_failures_within_max"),
        (f"UPDATE {TABLE} SET site_id = 'not a site!' WHERE event_id = 'e1'",
         "lc_site_id__token_syntax"),
        (f"UPDATE {TABLE} SET updated_at = 1 WHERE event_id = 'e1'",
         "lc_updated_not_before_created"),
    ]:
        with pytest.raises(psycopg.errors.CheckViolation) as raised:
            connection.execute(statement)
        assert raised.value.diag.constraint_name == constraint
    assert rows(connection) == before


def test_installing_over_broken_rows_is_refused_and_adds_nothing(pg_connect: Connect) -> None:
    connection = pg_connect()
    monitor = monitor_with(connection, 3)
    connection.execute(f"UPDATE {TABLE} SET failures = 9 WHERE event_id IN ('e2', 'e0')")
    before = rows(connection)
    with pytest.raises(InvariantViolation) as raised:
        install_rule_constraints(monitor.store)
    assert raised.value.code == STATE_INVALID_CODE
    assert raised.value.rules == ("failures_within_max", "polls_cover_failures")
    assert raised.value.keys == ("e0", "e2")
    assert installed_rule_constraints(monitor.store) == {}
    assert rows(connection) == before


def test_a_changed_rule_is_replaced_and_a_rule_gone_is_dropped(pg_connect: Connect) -> None:
    connection = pg_connect()
    monitor = monitor_with(connection, 1)
    install_rule_constraints(monitor.store)
    connection.execute(f"COMMENT ON CONSTRAINT lc_failures_within_max ON {TABLE} IS 'older'")
    connection.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT lc_retired_rule CHECK (true)")
    connection.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT site_short CHECK"
                       " (char_length(site_id) < 200)")  # an operator's own: kept
    changes = install_rule_constraints(monitor.store)
    assert changes.replaced == ("lc_failures_within_max",)
    assert changes.removed == ("lc_retired_rule",)
    assert changes.added == ()
    assert "lc_retired_rule" not in installed_rule_constraints(monitor.store)
    assert ("site_short", "CHECK ((char_length(site_id) < 200))") in other_constraints(
        connection)


def test_long_names_are_shortened_to_what_postgresql_keeps_and_stay_distinct() -> None:
    first = constraint_name("a_rule_with_a_very_long_name_indeed", "a_field_with_a_long_name")
    second = constraint_name("a_rule_with_a_very_long_name_indeed", "a_field_with_a_long_nam")
    assert len(first.encode()) <= MAX_NAME and len(second.encode()) <= MAX_NAME
    assert first != second and first.startswith("lc_a_field")
    assert constraint_name("short", None) == "lc_short"


def python_broken(values: dict[str, Any]) -> tuple[set[str], set[str] | None]:
    """The field rules Python finds broken in the row, and its broken invariants (None:
    not asked, a field breaks a rule; the record cannot be built)."""
    fields = {rule.name for (_, rule), holds in zip(
        field_rules(MonitorRecord), python_field_verdicts(values), strict=True) if not holds}
    if fields:
        return fields, None
    record = build_record(MonitorRecord, values, STATE_INVALID)
    return set(), set(MONITOR.invariants.broken(record))


def test_the_server_refuses_exactly_the_rows_python_refuses(pg_schema: str) -> None:
    """Hostile rows (test_rules_in_sql's) written one by one into a plain table carrying
    the constraints: accepted exactly when Python finds no rule broken; when refused,
    the constraint named is one of a rule Python finds broken."""
    dialect = PostgresDialect()
    setup = connect_in(pg_schema)
    declared = rule_constraints(monitor_with(setup, 0).store).constraints
    columns = ", ".join(
        dialect.column_definition(column, False)
        for column in DurableTerminalProcessingMonitor(setup, CAPABILITIES).store.schema.columns
    )
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


def test_the_command_lists_installs_and_refuses_sqlite(
    pg_schema: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    connection = connect_in(pg_schema)
    monitor_with(connection, 1)
    dsn = f"{require_postgres()}?options=-c%20search_path%3D{pg_schema}"
    argv = ["monitor", "constraints", "--dsn", dsn, "--capabilities", CAPABILITIES]
    assert main([*argv, "--json"]) == 1  # none installed yet
    listed = json.loads(capsys.readouterr().out)
    assert {c["state"] for c in listed["constraints"]} == {"missing"}
    assert main([*argv, "--install"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"installed: {len(listed['constraints'])} added, 0 replaced")
    assert "lc_failures_within_max" in out and "installed" in out
    connection.execute(f"COMMENT ON CONSTRAINT lc_failures_within_max ON {TABLE} IS 'x'")
    assert main([*argv, "--json"]) == 1
    states = {c["name"]: c["state"] for c in json.loads(capsys.readouterr().out)["constraints"]}
    assert states["lc_failures_within_max"] == "outdated"
    connection.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT lc_failures_within_max")
    connection.execute(f"UPDATE {TABLE} SET failures = 2, poll_attempts = 2, max_failures = 1"
                       " WHERE event_id = 'e0'")  # breaks failures_within_max alone
    assert main([*argv, "--install"]) == 3
    captured = capsys.readouterr()
    assert STATE_INVALID_CODE in captured.err and "e0" in captured.err
    assert "failures_within_max" in captured.err
    database = tmp_path / "monitor.db"
    DurableTerminalProcessingMonitor(sqlite3.connect(database), CAPABILITIES).connection.close()
    assert main(["monitor", "constraints", "--db", str(database), "--capabilities",
                 CAPABILITIES, "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == "postgres_only"
    assert "only PostgreSQL carries the rules" in captured.err
    connection.close()


def test_a_claim_the_server_refuses_is_decided_again_and_refused_as_state_invalid(
    pg_connect: Connect,
) -> None:
    """A constraint added NOT VALID (by an operator) leaves a broken row stored: the
    one-statement claim meets the server's refusal first, decides again in its
    transaction, and the read refuses the stored record as any read does."""
    connection = pg_connect()
    monitor = monitor_with(connection, 1)
    install_rule_constraints(monitor.store)
    connection.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT lc_site_id__token_syntax")
    connection.execute(f"UPDATE {TABLE} SET site_id = 'no spaces allowed' WHERE event_id = 'e0'")
    check = next(c.check for c in rule_constraints(monitor.store).constraints
                 if c.name == "lc_site_id__token_syntax")
    connection.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT lc_site_id__token_syntax"
                       f" CHECK (({check}) IS TRUE) NOT VALID")
    before = rows(connection)
    with pytest.raises(StateInvalid) as raised:
        monitor.claim("w1", now=20.0)
    assert raised.value.code == STATE_INVALID_CODE
    assert "token_syntax" in raised.value.rules
    assert rows(connection) == before


def test_any_lifecycle_gets_constraints_for_its_rules_with_an_sql_form(
    pg_connect: Connect,
) -> None:
    """The review example on a derived table: its library field rules become constraints;
    its rules written as Python functions stay Python-only, each with the reason."""
    from lifecycles.stores.postgres import PostgresStore

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
