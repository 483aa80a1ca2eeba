"""The files store's extension of the store contract: what a facade may call beyond it.

:class:`~lifecycles.stores._base.Store` knows records by key. A facade over a directory
that other programs also write (the outbox continues the reference's directories)
must also meet what is not a record: files named otherwise, material it cannot trust,
copies left by an interrupted move. :class:`FilesExtension` is that extension, and
the only one: a facade uses ``Store`` and these methods, never the store's internals.
Each method takes the lock itself; inside :meth:`FilesExtension.locked` (or
:meth:`FilesExtension.exclusive`) several calls see one consistent directory.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

if TYPE_CHECKING:
    from lifecycles.stores._files.quarantine import QuarantineEntry

R = TypeVar("R")


@attrs.frozen
class Listing:
    """One pass over a directory: its first names, how many ``*.json`` files it holds,
    and which of them are shadowed by a directory searched before it."""

    first: list[str]
    total: int
    shadowed: set[str]


class FilesExtension(ABC, Generic[R]):
    """Directory-level operations of a files store (see the module docstring).

    ``status`` arguments name a status of the lifecycle; ``name`` arguments are entry
    names as a listing gave them (one path component, maybe not UTF-8).
    """

    @abstractmethod
    def locked(self) -> AbstractContextManager[None]:
        """Hold the store's exclusive lock (re-entrant within a thread, across store
        objects on the same root); what the block wrote is durable when it exits."""

    @abstractmethod
    def exclusive(self, section: str) -> AbstractContextManager[None]:
        """Hold the lock for a block that the thread inside it must not enter again,
        through this or any other store object on the same root (e.g. from a callback
        the block calls): a second entry raises ``Reentered``, changing nothing."""

    @abstractmethod
    def first_names(self, status: str, limit: int) -> Listing:
        """The ``limit`` smallest ``*.json`` names in ``status``'s directory, how many
        there are, and which are shadowed, from one pass over it (no full sort)."""

    @abstractmethod
    def names(self, status: str) -> list[str]:
        """Every ``*.json`` name in ``status``'s directory (quarantine: material only),
        unsorted."""

    @abstractmethod
    def count(self, status: str) -> int:
        """How many ``*.json`` files ``status``'s directory holds (quarantine: material
        only), not counting copies shadowed by a directory searched before it."""

    @abstractmethod
    def read_named(self, status: str, name: str) -> R | None:
        """The trusted record in file ``name`` of ``status``'s directory (``None`` if
        gone); ``UntrustedRecord`` when the entry is not one."""

    @abstractmethod
    def discard_shadowed(self, record: R, status: str) -> bool:
        """Remove ``record``'s file from ``status``'s directory if a directory searched
        before it holds a trusted record under the same key (so :meth:`get` never
        answers this copy) and the file still holds exactly ``record``. Whether the copy
        is safe to drop (say, the source of a move whose destination was written) is the
        caller's judgement, made from both records. Returns whether the file was removed."""

    @abstractmethod
    def sweep(self, status: str) -> None:
        """Remove the temporary files that writers killed mid-write left in a directory
        (a writing store only). Listings do this on the way; this is for directories a
        caller does not list, when it has a sign that a writer died."""

    @abstractmethod
    def has_quarantined(self, key: str) -> bool:
        """Whether the quarantine holds any material or reason file for ``key``."""

    @abstractmethod
    def quarantine_material(self, status: str, name: str, reason: str) -> str:
        """Move entry ``name`` of ``status``'s directory (whatever it is: only its name
        moves) into quarantine beside a reason file, written first; returns its new
        name."""

    @abstractmethod
    def quarantine_entries(self) -> list[QuarantineEntry]:
        """Everything in quarantine with its reason document (``None`` when missing or
        unreadable), in name order."""


__all__ = ["FilesExtension", "Listing"]
