"""`lifecycles list|status|health|explain` on a lifecycle of the user's (the refund
example, named with --module) in each store: a SQLite file, a files store, PostgreSQL.

Every store holds the same three refunds, written through the store itself: rf-1
submitted (due at 0), rf-2 leased to worker-a until 300 under a secret token, rf-3
cancelled. Each mistake is checked for its exit code, its one line and that nothing was
created or changed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lifecycles._cli_ops import Figures, prometheus
from lifecycles._registry import import_target
from lifecycles.cli import main

ROOT = Path(__file__).resolve().parents[2]
REFUND_MODULE = str(ROOT / "examples" / "refund" / "lifecycle.py")
import_target(REFUND_MODULE)  # the example is not installed: put its root on the path

from examples.refund.lifecycle import REFUND, new_refund  # noqa: E402
from lifecycles.machines._blocks import WorkInputs  # noqa: E402

SECRET = "tok-secret-0123456789"
KINDS = ("sqlite", "files", "postgres")

# A lifecycle of the user's whose Handling.inputs raises: explain must name that line.
BRITTLE_SOURCE = '''\
from examples.refund.lifecycle import (
    CODE, EFFECTS, GUARDS, REFUND_INVARIANTS, TABLE, LEASE, Refund, RefundStatus)
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._work import Handling, outcomes


def lease_inputs(now, worker_id, token, seconds):
    raise LookupError("no provider configured")


BRITTLE = Lifecycle(
    module=__name__,
    name="brittle", statuses=RefundStatus, table=TABLE, initial=RefundStatus.SUBMITTED,
    final=[RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.CANCELLED],
    creation="submit", guards=GUARDS, effects=EFFECTS, invariants=REFUND_INVARIANTS,
    record_type=Refund, key_field="refund_id", not_allowed_code=CODE + "not_allowed",
    lease=LEASE.lease,
    handling=Handling(inputs=lease_inputs, finish=outcomes(success="succeed", failure="fail")),
)

BARE = Lifecycle(  # no Handling, and no exploration beside it: no inputs to assume
    module=__name__,
    name="bare", statuses=RefundStatus, table=TABLE, initial=RefundStatus.SUBMITTED,
    final=[RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.CANCELLED],
    creation="submit", guards=GUARDS, effects=EFFECTS, invariants=REFUND_INVARIANTS,
    record_type=Refund, key_field="refund_id", not_allowed_code=CODE + "not_allowed",
    lease=LEASE.lease,
)
'''
RAISING_LINE = 8  # `raise LookupError(...)` above

# A lifecycle with no Handling: its claims are judged with the exploration's lease inputs.
EXPLORED_SOURCE = '''\
from examples.refund.lifecycle import (
    CODE, EFFECTS, GUARDS, REFUND_INVARIANTS, TABLE, LEASE, Refund, RefundStatus)
from lifecycles.machines._blocks import WorkInputs
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._exploration import Exploration

EXPLORED = Lifecycle(
    module=__name__,
    name="explored", statuses=RefundStatus, table=TABLE, initial=RefundStatus.SUBMITTED,
    final=[RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.CANCELLED],
    creation="submit", guards=GUARDS, effects=EFFECTS, invariants=REFUND_INVARIANTS,
    record_type=Refund, key_field="refund_id", not_allowed_code=CODE + "not_allowed",
    lease=LEASE.lease,
)
EXPLORATION = Exploration(
    lifecycle=EXPLORED, initial=list, moves=(), abstraction=repr, abstraction_doc="as is",
    bounds="none", lease_inputs=lambda now, token: WorkInputs(
        now=now, worker_id="explorer", lease_token=token, lease_seconds=30.0),
)
'''


def fill(store: Any) -> None:
    """The three refunds of the module docstring, written through ``store``."""
    for key in ("rf-1", "rf-2", "rf-3"):
        store.insert(REFUND.create(new_refund(key, amount_cents=1250, currency="EUR", now=0.0)))
    claim = WorkInputs(now=0.0, worker_id="worker-a", lease_token=SECRET, lease_seconds=300.0)
    store.fire(store.get("rf-2"), "claim", claim)
    store.fire(store.get("rf-3"), "cancel", WorkInputs(now=0.0))


@pytest.fixture(scope="module")
def brittle_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("brittle") / "ops_brittle_refunds.py"
    path.write_text(BRITTLE_SOURCE, encoding="utf-8")
    return path


@pytest.fixture(params=KINDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """The refunds in one store, and the options naming it."""
    yield from _store(request.param, tmp_path, REFUND)


def _store(kind: str, tmp_path: Path, lifecycle: Any, filled: bool = True
           ) -> Iterator[list[str]]:
    if kind == "sqlite":
        from lifecycles.stores.sqlite import SQLiteStore, connect

        connection = connect(tmp_path / "refunds.db")
        store = SQLiteStore(lifecycle, connection)
        if filled:
            fill(store)
        connection.close()
        yield ["--db", str(tmp_path / "refunds.db")]
    elif kind == "files":
        from lifecycles.stores._files import FilesStore

        store = FilesStore(lifecycle, tmp_path / "refunds")
        if filled:
            fill(store)
        yield ["--root", str(tmp_path / "refunds")]
    else:
        from support.postgres import connect_in, require_postgres, temporary_schema

        from lifecycles.stores.postgres import PostgresStore

        dsn = require_postgres()
        with temporary_schema() as schema:
            connection = connect_in(schema)
            if filled:
                fill(PostgresStore(lifecycle, connection))
            connection.close()
            separator = "&" if "?" in dsn else "?"
            yield ["--dsn", f"{dsn}{separator}options={quote(f'-c search_path={schema}')}"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ops(capsys: pytest.CaptureFixture[str], command: str, *argv: str) -> tuple[int, str, str]:
    return run(capsys, command, *argv, "--module", REFUND_MODULE)


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lifecycles: ")
    return lines[0]


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every entry below ``path`` (hidden ones too), with its size and mode."""
    return {str(p.relative_to(path)): (p.stat().st_size if p.is_file() else 0, p.stat().st_mode)
            for p in sorted(path.rglob("*"))}


