"""Load the hand-written reference components from ../shared/seeds for differential tests.

They are the behaviour specification; they are imported from where they lie, never
copied into this repository. ``LIFECYCLES_SEEDS`` overrides the location.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

SEEDS = Path(
    os.environ.get("LIFECYCLES_SEEDS", Path(__file__).resolve().parents[2] / "shared" / "seeds")
)


def load_reference(name: str) -> ModuleType:
    """Import ``<SEEDS>/<name>.py`` as module ``reference_<name>``."""
    module_name = f"reference_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = SEEDS / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(f"reference component not found at {path}; set LIFECYCLES_SEEDS")
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
