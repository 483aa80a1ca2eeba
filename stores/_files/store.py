"""The files store: the :class:`~lifecycles.stores._base.Store` contract on directories.

This module sequences the parts (see the package docstring for the guarantees): it
takes the lock (:mod:`.locking`), reads and decodes files (:mod:`.fs`, :mod:`.codec`),
stages writes in transactions and applies them with one fsync per directory, and
answers the contract's queries and the files-store extension (:mod:`.contract`).

No ``OSError`` leaves a public method, the constructor included, as it is: an I/O
error, a full device, a denied permission or a vanished directory is
:class:`~.fs.FilesUnavailable`, damage the file system reports is
:class:`~.fs.FilesDamaged` (store errors with stable codes, and ``OSError`` too, with
the original ``errno``). An ``OSError`` raised by the caller's own code inside
``locked()`` or ``transaction()`` is the caller's, and passes unchanged.
"""

from __future__ import annotations

import functools
import heapq
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from operator import methodcaller
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import attrs

import lifecycles.stores._files.quarantine as quarantine
from lifecycles.machines import lease as lease_protocol
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.stores._base import StaleRecord, Store, StoreError
from lifecycles.stores._files.codec import RecordCodec, UntrustedRecord
from lifecycles.stores._files.contract import FilesExtension, Listing
from lifecycles.stores._files.fs import (
    StagedFile,
    StoreMissing,
    UnfitEntry,
    discard_staged,
    finish_file,
    is_leftover,
    make_owned_private,
    make_private_parents,
    open_directory,
    os_errors_as_store_errors,
    present,
    read_entry,
    stage_file,
    store_error_of,
    sync_files,
    unlink_after,
    vanished,
)
from lifecycles.stores._files.layout import (
    ERROR_SUFFIX,
    SUFFIX,
    TEMPORARY_NAME,
    FilesLayout,
    file_name,
    stem_for,
)
from lifecycles.stores._files.locking import Handles, StoreLock
from lifecycles.stores._files.quarantine import QuarantineEntry
from lifecycles.stores._files.view import HeldListing

R = TypeVar("R")
P = ParamSpec("P")
T = TypeVar("T")

_IS_JSON = methodcaller("endswith", SUFFIX)
# Whether a shadowed-copy check probes each name or lists the other directory: probing
# costs about three times a listed entry; a directory's st_size grows with its entries
# (ext4, XFS, btrfs, tmpfs: 20 to 70 bytes each). Cost only: both ways are exact.
PROBE_AT_MOST = 256
BYTES_PER_ENTRY_GUESS = 64


def _os_errors(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Any, P], T]:
    """A public method of :class:`FilesStore` whose ``OSError`` leaves as a store error."""

    @functools.wraps(method)
    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except OSError as error:
            raise store_error_of(error, f"{self.where}: {method.__name__}") from error

    return call


@attrs.define
class _Staged:
    record: Any
    on_disk: str | None  # the status directory the key's file is in now, None if new


