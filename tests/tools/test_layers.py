"""The framework does not know its apps: no generic module imports the monitor or the outbox.

The shipped lifecycles are apps on the framework, as a user's lifecycle is: the app
package (``lifecycles.monitor``, ``lifecycles.outbox``), its table with what is declared
beside it (``lifecycles.machines.monitor``, ``lifecycles.machines.outbox``) and its record
(``lifecycles.invariants.monitor``, ``monitor_messages``, ``lifecycles.invariants.outbox``).
Every other module of the package is generic: the checker, explain, the pages and the
operator commands find what an app declares through its ``Lifecycle`` (``declared_in``),
never by importing it. The apps are named only as data: the lifecycles installed with
the framework (:data:`lifecycles.registry.SHIPPED`) and their commands
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
    assert {"lifecycles.explain", "lifecycles.machines.core", "lifecycles.stores.sql",
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
