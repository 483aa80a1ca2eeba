"""The generic SQL store: no lifecycle inside stores/, statements from the table, one base.

The store contract itself is tested on every store by test_conformance.py; here is
what the split of issue 11 promises: ``stores/`` imports no particular lifecycle
(parsed with ``ast``, not grepped), the monitor's reference schema renders its status
lists from the table, and SQLite and PostgreSQL differ only by their dialects.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
import pytest

from lifecycles.machines import lease
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.schema import QUERIES, MonitorSchema, parse_named_blocks, render
from lifecycles.registry import registered
from lifecycles.stores.postgres_dialect import PostgresDialect
from lifecycles.stores.sql_schema import SQLSchema
from lifecycles.stores.sqlite import SQLiteDialect

STORES = Path(__file__).resolve().parents[2] / "stores"



def lifecycle_modules() -> set[str]:
    """Every module that belongs to one particular lifecycle: its table, its records, its
    facade (``lifecycles.<name>``) and the facade's own modules (``lifecycles.<name>_*``)."""
    modules: set[str] = set()
    for name, lifecycle in registered().items():
        modules |= {lifecycle.module, lifecycle.record_type.__module__, f"lifecycles.{name}"}
        modules.add(f"lifecycles.{name}_")  # a prefix: lifecycles.monitor.schema, ...
    return modules


def imports_of(path: Path) -> list[str]:
    """Every module an import in ``path`` names, wherever the import stands (a lazy import
    inside a function counts too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
            # `from lifecycles import monitor` names the module in the alias.
            found += [f"{node.module}.{a.name}" for a in node.names]
    return found


def test_stores_import_no_particular_lifecycle() -> None:
    specific = lifecycle_modules()
    offences = [
        f"{path.relative_to(STORES.parent)} imports {module}"
        for path in sorted(STORES.rglob("*.py"))
        for module in imports_of(path)
        if any(module == s or (s.endswith("_") and module.startswith(s)) for s in specific)
    ]
    assert offences == []


def test_the_import_check_sees_what_it_looks_for(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from lifecycles.machines.monitor import MONITOR\n"
        "def __getattr__(name):\n    import lifecycles.monitor.schema\n"
    )
    assert imports_of(planted)[:1] == ["lifecycles.machines.monitor"]
    assert "lifecycles.monitor.schema" in imports_of(planted)
    assert "lifecycles.machines.monitor" in lifecycle_modules()


# --- the monitor's schema, as named blocks ---------------------------------------------


def test_named_blocks_parse_once_and_refuse_a_repeated_name() -> None:
    assert parse_named_blocks("-- head\n-- name: a\n-- what a is\nSELECT 1\n") == {
        "a": "SELECT 1"
    }
    with pytest.raises(ValueError, match="two SQL blocks"):
        parse_named_blocks("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    assert {"create_meta", "bind_meta", "create_table"} <= set(QUERIES)


@pytest.mark.parametrize("dialect", [SQLiteDialect(), PostgresDialect()], ids=lambda d: d.name)
def test_status_lists_in_the_schema_come_from_the_table(dialect: SQLiteDialect) -> None:
    create = render("create_table", dialect)
    statuses = ", ".join(f"'{status.value}'" for status in MONITOR.statuses)
    assert f"status IN ({statuses})" in create
    assert f"status = '{lease.leased_status(MONITOR)}'" in create
    for status in MONITOR.statuses:  # typed nowhere in the SQL text itself
        assert f"'{status.value}'" not in "\n".join(QUERIES.values())


def test_the_claim_order_index_and_due_query_name_the_claimable_statuses() -> None:
    claimable = lease.claimable_statuses(MONITOR)
    index = PostgresDialect().claim_order_index(MonitorSchema("c" * 64))
    assert index is not None
    assert index.endswith(f"IN ({', '.join(repr(s) for s in claimable)})")


def test_a_generic_schema_derives_its_table_from_the_record() -> None:
    schema = SQLSchema(MONITOR)
    assert schema.table == "lifecycle_monitor" and schema.code_prefix == "lifecycles."
    assert schema.column_names == tuple(f.name for f in attrs.fields(MONITOR.record_type))
    kinds = {column.name: column.kind for column in schema.columns}
    assert kinds["created_at"] == "real" and kinds["failures"] == "bigint"
    assert kinds["status"] == "text"
    assert MonitorSchema("c" * 64).columns[6].kind == "integer"  # the reference's width
