"""The lifecycles shipped with lifecycles, by name, and importing a module named on the
command line. A project's own lifecycles and the entry points' join them in
:mod:`lifecycles.project`, which `check`, `diagrams` and `worker` ask."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from lifecycles.machines._core import Lifecycle

SHIPPED = ("lifecycles.machines.monitor", "lifecycles.machines.outbox")
"""The modules declaring the lifecycles shipped with lifecycles, in their stable order:
the apps installed with the framework, named here only, as a project names its own."""


def registered() -> dict[str, Lifecycle[Any, Any]]:
    """Every shipped lifecycle, keyed by name, in a stable order.

    A shipped declaration that is invalid raises its
    :class:`~lifecycles.machines._declaration.DefinitionError`;
    :func:`lifecycles.project.installed` reports it as ``check`` and ``diagrams`` report a
    ``--module`` of the user's.
    """
    found: dict[str, Lifecycle[Any, Any]] = {}
    for name in SHIPPED:
        found.update(lifecycles_in(importlib.import_module(name)))
    return found


def import_target(target: str) -> ModuleType:
    """Import a dotted module name or a ``.py`` path (its package root joins ``sys.path``).

    The root is appended, not prepended, so a source checkout can never shadow the
    installed ``lifecycles`` package.
    """
    if not target.endswith(".py"):
        if str(Path.cwd()) not in sys.path:
            sys.path.append(str(Path.cwd()))
        return importlib.import_module(target)
    path = Path(target).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {target}")
    parts = [path.stem]
    root = path.parent
    while (root / "__init__.py").is_file():
        parts.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.append(str(root))
    return importlib.import_module(".".join(parts))


def lifecycles_in(module: ModuleType) -> dict[str, Lifecycle[Any, Any]]:
    """Every lifecycle defined at the top level of ``module``, by name."""
    return {v.name: v for v in vars(module).values() if isinstance(v, Lifecycle)}
