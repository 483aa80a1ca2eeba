"""The public API, pinned: what each package exports, and that importing it stays cheap.

The public surface is the ``__all__`` of ``lifecycles`` (the face) and of the packages
``lifecycles.machines``, ``lifecycles.invariants`` and ``lifecycles.stores`` (each its own
part); every other module may move. The lists below are the surface: a name added to or
removed from a package's ``__all__`` fails here until this file says so too, so a change
of the API is always a deliberate one (as trio's ``test_exports`` does).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

MACHINES = [
    "AcceptedCycle", "Backoff", "Changes", "DefinitionError", "Effect", "EffectContractError",
    "EquivalentMutant", "ExpectationBroken", "Exploration", "Fire", "FiredBy", "Guard",
    "Handling", "InputNames", "Lease", "LeaseDefaults", "Leasing", "LeasingStore", "Leave",
    "Lifecycle", "LifecycleError", "LostRace", "Move", "NotLeasable", "Outcome", "Permanent",
    "Retry", "Row", "Step", "TransitionRefused", "Work", "WorkInputs", "Workers",
    "due_in_order", "effect", "expired_among", "explore", "explore_workers", "guard",
    "named_in", "outcomes", "source_of", "symbolic_row", "time_relation", "trigger_move",
]
INVARIANTS = [
    "Expr", "FieldRule", "FieldRuleViolation", "Fields", "Invariant", "InvariantSet",
    "InvariantViolation", "build_record", "expressed", "field_rules", "finite_time",
    "integer_between", "invariant", "matches", "one_of", "step_invariant",
]
STORES = [
    "CommitUncertain", "FilesStore", "MemoryStore", "PostgresStore", "SQLiteStore",
    "SchemaMismatch", "StaleRecord", "Store", "StoreDamaged", "StoreError", "StoreUnavailable",
    "UniqueViolation",
]
# The face: every part's names, the worker, and `liveness` (not exported by
# lifecycles.machines, whose submodule of that name would shadow the function there).
FACE_ONLY = ["HeldLease", "WorkOutcome", "Worker", "__version__", "liveness"]
LIFECYCLES = sorted(MACHINES + INVARIANTS + STORES + FACE_ONLY)

PINNED = {
    "lifecycles": LIFECYCLES,
    "lifecycles.machines": MACHINES,
    "lifecycles.invariants": INVARIANTS,
    "lifecycles.stores": STORES,
}
SOURCES = {
    "lifecycles": ROOT / "lifecycles" / "__init__.py",
    "lifecycles.machines": ROOT / "machines" / "__init__.py",
    "lifecycles.invariants": ROOT / "invariants" / "__init__.py",
    "lifecycles.stores": ROOT / "stores" / "__init__.py",
}


def package(name: str) -> ModuleType:
    return importlib.import_module(name)


def defining_modules(name: str) -> dict[str, str]:
    """The package's own table: each exported name and the module said to define it."""
    table = package(name)._DEFINED_IN
    assert isinstance(table, dict)
    return table


def test_the_pinned_lists_are_sorted_and_without_repeats() -> None:
    for name, pinned in PINNED.items():
        assert pinned == sorted(set(pinned)), name


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_package_exports_exactly_the_pinned_names(name: str) -> None:
    exported = package(name).__all__
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    assert sorted(exported) == PINNED[name]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_every_exported_name_is_the_object_its_defining_module_defines(name: str) -> None:
    # Every defining module imported first: a submodule named like an exported name would
    # then shadow it on the package (the reason `liveness` is the face's alone).
    table = defining_modules(name)
    modules = {module: importlib.import_module(module) for module in set(table.values())}
    exported = package(name)
    assert sorted(table) == sorted(set(exported.__all__) - {"__version__"})
    for public, where in table.items():
        defining = modules[where]
        value = getattr(exported, public)
        assert value is getattr(defining, public), f"{name}.{public} is not {where}.{public}"
        # Defined there, not re-exported from elsewhere (type aliases carry no module).
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == where, f"{name}.{public} is defined in {value.__module__}"


def test_a_name_exported_by_a_part_is_the_same_object_on_the_face() -> None:
    import lifecycles

    for name in ("lifecycles.machines", "lifecycles.invariants", "lifecycles.stores"):
        for public in package(name).__all__:
            assert getattr(lifecycles, public) is getattr(package(name), public), public


@pytest.mark.parametrize("name", sorted(PINNED))
def test_mypy_sees_what_the_package_exports(name: str) -> None:
    """The ``if TYPE_CHECKING:`` imports name each export from its defining module."""
    tree = ast.parse(SOURCES[name].read_text(encoding="utf-8"))
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module != "typing":
                    assert statement.module is not None
                    imported.update({alias.name: statement.module for alias in statement.names})
    assert imported == defining_modules(name)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_dir_lists_every_exported_name(name: str) -> None:
    assert set(package(name).__all__) <= set(dir(package(name)))


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    import lifecycles
    import lifecycles.machines

    with pytest.raises(AttributeError, match="no attribute 'Lifecyle'"):
        _ = lifecycles.Lifecyle  # type: ignore[attr-defined]
    from lifecycles.machines import lease

    assert lease.__name__ == "lifecycles.machines.lease"


def imported_by(code: str, where: Path) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (the installed package,
    not the checkout: ``where`` is an empty directory)."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=where,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_packages_imports_no_engine_store_or_driver(tmp_path: Path) -> None:
    modules = imported_by("import lifecycles, lifecycles.machines, lifecycles.invariants,"
                          " lifecycles.stores", tmp_path)
    ours = {module for module in modules if module.split(".")[0] == "lifecycles"}
    assert ours == {"lifecycles", "lifecycles._exports", "lifecycles.machines",
                    "lifecycles.invariants", "lifecycles.stores"}
    for heavy in ("psycopg", "hypothesis", "sqlite3", "transitions", "attrs"):
        assert heavy not in modules, heavy


def test_a_public_name_imports_only_what_defines_it(tmp_path: Path) -> None:
    modules = imported_by("from lifecycles import Lifecycle, MemoryStore, InvariantSet", tmp_path)
    assert "lifecycles.machines.core" in modules
    assert "lifecycles.stores.memory" in modules
    assert not {module for module in modules
                if module.split(".")[0] in ("psycopg", "hypothesis", "sqlite3")
                or module.startswith(("lifecycles.stores.sql", "lifecycles.stores.postgres"))}
