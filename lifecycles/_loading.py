"""Loading user code for the checker: import a module named on the command line, find
what is declared for a lifecycle beside its table (in the modules its ``declared_in``
names: :func:`declared_beside`), and say at which ``file:line`` user code failed.

Every failure becomes a :class:`CheckerError` with a stable code and one line saying
where and what to do; ``lifecycles diagrams --module`` reports import failures the same
way.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import lifecycles
import lifecycles.invariants
import lifecycles.machines
import lifecycles.machines._checks
import lifecycles.machines._core
import lifecycles.stores
from lifecycles._registry import import_target as registry_import_target
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import DefinitionError
from lifecycles.machines._exploration import Exploration
from lifecycles.machines._interleaving import Workers

AnyLifecycle = Lifecycle[Any, Any]
AnyExploration = Exploration[Any]


class CheckerError(Exception):
    """The checker cannot run; ``error`` is a stable code of the module docstring.

    The message is one line: where (``file:line`` when user code is at fault), what is
    wrong and what to do. The exception at fault, if any, is the ``__cause__``.
    """

    code = "lifecycles.check_unavailable"

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# --- where user code went wrong -----------------------------------------------------


def _prefixes(paths: Iterable[str | Path]) -> tuple[str, ...]:
    return tuple(f"{Path(p).resolve()}{os.sep}" for p in paths)


def _own_directories() -> set[Path]:
    """Where lifecycles' code runs from: its subpackages are links to top-level folders
    (resolved by _prefixes), and an installed copy may link each file from elsewhere."""
    packages = (lifecycles, lifecycles.machines, lifecycles.stores, lifecycles.invariants)
    folders = {Path(package.__file__ or "").parent for package in packages}
    return folders | {file.resolve().parent for folder in folders for file in folder.glob("*.py")}


_OWN = _prefixes(_own_directories())
_INSTALLED = _prefixes({sysconfig.get_paths()[key]
                        for key in ("stdlib", "platstdlib", "purelib", "platlib")})
# What checks a declaration when a Lifecycle is built: a DefinitionError's place is the
# line that called into it, in the user's module or in a shipped one alike.
_DECLARING = frozenset(str(Path(module.__file__ or "").resolve())
                       for module in (lifecycles.machines._core, lifecycles.machines._checks))


def display(path: str | Path) -> str:
    """``path`` relative to the current directory when it lies below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def where(error: BaseException, module_file: Path | None = None) -> str | None:
    """``file:line`` of the user's code where ``error`` happened, or ``None``.

    For a :class:`DefinitionError`, the line in ``module_file`` (the module checked)
    that declared it, through a helper of its own or not; else the line of the
    ``Lifecycle(...)`` call, a shipped lifecycle's too. Otherwise the innermost frame
    outside lifecycles, the standard library and installed packages (a guard, an
    effect, an ``import``); else the innermost frame in ``module_file``; else the
    innermost frame outside lifecycles.
    """
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return f"{display(error.filename)}:{error.lineno}"
    frames: list[tuple[str, int]] = []
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith("<"):  # <frozen importlib._bootstrap>, <string>
            frames.append((str(Path(name).resolve()), tb.tb_lineno))
        tb = tb.tb_next
    own_file = str(module_file.resolve()) if module_file is not None else None
    tests: list[Callable[[str], bool]] = [
        lambda name: not name.startswith(_OWN + _INSTALLED),
        lambda name: name == own_file,
        lambda name: not name.startswith(_OWN),
    ]
    if isinstance(error, DefinitionError):
        # The module that declared the table, where a helper of the author's built it;
        # else the line that called Lifecycle(...).
        tests[:0] = [lambda name: name == own_file, lambda name: name not in _DECLARING]
    for test in tests:
        for name, line in reversed(frames):
            if test(name):
                return f"{display(name)}:{line}"
    return None


def at(place: str | None) -> str:
    """``place: `` to start a message with, or nothing when the place is unknown."""
    return f"{place}: " if place else ""


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``: an error on one line."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _targets_named(missing: str | None, target: str) -> bool:
    """Whether ``ModuleNotFoundError.name`` is ``target`` itself or one of its parents."""
    return missing is not None and (target == missing or target.startswith(f"{missing}."))


