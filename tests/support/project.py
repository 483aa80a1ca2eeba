"""A downstream project on disk: a pyproject.toml with [tool.lifecycles] and a copy of
the refund example as the project's own package, importing itself by its new name."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refund"
HANDLER = '''\
def pay_back(refund, lease):
    """The provider always refunds: returning succeeds the attempt."""
    return None
'''


def refund_package(where: Path, package: str = "refunds") -> Path:
    """``where/package``: the refund example's table and exploration inputs, and a handler."""
    target = where / package
    target.mkdir(parents=True)
    (target / "__init__.py").write_text("")
    for name in ("lifecycle.py", "lifecycle_inputs.py"):
        text = (EXAMPLE / name).read_text(encoding="utf-8")
        (target / name).write_text(text.replace("examples.refund.", f"{package}."),
                                   encoding="utf-8")
    (target / "handler.py").write_text(HANDLER)
    return target


def write_pyproject(root: Path, settings: str, name: str = "refund-service") -> Path:
    """``root/pyproject.toml`` declaring the project ``name`` and ``[tool.lifecycles]``."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "pyproject.toml"
    path.write_text(f'[project]\nname = "{name}"\nversion = "0.1"\n\n'
                    f"[tool.lifecycles]\n{settings}", encoding="utf-8")
    return path


@pytest.fixture
def fresh_imports() -> Iterator[None]:
    """Each test imports its own copy of a package of the same name: forget what it
    imported and the directories it put on the path."""
    modules, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path
