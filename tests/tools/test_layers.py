"""The framework does not know its apps: no generic module imports the monitor or the outbox.

The shipped lifecycles are apps on the framework, as a user's lifecycle is: the app
package (``lifecycles.monitor``, ``lifecycles.outbox``), its table with what is declared
beside it (``lifecycles.machines.monitor``, ``lifecycles.machines.outbox``) and its record
(``lifecycles.invariants.monitor``, ``monitor_messages``, ``lifecycles.invariants.outbox``).
Every other module of the package is generic: the checker, explain, the pages and the
operator commands find what an app declares through its ``Lifecycle`` (``declared_in``),
never by importing it. The apps are named only as data: the lifecycles installed with
the framework (:data:`lifecycles._registry.SHIPPED`) and their commands
(:data:`lifecycles.cli.COMMAND_MODULES`), imported by name when asked for.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Where each installed package's files are in the checkout (pyproject's package-dir).
PACKAGE_DIRS = {
    "lifecycles": ROOT / "lifecycles",
    "lifecycles.machines": ROOT / "machines",
    "lifecycles.invariants": ROOT / "invariants",
    "lifecycles.stores": ROOT / "stores",
}
APPS = (
    "lifecycles.monitor", "lifecycles.outbox",
    "lifecycles.machines.monitor", "lifecycles.machines.outbox",
    "lifecycles.invariants.monitor", "lifecycles.invariants.monitor_messages",
    "lifecycles.invariants.outbox",
)


def is_app(module: str) -> bool:
    return any(module == app or module.startswith(app + ".") for app in APPS)


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the installed package, by its dotted name."""
    for package, directory in PACKAGE_DIRS.items():
        for path in sorted(directory.rglob("*.py")):
            parts = list(path.relative_to(directory).with_suffix("").parts)
            if parts[0] in {"machines", "invariants", "stores"} and package == "lifecycles":
                continue  # the other top-level directories, listed on their own
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join([package, *parts]), path


def imported_by(module: str, path: Path) -> Iterator[str]:
    """Every module an import statement of ``path`` names, anywhere in it (in functions
    and under TYPE_CHECKING too), relative imports resolved; a ``from X import name``
    names ``X.name`` as well, since the name may be a submodule."""
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parent = ".".join(base[:len(base) - node.level + 1]) if node.level else ""
            named = ".".join(part for part in (parent, node.module or "") if part)
            yield named
            yield from (f"{named}.{alias.name}" for alias in node.names)


def test_the_walk_sees_the_apps_and_the_generic_modules() -> None:
    names = {name for name, _ in modules()}
    assert {"lifecycles._explain", "lifecycles.machines._core", "lifecycles.stores._sql",
            "lifecycles.monitor.facade", "lifecycles.machines.monitor.inputs",
            "lifecycles.invariants.outbox"} <= names


def test_no_generic_module_imports_an_app() -> None:
    found = {name: sorted({imported for imported in imported_by(name, path)
                           if is_app(imported)})
             for name, path in modules() if not is_app(name)}
    assert {name: apps for name, apps in found.items() if apps} == {}