def import_failure(target: str, error: BaseException, module_file: Path | None = None
                   ) -> CheckerError:
    """The :class:`CheckerError` for ``error``, raised while importing ``target``."""
    place = at(where(error, module_file))
    if isinstance(error, SyntaxError):
        return CheckerError("module_syntax_error",
                            f"{place}{type(error).__name__}: {error.msg}: {target} does not "
                            "import; fix the syntax there")
    if isinstance(error, ModuleNotFoundError):
        if _targets_named(error.name, target):
            return CheckerError("module_not_found",
                                f"no module named {target!r}: run from the directory it is "
                                "imported from, or pass the path to its .py file")
        return CheckerError("module_not_found",
                            f"{place}{target} imports {error.name!r}, which is not installed "
                            "or not on the path: install it, or fix the import there")
    if isinstance(error, DefinitionError):
        return CheckerError("definition_invalid",
                            f"{place}the lifecycle declared here is invalid: {error}; fix its "
                            "table or declaration there")
    return CheckerError("module_import_failed",
                        f"{place}{one_line(error)} (raised while importing {target}); fix "
                        "the code there (--traceback shows the traceback)")


# --- finding lifecycles and their exploration inputs ---------------------------------


def import_target(target: str) -> ModuleType:
    """Import a module named on the command line (see :func:`registry.import_target`);
    any failure becomes a :class:`CheckerError` naming the line at fault."""
    module_file = Path(target) if target.endswith(".py") else None
    if module_file is not None and not module_file.is_file():
        raise CheckerError("module_not_found", f"no such file: {target}")
    try:
        return registry_import_target(target)
    except (Exception, SystemExit) as error:  # a module may sys.exit() while importing
        raise import_failure(target, error, module_file) from error


def _spec_module(spec: str) -> tuple[str, str]:
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute:
        raise CheckerError("exploration_not_found",
                           f"{spec!r} is not 'module:ATTRIBUTE' or 'path.py:ATTRIBUTE'")
    return module, attribute


def load_exploration(spec: str) -> AnyExploration:
    """The :class:`Exploration` named by ``module:ATTRIBUTE`` (module may be a path)."""
    module, attribute = _spec_module(spec)
    found = getattr(import_target(module), attribute, None)
    if not isinstance(found, Exploration):
        raise CheckerError("exploration_not_found", f"{spec} is not an Exploration")
    return found


def explorations_in(module: ModuleType, target: str) -> list[tuple[AnyExploration, str]]:
    """Every module-level :class:`Exploration` in ``module``, with its replay spec. One it
    imports counts (a module may gather explorations to check), unless the module
    declares its own for the same lifecycle (``from .inputs import EXPLORATION as
    DECLARED``, to derive its own from it): then only its own are checked, not both."""
    imported = _imported_names(module)
    found = [(name, value) for name, value in vars(module).items()
             if isinstance(value, Exploration) and not name.startswith("_")]
    own = {id(value.lifecycle) for name, value in found if name not in imported}
    return [(value, f"{target}:{name}") for name, value in found
            if name not in imported or id(value.lifecycle) not in own]


