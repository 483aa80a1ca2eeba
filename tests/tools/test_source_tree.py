"""Tooling sees the package tree as it is on disk: machines/, stores/ and invariants/ at the
top of the checkout are the subpackages lifecycles.machines, lifecycles.stores and
lifecycles.invariants through links, so a module added there imports without installing
again, and walking the package visits each module once."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import uuid
from pathlib import Path

import lifecycles

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("machines", "stores", "invariants")


def test_each_part_is_a_link_to_its_top_level_folder() -> None:
    for part in PARTS:
        link = ROOT / "lifecycles" / part
        assert link.is_symlink(), link
        assert link.resolve() == (ROOT / part).resolve()


def test_a_module_added_under_a_part_imports_without_installing_again(tmp_path: Path) -> None:
    for part in PARTS:
        name = f"_added_{uuid.uuid4().hex[:8]}"
        added = ROOT / part / f"{name}.py"
        added.write_text("ANSWER = 42\n")
        try:
            found = subprocess.run(
                [sys.executable, "-c",
                 f"import lifecycles.{part}.{name} as m; print(m.ANSWER, m.__file__)"],
                cwd=tmp_path, capture_output=True, text=True, check=False,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        finally:
            added.unlink()
        assert found.returncode == 0, found.stderr
        answer, path = found.stdout.split()
        assert answer == "42"
        assert Path(path).resolve() == added.resolve()


def test_walking_the_package_visits_each_module_once() -> None:
    names = [module.name for module in pkgutil.walk_packages(lifecycles.__path__,
                                                              "lifecycles.")]
    assert len(names) == len(set(names))
    on_disk = {f"lifecycles.{part}.{path.stem}" for part in PARTS
               for path in (ROOT / part).glob("*.py") if path.stem != "__init__"}
    assert on_disk <= set(names)
