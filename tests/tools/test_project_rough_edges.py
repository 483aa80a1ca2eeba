"""Rough edges a downstream project met: a page linking a picture that was not drawn,
an index repeating a column, usage errors with the prefix twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support.postgres import connect_in, temporary_schema
from support.project import fresh_imports, refund_package

from lifecycles import cli
from lifecycles._registry import registered
from lifecycles.diagrams import generate
from lifecycles.project import module_lifecycles
from lifecycles.stores.sqlite import SQLiteStore

__all__ = ["fresh_imports"]
pytestmark = pytest.mark.usefixtures("fresh_imports")


def refund(tmp_path: Path) -> object:
    package = refund_package(tmp_path)
    return module_lifecycles(str(package / "lifecycle.py"))["refund"]


def test_a_page_drawn_without_graphviz_links_no_picture(tmp_path: Path) -> None:
    lifecycle = refund(tmp_path)
    generation = generate({"refund": lifecycle}, None)  # type: ignore[dict-item]
    page = generation.files["refund.md"].decode()
    assert "](None)" not in page and "](refund.svg)" not in page
    assert "drawn by Graphviz]" not in page
    assert "Graphviz picture: not drawn (Graphviz was not installed" in page
    # Drawn earlier and committed: the page links the picture that is there.
    present = generate({"refund": lifecycle}, None, present={"refund.svg"})  # type: ignore[dict-item]
    assert "![The refund lifecycle drawn by Graphviz](refund.svg)" in \
        present.files["refund.md"].decode()


def index_columns(definition: str) -> list[str]:
    listed = definition.split(" ON ", 1)[1].split("(", 1)[1].split(")", 1)[0]
    return [column.strip().strip('"') for column in listed.split(",")]


def test_sqlite_indexes_name_each_column_once(tmp_path: Path) -> None:
    for lifecycle in [refund(tmp_path), *registered().values()]:
        connection = sqlite3.connect(":memory:")
        store = SQLiteStore(lifecycle, connection)  # type: ignore[arg-type]
        definitions = [sql for (sql,) in connection.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
            "AND sql IS NOT NULL", (store.schema.table,))]
        assert definitions
        for definition in definitions:
            columns = index_columns(definition)
            assert len(columns) == len(set(columns)), definition
        connection.close()
    connection = sqlite3.connect(":memory:")
    SQLiteStore(refund(tmp_path / "again"), connection)  # type: ignore[arg-type]
    ((due,),) = connection.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'lifecycle_refund_due'").fetchall()
    assert index_columns(due) == ["status", "available_at", "refund_id"]
    ((claim,),) = connection.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'lifecycle_refund_claim_order'").fetchall()
    assert index_columns(claim) == ["available_at", "refund_id"]


@pytest.mark.postgres
def test_postgresql_indexes_name_each_column_once(tmp_path: Path) -> None:
    from lifecycles.stores.postgres import PostgresStore

    with temporary_schema() as schema:
        connection = connect_in(schema)
        try:
            PostgresStore(refund(tmp_path), connection)  # type: ignore[arg-type]
            found = dict(connection.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
                "AND tablename = 'lifecycle_refund'", (schema,)).fetchall())
        finally:
            connection.close()
    for definition in found.values():
        columns = index_columns(definition)
        assert len(columns) == len(set(columns)), definition
    assert index_columns(found["lifecycle_refund_due"]) == ["status", "available_at",
                                                            "refund_id"]
    assert index_columns(found["lifecycle_refund_claim_order"]) == ["available_at",
                                                                    "refund_id"]


@pytest.mark.parametrize(("argv", "command"), [
    (["monitor", "status"], "monitor status"),
    (["worker"], "worker"),
    (["check", "--bound"], "check"),
    (["frobnicate"], ""),
])
def test_usage_errors_carry_one_prefix(
    capsys: pytest.CaptureFixture[str], argv: list[str], command: str
) -> None:
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"lifecycles: {command + ': ' if command else ''}")
    assert "lifecycles: lifecycles" not in err
    assert err.rstrip().endswith(f"(see `lifecycles{' ' + command if command else ''} --help`)")