def _imported_names(module: ModuleType) -> frozenset[str]:
    """The names ``module``'s top-level import statements bind (none when its source
    cannot be read: then every name counts as its own)."""
    import ast
    import inspect

    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def modules_beside(names: Iterable[str]) -> Iterator[tuple[str, ModuleType]]:
    """Each module of ``names`` that exists, imported, with its name (a module that is
    missing is passed over; one that fails to import raises)."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            continue
        yield name, module


def named_beside(table_module: str, name: str) -> str:
    """``name`` as an absolute module name: one with a leading dot names a module beside
    ``table_module``, as a relative import there would (``.lifecycle_inputs``)."""
    if not name.startswith("."):
        return name
    table = sys.modules.get(table_module)
    package = (table.__package__ if table is not None and table.__package__ is not None
               else table_module.rpartition(".")[0])  # a package's own name, for __init__
    if package:
        return importlib.util.resolve_name(name, package)
    if name.startswith(".."):
        raise CheckerError("definition_invalid",
                           f"{table_module} is not in a package: {name} names nothing")
    return name[1:]


def declaring_modules(lifecycle: AnyLifecycle) -> Iterator[tuple[str, ModuleType]]:
    """Where the tools look for what is declared about ``lifecycle`` beside its table:
    the module that declares it (passed over when it cannot be imported, as a table built
    in a script), then each module its ``declared_in`` names, imported in that order."""
    yield from modules_beside((lifecycle.module,))
    for name in lifecycle.declared_in:
        absolute = named_beside(lifecycle.module, name)
        yield absolute, importlib.import_module(absolute)


T = TypeVar("T")


def declared_beside(lifecycle: AnyLifecycle, kind: type[T]) -> T | None:
    """The first module-level ``kind`` declared for ``lifecycle`` (its ``lifecycle``
    attribute is that very object) in :func:`declaring_modules`, or ``None``."""
    for _, module in declaring_modules(lifecycle):
        for value in vars(module).values():
            if isinstance(value, kind) and getattr(value, "lifecycle", None) is lifecycle:
                return value
    return None


def find_exploration(lifecycle: AnyLifecycle) -> tuple[AnyExploration, str] | None:
    """The exploration declared for ``lifecycle`` in :func:`declaring_modules`, with the
    ``module:ATTRIBUTE`` spec a replay names it by."""
    for name, module in declaring_modules(lifecycle):
        for exploration, spec in explorations_in(module, name):
            if exploration.lifecycle is lifecycle:
                return exploration, spec
    return None


# --- an exploration the checker can run ------------------------------------------------


def _lifecycle_declared(exploration: AnyExploration) -> str | None:
    lifecycle: Any = exploration.lifecycle
    if isinstance(lifecycle, Lifecycle):
        return None
    return (f"lifecycle_declared: its lifecycle is {type(lifecycle).__name__} "
            f"{lifecycle!r:.60}, not a Lifecycle")


def _workers_on_a_lease(exploration: AnyExploration) -> str | None:
    workers: Any = exploration.workers
    if workers is None:
        return None
    if not isinstance(workers, Workers):
        return f"workers_on_a_lease: its workers are {type(workers).__name__}, not Workers"
    if exploration.lifecycle.lease is None:
        return (f"workers_on_a_lease: it declares workers for {exploration.lifecycle.name}, "
                "which declares no lease: declare the lease (Lifecycle(lease=...)) or "
                "drop the workers")
    return None


def _accepted_cycles_declared(exploration: AnyExploration) -> str | None:
    triggers = set(exploration.lifecycle.triggers)
    unknown = sorted({trigger for cycle in exploration.accepted_cycles
                      for trigger in cycle.triggers} - triggers)
    if not unknown:
        return None
    return (f"accepted_cycles_declared: accepted cycles name triggers "
            f"{exploration.lifecycle.name}'s table does not declare: {unknown}")


EXPLORATION_CHECKS: tuple[Callable[[AnyExploration], str | None], ...] = (
    _lifecycle_declared, _workers_on_a_lease, _accepted_cycles_declared,
)
"""What the checker needs of an exploration before it can run it: each names what is
wrong, or ``None``; each runs only once the ones before it passed."""


def assigned_at(spec: str) -> str | None:
    """``file:line`` of the top-level statement that assigns the attribute of ``spec``
    (``module:ATTRIBUTE``, module a dotted name already imported or a path), or ``None``."""
    module, attribute = _spec_module(spec)
    file = module if module.endswith(".py") else getattr(sys.modules.get(module), "__file__", None)
    try:
        tree = ast.parse(Path(file or "").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    lines = [node.lineno for node in tree.body
             if isinstance(node, ast.Assign | ast.AnnAssign)
             and any(isinstance(target, ast.Name) and target.id == attribute
                     for target in (node.targets if isinstance(node, ast.Assign)
                                    else [node.target]))]
    # The last assignment is the one the module keeps.
    return f"{display(file or '')}:{lines[-1]}" if lines else None


def check_exploration(exploration: AnyExploration, spec: str) -> None:
    """``definition_invalid`` at the exploration's ``file:line`` when the checker cannot
    run it (:data:`EXPLORATION_CHECKS`)."""
    for exploration_check in EXPLORATION_CHECKS:
        problem = exploration_check(exploration)
        if problem is not None:
            place = assigned_at(spec)
            subject = (f"{place}: the exploration {_spec_module(spec)[1]} declared here"
                       if place else f"the exploration {spec}")
            raise CheckerError("definition_invalid",
                               f"{subject} is invalid: {problem}; fix it there")


def declared_exploration(lifecycle: AnyLifecycle) -> tuple[AnyExploration, str] | None:
    """:func:`find_exploration`, with an inputs module that fails to import reported."""
    try:
        return find_exploration(lifecycle)
    except (Exception, SystemExit) as error:
        raise import_failure(f"the exploration inputs of {lifecycle.name}", error) from error
