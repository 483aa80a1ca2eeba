"""`lifecycles monitor explain`: one item, its rows and guards now, its rules; read-only."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.monitor import CAPABILITIES, TABLE, notification, three_items
from support.postgres import connect_in, require_postgres, temporary_schema

from lifecycles.cli import main
from lifecycles.machines.monitor import MONITOR, MonitorInputs
from lifecycles.monitor.facade import DurableTerminalProcessingMonitor

# e0 succeeded, e1 leased by w1 until 130, e2 pending (registered at 10).


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "monitor.db"
    monitor = three_items(path)
    claimed = monitor.claim("w1", now=30, lease_seconds=100)
    assert claimed is not None and claimed["event_id"] == "e1"
    monitor.connection.close()
    return path


def files(directory: Path) -> dict[str, bytes]:
    """Every file in the database's directory (journals included) and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def explain(
    capsys: pytest.CaptureFixture[str], database: Path, *extra: str, now: str = "40"
) -> tuple[int, str, str]:
    """Run explain; nothing in the database's directory may change."""
    before = files(database.parent)
    code = main(["monitor", "explain", "--db", str(database), "--capabilities", CAPABILITIES,
                 "--now", now, *extra])
    captured = capsys.readouterr()
    assert files(database.parent) == before, "explain must only read"
    return code, captured.out, captured.err


def explained(capsys: pytest.CaptureFixture[str], database: Path, event_id: str,
              now: str = "40") -> tuple[int, dict[str, Any]]:
    code, out, err = explain(capsys, database, "--json", event_id, now=now)
    assert err == ""
    return code, json.loads(out)