class FilesStore(Store[R], FilesExtension[R]):
    """Records of one lifecycle as files under ``root`` (see the package docstring).

    With ``create=False`` the store only opens what exists and creates nothing, not
    even the lock file, nor does it change a mode or remove a writer's temporary file:
    the way to inspect a store without touching it. With ``create=True`` only the
    constructor creates (the root, its parents, the directories); a directory that
    vanishes under the open store fails every call (:func:`~.fs.vanished`).
    """

    def __init__(
        self,
        lifecycle: Lifecycle[R, Any],
        root: Path | str,
        layout: FilesLayout | None = None,
        *,
        create: bool = True,
    ) -> None:
        self.lifecycle = lifecycle
        self.layout = layout or FilesLayout.for_lifecycle(lifecycle)
        self.layout.check(lifecycle)
        self.root = Path(root)
        self.create = create
        self.where = f"files store {self.root}"
        self.codec = RecordCodec(lifecycle, self.layout, self.values_of)
        self._lock = StoreLock(
            self._open_root, self.layout.lock_name, self.layout.all_directories,
            create=create, where=self.where,
        )
        self._local = threading.local()  # this thread's staged transaction
        with os_errors_as_store_errors(self.where), self._lock.held(opening=True) as handles:
            # creates (or checks) the layout, modes included
            if create:
                make_owned_private(handles.root, 0o700)
            for name in self.layout.all_directories:
                handles.directories[name] = open_directory(name, handles.root, create=create)

    def _open_root(self, opening: bool) -> int:
        """The store directory, never through a link at its own name (the caller's path
        above it is followed as given); created, with its parents, if asked, by the
        constructor only."""
        try:
            return open_directory(str(self.root), None, create=False, check_mode=False)
        except StoreMissing:
            if not self.create:
                raise
            if not opening:
                raise vanished(str(self.root), self.where) from None
        make_private_parents(self.root.parent)
        return open_directory(str(self.root), None, create=True)

    def driver_error(self, error: Exception) -> StoreError | None:
        """An ``OSError`` as the store error it leaves a call as (see the module
        docstring); ``None`` for anything else."""
        if isinstance(error, OSError) and not isinstance(error, StoreError):
            return store_error_of(error, self.where)
        return None

    # -- locking -----------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock.held():
            yield

    def exclusive(self, section: str) -> AbstractContextManager[None]:
        return self._lock.exclusive(section)

    def _held(self) -> Handles:
        handles = self._lock.current
        if handles is None:
            raise RuntimeError("the store's lock is not held")
        return handles

    def _dir_fd(self, status_or_directory: str) -> int:
        return self._held().directory(self.layout.directory(status_or_directory))

    # -- transactions -------------------------------------------------------------

    @property
    def _staged(self) -> dict[str, _Staged] | None:
        staged: dict[str, _Staged] | None = getattr(self._local, "staged", None)
        return staged

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.locked():
            staged = self._staged
            if staged is not None:  # a savepoint inside the outer transaction
                snapshot = dict(staged)
                try:
                    yield
                except BaseException:
                    staged.clear()
                    staged.update(snapshot)
                    raise
                return
            self._local.staged = {}
            try:
                yield
                pending = self._local.staged
                self._local.staged = None
                with os_errors_as_store_errors(f"{self.where}: writing"):
                    self._apply(pending)
            finally:
                self._local.staged = None

    def _apply(self, staged: Mapping[str, _Staged]) -> None:
        """Write every staged record: all files first (synced together), then renamed,
        then one sync per directory, then the unlinks that finish moves (so a
        destination is durable before its source goes, and many records share each
        fsync of a directory, and of the journal)."""
        handles = self._held()
        view, directory_of = handles.view, self.layout.directory
        files: list[StagedFile] = []  # written, not yet renamed
        placed: list[tuple[int, str, bool]] = []  # (directory, name, fresh): put, not synced
        written: list[tuple[str, str, bytes, Any, bool]] = []  # ..., record, fresh
        moves: list[tuple[str, str]] = []  # (source status, name)
        try:
            for key, change in staged.items():
                status = str(self.lifecycle.status_of(change.record))
                data = self.codec.encode(change.record)
                name = file_name(key)
                if status == self.layout.quarantine_status:
                    reason = self.codec.reason_of(change.record)
                    quarantine.write_record(handles, self.layout, stem_for(key), data, reason)
                else:
                    view.forget(directory_of(status), name)
                    destination = self._dir_fd(status)
                    fresh = change.on_disk != status and not present(destination, name)
                    files.append(stage_file(destination, name, data))
                    placed.append((destination, name, fresh))
                    written.append((directory_of(status), name, data, change.record, fresh))
                if change.on_disk is not None and change.on_disk != status:
                    moves.append((change.on_disk, name))
            sync_files(files)
            while files:
                finish_file(files.pop(0))  # out of the list first: it cleans up after itself
            for directory in dict.fromkeys(fd for fd, _, _ in placed):
                os.fsync(directory)
                handles.synced(directory)
        except BaseException as error:
            view.clear()
            discard_staged(error, files)
            for directory, name, fresh in placed[: len(placed) - len(files)]:  # renamed
                if fresh:  # never acknowledged: leave no second copy behind
                    unlink_after(error, name, directory)
            raise
        for directory_name, name, data, record, fresh in written:
            if fresh:
                view.added(directory_name, name)
            view.remember_file(directory_name, name, data, record)  # the next CAS need not read
        for source_status, name in moves:
            # The destination is durable; the source's unlink is synced with the next
            # write into its directory or at lock release (see Handles.unsynced).
            self._unlink(source_status, name)

    def _unlink(self, status: str, name: str) -> None:
        source = self._dir_fd(status)
        os.unlink(name, dir_fd=source)
        self._held().unsynced_unlink(source)
        self._held().view.removed(self.layout.directory(status), name)

    # -- reading ------------------------------------------------------------------

    def _read(self, status_or_directory: str, name: str) -> bytes | None:
        """The bytes of ``name``, ``None`` if absent; never follows a link."""
        handles = self._held()
        directory = self.layout.directory(status_or_directory)
        known, data = handles.view.file(directory, name)
        if known:
            return data
        try:
            data = read_entry(
                handles.directory(directory), name, self.layout.max_file_bytes, self.layout.noun
            )
        except UnfitEntry as finding:
            raise self.codec.unfit(name, finding) from None
        handles.view.remember_file(directory, name, data)
        return data

    @_os_errors
    def read_named(self, status: str, name: str) -> R | None:
        with self.locked():
            view, directory = self._held().view, self.layout.directory(status)
            record: R | None = view.record(directory, name)
            if record is not None:
                return record  # decoded from the very bytes still remembered
            data = self._read(status, name)
            if data is None:
                return None
            record = self.codec.decode(data, name, status)
            view.remember_record(directory, name, record)
            return record

    def decode(self, data: bytes, name: str, directory_status: str | None) -> R:
        """See :meth:`RecordCodec.decode`."""
        return self.codec.decode(data, name, directory_status)

    def _locate(self, key: str, prefer: str | None = None) -> tuple[R, str] | None:
        """The record under ``key`` and the status directory it is in (staged first).

        ``prefer`` is searched first: a compare-and-set looks where the caller read.
        """
        staged = self._staged
        if staged is not None and key in staged:
            record = staged[key].record
            return record, str(self.lifecycle.status_of(record))
        name = file_name(key)
        order = self.layout.search_order
        if prefer in order:
            order = (prefer, *(status for status in order if status != prefer))
        for status in order:
            found = self.read_named(status, name)
            if found is not None:
                return found, status
        status_quarantined = self.layout.quarantine_status
        if status_quarantined is not None:
            listing = self._listing(status_quarantined).names()
            material = quarantine.material_of(listing, stem_for(key))
            for name in material:
                try:
                    found = self.read_named(status_quarantined, name)
                except UntrustedRecord:
                    continue  # quarantined material that is not a record stays where it is
                if found is not None:
                    return found, status_quarantined
        return None

    # -- the Store primitives ---------------------------------------------------------

    @_os_errors
    def get(self, key: str) -> R | None:
        with self.locked():
            found = self._locate(key)
            return None if found is None else found[0]

    @_os_errors
    def insert(self, record: R) -> R:
        key = self.lifecycle.key_of(record)
        stem_for(key)
        with self.transaction():
            found = self._locate(key)
            if found is not None:
                return found[0]
            self.lifecycle.check(record)
            staged = self._staged
            assert staged is not None
            staged[key] = _Staged(record, None)
            return record

    @_os_errors
    def put(self, before: R, after: R, row: Row) -> None:
        key = self.lifecycle.key_of(before)
        with self.transaction():
            found = self._unchanged_on_disk(key, before) or self._locate(
                key, prefer=str(self.lifecycle.status_of(before))
            )
            if found is None or found[0] != before:  # compare-and-set on the whole record
                raise StaleRecord(f"{key} changed since it was read")
            current, on_disk = found
            if after == current:
                return  # an effect-free self-loop: nothing to write
            staged = self._staged
            assert staged is not None
            previous = staged.get(key)
            staged[key] = _Staged(after, previous.on_disk if previous else on_disk)

    def _unchanged_on_disk(self, key: str, before: R) -> tuple[R, str] | None:
        """``(before, status)`` when its directory holds exactly ``before``'s bytes.

        Byte equality proves the record is unchanged without decoding it again; any
        other answer falls back to a full read.
        """
        staged = self._staged
        status = str(self.lifecycle.status_of(before))
        if (staged is not None and key in staged) or status not in self.layout.search_order:
            return None
        name = file_name(key)
        if self._held().view.record(self.layout.directory(status), name) is before:
            return before, status  # the very record this process last read or wrote there
        data = self._read(status, name)
        if data is None or data != self.codec.encode(before):
            return None
        return before, status

    # -- the files-store extension (see contract.FilesExtension) ---------------------

    @_os_errors
    def discard_shadowed(self, record: R, status: str) -> bool:
        with self.locked():
            name = file_name(self.lifecycle.key_of(record))
            order = self.layout.search_order
            earlier = order[: order.index(status)] if status in order else ()
            try:
                shadowing = [self.read_named(other, name) for other in earlier]
            except UntrustedRecord:
                return False  # shadowed by material no one can trust: not a move's end
            if not any(shadowing):
                return False  # not shadowed: it is the record get() answers
            if self._read(status, name) != self.codec.encode(record):
                return False  # the copy is not (or no longer) what the caller judged
            self._unlink(status, name)
            return True

    @_os_errors
    def first_names(self, status: str, limit: int) -> Listing:
        with self.locked():
            names = self._names(status)
            return Listing(
                heapq.nsmallest(limit, names), len(names), self._shadowed(status, names)
            )

    @_os_errors
    def names(self, status: str) -> list[str]:
        with self.locked():
            return list(self._names(status))

    @_os_errors
    def count(self, status: str) -> int:
        with self.locked():
            names = self._names(status)
            return len(names) - len(self._shadowed(status, names))

    @_os_errors
    def sweep(self, status_or_directory: str) -> None:
        with self.locked():
            self._list(status_or_directory)

    @_os_errors
    def has_quarantined(self, key: str) -> bool:
        with self.locked():
            listing = self._listing(self.layout.quarantine_directory).names()
            return quarantine.holds_any_of(listing, stem_for(key))

    @_os_errors
    def quarantine_material(self, status: str, name: str, reason: str) -> str:
        with self.locked():
            return quarantine.move_material(
                self._held(), self.layout, self.layout.directory(status), name, reason
            )

    @_os_errors
    def quarantine_entries(self) -> list[QuarantineEntry]:
        with self.locked():
            return quarantine.entries(
                self._held(), self.layout, self._names(self.layout.quarantine_directory)
            )

    # -- listing ------------------------------------------------------------------

    def _listing(self, status_or_directory: str) -> HeldListing:
        """The directory's ``*.json`` names as this process last left them."""
        directory = self.layout.directory(status_or_directory)
        listing = self._held().view.listing(directory)
        return listing if listing is not None else self._list(directory)

    def _list(self, status_or_directory: str) -> HeldListing:
        """One pass over a directory: its ``*.json`` names; on the way, the temp files of
        writers that died mid-write are removed (the lock is held: no writer is live)."""
        directory = self.layout.directory(status_or_directory)
        dir_fd = self._dir_fd(directory)
        listed = os.listdir(dir_fd)  # names only: no stat, no per-entry objects
        names = list(filter(_IS_JSON, listed))  # filtered in C: this runs on every replay
        if len(names) != len(listed):
            self._remove_leftovers(dir_fd, listed)
        return self._held().view.remember_listing(directory, names)

    def _names(self, status: str) -> list[str]:
        """The ``*.json`` names of ``status``'s directory (quarantine: material only);
        the list is not the caller's to change."""
        names = self._listing(status).names()
        if self.layout.directory(status) == self.layout.quarantine_directory:
            return [name for name in names if not name.endswith(ERROR_SUFFIX)]
        return names

    def _remove_leftovers(self, dir_fd: int, listed: list[str]) -> None:
        """Unlink the leftover temp files among ``listed`` (the lock is held: no writer
        is live, so a temp file is a dead writer's). A reading store removes nothing."""
        if not self.create:
            return
        removed = [
            name for name in listed
            if name.startswith(".") and TEMPORARY_NAME.fullmatch(name)
            and is_leftover(dir_fd, name)
        ]
        for name in removed:
            os.unlink(name, dir_fd=dir_fd)
        if removed:
            self._held().unsynced_unlink(dir_fd)

    def _shadowed(self, status: str, names: Collection[str]) -> set[str]:
        """Which of ``names`` are also in a directory that ``search_order`` puts before
        ``status``'s: copies :meth:`get` never returns, left by a move interrupted before
        it unlinked its source (or planted)."""
        order = self.layout.search_order
        if not names or status not in order:
            return set()
        found: set[str] = set()
        for other in order[: order.index(status)]:
            held = self._held().view.listing(self.layout.directory(other))
            if held is not None:  # listed under this lock already: no second listing
                found.update(set(held.names()).intersection(names))
                continue
            dir_fd = self._dir_fd(other)
            entries_guess = os.fstat(dir_fd).st_size // BYTES_PER_ENTRY_GUESS
            if len(names) <= max(PROBE_AT_MOST, entries_guess // 3):
                found.update(
                    name for name in names
                    if os.access(name, os.F_OK, dir_fd=dir_fd, follow_symlinks=False)
                )
            else:
                listed = self._list(other).names()  # remembered for the rest of the lock
                if listed:  # a set of the other listing, not of the (long) names
                    found.update(set(listed).intersection(names))
        return found

    # -- whole-store queries ----------------------------------------------------------

    def _records(self, statuses: Sequence[str]) -> list[R]:
        """Trusted records of ``statuses`` (staged view); untrusted files are quarantined."""
        staged = self._staged or {}
        records: list[R] = []
        with self.locked():
            for status in statuses:
                names = self._names(status)
                if status == self.layout.quarantine_status:
                    records.extend(self._quarantined_records(names, staged))
                    continue
                for name in names:
                    try:
                        record = self.read_named(status, name)
                    except UntrustedRecord as error:
                        self.quarantine_material(status, name, error.detail)
                        continue
                    if record is not None and self.lifecycle.key_of(record) not in staged:
                        records.append(record)
            wanted = set(statuses)
            records.extend(
                change.record
                for change in staged.values()
                if str(self.lifecycle.status_of(change.record)) in wanted
            )
        return records

    def _quarantined_records(self, names: list[str], staged: Mapping[str, _Staged]) -> list[R]:
        status = self.layout.quarantine_status
        assert status is not None
        seen: dict[str, R] = {}
        for name in sorted(names):
            try:
                record = self.read_named(status, name)
            except UntrustedRecord:
                continue
            if record is not None:
                key = self.lifecycle.key_of(record)
                if key not in staged:
                    seen.setdefault(key, record)
        return list(seen.values())

    def _due(self, now: float) -> list[R]:
        lease = self._lease()
        claimable = [status.value for status in self.lifecycle.claimable]
        return [r for r in self._records(claimable) if getattr(r, lease.due_field) <= now]

    @_os_errors
    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        found = self.due(now, 1, exclude)
        return found[0] if found else None

    @_os_errors
    def due(self, now: float, limit: int, exclude: frozenset[str] = frozenset()) -> list[R]:
        self._lease()
        return lease_protocol.due_in_order(self.lifecycle, self._due(now), now, limit, exclude)

    def _expired(self, now: float) -> list[R]:
        lease = self._lease()
        leased = self.lifecycle.leased
        assert leased is not None
        return [r for r in self._records([leased.value]) if getattr(r, lease.expires_field) <= now]

    @_os_errors
    def expired_leases(self, now: float) -> list[R]:
        return sorted(self._expired(now), key=self.lifecycle.key_of)

    @_os_errors
    def count_by_status(self) -> dict[str, int]:
        with self.locked():
            counts = {s.value: self.count(s.value) for s in self.lifecycle.statuses}
            for change in (self._staged or {}).values():
                if change.on_disk is not None:
                    counts[change.on_disk] -= 1
                counts[str(self.lifecycle.status_of(change.record))] += 1
            return counts

    @_os_errors
    def count_due(self, now: float) -> int:
        return len(self._due(now))

    @_os_errors
    def count_expired(self, now: float) -> int:
        return len(self._expired(now))

    def scan(self) -> Iterator[R]:
        statuses = [status.value for status in self.lifecycle.statuses]
        with os_errors_as_store_errors(f"{self.where}: scan"), self.locked():
            records = self._scan_records(statuses)
        yield from sorted(records, key=self.lifecycle.key_of)

    def _scan_records(self, statuses: Sequence[str]) -> list[R]:
        staged = self._staged or {}
        records: dict[str, R] = {}
        for status in self.layout.search_order:
            for name in sorted(self._names(status)):
                record = self.read_named(status, name)  # untrusted material raises
                if record is not None:
                    records.setdefault(self.lifecycle.key_of(record), record)
        if self.layout.quarantine_status is not None:
            for record in self._quarantined_records(
                self._names(self.layout.quarantine_status), {}
            ):
                records.setdefault(self.lifecycle.key_of(record), record)
        for key, change in staged.items():
            records[key] = change.record
        return [r for r in records.values() if str(self.lifecycle.status_of(r)) in statuses]


__all__ = ["FilesStore"]
