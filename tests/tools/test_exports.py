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
    "EquivalentMutant", "ExpectationBroken", "Exploration", "ExternalEffect", "Fire", "FiredBy",
    "Guard",
    "Handling", "InputNames", "Lease", "LeaseDefaults", "Leasing", "LeasingStore", "Leave",
    "Lifecycle", "LifecycleError", "LostRace", "Move", "NotLeasable", "Outcome", "Permanent",
    "Retry", "Row", "Step", "TransitionRefused", "Work", "WorkInputs", "Workers",
    "due_in_order", "effect", "expired_among", "explore", "explore_workers", "guard",
    "liveness", "named_in", "outcomes", "source_of", "symbolic_row", "time_relation",
    "trigger_move",
]
INVARIANTS = [
    "Expr", "FieldRule", "FieldRuleViolation", "Fields", "GroupLimit", "Holding", "Invariant",
    "InvariantSet", "InvariantViolation", "StoreInvariant", "StoreView", "at_most_per",
    "build_record", "canonical_json", "expressed", "field_rules", "finite_time",
    "integer_between", "invariant", "is_integer", "is_time", "matches",
    "non_negative_integer", "one_of", "step_invariant", "store_invariant", "unique_across",
]
STORES = [
    "CommitUncertain", "FilesStore", "MemoryStore", "PostgresStore", "SQLSchema", "SQLiteStore",
    "SchemaMismatch", "StaleRecord", "Store", "StoreDamaged", "StoreError", "StoreUnavailable",
    "UniqueViolation", "UntrustedRecord",
]
# The face: every part's names and the worker.
FACE_ONLY = ["HeldLease", "WorkOutcome", "Worker", "__version__"]
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
    # Every defining module imported first: a public submodule named like an exported name
    # would then shadow it on the package.
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
    assert "lifecycles.machines._core" in modules
    assert "lifecycles.stores._memory" in modules
    assert not {module for module in modules
                if module.split(".")[0] in ("psycopg", "hypothesis", "sqlite3")
                or module.startswith(("lifecycles.stores._sql", "lifecycles.stores.postgres"))}


# Every module of the package whose name has no leading underscore: the faces above, the
# framework's public modules below, the command line, and the shipped apps (their tables,
# records and packages: a lifecycle's own modules are its author's public code).
PUBLIC_FRAMEWORK_MODULES: dict[str, list[str]] = {
    "lifecycles.cli": ["main"],
    "lifecycles.diagrams": ["Drift", "Generation", "Written", "check", "generate", "write"],
    "lifecycles.machines.lease": [
        "Doubt", "Glance", "LeaseDefaults", "LeasingStore", "LostRace", "NotLeasable",
        "Resumed", "claim", "claim_many", "complete", "due_in_order", "expired_among",
        "first_due", "is_due", "is_expired", "is_live_lease", "recover_expired",
        "rescue_expired", "resume",
    ],
    "lifecycles.observe": [
        "FIELDS", "INSTRUMENTS", "LOGGER_PREFIX", "Observer", "lease_digest", "observer",
        "use_meter_provider", "watch_health",
    ],
    "lifecycles.project": ["Project", "StoreURL", "available", "find_project", "resolve"],
    "lifecycles.stores.postgres": [
        "CommitUncertain", "PostgresDialect", "PostgresStore", "SchemaMismatch",
        "TransactionNested", "connect",
    ],
    "lifecycles.stores.postgres_rules": [
        "ConstraintChanges", "RuleConstraint", "RuleConstraints", "install_rule_constraints",
        "installed_rule_constraints", "rule_constraints",
    ],
    "lifecycles.stores.sqlite": [
        "CommitUncertain", "SQLiteDialect", "SQLiteStore", "StoreUnavailable", "connect",
    ],
    "lifecycles.testing": [
        "COVERAGE_RUNS", "DEFAULT_PROFILE", "PENDING_PROFILE", "PROFILE_VARIABLE",
        "REQUIRE_COVERAGE_OPTION", "StepCoverage", "StepFailed", "build_state_machine",
        "coverage_of", "generated_test_settings", "merged_by_lifecycle", "pytest_addoption",
        "pytest_configure", "pytest_load_initial_conftests", "pytest_sessionfinish",
        "pytest_terminal_summary", "pytest_unconfigure",
    ],
}
APPS = ("lifecycles.monitor", "lifecycles.outbox", "lifecycles.machines.monitor",
        "lifecycles.machines.outbox", "lifecycles.invariants.monitor",
        "lifecycles.invariants.outbox")


