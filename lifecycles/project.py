"""A project's own lifecycles: ``[tool.lifecycles]`` in its ``pyproject.toml``, and the
lifecycles installed distributions contribute through the entry-point group
``lifecycles.lifecycles``.

The project is the nearest ``pyproject.toml`` holding a ``[tool.lifecycles]`` table,
looked for from the current directory upwards (as ruff and pytest look for theirs)::

    [tool.lifecycles]
    modules = ["refunds.lifecycle", "jobs/lifecycle.py"]  # dotted names, or .py paths
    statuses = "lifecycle-statuses.json"  # the status snapshot `check` compares with
    diagrams = "diagrams"                 # what `diagrams` writes and `--check` compares
    store = "sqlite:data/refunds.db"      # or postgresql://..., or files:DIR

Paths are relative to the ``pyproject.toml``'s directory, whichever directory a command
runs from. Every key is optional. A key not listed here, or a value of the wrong type,
is :class:`~lifecycles._loading.CheckerError` ``project_invalid`` (exit 2), naming the
file and the key.

A distribution contributes lifecycles with an entry point in the group
``lifecycles.lifecycles`` whose value is a module (every lifecycle at its top level)
or ``module:ATTRIBUTE`` naming one :class:`~lifecycles.machines._core.Lifecycle`.

Which lifecycles a command covers when none is named (:func:`own`): in a project whose
``modules`` name some, those; elsewhere every installed one (the shipped monitor and
outbox, and the entry points'). A name given on the command line is looked for among
all of them (:func:`available`, :func:`resolve`).
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import attrs

from lifecycles._loading import CheckerError, display, import_failure, import_target
from lifecycles._registry import lifecycles_in, registered
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import DefinitionError

# What a project asks from Python; the rest serves the commands.
__all__ = ["Project", "StoreURL", "available", "find_project", "resolve"]

AnyLifecycle = Lifecycle[Any, Any]

ENTRY_POINT_GROUP = "lifecycles.lifecycles"
PYPROJECT = "pyproject.toml"
SECTION = "[tool.lifecycles]"
STATUSES_DEFAULT = "lifecycle-statuses.json"
DIAGRAMS_DEFAULT = "diagrams"
STORE_SCHEMES = ("sqlite:PATH", "postgresql://...", "postgres://...", "files:DIR")


@attrs.frozen
class StoreURL:
    """Where a lifecycle's records live: ``kind`` and its ``location`` (a path for
    ``sqlite`` and ``files``, the connection string for ``postgresql``)."""

    kind: Literal["sqlite", "postgresql", "files"]
    location: str

    @property
    def path(self) -> Path:
        return Path(self.location)


@attrs.frozen
class Project:
    """One project's ``[tool.lifecycles]``, every path absolute."""

    root: Path
    pyproject: Path
    modules: tuple[str, ...]  # dotted names as written; .py paths made absolute
    statuses: Path
    diagrams: Path
    store: StoreURL | None


def _invalid(pyproject: Path, key: str | None, problem: str) -> CheckerError:
    where = f"{SECTION} {key}" if key else SECTION
    return CheckerError("project_invalid", f"{pyproject}: {where}: {problem}; fix it there")


def store_url(text: str, root: Path, *, pyproject: Path | None = None) -> StoreURL:
    """``sqlite:PATH``, ``files:DIR`` (relative to ``root``) or ``postgresql://...``.

    Anything else is ``project_invalid`` naming ``pyproject`` (the setting's file).
    """
    if text.startswith(("postgresql://", "postgres://")):
        return StoreURL("postgresql", text)
    for scheme in ("sqlite", "files"):
        prefix = f"{scheme}:"
        if text.startswith(prefix) and text[len(prefix):].strip():
            kind: Literal["sqlite", "files"] = "sqlite" if scheme == "sqlite" else "files"
            return StoreURL(kind, str(root / text[len(prefix):]))
    raise _invalid(pyproject or root / PYPROJECT, "store",
                   f"{text!r} is not one of {', '.join(STORE_SCHEMES)}")