# --- list ------------------------------------------------------------------------------


def test_list_names_each_lifecycle_with_its_statuses_lease_version_and_module(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = ops(capsys, "list", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)["lifecycles"]}
    assert rows["refund"] == {"name": "refund", "statuses": 6, "leased": True,
                              "table_version": REFUND.table_version,
                              "module": "examples.refund.lifecycle"}
    assert rows["outbox"]["leased"] is False and "monitor" in rows
    code, out, _ = ops(capsys, "list")
    line = next(line for line in out.splitlines() if line.startswith("refund"))
    assert line.split() == ["refund", "6", "statuses", "leased", "table", REFUND.table_version,
                            "examples.refund.lifecycle"]


# --- status, health, explain on every store ----------------------------------------------


def test_status_counts_and_one_record_with_its_token_hidden(
    capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    code, out, _ = ops(capsys, "status", "refund", *where, "--now", "10", "--json")
    assert code == 0
    assert json.loads(out) == {
        "lifecycle": "refund", "leased": True, "total": 3, "due": 1, "expired": 0,
        "counts": {"submitted": 1, "leased": 1, "retry_wait": 0, "succeeded": 0, "failed": 0,
                   "cancelled": 1}}
    code, out, _ = ops(capsys, "status", "refund", "rf-2", *where, "--now", "400", "--json")
    document = json.loads(out)
    assert code == 0 and SECRET not in out
    assert (document["status"], document["due"], document["lease_expired"]) == (
        "leased", False, True)
    assert document["values"]["worker_id"] == "worker-a"
    assert document["values"]["lease_token"] == "(set, not shown)"
    code, out, _ = ops(capsys, "status", "refund", "rf-2", *where, "--now", "10")
    assert code == 0 and SECRET not in out
    assert "lease_expired     False" in out.splitlines()


def test_health_in_each_format(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    code, out, _ = ops(capsys, "health", "refund", *where, "--now", "10", "--format", "json")
    document = json.loads(out)
    assert code == 0
    assert (document["status"], document["total"], document["due"], document["expired"],
            document["broken"]) == ("ok", 3, 1, 0, 0)
    assert document["counts"]["leased"] == 1
    code, text, _ = ops(capsys, "health", "refund", *where, "--now", "10")
    assert code == 0 and text.startswith("refund: ok (")
    assert "due now: 1" in text.splitlines() and "expired leases: 0" in text.splitlines()
    # At 400 the lease of rf-2 has run out: blocked, exit 1, in every format.
    code, out, _ = ops(capsys, "health", "refund", *where, "--now", "400", "--format",
                       "prometheus")
    assert code == 1
    families = {family.name: family for family in text_string_to_metric_families(out)}
    assert set(families) == {"lifecycles_records", "lifecycles_records_due",
                             "lifecycles_leases_expired", "lifecycles_records_broken",
                             "lifecycles_rule_violations"}
    assert all(family.type == "gauge" and family.documentation
               for family in families.values())
    records = {s.labels["status"]: s.value for s in families["lifecycles_records"].samples}
    assert records == {"submitted": 1, "leased": 1, "retry_wait": 0, "succeeded": 0,
                       "failed": 0, "cancelled": 1}
    assert all(s.labels["lifecycle"] == "refund" for s in families["lifecycles_records"].samples)
    assert [s.value for s in families["lifecycles_leases_expired"].samples] == [1]
    assert [s.value for s in families["lifecycles_records_due"].samples] == [1]
    assert [s.value for s in families["lifecycles_records_broken"].samples] == [0]
    assert families["lifecycles_rule_violations"].samples == []
    code, out, _ = ops(capsys, "health", "refund", *where, "--now", "400", "--json")
    assert code == 1 and json.loads(out)["status"] == "blocked"


def test_explain_as_text_json_and_mermaid(
    capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    code, out, err = ops(capsys, "explain", "refund", "rf-2", *where, "--now", "10")
    assert code == 0 and err == "" and SECRET not in out
    lines = out.splitlines()
    assert lines[1].startswith("status: leased")
    # The holder's steps are judged as the lease holder (its Handling), the rescue as a
    # new worker's claim; none was ever stored.
    assert "  succeed  fires row #3 -> succeeded" in lines
    assert "           assumed: the lease holder worker-a with its own token, its handler " \
           "returning at now" in lines
    assert "  rescue   refused: guard lease_has_expired (refund.lease_live)" in lines
    code, out, _ = ops(capsys, "explain", "refund", "rf-2", *where, "--now", "400", "--json",
                       "--mermaid")
    document = json.loads(out)
    assert code == 0 and document["broken"] == [] and document["inputs_failure"] is None
    verdicts = {v["trigger"]: (v["dest"], v["refusal"]) for v in document["verdicts"]}
    assert verdicts["rescue"] == ("retry_wait", None)
    assert verdicts["succeed"] == (None, "refund.lease_expired")
    assert document["values"]["lease_token"] == "(set, not shown)" and SECRET not in out
    assert "rows leaving leased\n---\nstateDiagram-v2\n" in document["mermaid"]
    code, out, _ = ops(capsys, "explain", "refund", "rf-1", *where, "--now", "10",
                       "--mermaid")
    assert code == 0 and out.startswith("---\ntitle: refund lifecycle")
    assert "rows leaving submitted" in out.splitlines()[1]
    assert "  submitted --> leased: claim [is_due]" in out.splitlines()
    assert "  submitted --> cancelled: cancel" in out.splitlines()


# --- broken records, and reading without changing ------------------------------------------


def test_a_broken_row_is_counted_refused_by_status_and_explained(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (where,) = list(_store("sqlite", tmp_path, REFUND))
    with sqlite3.connect(tmp_path / "refunds.db") as connection:
        connection.execute("UPDATE lifecycle_refund SET failures = 99 WHERE refund_id = 'rf-1'")
    connection.close()
    code, out, _ = ops(capsys, "health", "refund", *where, "--now", "10", "--json")
    document = json.loads(out)
    assert code == 1 and document["status"] == "blocked"
    assert (document["broken"], document["broken_keys"]) == (1, ["rf-1"])
    assert document["violations"]["failures_bounds"] == 1
    code, out, _ = ops(capsys, "health", "refund", *where, "--now", "10", "--format",
                       "prometheus")
    (violations,) = [f for f in text_string_to_metric_families(out)
                     if f.name == "lifecycles_rule_violations"]
    assert {s.labels["rule"]: s.value for s in violations.samples}["failures_bounds"] == 1
    code, out, err = ops(capsys, "status", "refund", "rf-1", *where, "--json")
    assert code == 3 and json.loads(out)["error"] == "state_invalid"
    assert "failures_bounds" in one_line_error(err)
    code, out, _ = ops(capsys, "explain", "refund", "rf-1", *where, "--json")
    assert code == 1 and "failures_bounds" in json.loads(out)["broken"]


def test_reading_creates_no_index_nor_file(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    (where,) = list(_store("sqlite", tmp_path, REFUND))
    database = tmp_path / "refunds.db"
    with sqlite3.connect(database) as connection:
        indexes = [name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
        assert indexes  # the store made its lease-order and rules indexes
        for name in indexes:
            connection.execute(f'DROP INDEX "{name}"')
        schema = connection.execute("SELECT * FROM sqlite_master").fetchall()
    connection.close()
    before = tree(tmp_path)
    for command in (["health", "refund"], ["status", "refund"], ["status", "refund", "rf-1"],
                    ["explain", "refund", "rf-1"]):
        code, _, _ = ops(capsys, *command, *where, "--now", "10")
        assert code == 0, command
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT * FROM sqlite_master").fetchall() == schema
    connection.close()
    assert tree(tmp_path) == before


def test_reading_a_files_store_moves_nothing_out_of_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (where,) = list(_store("files", tmp_path, REFUND))
    planted = tmp_path / "refunds" / "submitted" / "rf-9.json"
    planted.write_text("not json\n")
    os.chmod(planted, 0o600)
    before = tree(tmp_path)
    code, out, _ = ops(capsys, "health", "refund", *where, "--now", "10", "--json")
    document = json.loads(out)
    assert code == 1 and document["broken"] == 1 and document["broken_keys"] == ["rf-9.json"]
    assert tree(tmp_path) == before  # the untrusted file is reported, not quarantined


# --- each mistake: its exit code, one line, nothing created ------------------------------


def test_an_unknown_lifecycle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    database = tmp_path / "refunds.db"
    code, out, err = ops(capsys, "health", "refnud", "--db", str(database), "--json")
    assert code == 2 and json.loads(out)["error"] == "unknown_lifecycle"
    assert "no lifecycle named 'refnud'" in one_line_error(err)
    assert not database.exists()


def test_a_module_declaring_no_lifecycle(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    empty = tmp_path / "ops_nothing_here.py"
    empty.write_text("VALUE = 1\n")
    code, out, err = run(capsys, "list", "--module", str(empty), "--json")
    assert code == 2 and json.loads(out)["error"] == "no_lifecycle"
    assert f"{empty} declares no lifecycle" in one_line_error(err)


@pytest.mark.parametrize("command", [["status", "refund"], ["health", "refund"],
                                     ["explain", "refund", "rf-1"]])
def test_a_missing_database_or_directory_is_never_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    database, root = tmp_path / "absent.db", tmp_path / "absent"
    code, out, err = ops(capsys, *command, "--db", str(database), "--json")
    assert (code, json.loads(out)["error"]) == (4, "no_database")
    assert f"no database at {database}" in one_line_error(err)
    code, out, err = ops(capsys, *command, "--root", str(root), "--json")
    assert (code, json.loads(out)["error"]) == (4, "no_store")
    assert f"no files store at {root}" in one_line_error(err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("now", ["nan", "-1", "inf"])
def test_a_time_that_is_no_time(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                now: str) -> None:
    code, out, err = ops(capsys, "health", "refund", "--db", str(tmp_path / "r.db"),
                         f"--now={now}", "--json")
    assert (code, json.loads(out)["error"]) == (2, "time_invalid")
    assert one_line_error(err) == (
        "lifecycles: --now must be a finite, non-negative number of UNIX seconds")
    assert list(tmp_path.iterdir()) == []


def test_no_store_named(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = ops(capsys, "health", "refund", "--json")
    assert (code, json.loads(out)["error"]) == (2, "usage")
    assert one_line_error(err) == (
        "lifecycles: health: no store: pass --db FILE, --dsn DSN or --root DIR")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_store_of_another_lifecycle(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        kind: str) -> None:
    for where in _store(kind, tmp_path, REFUND):
        before = tree(tmp_path)
        code, out, err = run(capsys, "health", "monitor", *where, "--json")
        error = json.loads(out)["error"]
        if kind == "files":
            assert (code, error) == (4, "no_store")
            assert "holds no monitor files store" in one_line_error(err)
        else:
            assert (code, error) == (4, "no_table")
            assert "holds no monitor store (no table cms_source_terminal_processing)" in (
                one_line_error(err))
        assert tree(tmp_path) == before


def test_a_table_of_the_name_with_other_columns(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    database = tmp_path / "other.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE lifecycle_refund (refund_id TEXT PRIMARY KEY)")
    connection.close()
    before = tree(tmp_path)
    code, out, err = ops(capsys, "status", "refund", "--db", str(database), "--json")
    assert (code, json.loads(out)["error"]) == (3, "schema_altered")
    assert "the table is not the one the refund store writes" in one_line_error(err)
    assert tree(tmp_path) == before


def test_a_key_not_found(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    for command in ("status", "explain"):
        code, out, err = ops(capsys, command, "refund", "rf-404", *where, "--json")
        assert (code, json.loads(out)["error"]) == (3, "missing")
        assert "no refund record under key 'rf-404'" in one_line_error(err)


def test_the_users_inputs_function_raising_is_named_at_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, brittle_module: Path
) -> None:
    from lifecycles._registry import import_target as importing

    brittle = importing(str(brittle_module)).BRITTLE
    (where,) = list(_store("sqlite", tmp_path, brittle))
    place = f"{brittle_module.resolve()}:{RAISING_LINE}: LookupError: no provider configured"
    code, out, err = run(capsys, "explain", "brittle", "rf-1", *where, "--module",
                         str(brittle_module))
    assert code == 1
    assert place in one_line_error(err)
    assert "cannot be built from its values" not in out
    assert f"(none judged: the inputs assumed now cannot be built: {place}; fix the code " \
           "there)" in out
    assert "invariants: 5 of 5 hold" in out  # the record itself is valid
    code, out, _ = run(capsys, "explain", "brittle", "rf-1", *where, "--module",
                       str(brittle_module), "--json")
    document = json.loads(out)
    assert code == 1 and document["inputs_failure"] == place and document["broken"] == []


def test_without_a_handling_the_exploration_gives_the_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from lifecycles._registry import import_target as importing

    module = tmp_path / "ops_explored_refunds.py"
    module.write_text(EXPLORED_SOURCE, encoding="utf-8")
    (where,) = list(_store("sqlite", tmp_path, importing(str(module)).EXPLORED))
    code, out, err = run(capsys, "explain", "explored", "rf-1", *where, "--module",
                         str(module), "--now", "10")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "  claim   fires row #1 -> leased" in lines
    assert "          assumed: a claim by a new worker at now (as " \
           "ops_explored_refunds:EXPLORATION builds a claim's)" in lines
    assert "  cancel  fires row #8 -> cancelled" in lines


def test_a_lifecycle_declaring_nothing_to_build_inputs_from(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, brittle_module: Path
) -> None:
    from lifecycles._registry import import_target as importing

    bare = importing(str(brittle_module)).BARE
    (where,) = list(_store("sqlite", tmp_path, bare))
    code, out, err = run(capsys, "explain", "bare", "rf-1", *where, "--module",
                         str(brittle_module), "--json")
    assert code == 1
    assert json.loads(out)["inputs_failure"] == (
        "NoInputsDeclared: bare declares no Handling and no exploration (in "
        "ops_brittle_refunds or its declared_in) to build its inputs from")
    assert "NoInputsDeclared: bare declares no Handling" in one_line_error(err)


# --- the exposition's escaping -------------------------------------------------------------


def test_label_values_are_escaped_as_the_exposition_format_says() -> None:
    odd = 'a "quoted"\\back\nline'
    found = Figures(odd, True, 2, {"waiting": 2}, 1, 0, 1, {odd: 1}, ("k",), (odd,))
    families = {f.name: f for f in text_string_to_metric_families(prometheus([found]))}
    (sample,) = families["lifecycles_records"].samples
    assert sample.labels == {"lifecycle": odd, "status": "waiting"} and sample.value == 2
    (violation,) = families["lifecycles_rule_violations"].samples
    assert violation.labels == {"lifecycle": odd, "rule": odd} and violation.value == 1


# --- the shipped lifecycles through the same commands ---------------------------------------


def test_the_monitor_through_the_generic_commands_agrees_with_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from support.monitor import CAPABILITIES, three_items

    path = tmp_path / "monitor.db"
    monitor = three_items(path)
    assert monitor.claim("w1", now=30, lease_seconds=100) is not None
    monitor.connection.close()
    before = tree(tmp_path)
    where = ["--db", str(path), "--now", "40", "--json"]
    code, out, _ = run(capsys, "health", "monitor", *where)
    generic = json.loads(out)
    code_own, out, _ = run(capsys, "monitor", "health", "--capabilities", CAPABILITIES, *where)
    own = json.loads(out)
    assert (code, generic["counts"], generic["due"], generic["expired"]) == (
        code_own, own["counts"], own["due"], own["expired_leases"])
    code, out, _ = run(capsys, "explain", "monitor", "e1", *where)
    code_own, out_own, _ = run(capsys, "monitor", "explain", "--capabilities", CAPABILITIES,
                               "e1", *where)
    generic, own = json.loads(out), json.loads(out_own)
    assert code == code_own == 0
    assert generic["verdicts"] == own["verdicts"] and generic["rows"] == own["rows"]
    assert tree(tmp_path) == before


def test_the_outbox_through_the_generic_commands(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    from lifecycles.outbox.facade import CloseOutbox, CloseRequest

    outbox = CloseOutbox(state_dir=tmp_path)
    outbox.enqueue(CloseRequest("run-1", "tx", "complete", {"i": 1}))
    root = tmp_path / "close-outbox"
    (entry,) = [p.stem for p in (root / "pending").iterdir()]
    before = tree(tmp_path)
    code, out, _ = run(capsys, "health", "outbox", "--root", str(root), "--json")
    document = json.loads(out)
    assert code == 0 and document["counts"] == {"pending": 1, "delivered": 0, "quarantined": 0}
    assert document["leased"] is False
    code, out, _ = run(capsys, "explain", "outbox", entry, "--root", str(root), "--json",
                       "--now", "1769904000")
    assert json.loads(out)["now"] == "2026-02-01T00:00:00+00:00"  # as the outbox writes times
    verdicts = {v["trigger"]: (v["dest"], v["guard"]) for v in json.loads(out)["verdicts"]}
    assert code == 0 and verdicts["attempt"] == ("pending", None)
    assert verdicts["deliver"] == (None, "attempt_recorded")  # what a replay would pass
    assert tree(tmp_path) == before
