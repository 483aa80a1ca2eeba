"""The status snapshot: the statuses stored records may hold, per lifecycle, recorded in
``lifecycle-statuses.json`` so that ``lifecycles check`` fails when a table drops one.

Where it is looked for (:func:`find_snapshot`), how it is read and validated
(:func:`read_snapshot`), recorded (:func:`write_snapshot`) and compared with a table
(:func:`removed_statuses`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from lifecycles._loading import CheckerError, one_line
from lifecycles.machines._core import Lifecycle

AnyLifecycle = Lifecycle[Any, Any]

SNAPSHOT_DEFAULT = "lifecycle-statuses.json"
PROJECT_ROOT_MARKERS = ("pyproject.toml", ".git")


@attrs.frozen
class SnapshotSearch:
    """Where ``lifecycle-statuses.json`` was looked for, and what was found."""

    start: Path
    found: Path | None
    root: Path | None  # the project root the search stopped at, if any

    @property
    def record_path(self) -> Path:
        """Where ``--record-statuses`` writes: the snapshot found, else at the root."""
        return self.found or (self.root or self.start) / SNAPSHOT_DEFAULT

    def warning(self) -> str:
        limit = (f"up to the project root {self.root}" if self.root
                 else "(no project root: no pyproject.toml or .git above it)")
        return (f"no status snapshot found: {SNAPSHOT_DEFAULT} not in {self.start} or any "
                f"parent {limit}; removed statuses cannot be detected — pass --statuses "
                "FILE or run --record-statuses")


def find_snapshot(start: Path | None = None) -> SnapshotSearch:
    """Look for the snapshot from ``start`` (the current directory) upwards, up to and
    including the first directory holding ``pyproject.toml`` or ``.git``."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / SNAPSHOT_DEFAULT
        if candidate.is_file():
            # Shown as found from here (e.g. ../lifecycle-statuses.json): a parent at most.
            return SnapshotSearch(here, Path(os.path.relpath(candidate)), None)
        if any((directory / marker).exists() for marker in PROJECT_ROOT_MARKERS):
            return SnapshotSearch(here, None, directory)
    return SnapshotSearch(here, None, None)


def _snapshot_invalid(path: Path, line: int | None, problem: str) -> CheckerError:
    place = f"{path}:{line}" if line else str(path)
    return CheckerError("snapshot_invalid",
                        f"{place}: not a status snapshot: {problem}; fix it, or delete it and "
                        "run `lifecycles check --record-statuses`")


def read_snapshot(path: Path) -> dict[str, dict[str, Any]]:
    """The recorded statuses per lifecycle name (empty when the file does not exist)."""
    if not path.is_file():
        return {}
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise _snapshot_invalid(path, error.lineno, f"invalid JSON ({error.msg})") from error
    except (OSError, UnicodeDecodeError) as error:
        raise _snapshot_invalid(path, None, one_line(error)) from error
    lifecycles_ = content.get("lifecycles") if isinstance(content, dict) else None
    if not isinstance(lifecycles_, dict):
        raise _snapshot_invalid(path, None, 'expected {"lifecycles": {NAME: {...}}}')
    for name, recorded in lifecycles_.items():
        statuses = recorded.get("statuses") if isinstance(recorded, dict) else None
        if not (isinstance(statuses, list) and all(isinstance(s, str) for s in statuses)):
            raise _snapshot_invalid(path, None, f"lifecycle {name!r} has no list of statuses")
    return lifecycles_


def write_snapshot(path: Path, lifecycles: Iterable[AnyLifecycle]) -> None:
    """Record the statuses each lifecycle's stored records may hold from now on."""
    recorded = read_snapshot(path)
    for lifecycle in lifecycles:
        recorded[lifecycle.name] = {
            "statuses": [status.value for status in lifecycle.statuses],
            "final": sorted(status.value for status in lifecycle.final),
            "table_version": lifecycle.table_version,
        }
    content = {
        "about": (
            "Statuses that stored records may hold, per lifecycle. `lifecycles check` fails "
            "when a table no longer declares one; after migrating stored records, update "
            "this file with `lifecycles check --record-statuses`."
        ),
        "lifecycles": dict(sorted(recorded.items())),
    }
    path.parent.mkdir(parents=True, exist_ok=True)  # a project's setting may name a new one
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def removed_statuses(lifecycle: AnyLifecycle, recorded: dict[str, Any] | None) -> list[str]:
    """Statuses recorded for ``lifecycle`` that its table no longer declares."""
    if not recorded:
        return []
    declared = {status.value for status in lifecycle.statuses}
    return [status for status in recorded.get("statuses", []) if status not in declared]
