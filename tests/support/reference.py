"""Load the hand-written reference components for the differential tests.

The reference components (``terminal_processing_monitor.py``, ``close_outbox.py``) are
the behaviour specification; they are imported from where they lie, never copied into
this repository. ``LIFECYCLES_SEEDS=DIR`` names the directory holding them (`.ci/run`
points it at ``../shared/seeds``). Without it every test that needs them skips with
:data:`SKIP_REASON`, so a fresh clone's test command passes on its own; a variable that
names a directory without the components is an error, never a silent skip.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

SEEDS_VARIABLE = "LIFECYCLES_SEEDS"
SKIP_REASON = (
    f"reference components not found; set {SEEDS_VARIABLE}=DIR to run the compatibility tests"
)


class ReferenceUnavailable(LookupError):
    """``LIFECYCLES_SEEDS`` is not set: the reference components are not at hand."""


def seeds_dir() -> Path | None:
    """The directory ``LIFECYCLES_SEEDS`` names, or None when it is unset or empty."""
    value = os.environ.get(SEEDS_VARIABLE, "").strip()
    return Path(value).expanduser().resolve() if value else None


def load_reference(name: str) -> ModuleType:
    """Import ``<LIFECYCLES_SEEDS>/<name>.py`` as module ``reference_<name>``.

    Raises :class:`ReferenceUnavailable` when the variable is unset, and
    :class:`FileNotFoundError` when it names a directory without the component.
    """
    module_name = f"reference_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    directory = seeds_dir()
    if directory is None:
        raise ReferenceUnavailable(SKIP_REASON)
    path = directory / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(
            f"{SEEDS_VARIABLE}={directory} holds no {name}.py; point it at the directory "
            "holding the reference components, or unset it to skip the compatibility tests"
        )
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def require_reference(name: str) -> ModuleType:
    """:func:`load_reference` for tests: skips the caller (a test or a whole module) with
    the one shared reason when the reference components are not at hand."""
    import pytest

    try:
        return load_reference(name)
    except ReferenceUnavailable:
        pytest.skip(SKIP_REASON, allow_module_level=True)
