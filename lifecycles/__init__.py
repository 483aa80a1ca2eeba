"""lifecycles: explicit, durable state machines declared as transition tables."""

from pathlib import Path as _Path

__version__ = "0.1.0"

# machines/, stores/ and invariants/ live at the top of the source tree and are installed
# as subpackages of lifecycles. When this package is imported straight from a checkout
# (`python -m lifecycles` run in the repository root puts the root first on sys.path),
# they sit beside this directory instead of inside it: let the import system find them.
_here = _Path(__file__).resolve().parent
if not (_here / "machines").is_dir() and (_here.parent / "machines" / "core.py").is_file():
    __path__.append(str(_here.parent))
