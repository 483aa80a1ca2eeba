"""The quarantine directory: material the store cannot trust, set aside with its reason.

Each piece is ``<stem>.<tag>.json`` beside ``<stem>.<tag>.error.json`` (the reason
file: ``entry_id``, ``quarantined_at``, ``reason``, and ``original_name`` when the
material's own stem could not be kept). The reason file is always written first, so
material is never found without its reason. Moving material moves its name only:
nothing is opened, and a shared inode keeps its content.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from lifecycles.stores._files.codec import RecordCodec
from lifecycles.stores._files.fs import UnfitEntry, make_private, read_entry, unlink_after
from lifecycles.stores._files.layout import (
    ERROR_SUFFIX,
    QUARANTINED_NAME,
    SUFFIX,
    FilesLayout,
    quarantine_stem,
)
from lifecycles.stores._files.locking import Handles


@attrs.frozen
class QuarantineEntry:
    """One piece of quarantined material and its reason document, if readable."""

    name: str
    stem: str
    reason: Mapping[str, Any] | None


def material_of(json_names: Iterable[str], stem: str) -> list[str]:
    """The quarantined material (not reason files) under ``stem``, in name order."""
    prefix = stem + "."
    return sorted(
        name for name in json_names
        if name.startswith(prefix) and not name.endswith(ERROR_SUFFIX)
    )


def holds_any_of(json_names: Iterable[str], stem: str) -> bool:
    """Whether any ``<stem>.*.json`` (material or reason) is among ``json_names``."""
    prefix = stem + "."
    return any(name.startswith(prefix) for name in json_names)


def move_material(
    handles: Handles, layout: FilesLayout, directory: str, name: str, reason: str
) -> str:
    """Move entry ``name`` of ``directory`` into quarantine, its reason file first;
    returns the quarantined name. ``name`` must come from a listing (one component)."""
    if "/" in name or "\0" in name or name in (".", ".."):
        raise ValueError(f"not a directory entry name: {name!r}")
    stem, original = quarantine_stem(name)
    tag = secrets.token_hex(6)
    target = f"{stem}.{tag}{SUFFIX}"
    reason_name = f"{stem}.{tag}{ERROR_SUFFIX}"
    quarantine = layout.quarantine_directory
    view = handles.view
    view.forget(directory, name)
    source = handles.directory(directory)
    destination = handles.directory(quarantine)
    handles.write(destination, reason_name, RecordCodec.reason_bytes(stem, reason, original))
    view.added(quarantine, reason_name)
    # Whatever the entry is (a file, a directory, a link, a FIFO), only its name moves.
    os.replace(name, target, src_dir_fd=source, dst_dir_fd=destination)
    view.removed(directory, name)
    view.added(quarantine, target)
    os.fsync(source)
    os.fsync(destination)
    handles.synced(source)
    # Made 0600 like every file of the store, unless it is not ours to change.
    make_private(destination, target)
    return target


def write_record(handles: Handles, layout: FilesLayout, stem: str, data: bytes,
                 reason: str) -> None:
    """Write a record of the quarantine status as material with its reason file."""
    tag = secrets.token_hex(6)
    quarantine = layout.quarantine_directory
    directory = handles.directory(quarantine)
    reason_name = f"{stem}.{tag}{ERROR_SUFFIX}"
    handles.write(directory, reason_name, RecordCodec.reason_bytes(stem, reason), fresh=True)
    handles.view.added(quarantine, reason_name)
    try:
        handles.write(directory, f"{stem}.{tag}{SUFFIX}", data, fresh=True)
    except BaseException as error:
        unlink_after(error, reason_name, directory)
        raise
    handles.view.added(quarantine, f"{stem}.{tag}{SUFFIX}")


def entries(
    handles: Handles, layout: FilesLayout, material: Iterable[str]
) -> list[QuarantineEntry]:
    """Each piece of ``material`` with its reason (``None`` when the reason file is
    missing or unreadable), in name order."""
    found: list[QuarantineEntry] = []
    for name in sorted(material):
        parsed = QUARANTINED_NAME.fullmatch(name)
        stem, tag = (parsed["stem"], parsed["tag"]) if parsed else (name, "")
        reason = _read_reason(handles, layout, f"{stem}.{tag}{ERROR_SUFFIX}") if parsed else None
        found.append(QuarantineEntry(name=name, stem=stem, reason=reason))
    return found


def _read_reason(handles: Handles, layout: FilesLayout, name: str) -> Mapping[str, Any] | None:
    directory = handles.directory(layout.quarantine_directory)
    try:
        data = read_entry(directory, name, layout.max_file_bytes, layout.noun)
        value = json.loads(data.decode("utf-8")) if data is not None else None
    except (UnfitEntry, UnicodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


__all__ = ["QuarantineEntry", "entries", "holds_any_of", "material_of", "move_material",
           "write_record"]