def test_the_walk_would_see_an_app_imported_late(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("def later():\n    from lifecycles.machines import monitor\n"
                       "    from ..outbox.facade import CloseOutbox\n")
    assert [name for name in imported_by("lifecycles.x.planted", planted) if is_app(name)] == [
        "lifecycles.machines.monitor", "lifecycles.outbox.facade",
        "lifecycles.outbox.facade.CloseOutbox"]


# The framework's own tests (tests/engine, tests/stores) run on lifecycles made for them
# (tests/support/tasks.py and the small ones declared in the tests); the apps are tested in
# tests/monitor and tests/outbox.
TESTS = ROOT / "tests"
FRAMEWORK_TESTS = ("engine", "stores")
APP_NAMES = ("monitor", "outbox")  # tests/support/<app>.py loads its app, by name or not


def support_imports() -> dict[str, set[str]]:
    """What each module of tests/support imports, by its name (``support.<stem>``)."""
    return {f"support.{path.stem}": set(imported_by(f"support.{path.stem}", path))
            for path in sorted((TESTS / "support").glob("*.py")) if path.stem != "__init__"}


def app_helpers() -> set[str]:
    """The test helpers that build an app's records or drive an app: those named after an
    app, and those importing an app or such a helper (anywhere in them)."""
    imports = support_imports()
    helpers = {name for name in imports if name.split(".")[1].startswith(APP_NAMES)}
    while more := {name for name, named in imports.items() if name not in helpers
                   and any(is_app(module) or module.startswith(tuple(helpers))
                           for module in named)}:
        helpers |= more
    return helpers


# The framework's test files that use an app on purpose, each with the reason: the shipped
# lifecycles are what they are about (every other framework test runs on tests/support's
# own lifecycles: tasks, tickets, parcels, deliveries).
USES_AN_APP_ON_PURPOSE: dict[str, str] = {
    "engine/test_evolver_on_the_monitor_record.py":
        "kept: the evolver against attrs.evolve on the shipped record with the most rules",
    "engine/test_exploration_memo_on_the_monitor.py":
        "kept: the memoized choices of the monitor's exploration against fresh ones",
    "engine/test_interleaving_on_the_monitor.py":
        "kept: the interleaving finds defects planted in the monitor's own table",
    "engine/test_exploration_pinned.py":
        "kept: pins the search's figures for the shipped lifecycles from before issue 13",
    "stores/test_claim_plan.py":
        "kept: claim plans on the monitor's reference schema, beside the generic one",
    "stores/test_conformance.py": "kept: the conformance suite, over every shipped lifecycle",
    "stores/test_insert_many.py":
        "kept: the conformance suite's cases, and the monitor's exact schemas' unique key",
    "stores/test_invariant_conjunction_on_the_monitor.py":
        "kept: the conjunction and the builder on the rules the monitor declares",
    "stores/test_lease_expiry_index_on_the_monitor_schema.py":
        "kept: the lease queries' plans on the monitor's reference schema and its indexes",
    "stores/test_postgres_batches.py":
        "kept: the tasks and the monitor's exact schema (notification_id unique)",
    "stores/test_rules_in_sql_on_the_monitor_schema.py":
        "kept: the rules in SQL on the monitor's reference schema, beside the tickets'",
    "stores/test_shipped_symbolic_rows.py":
        "kept: every row of the shipped tables has an SQL form agreeing with Python",
}


def uses_an_app(module: str, helpers: set[str]) -> bool:
    return is_app(module) or any(module == helper or module.startswith(helper + ".")
                                 for helper in helpers)


def framework_tests_using_an_app() -> set[str]:
    """The test files under tests/engine and tests/stores that import an app or an app's
    helper, directly or through a test module of their folder (``from test_conformance
    import ...``)."""
    helpers = app_helpers()
    imports = {}
    for folder in FRAMEWORK_TESTS:
        for path in sorted((TESTS / folder).glob("*.py")):
            imports[f"{folder}/{path.name}"] = set(imported_by(f"{folder}.{path.stem}", path))
    using = {name for name, named in imports.items()
             if any(uses_an_app(module, helpers) for module in named)}
    while True:  # a sibling test module that uses an app makes its importer use it too
        more = {name for name, named in imports.items() if name not in using
                and any(f"{name.split('/')[0]}/{module.split('.')[0]}.py" in using
                        for module in named)}
        if not more:
            return using
        using |= more


def test_the_framework_tests_use_no_app_but_those_listed() -> None:
    assert framework_tests_using_an_app() == set(USES_AN_APP_ON_PURPOSE)
    assert all(reason.startswith("kept: ") for reason in USES_AN_APP_ON_PURPOSE.values())


def test_the_app_helpers_are_found_and_the_tests_own_lifecycles_are_not_among_them() -> None:
    helpers = app_helpers()
    assert {"support.monitor", "support.outbox", "support.outbox_child",
            "support.legacy_schema", "support.store_operations", "support.stress_worker",
            "support.store_kinds"} <= helpers  # store_kinds: the monitor's exact schema
    assert not {"support.tasks", "support.tasks_inputs", "support.deliveries",
                "support.symbolic_rows", "support.postgres"} & helpers


def test_the_test_walk_would_see_an_app_and_an_app_helper(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("from support.monitor import registered\n"
                       "def later():\n    from lifecycles.machines.outbox import OUTBOX\n")
    helpers = app_helpers()
    assert [name for name in imported_by("engine.planted", planted)
            if uses_an_app(name, helpers)] == [
        "support.monitor", "support.monitor.registered", "lifecycles.machines.outbox",
        "lifecycles.machines.outbox.OUTBOX"]
