"""Where a files store puts things: the layout of statuses in directories, and every name.

No path is ever built from unchecked input: a record's file is named by :func:`stem_for`
(its key when that is a safe name, else a digest of it), quarantined material by
:func:`quarantine_stem`, and anything written into a document or a terminal goes
through :func:`printable_name`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import attrs

from lifecycles.machines._core import Lifecycle

SUFFIX = ".json"
ERROR_SUFFIX = ".error.json"
SAFE_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}")
DIRECTORY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Ours: .<name>.<16 hex>.tmp; the reference's: .<name>.<32 hex>.tmp
TEMPORARY_NAME = re.compile(r"\..+\.[0-9a-f]{16,32}\.tmp")
QUARANTINED_NAME = re.compile(r"(?P<stem>.+)\.(?P<tag>[0-9a-f]{12})(?P<error>\.error)?\.json")
# A quarantined entry keeps its own stem when the stem is printable UTF-8 and short enough
# that "<stem>.<tag>.error.json" and its temporary file fit in NAME_MAX (255 bytes).
QUARANTINE_STEM = re.compile(r"[^\x00-\x1f\x7f/]+")
MAX_QUARANTINE_STEM_BYTES = 200
GENERATED_STEM_PREFIX = "invalid-name-"


@attrs.frozen
class FilesLayout:
    """Where each status lives under the store root, and how the store names things.

    ``directories`` maps every status to a directory name. ``quarantine_status``, if
    the lifecycle has one, is stored in ``quarantine_directory`` under quarantine
    names, with its ``reason_field`` written to the reason file. ``search_order`` is
    the order :meth:`FilesStore.get` looks in (first wins).
    """

    directories: Mapping[str, str]
    search_order: tuple[str, ...]
    quarantine_directory: str = "quarantine"
    quarantine_status: str | None = None
    reason_field: str | None = None
    lock_name: str = ".lock"
    max_file_bytes: int = 1 << 20
    noun: str = "record"

    @classmethod
    def for_lifecycle(cls, lifecycle: Lifecycle[Any, Any], **options: Any) -> FilesLayout:
        """One directory per status, named after it; final statuses searched first."""
        statuses = [status.value for status in lifecycle.statuses]
        final = {status.value for status in lifecycle.final}
        order = tuple(sorted(statuses, key=lambda s: (s not in final, statuses.index(s))))
        defaults: dict[str, Any] = {
            "directories": {status: status for status in statuses},
            "search_order": order,
        }
        defaults.update(options)
        return cls(**defaults)

    def check(self, lifecycle: Lifecycle[Any, Any]) -> None:
        """Every status has a safe, distinct directory; the quarantine is consistent."""
        statuses = {status.value for status in lifecycle.statuses}
        if set(self.directories) != statuses:
            raise ValueError(f"layout directories {sorted(self.directories)} != {sorted(statuses)}")
        names = [*self.directories.values(), self.quarantine_directory, self.lock_name]
        for name in [*self.directories.values(), self.quarantine_directory]:
            if not DIRECTORY_NAME.fullmatch(name):
                raise ValueError(f"unsafe directory name {name!r}")
        if self.lock_name.startswith("/") or "/" in self.lock_name or self.lock_name in ("", "."):
            raise ValueError(f"unsafe lock name {self.lock_name!r}")
        quarantine = self.quarantine_status
        if quarantine is not None:
            if self.directories.get(quarantine) != self.quarantine_directory:
                raise ValueError("the quarantine status must live in the quarantine directory")
            names.remove(self.quarantine_directory)
        if len(set(names)) != len(names):
            raise ValueError(f"directory names collide: {names}")
        expected = statuses - ({quarantine} if quarantine else set())
        if set(self.search_order) != expected:
            raise ValueError("search_order must list every status outside the quarantine")

    def directory(self, status_or_directory: str) -> str:
        """The directory name of a status; a directory name is its own."""
        return self.directories.get(status_or_directory, status_or_directory)

    @property
    def all_directories(self) -> list[str]:
        """Every directory of the layout, the quarantine included, in name order."""
        return sorted({*self.directories.values(), self.quarantine_directory})


def stem_for(key: str) -> str:
    """The file stem of ``key``: the key itself when it is safe, else ``_`` + its SHA-256."""
    if not isinstance(key, str) or "\0" in key:
        raise ValueError(f"record key must be a string without NUL: {key!r:.80}")
    if SAFE_STEM.fullmatch(key):
        return key
    return "_" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def file_name(key: str) -> str:
    """The file name of the record under ``key`` in its status directory."""
    return stem_for(key) + SUFFIX


def printable_name(name: str) -> str:
    """``name`` as text that can be written anywhere (JSON, a terminal, a log).

    ``os.listdir`` gives the bytes of a name that are not UTF-8 as lone surrogates
    (``surrogateescape``); they cannot be encoded, so they become ``\\xNN`` escapes.
    """
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that no undecodable byte produced
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def quarantine_stem(name: str) -> tuple[str, str | None]:
    """The stem under which entry ``name`` is quarantined, and its original name when
    that stem had to be generated.

    As the reference does, material keeps its own stem (``x.json`` -> ``x``), so the
    quarantine says where it came from. A stem that is not a safe file name (not UTF-8,
    control characters, empty, too long for the quarantine's names) is replaced by
    ``invalid-name-`` and 16 hex digits of the SHA-256 of the name's bytes; the reason
    file then records the original name as escaped text.
    """
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    try:
        size = len(stem.encode("utf-8"))
    except UnicodeEncodeError:  # bytes that are not UTF-8
        size = -1
    if 0 < size <= MAX_QUARANTINE_STEM_BYTES and QUARANTINE_STEM.fullmatch(stem):
        return stem, None
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return GENERATED_STEM_PREFIX + digest, printable_name(name)


def is_quarantined_material_of(name: str, stem: str) -> bool:
    """Whether ``name`` is quarantined material (not a reason file) under ``stem``."""
    found = QUARANTINED_NAME.fullmatch(name)
    return bool(found and found["stem"] == stem and not found["error"])


__all__ = [
    "ERROR_SUFFIX",
    "QUARANTINED_NAME",
    "SUFFIX",
    "TEMPORARY_NAME",
    "FilesLayout",
    "file_name",
    "is_quarantined_material_of",
    "printable_name",
    "quarantine_stem",
    "stem_for",
]
