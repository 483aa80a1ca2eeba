"""The files store's one cache: what this process knows of the store while it holds the lock.

While a process holds the store's ``flock`` nobody else writes, so what it listed, read
or wrote stays true until it changes those files itself or releases the lock. A
:class:`HeldView` remembers exactly that, and every write of this process updates it
(:meth:`HeldView.added`, :meth:`HeldView.removed`) or forgets what it touched
(:meth:`HeldView.forget`); releasing the lock drops it whole. It is shared by every
store object on the same lock file in this process, so one object's writes are seen
by another's reads.

What it saves, measured by ``benchmarks/bench_outbox.py`` (``replay(limit=10)`` with
10,000 pending records): the count of what remains comes from the listing taken at the
start, kept current, instead of a second listing of the whole directory; a
compare-and-set write of a record this process just read or wrote need not read and
compare its file again; a lookup that missed need not probe again.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.define
class HeldListing:
    """A directory's ``*.json`` names: as listed once, and this process's changes since
    (kept apart, so a listing of many thousand names is never copied or hashed)."""

    listed: list[str]
    gone: set[str] = attrs.field(factory=set)  # listed names removed since
    new: set[str] = attrs.field(factory=set)  # names created since where there was none

    def names(self) -> list[str]:
        """The names now (do not change the list: it may be the listing itself)."""
        if not self.gone and not self.new:
            return self.listed
        gone = self.gone
        return [name for name in self.listed if name not in gone] + sorted(self.new)

    def __len__(self) -> int:
        return len(self.listed) - len(self.gone) + len(self.new)

    def added(self, name: str) -> None:
        if name in self.gone:
            self.gone.discard(name)  # listed, removed, and now back
        else:
            self.new.add(name)

    def removed(self, name: str) -> None:
        if name in self.new:
            self.new.discard(name)
        else:
            self.gone.add(name)


@attrs.define
class HeldView:
    """Directory listings (``*.json`` names), file bytes and decoded records, by directory
    name, as this process left them. Valid only while the lock is held."""

    # directory -> its *.json names, as listed and since changed by this process
    listings: dict[str, HeldListing] = attrs.field(factory=dict)
    # (directory, name) -> the file's bytes (None: no file there)
    files: dict[tuple[str, str], bytes | None] = attrs.field(factory=dict)
    # (directory, name) -> the record decoded from, or written as, those bytes
    records: dict[tuple[str, str], Any] = attrs.field(factory=dict)

    def listing(self, directory: str) -> HeldListing | None:
        return self.listings.get(directory)

    def remember_listing(self, directory: str, names: list[str]) -> HeldListing:
        listing = self.listings[directory] = HeldListing(names)
        return listing

    def file(self, directory: str, name: str) -> tuple[bool, bytes | None]:
        """``(known, bytes)``: whether the file's content is remembered, and what it is."""
        found = (directory, name)
        if found in self.files:
            return True, self.files[found]
        return False, None

    def remember_file(self, directory: str, name: str, data: bytes | None,
                      record: Any = None) -> None:
        self.files[(directory, name)] = data
        if record is not None:
            self.records[(directory, name)] = record
        else:
            self.records.pop((directory, name), None)

    def record(self, directory: str, name: str) -> Any:
        """The record last read from or written to that file, ``None`` if not remembered."""
        return self.records.get((directory, name))

    def remember_record(self, directory: str, name: str, record: Any) -> None:
        self.records[(directory, name)] = record

    def added(self, directory: str, name: str) -> None:
        """This process created a ``*.json`` file at ``name``, where there was none."""
        listing = self.listings.get(directory)
        if listing is not None:
            listing.added(name)

    def removed(self, directory: str, name: str) -> None:
        """This process removed (or moved away) the file at ``name``."""
        listing = self.listings.get(directory)
        if listing is not None:
            listing.removed(name)
        self.files[(directory, name)] = None
        self.records.pop((directory, name), None)

    def forget(self, directory: str, name: str) -> None:
        """The file at ``name`` is about to change: forget its content."""
        self.files.pop((directory, name), None)
        self.records.pop((directory, name), None)

    def clear(self) -> None:
        """Forget everything (the lock is released, or a write failed half-way)."""
        # New containers rather than clear(): emptying a large listing in place costs
        # its size again; dropping it is left to the collector.
        self.listings, self.files, self.records = {}, {}, {}
