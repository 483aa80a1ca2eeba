"""The lazy public surface shared by the packages' ``__init__`` modules (PEP 562).

Each package lists its public names and the module defining each; a name is imported on
first use, so importing a package loads no engine, store or driver.
"""

from __future__ import annotations

# Not typing.TYPE_CHECKING: the faces import this module, and typing costs milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(package: str, defined_in: Mapping[str, str], namespace: dict[str, Any],
                 exported: list[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__``."""

    def __getattr__(name: str) -> Any:
        module = defined_in.get(name)
        if module is None:
            # Not public here; `from PACKAGE import submodule` then imports the submodule.
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exported))

    return __getattr__, __dir__
