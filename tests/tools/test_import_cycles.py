"""No import cycle anywhere in the package: modules cut at seams, dependencies one way.

The graph is read statically from the source (``ast``), over ``lifecycles/`` and the three
folders installed as its subpackages (``machines/``, ``stores/``, ``invariants/``; see
``[tool.setuptools.package-dir]`` in pyproject.toml). What counts as an edge:

- every ``import x`` and ``from x import y``, at module level *and* inside functions or
  methods: an import deferred into a function to dodge a cycle is still a cycle of the
  design, only hidden until the function runs;
- ``from package import name`` is an edge to ``package.name`` when that is a module, and to
  ``package`` otherwise;
- an edge goes to the named module only, not to the packages above it: Python runs a
  package's ``__init__`` before its submodules, but a package that imports its submodules
  is their face, not their dependency; a submodule depends on its package only when it
  imports a name the package itself defines or exports (``from package import name``);
- imports under ``if TYPE_CHECKING:`` do not count: they never run, and exist so that
  annotations can name a type without importing its module.

A failure names every cycle found, one concrete loop of modules for each strongly connected
group, so a change that closes two cycles is told about both.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Installed package name -> the folder it is installed from.
PACKAGE_DIRS = {
    "lifecycles": ROOT / "lifecycles",
    "lifecycles.machines": ROOT / "machines",
    "lifecycles.stores": ROOT / "stores",
    "lifecycles.invariants": ROOT / "invariants",
}

def module_files() -> dict[str, Path]:
    """Every module of the package, by its installed dotted name."""
    modules: dict[str, Path] = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _is_type_checking_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking_guard(node):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def _resolve(name: str, package: str, level: int) -> str:
    """The absolute name of a (possibly relative) ``from`` target."""
    if level == 0:
        return name
    base = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([*base, name] if name else base)


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's own modules that ``module`` imports (see the module docstring)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        source = _resolve(node.module or "", package, node.level)
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            targets.add(submodule if submodule in known else source)
    return {target for target in targets if target in known and target != module}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {module: imported_modules(module, path, known) for module, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = lowlink[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    group: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def one_loop(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest loop through the group's first module, staying inside the group."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for successor in sorted(graph[node] & members):
                if successor == start:
                    loop = [node]
                    while loop[-1] != start:
                        loop.append(came_from[loop[-1]])
                    return [*reversed(loop), start]
                if successor not in came_from:
                    came_from[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{group} is not strongly connected")


def test_the_walk_sees_the_whole_package() -> None:
    files = module_files()
    for expected in (
        "lifecycles.cli",
        "lifecycles.testing._plugin",
        "lifecycles.machines._core",
        "lifecycles.stores._files.store",
        "lifecycles.invariants._core",
    ):
        assert expected in files


def test_imports_in_functions_count_and_type_checking_ones_do_not() -> None:
    graph = import_graph()
    # Module level, and `from lifecycles.machines import lease` (a submodule by name).
    assert {"lifecycles.machines._core", "lifecycles.machines.lease"} <= graph[
        "lifecycles.machines._interleaving"]
    # Inside a function: diagrams_page finds an exploration's inputs when it draws a page.
    assert "lifecycles._loading" in graph["lifecycles._diagrams_page"]
    # Under `if TYPE_CHECKING:` only: the Workers type exploration's annotations name.
    assert "lifecycles.machines._interleaving" not in graph["lifecycles.machines._exploration"]


def test_the_cycle_finder_finds_and_names_a_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert one_loop(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycle() -> None:
    graph = import_graph()
    cycles = strongly_connected(graph)
    report = "\n".join(" -> ".join(one_loop(graph, group)) for group in cycles)
    assert not cycles, f"{len(cycles)} import cycle(s):\n{report}"