def _string(pyproject: Path, key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(pyproject, key, f"expected a non-empty string, not {value!r}")
    return value


def _read(pyproject: Path) -> dict[str, Any] | None:
    """The ``[tool.lifecycles]`` table of ``pyproject``, or ``None`` when it has none."""
    try:
        content = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise _invalid(pyproject, None, f"cannot be read ({error})") from error
    except tomllib.TOMLDecodeError as error:
        raise CheckerError("project_invalid", f"{pyproject}: not valid TOML ({error}); fix "
                           "it there") from error
    tool = content.get("tool")
    section = tool.get("lifecycles") if isinstance(tool, dict) else None
    if section is None:
        return None
    if not isinstance(section, dict):
        raise _invalid(pyproject, None, "expected a table")
    return section


def _project(pyproject: Path, section: dict[str, Any]) -> Project:
    root = pyproject.parent
    known = ("modules", "statuses", "diagrams", "store")
    for key in section:
        if key not in known:
            raise _invalid(pyproject, key, f"unknown key (known: {', '.join(known)})")
    modules = section.get("modules", [])
    if not isinstance(modules, list):
        raise _invalid(pyproject, "modules", f"expected a list of strings, not {modules!r}")
    named = tuple(_string(pyproject, "modules", module) for module in modules)
    store = section.get("store")
    return Project(
        root=root, pyproject=pyproject,
        modules=tuple(str(root / m) if m.endswith(".py") else m for m in named),
        statuses=root / _string(pyproject, "statuses",
                                section.get("statuses", STATUSES_DEFAULT)),
        diagrams=root / _string(pyproject, "diagrams",
                                section.get("diagrams", DIAGRAMS_DEFAULT)),
        store=None if store is None else store_url(_string(pyproject, "store", store), root,
                                                   pyproject=pyproject),
    )


def find_project(start: Path | None = None) -> Project | None:
    """The project of the nearest ``pyproject.toml`` with ``[tool.lifecycles]``, from
    ``start`` (the current directory) upwards; ``None`` when there is none."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        pyproject = directory / PYPROJECT
        if pyproject.is_file():
            section = _read(pyproject)
            if section is not None:
                return _project(pyproject, section)
    return None


# --- the lifecycles -------------------------------------------------------------------


def module_lifecycles(target: str) -> dict[str, AnyLifecycle]:
    """The lifecycles at the top level of the module ``target`` (dotted name or .py
    path); ``no_lifecycle`` when it has none: a name mistyped in CI must not pass."""
    found = lifecycles_in(import_target(target))
    if not found:
        raise CheckerError("no_lifecycle",
                           f"{display(target)} declares no lifecycle (no Lifecycle at its "
                           "top level): check the module named, or remove it")
    return found


@contextmanager
def named_by(project: Project | None) -> Iterator[None]:
    """A project's module that is missing or declares no lifecycle: the message also
    says where it is named (the file a user has to fix)."""
    try:
        yield
    except CheckerError as error:
        if project is None or error.error not in ("module_not_found", "no_lifecycle"):
            raise
        raise CheckerError(error.error, f"{error.message} (named in {project.pyproject} "
                           f"{SECTION} modules)") from error


def on_path(project: Project) -> None:
    """Put the project's root on ``sys.path`` (appended: never shadowing an installed
    package), so its dotted module names import from any directory."""
    if str(project.root) not in sys.path:
        sys.path.append(str(project.root))


def _entry_point_lifecycles(entry_point: EntryPoint) -> dict[str, AnyLifecycle]:
    distribution = entry_point.dist.name if entry_point.dist is not None else "?"
    what = f"the entry point {entry_point.name} = {entry_point.value} of {distribution}"
    try:
        loaded = entry_point.load()
    except (Exception, SystemExit) as error:
        raise import_failure(what, error) from error
    if isinstance(loaded, Lifecycle):
        return {loaded.name: loaded}
    found = lifecycles_in(loaded) if isinstance(loaded, ModuleType) else {}
    if not found:
        raise CheckerError("no_lifecycle",
                           f"{what} ({ENTRY_POINT_GROUP}) names no lifecycle: its value must "
                           "be a module declaring one, or module:ATTRIBUTE naming one")
    return found


def installed() -> list[AnyLifecycle]:
    """The shipped lifecycles, then those of the ``lifecycles.lifecycles`` entry points
    (sorted by entry point name). A shipped declaration that is invalid is
    ``definition_invalid``, at the ``file:line`` of its ``Lifecycle(...)`` call."""
    try:
        found = list(registered().values())
    except DefinitionError as error:
        raise import_failure("the shipped lifecycles", error) from error
    for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        found.extend(_entry_point_lifecycles(entry_point).values())
    return found


def unique(lifecycles: Iterable[AnyLifecycle]) -> dict[str, AnyLifecycle]:
    """``lifecycles`` by name, each once (a module and an entry point may name the same
    one); ``duplicate_name`` when two different ones share a name (both modules named)."""
    by_name: dict[str, AnyLifecycle] = {}
    for lifecycle in lifecycles:
        seen = by_name.setdefault(lifecycle.name, lifecycle)
        if seen is not lifecycle:
            raise CheckerError(
                "duplicate_name",
                f"two lifecycles are named {lifecycle.name!r}: one in {seen.module}, one in "
                f"{lifecycle.module}; rename one (its name keys its stored records)")
    return by_name


def own(modules: Sequence[str] = (), start: Path | None = None) -> dict[str, AnyLifecycle]:
    """What a command covers when no lifecycle is named: the ``modules`` given, else the
    project's ``modules``, else every installed lifecycle (:func:`installed`)."""
    if modules:
        return unique(lifecycle for target in modules
                      for lifecycle in module_lifecycles(target).values())
    project = find_project(start)
    if project is None or not project.modules:
        return unique(installed())
    on_path(project)
    with named_by(project):
        return unique(lifecycle for target in project.modules
                      for lifecycle in module_lifecycles(target).values())


def available(modules: Sequence[str] = (), start: Path | None = None
              ) -> dict[str, AnyLifecycle]:
    """Every lifecycle a name may denote: the shipped ones, the entry points', the
    project's modules' and those of the explicit ``modules``."""
    project = find_project(start)
    found = installed()
    if project is not None:
        on_path(project)
        with named_by(project):
            for target in project.modules:
                found.extend(module_lifecycles(target).values())
    for target in modules:
        found.extend(module_lifecycles(target).values())
    return unique(found)


def resolve(name: str, modules: Sequence[str] = (), start: Path | None = None
            ) -> AnyLifecycle:
    """The lifecycle called ``name`` (:func:`available`); ``unknown_lifecycle`` if none."""
    found = available(modules, start)
    if name not in found:
        raise CheckerError(
            "unknown_lifecycle",
            f"no lifecycle named {name!r} (known: {sorted(found)}): check the spelling, list "
            f"its module in {SECTION} modules of {PYPROJECT}, or pass --module MODULE")
    return found[name]