def verdicts(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {verdict["trigger"]: verdict for verdict in document["verdicts"]}


def guards(row: dict[str, Any]) -> dict[str, bool | None]:
    return {guard["name"]: guard["value"] for guard in row["guards"]}


def test_a_pending_item_can_be_claimed_by_a_new_worker(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = explained(capsys, database, "e2")
    assert code == 0 and document["status"] == "pending" and document["broken"] == []
    assert [(row["trigger"], row["dest"], row["fires"]) for row in document["rows"]] == [
        ("claim", "leased", True), ("register", "pending", True)]
    assert guards(document["rows"][0]) == {"poll_is_due": True, "failures_remain": True}
    claim = verdicts(document)["claim"]
    assert (claim["row"], claim["dest"], claim["refusal"]) == (0, "leased", None)
    assert "new worker" in claim["who"]
    assert verdicts(document)["observe_success"]["refusal"] == (
        "terminal_processing_monitor.claim_lost")


def test_a_pending_item_not_yet_due_names_the_guard_that_refuses(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, document = explained(capsys, database, "e2", now="5")
    assert guards(document["rows"][0])["poll_is_due"] is False
    claim = verdicts(document)["claim"]
    assert (claim["row"], claim["guard"]) == (None, "poll_is_due")


def test_a_leased_item_the_holder_completes_and_a_claim_is_refused(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = explained(capsys, database, "e1")
    assert code == 0 and document["status"] == "leased"
    completions = [row for row in document["rows"]
                   if row["trigger"].startswith("observe_") or row["trigger"] == "fail_attempt"]
    assert len(completions) == 5
    for row in completions:
        assert guards(row)["lease_is_held"] is True and guards(row)["lease_is_live"] is True
    found = verdicts(document)
    assert {trigger: found[trigger]["dest"] for trigger in
            ("observe_progress", "observe_success", "observe_failure", "fail_attempt")} == {
        "observe_progress": "watching", "observe_success": "succeeded",
        "observe_failure": "failed", "fail_attempt": "retry_wait"}
    assert "lease holder w1" in found["observe_success"]["who"]
    claim = found["claim"]
    assert claim["row"] is None and claim["guard"] is None  # no claim row leaves leased
    assert claim["refusal"] == "terminal_processing_monitor.claim_lost"
    assert found["expire_lease"]["guard"] == "lease_has_expired"
    # The holder's fencing token is never printed, only that it is set.
    assert document["values"]["lease_token"] == "(set, not shown)"
    assert document["values"]["lease_owner"] == "w1"


def test_each_verdict_is_the_engines_own_choice(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, document = explained(capsys, database, "e1")
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(database), CAPABILITIES)
    record = monitor.store.get("e1")
    monitor.connection.close()
    assert record is not None
    holder = MonitorInputs(40.0, worker_id="w1", lease_token=record.lease_token)
    assert MONITOR.select_row("observe_success", record, holder).index == verdicts(
        document)["observe_success"]["row"]
    fired = [row for row in document["rows"] if row["fires"]]
    assert {row["index"] for row in fired} == {
        verdict["row"] for verdict in document["verdicts"] if verdict["row"] is not None}


def test_an_expired_lease_is_recovered_and_the_holder_refused(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, document = explained(capsys, database, "e1", now="500")
    found = verdicts(document)
    assert found["expire_lease"]["dest"] == "retry_wait"
    assert found["observe_success"]["guard"] == "lease_is_live"
    assert found["observe_success"]["refusal"] == "terminal_processing_monitor.lease_expired"


def test_a_final_item_has_no_row_out_of_its_status(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = explained(capsys, database, "e0")
    assert code == 0 and document["status"] == "succeeded" and document["final"] is True
    # Only re-registering the same notification, which keeps the status, is open.
    assert [(row["trigger"], row["dest"]) for row in document["rows"]] == [
        ("register", "succeeded")]
    assert all(verdict["row"] is None for trigger, verdict in verdicts(document).items()
               if trigger != "register")


def test_the_text_names_status_rows_guards_assumptions_and_invariants(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = explain(capsys, database, "e1")
    assert code == 0
    assert "status: leased: A worker holds the lease" in out
    assert "row #5: observe_success -> succeeded  (fires now)" in out
    assert "ok  lease_is_held = true" in out
    assert "assumed: the lease holder w1 with its own token" in out
    assert "not allowed from leased (terminal_processing_monitor.claim_lost): claim" in out
    assert f"invariants: {len(MONITOR.invariants)} of {len(MONITOR.invariants)} hold" in out
    assert "holds  lease_fields_iff_leased" in out
    assert "field rules: every field holds its rule" in out


def test_an_item_breaking_invariants_is_explained_with_the_rule_names(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(database) as connection:  # planted past every check
        connection.execute(f"UPDATE {TABLE} SET failures = 99 WHERE event_id = 'e2'")
    code, document = explained(capsys, database, "e2")
    assert code == 1
    assert document["broken"] == ["failures_within_max", "polls_cover_failures"]
    assert verdicts(document)["claim"]["guard"] == "failures_remain"
    code, out, _ = explain(capsys, database, "e2")
    assert code == 1
    assert "BROKEN failures_within_max" in out and "BROKEN polls_cover_failures" in out
    assert f"invariants: {len(MONITOR.invariants) - 2} of" in out


def test_an_item_breaking_a_field_rule_is_still_explained(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(database) as connection:
        connection.execute(f"UPDATE {TABLE} SET lease_owner = 'not a token!' "
                           "WHERE event_id = 'e1'")
    code, document = explained(capsys, database, "e1")
    assert code == 1 and document["status"] == "leased"
    assert [(rule["name"], rule["field"]) for rule in document["field_rules"]] == [
        ("token_syntax", "lease_owner")]
    assert "token_syntax" in document["broken"]
    assert verdicts(document)["observe_success"]["dest"] == "succeeded"


def test_an_unknown_item_is_missing_exit_3(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = explain(capsys, database, "e404")
    assert (code, out) == (3, "")
    assert err == ("lifecycles: refused: terminal_processing_monitor.missing: "
                   "no item with event id 'e404'\n")
    code, out, _ = explain(capsys, database, "--json", "e404")
    assert code == 3 and json.loads(out)["error"] == "terminal_processing_monitor.missing"


def test_a_malformed_event_id_or_time_is_a_usage_error(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = explain(capsys, database, "--json", "not an id")
    assert code == 2 and json.loads(out)["error"] == "terminal_processing_monitor.event_invalid"
    code, out, _ = explain(capsys, database, "--json", "e1", now="inf")
    assert code == 2 and json.loads(out)["error"] == "terminal_processing_monitor.time_invalid"


def mermaid_parts(source: str) -> tuple[set[str], set[tuple[str, str, str]], list[str]]:
    """The declared states, the edges (one per label) and every other statement."""
    states, edges, others = set(), set(), []
    for line in source.split("---")[-1].splitlines()[1:]:
        line = line.strip()
        if match := re.fullmatch(r'state "(\w+)" as (\w+)', line):
            states.add(match[2])
        elif match := re.fullmatch(r"(\S+) --> (\S+): (.*)", line):
            edges |= {(match[1], match[2], label) for label in match[3].split("<br/>")}
        elif line:
            others.append(line)
    return states, edges, others


@pytest.mark.parametrize(("event_id", "status"), [("e1", "leased"), ("e2", "pending"),
                                                  ("e0", "succeeded")])
def test_mermaid_draws_the_status_and_the_rows_leaving_it_and_nothing_else(
    database: Path, capsys: pytest.CaptureFixture[str], event_id: str, status: str
) -> None:
    code, out, _ = explain(capsys, database, "--mermaid", event_id)
    assert code == 0 and out.startswith("---\ntitle: monitor lifecycle")
    states, edges, others = mermaid_parts(out)
    leaving = [row for row in MONITOR.rows if row.source == status]
    assert edges == {(status, row.dest, row.label) for row in leaving}
    assert states == {status} | {row.dest for row in leaving}
    assert "[*]" not in out
    assert all(line.startswith(("stateDiagram-v2", "direction", "classDef", "class "))
               for line in others)
    code, json_out, _ = explain(capsys, database, "--mermaid", "--json", event_id)
    assert json.loads(json_out)["mermaid"] == out


def test_help_lists_explain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["monitor", "--help"])
    assert "explain" in capsys.readouterr().out


def test_explain_over_a_postgres_dsn(capsys: pytest.CaptureFixture[str]) -> None:
    postgres_dsn = require_postgres()
    with temporary_schema() as schema:
        monitor = DurableTerminalProcessingMonitor(connect_in(schema), CAPABILITIES)
        monitor.register(*notification(1), now=10)
        monitor.claim("w1", now=20, lease_seconds=100)
        monitor.connection.close()
        dsn = f"{postgres_dsn}?options=-c%20search_path%3D{schema}"
        argv = ["monitor", "explain", "--dsn", dsn, "--capabilities", CAPABILITIES,
                "--now", "30", "--json"]
        assert main([*argv, "e1"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document["status"] == "leased"
        assert verdicts(document)["observe_success"]["dest"] == "succeeded"
        assert main([*argv, "e9"]) == 3
        assert json.loads(capsys.readouterr().out)["error"] == (
            "terminal_processing_monitor.missing")


def test_the_text_numbers_rows_as_the_auditor_page_does(
    capsys: pytest.CaptureFixture[str], database: Path
) -> None:
    """The page numbers table entries from 1 (claim is #1); explain's text says the same."""
    assert main(["monitor", "explain", "--db", str(database), "--capabilities", CAPABILITIES,
                 "--now", "50", "e1"]) == 0
    out = capsys.readouterr().out
    page = (Path(__file__).resolve().parents[2] / "diagrams" / "monitor.md").read_text()
    assert "| 2 | `expire_lease` | `leased` | `retry_wait` |" in page
    assert "  row #2: expire_lease -> retry_wait" in out
    assert "fires row #5 -> succeeded" in out
    assert "| 5 | `observe_success` | `leased` | `succeeded` |" in page