def package_modules() -> set[str]:
    """Every module of the installed tree, by dotted name (the folders the package's
    symlinks point at included)."""
    names = set()
    folders = {"lifecycles": ROOT / "lifecycles", "lifecycles.machines": ROOT / "machines",
               "lifecycles.stores": ROOT / "stores", "lifecycles.invariants": ROOT / "invariants"}
    for package_name, folder in folders.items():
        for path in folder.rglob("*.py"):
            if path.is_relative_to(ROOT / "lifecycles") and path.relative_to(
                    ROOT / "lifecycles").parts[0] in ("machines", "stores", "invariants"):
                continue  # the symlinked folders, walked from their real place
            parts = [package_name, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            names.add(".".join(parts))
    return names


def is_private(module: str) -> bool:
    return any(part.startswith("_") and part != "__main__" for part in module.split("."))


def test_every_module_is_private_by_name_or_a_pinned_public_one() -> None:
    public = {module for module in package_modules() if not is_private(module)}
    apps = {module for module in public if module.startswith(APPS)}
    assert public - apps == set(PINNED) | set(PUBLIC_FRAMEWORK_MODULES) | {"lifecycles.__main__"}


@pytest.mark.parametrize("name", sorted(PUBLIC_FRAMEWORK_MODULES))
def test_each_public_module_exports_exactly_the_pinned_names(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == PUBLIC_FRAMEWORK_MODULES[name]
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.{public}"


def imports_of(source: str) -> list[tuple[str, list[str]]]:
    """Each ``lifecycles`` import in ``source``: the module, and the names taken from it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return [(module, names) for module, names in found
            if module.split(".")[0] == "lifecycles"]


def private_imports(source: str) -> list[str]:
    """The private names ``source`` imports: a module private by name, a name with a
    leading underscore, or a name its public module leaves out of ``__all__`` (a public
    submodule taken from its package is public)."""
    private = []
    for module, names in imports_of(source):
        if is_private(module):
            private.append(module)
            continue
        exported = set(getattr(importlib.import_module(module), "__all__", ()))
        for name in names:
            submodule = f"{module}.{name}"
            if name.startswith("_") or (name not in exported
                                        and submodule not in package_modules()):
                private.append(f"{module}.{name}")
            elif submodule in package_modules() and is_private(submodule):
                private.append(submodule)
    return private


def doc_blocks() -> dict[str, str]:
    """The Python blocks of the README and the guides, by ``file:line``."""
    blocks = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = page.read_text(encoding="utf-8").splitlines()
        start = None
        for number, line in enumerate(lines, 1):
            if start is None and line.strip() == "```python":
                start = number
            elif start is not None and line.strip() == "```":
                blocks[f"{page.relative_to(ROOT)}:{start}"] = "\n".join(lines[start:number - 1])
                start = None
    return blocks


def app_test_and_example_sources() -> dict[str, str]:
    files = [*sorted((ROOT / "tests" / "monitor").glob("*.py")),
             *sorted((ROOT / "tests" / "outbox").glob("*.py")),
             *sorted((ROOT / "examples").rglob("*.py"))]
    return {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in files}


def test_no_example_doc_block_or_app_test_imports_a_private_name() -> None:
    sources = {**app_test_and_example_sources(), **doc_blocks()}
    assert len(doc_blocks()) > 20  # the walk finds the blocks
    found = {where: private for where, source in sources.items()
             if (private := private_imports(source))}
    assert found == {}


def test_the_private_import_walk_sees_each_kind() -> None:
    source = ("from lifecycles.machines._core import Lifecycle\n"
              "from lifecycles.machines.lease import claim, decide_claim\n"
              "from lifecycles.machines import lease, _core\n"
              "from lifecycles import Worker, observe\n"
              "import lifecycles.stores._sql\n")
    assert private_imports(source) == [
        "lifecycles.machines._core", "lifecycles.machines.lease.decide_claim",
        "lifecycles.machines._core", "lifecycles.stores._sql"]
