"""The generic SQL store: no lifecycle inside stores/, statements from the table, one base.

The store contract itself is tested on every store by test_conformance.py; here is
what the split of issue 11 promises: ``stores/`` imports no particular lifecycle
(parsed with ``ast``, not grepped), and a generic schema derives its table from the record
(the tests' tasks'). The monitor's reference schema is tested in
tests/monitor/test_monitor_reference_schema.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
from support.tasks import TASKS

from lifecycles._registry import registered
from lifecycles.stores._sql_schema import SQLSchema

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


def test_a_generic_schema_derives_its_table_from_the_record() -> None:
    schema = SQLSchema(TASKS)
    assert schema.table == "lifecycle_tasks" and schema.code_prefix == "lifecycles."
    assert schema.column_names == tuple(f.name for f in attrs.fields(TASKS.record_type))
    kinds = {column.name: column.kind for column in schema.columns}
    assert kinds["available_at"] == "real" and kinds["attempts"] == "bigint"
    assert kinds["status"] == "text"
