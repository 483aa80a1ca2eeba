"""The monitor's rules as named PostgreSQL CHECK constraints, on its reference schema.

The constraints themselves (lifecycles.stores.postgres_rules: generated from the rules'
declarations, installed idempotently, replaced, dropped, refused over broken rows, the
server refusing exactly what Python refuses) are tested on the tests' tasks in
tests/stores/test_postgres_rule_constraints.py. Here what the monitor adds: every one of
its rules has an SQL form and the reference schema's own constraints are left alone, the
monitor works unchanged on a table carrying them, its ``monitor constraints`` command, and
a claim the server refuses is the facade's ``StateInvalid``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, answer, notification
from support.postgres import Connect, connect_in, pg_connect, pg_schema, require_postgres

from lifecycles.cli import main
from lifecycles.invariants.monitor import COLUMNS
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor, StateInvalid
from lifecycles.monitor.schema import TABLE
from lifecycles.stores.postgres_rules import (
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

