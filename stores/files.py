"""A filesystem store: one directory per status, one canonical-JSON file per record.

Any lifecycle whose records are JSON-serialisable can live here. The layout::

    <root>/.lock                      flock'ed around every operation
    <root>/<status dir>/<stem>.json   one record, canonical JSON + newline, mode 0600
    <root>/quarantine/<stem>.<tag>.json        material the store cannot trust
    <root>/quarantine/<stem>.<tag>.error.json  {"entry_id", "quarantined_at", "reason"}

``<stem>`` is the record's key when it matches :data:`SAFE_STEM`, otherwise ``_`` and
the key's SHA-256, so no path is ever built from unchecked input. Directories are
0700 and files 0600 whatever the umask.

Guarantees (beyond :mod:`lifecycles.stores.base`):

* **Durability.** A write is: temp file in the destination directory (``O_EXCL``),
  write, ``fsync``, ``rename`` over the final name, ``fsync`` of the directory. A move
  to another status writes the destination that way, then unlinks the source; the
  source directory is synced by the next write into it or when the outermost lock is
  released. When a store call (or the outermost :meth:`FilesStore.locked` block)
  returns, what it wrote is on disk; a reader never sees a partly written file under
  a final name. A new file whose directory cannot be synced is removed again.
* **Transactions.** Writes inside :meth:`FilesStore.transaction` are staged and
  applied on exit (inner transactions are savepoints); an exception discards them.
  The apply writes every file, then syncs each directory once, then unlinks the
  sources of moves, so many records share a directory's fsync. A crash *during* it
  can leave part of a multi-record transaction applied, each file whole.
* **Interrupted moves.** A crash (or a failed unlink) between a move's two steps
  leaves the record in both directories: :meth:`FilesStore.get` trusts the first of
  the layout's ``search_order``, and :meth:`FilesStore.finish_interrupted_move`
  removes the source once it is proven to be exactly what a row moved; until then the
  shadowed copy is not counted (:meth:`FilesStore.shadowed`). Temp files of writers
  that died mid-write are removed by the next listing of their directory (a writing
  store only), or by :meth:`FilesStore.sweep` for directories a caller does not list.
* **Locking.** Every operation holds an exclusive ``flock`` on ``.lock``: safe across
  processes; within a process a re-entrant guard per lock file (keyed by its inode)
  lets nested use by the same thread proceed, even through a second store object,
  and serialises threads. While this process holds the lock nobody else writes, so
  what it read or wrote is remembered (per lock file, shared by its store objects)
  until it changes those files or releases the lock: a compare-and-set need not
  re-read the record it just wrote.
* **No symlinks followed.** Below the caller's parent directory, every open is
  relative to a directory descriptor with ``O_NOFOLLOW``; directories are opened with
  ``O_DIRECTORY | O_NOFOLLOW``. A planted link at a directory or the lock file makes
  the store refuse to operate (:class:`UnsafePath`); one at a record path is material
  it cannot trust.
* **Quarantine.** Material that is not a valid record (unreadable, too big, not
  JSON, wrong keys, broken rules, in the wrong directory) is reported as
  :class:`UntrustedRecord`; :meth:`FilesStore.quarantine_material` moves it aside with
  a reason file. The lease queries quarantine it themselves, so one bad file never
  blocks a queue. Material keeps its own stem unless that is not a safe file name
  (:func:`quarantine_stem`).
* **Hostile entries.** No directory entry blocks the store or makes it touch anything
  outside it. An entry's kind is checked (``lstat``) before it is opened: a directory,
  link, FIFO, socket or device under a record name is untrusted material, never opened;
  so is a regular file with more than one hard link (another name shares its inode),
  and no inode with more than one link is ever re-moded or written (a quarantine moves
  its name only). Names that are not UTF-8 are handled as the surrogate-escaped text
  ``os.listdir`` gives, and written into reasons as escaped text (:func:`printable_name`).
  Entries that are not ``*.json`` and not a writer's leftover temporary file (a regular
  file with one link) are ignored, as the reference ignores them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import heapq
import json
import os
import re
import secrets
import stat
import threading
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from operator import methodcaller
from pathlib import Path
from typing import Any, TypeVar

import attrs

from lifecycles.invariants.core import (
    FieldRuleViolation,
    InvariantViolation,
    canonical_json,  # a record file's bytes, + newline
)
from lifecycles.machines.core import Lifecycle, Row
from lifecycles.stores.base import StaleRecord, Store, StoreError

R = TypeVar("R")

SUFFIX = ".json"
ERROR_SUFFIX = ".error.json"
SAFE_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}")
DIRECTORY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Ours: .<name>.<16 hex>.tmp; the reference's: .<name>.<32 hex>.tmp
TEMPORARY_NAME = re.compile(r"\..+\.[0-9a-f]{16,32}\.tmp")
QUARANTINED_NAME = re.compile(r"(?P<stem>.+)\.(?P<tag>[0-9a-f]{12})(?P<error>\.error)?\.json")
MAX_REASON_LENGTH = 1000
_IS_JSON = methodcaller("endswith", SUFFIX)

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted at the lock's name must not hang the open (it is refused).
LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_LOCK_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # flock: no write
# A quarantined entry keeps its own stem when the stem is printable UTF-8 and short enough
# that "<stem>.<tag>.error.json" and its temporary file fit in NAME_MAX (255 bytes).
QUARANTINE_STEM = re.compile(r"[^\x00-\x1f\x7f/]+")
MAX_QUARANTINE_STEM_BYTES = 200
GENERATED_STEM_PREFIX = "invalid-name-"
# Whether a shadowed-copy check probes each name or lists the other directory: probing
# costs about three times a listed entry; a directory's st_size grows with its entries
# (ext4, XFS, btrfs, tmpfs: 20 to 70 bytes each). Cost only: both ways are exact.
PROBE_AT_MOST = 256
BYTES_PER_ENTRY_GUESS = 64


class UnsafePath(StoreError):
    """A directory or the lock file is a symbolic link or not what it must be."""

    code = "lifecycles.store_unsafe_path"


class Reentered(StoreError):
    """A section that must not be re-entered was entered again by the thread inside it."""

    code = "lifecycles.store_reentered"


class StoreMissing(StoreError):
    """The store directory does not exist and the store was opened without ``create``."""

    code = "lifecycles.store_missing"


class UntrustedRecord(InvariantViolation):
    """A stored file is not a record this store can trust; ``rules`` name why.

    ``detail`` is a readable reason (it goes into the quarantine reason file);
    ``field`` and ``value`` are set when a single field broke its rule.
    """

    def __init__(
        self,
        code: str,
        rules: Sequence[str],
        detail: str,
        *,
        name: str,
        field: str | None = None,
        value: object = None,
        directory: str | None = None,
    ) -> None:
        super().__init__(code, rules)
        self.detail = detail
        self.name = name
        self.directory = directory
        self.field = field
        self.value = value
        self.args = (f"{code}: {', '.join(rules)}: {detail}",)


# --- layout ---------------------------------------------------------------------


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


def stem_for(key: str) -> str:
    """The file stem of ``key``: the key itself when it is safe, else ``_`` + its SHA-256."""
    if not isinstance(key, str) or "\0" in key:
        raise ValueError(f"record key must be a string without NUL: {key!r:.80}")
    if SAFE_STEM.fullmatch(key):
        return key
    return "_" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


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


def _kind_of(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def utc_now() -> str:
    """The time written into quarantine reason files (the store's own clock, not a machine's)."""
    return datetime.now(UTC).isoformat()


# --- the per-process lock registry ------------------------------------------------


@attrs.define
class _ProcessLock:
    """One per lock file (by inode) in this process: the threads' lock and the flock holder."""

    guard: threading.RLock = attrs.field(factory=threading.RLock)
    depth: int = 0
    fd: int = -1
    # Files that appeared (+) or left (-) each directory while this process held the lock.
    changes: Counter[str] = attrs.field(factory=Counter)
    # What this process read or wrote while holding the lock, by (kind, directory, name):
    # file bytes (None: absent), the record a file holds, the quarantine listing. Valid
    # only while the lock is held (no one else writes then); cleared on every change
    # this process makes and when the lock is released.
    memo: dict[tuple[str, str, str], Any] = attrs.field(factory=dict)
    # Sections (FilesStore.exclusive) the holding thread is inside.
    sections: set[str] = attrs.field(factory=set)


_REGISTRY: dict[tuple[int, int], _ProcessLock] = {}
_REGISTRY_GUARD = threading.Lock()


def _reset_registry_in_child() -> None:
    # A forked child holds none of its parent's locks (flock is not inherited as held
    # by the child's own logic); start with a clean registry.
    global _REGISTRY_GUARD
    _REGISTRY.clear()
    _REGISTRY_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_reset_registry_in_child)


def _process_lock(identity: tuple[int, int]) -> _ProcessLock:
    with _REGISTRY_GUARD:
        entry = _REGISTRY.get(identity)
        if entry is None:
            entry = _REGISTRY[identity] = _ProcessLock()
        return entry


@attrs.define
class _Handles:
    """Directory descriptors and the lock held by one thread for one store."""

    root: int
    directories: dict[str, int]
    process_lock: _ProcessLock
    lock_fd: int
    depth: int = 1
    # Directories with an unlink not yet fsynced: synced by the next write into them,
    # or when the outermost lock is released, whichever comes first.
    unsynced: set[int] = attrs.field(factory=set)


@attrs.define
class _Staged:
    record: Any
    on_disk: str | None  # the status directory the key's file is in now, None if new


# --- low-level file operations (every one relative to a directory descriptor) ------


def _close_quietly_after(error: BaseException, fd: int) -> None:
    try:
        os.close(fd)
    except OSError as close_error:
        error.add_note(f"closing fd {fd} also failed: {close_error!r}")


def _unlink_after(error: BaseException, name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as cleanup_error:
        error.add_note(f"removing {name} also failed: {cleanup_error!r}")


def put_file(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically put ``data`` at ``name``: temp file, write, fsync, rename over ``name``.

    Durable once the directory is synced (:func:`write_file` does both).
    """
    temp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException as error:
        _close_quietly_after(error, fd)
        _unlink_after(error, temp, dir_fd)
        raise
    try:
        os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as error:
        _unlink_after(error, temp, dir_fd)
        raise


def write_file(dir_fd: int, name: str, data: bytes, *, fresh: bool = False) -> None:
    """Atomically and durably put ``data`` at ``name``: temp, write, fsync, rename, fsync dir.

    ``fresh`` says nothing was at ``name`` before: if the directory cannot be synced
    after the rename, the new file is removed again, so a failed write of a new
    name leaves nothing behind that was never acknowledged.
    """
    put_file(dir_fd, name, data)
    try:
        os.fsync(dir_fd)
    except BaseException as error:
        if fresh:
            _unlink_after(error, name, dir_fd)
        raise


def _open_directory(
    name: str, dir_fd: int | None, *, create: bool, check_mode: bool = True
) -> int:
    """Open (and if asked create, 0700) a directory without following a symbolic link.

    ``check_mode`` (with ``create``) also tightens an existing directory to 0700.
    """
    try:
        try:
            fd = os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # a racing creator: the open checks
                os.mkdir(name, 0o700, dir_fd=dir_fd)
                check_mode = True  # made here: the umask may have taken bits off 0700
            fd = os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise StoreMissing(f"directory {name} does not exist") from None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{name} is a symbolic link or not a directory") from None
        raise
    if not (create and check_mode):
        return fd
    try:
        info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) != 0o700 and info.st_uid == os.geteuid():
            os.fchmod(fd, 0o700)
    except BaseException as error:
        _close_quietly_after(error, fd)
        raise
    return fd


def _reject_constant(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return value


# --- the store --------------------------------------------------------------------


class FilesStore(Store[R]):
    """Records of one lifecycle as files under ``root`` (see the module docstring).

    With ``create=False`` the store only opens what exists and creates nothing, not
    even the lock file, nor does it change a mode or remove a writer's temporary file:
    the way to inspect a store without touching it.
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
        self._fields = frozenset(field.name for field in attrs.fields(lifecycle.record_type))  # type: ignore[arg-type]
        self._local = threading.local()
        self._directory_names = dict(self.layout.directories)
        self._all_directories = sorted(
            {*self.layout.directories.values(), self.layout.quarantine_directory}
        )
        with self.locked():  # creates (or checks) the whole layout once, modes included
            handles = self._handles
            assert handles is not None
            if create:
                root_info = os.fstat(handles.root)
                if stat.S_IMODE(root_info.st_mode) != 0o700 and root_info.st_uid == os.geteuid():
                    os.fchmod(handles.root, 0o700)
            for name in self._all_directories:
                handles.directories[name] = _open_directory(name, handles.root, create=create)

    # -- locking -----------------------------------------------------------------

    @property
    def _handles(self) -> _Handles | None:
        handles: _Handles | None = getattr(self._local, "handles", None)
        return handles

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's exclusive lock (re-entrant within a thread, across store objects)."""
        handles = self._handles
        if handles is not None:
            handles.depth += 1
            try:
                yield
            finally:
                handles.depth -= 1
            return
        handles = self._acquire()
        self._local.handles = handles
        try:
            yield
        finally:
            self._local.handles = None
            self._release(handles)

    def _acquire(self) -> _Handles:
        root_fd = self._open_root()
        opened = [root_fd]
        try:
            lock_fd = self._open_lock(root_fd)
            opened.append(lock_fd)
            identity = os.fstat(lock_fd)
            process_lock = _process_lock((identity.st_dev, identity.st_ino))
            process_lock.guard.acquire()
            try:
                if process_lock.depth == 0:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                    process_lock.fd = lock_fd
                process_lock.depth += 1
            except BaseException:
                process_lock.guard.release()
                raise
        except BaseException as error:
            for fd in reversed(opened):
                _close_quietly_after(error, fd)
            raise
        return _Handles(root_fd, {}, process_lock, lock_fd)

    def _open_root(self) -> int:
        """The store directory, never through a link at its own name (the caller's path
        above it is followed as given); created, with its parents, if asked."""
        try:
            return _open_directory(str(self.root), None, create=False, check_mode=False)
        except StoreMissing:
            if not self.create:
                raise
        os.makedirs(self.root.parent, mode=0o700, exist_ok=True)
        return _open_directory(str(self.root), None, create=True)

    def _open_lock(self, root_fd: int) -> int:
        try:
            if self.create:
                fd = os.open(self.layout.lock_name, LOCK_FLAGS, 0o600, dir_fd=root_fd)
            else:
                fd = os.open(self.layout.lock_name, READ_LOCK_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            # A reader creates nothing. No lock file means no writer has run an operation
            # yet (the reference creates it lazily): lock the store directory instead.
            return os.dup(root_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise UnsafePath(f"lock file {self.layout.lock_name} is a symbolic link") from None
            if error.errno in (errno.EISDIR, errno.ENXIO):  # a directory; a socket
                raise UnsafePath(
                    f"lock file {self.layout.lock_name} is not a regular file"
                ) from None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UnsafePath(
                    f"lock file {self.layout.lock_name} is {_kind_of(info.st_mode)}, "
                    "not a regular file"
                )
            if info.st_nlink > 1:
                # Another name shares the inode: re-moding it would change that file too,
                # and flock on it would contend with whoever uses that name.
                raise UnsafePath(
                    f"lock file {self.layout.lock_name} has {info.st_nlink} hard links"
                )
            if (
                self.create
                and stat.S_IMODE(info.st_mode) != 0o600
                and info.st_uid == os.geteuid()
            ):
                os.fchmod(fd, 0o600)
        except BaseException as error:
            _close_quietly_after(error, fd)
            raise
        return fd

    def _unlock(self, process_lock: _ProcessLock, lock_fd: int) -> None:
        process_lock.depth -= 1
        if process_lock.depth == 0:
            process_lock.fd = -1
            process_lock.memo.clear()
            fcntl.flock(lock_fd, fcntl.LOCK_UN)

    def _unsynced(self, dir_fd: int) -> None:
        handles = self._handles
        if handles is None:
            os.fsync(dir_fd)
        else:
            handles.unsynced.add(dir_fd)

    def _write(self, dir_fd: int, name: str, data: bytes, *, fresh: bool = False) -> None:
        write_file(dir_fd, name, data, fresh=fresh)  # syncs the directory's unlinks too
        self._synced(dir_fd)

    def _synced(self, dir_fd: int) -> None:
        handles = self._handles
        if handles is not None:
            handles.unsynced.discard(dir_fd)

    def _release(self, handles: _Handles) -> None:
        try:
            for dir_fd in sorted(handles.unsynced):
                os.fsync(dir_fd)
            handles.unsynced.clear()
        finally:
            try:
                self._unlock(handles.process_lock, handles.lock_fd)
            finally:
                handles.process_lock.guard.release()
                for fd in (*handles.directories.values(), handles.lock_fd, handles.root):
                    os.close(fd)

    def _dir_fd(self, status_or_directory: str) -> int:
        """The directory's descriptor, opened on first use while the lock is held."""
        handles = self._handles
        if handles is None:
            raise RuntimeError("the store's lock is not held")
        name = self._directory_names.get(status_or_directory, status_or_directory)
        fd = handles.directories.get(name)
        if fd is None:
            fd = _open_directory(name, handles.root, create=self.create, check_mode=False)
            handles.directories[name] = fd
        return fd

    @property
    def _memo(self) -> dict[tuple[str, str, str], Any]:
        handles = self._handles
        if handles is None:
            return {}
        return handles.process_lock.memo

    def _forget(self, *files: tuple[str, str]) -> None:
        """``(status or directory, name)`` files are about to change: forget what was
        remembered about them and about their directories' listings (with no files
        named, forget everything)."""
        memo = self._memo
        if not files:
            memo.clear()
            return
        for directory, name in files:
            directory_name = self._directory_names.get(directory, directory)
            memo.pop(("bytes", directory_name, name), None)
            memo.pop(("record", directory_name, name), None)
            memo.pop(("listing", directory_name, ""), None)

    def _note_change(self, status: str, delta: int) -> None:
        handles = self._handles
        if handles is not None:
            handles.process_lock.changes[status] += delta

    @contextmanager
    def exclusive(self, section: str) -> Iterator[None]:
        """Hold the lock for a block that the thread inside it must not enter again,
        through this or any other store object on the same root (e.g. from a callback
        the block calls): a second entry raises :class:`Reentered`, changing nothing."""
        with self.locked():
            handles = self._handles
            assert handles is not None
            sections = handles.process_lock.sections
            if section in sections:
                raise Reentered(f"{section} was called again from inside itself")
            sections.add(section)
            try:
                yield
            finally:
                sections.discard(section)

    def changes_seen(self, status: str) -> int:
        """Net files added to ``status``'s directory by this process while it held the lock."""
        with self.locked():
            handles = self._handles
            assert handles is not None
            return handles.process_lock.changes[status]

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
                self._apply(pending)
            finally:
                self._local.staged = None

    def _apply(self, staged: Mapping[str, _Staged]) -> None:
        """Write every staged record: all files first, then one sync per directory, then
        the unlinks that finish moves (so a destination is durable before its source
        goes, and many records share each directory's fsync)."""
        touched: list[tuple[str, str]] = []
        for key, change in staged.items():
            name = stem_for(key) + SUFFIX
            touched.append((str(self.lifecycle.status_of(change.record)), name))
            if change.on_disk is not None:
                touched.append((change.on_disk, name))
        self._forget(*touched)
        placed: list[tuple[int, str, bool]] = []  # (directory, name, fresh): put, not synced
        written: dict[tuple[str, str, str], Any] = {}
        appeared: list[str] = []
        moves: list[tuple[str, str]] = []  # (source status, name)
        try:
            for key, change in staged.items():
                status = str(self.lifecycle.status_of(change.record))
                data = canonical_json(self.values_of(change.record)) + b"\n"
                stem = stem_for(key)
                name = stem + SUFFIX
                if status == self.layout.quarantine_status:
                    self._write_quarantined(stem, data, self._reason_of(change.record))
                else:
                    destination = self._dir_fd(status)
                    moving = change.on_disk != status
                    fresh = moving and not self._present(destination, name)
                    put_file(destination, name, data)
                    placed.append((destination, name, fresh))
                    directory_name = self._directory_names[status]
                    written[("bytes", directory_name, name)] = data
                    written[("record", directory_name, name)] = change.record
                    if moving:
                        appeared.append(status)
                if change.on_disk is not None and change.on_disk != status:
                    moves.append((change.on_disk, name))
            for directory in dict.fromkeys(fd for fd, _, _ in placed):
                os.fsync(directory)
                self._synced(directory)
        except BaseException as error:
            self._forget()
            for directory, name, fresh in placed:
                if fresh:  # never acknowledged: leave no second copy behind
                    _unlink_after(error, name, directory)
            raise
        for source_status, name in moves:
            written[("bytes", self._directory_names[source_status], name)] = None
        for status in appeared:
            self._note_change(status, +1)
        for source_status, name in moves:
            # The destination is durable; the source's unlink is synced with the next
            # write into its directory or at lock release (see _Handles.unsynced).
            source = self._dir_fd(source_status)
            os.unlink(name, dir_fd=source)
            self._unsynced(source)
            self._note_change(source_status, -1)
        self._memo.update(written)  # what is on disk now, so the next write need not read it

    def _reason_of(self, record: R) -> str:
        field = self.layout.reason_field
        reason = getattr(record, field) if field else None
        return str(reason) if reason else f"{self.layout.noun} quarantined"

    def _write_quarantined(self, stem: str, data: bytes, reason: str) -> None:
        tag = secrets.token_hex(6)
        directory = self._dir_fd(self.layout.quarantine_directory)
        # The reason goes first: quarantined material never exists without its reason.
        reason_name = f"{stem}.{tag}{ERROR_SUFFIX}"
        self._write(directory, reason_name, self._reason_bytes(stem, reason), fresh=True)
        try:
            self._write(directory, f"{stem}.{tag}{SUFFIX}", data, fresh=True)
        except BaseException as error:
            _unlink_after(error, reason_name, directory)
            raise

    @staticmethod
    def _present(dir_fd: int, name: str) -> bool:
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _reason_bytes(self, stem: str, reason: str, original_name: str | None = None) -> bytes:
        """The reason file: the reference's three keys, and ``original_name`` (escaped
        text) when the material's own name could not be kept as its stem."""
        reason_text = printable_name(" ".join(reason.split())[:MAX_REASON_LENGTH])
        document = {"entry_id": stem, "quarantined_at": utc_now(), "reason": reason_text}
        if original_name is not None:
            document["original_name"] = original_name
        return canonical_json(document) + b"\n"

    # -- reading ------------------------------------------------------------------

    def _read(self, directory: str, name: str) -> bytes | None:
        """The bytes of ``name`` in ``directory``, ``None`` if absent; never follows a link."""
        memo = self._memo
        remembered = ("bytes", self._directory_names.get(directory, directory), name)
        if remembered in memo:
            found: bytes | None = memo[remembered]
            return found
        data = self._read_file(directory, name)
        memo[remembered] = data
        return data

    def _entry_problem(self, name: str, info: os.stat_result) -> UntrustedRecord | None:
        """Why the entry ``info`` describes cannot hold a record (``None``: it may)."""
        noun = self.layout.noun
        if not stat.S_ISREG(info.st_mode):
            return self._untrusted(
                name, "record_is_regular_file", f"{noun} is {_kind_of(info.st_mode)}"
            )
        if info.st_nlink > 1:
            # Whoever holds the other name can change the content at will, and a chmod
            # or rewrite in place would change their file: the store trusts and touches
            # only files that it alone names.
            return self._untrusted(
                name,
                "record_single_link",
                f"{noun} has {info.st_nlink} hard links (another name shares its file)",
            )
        if info.st_size > self.layout.max_file_bytes:
            return self._untrusted(
                name, "record_size_bound", f"{noun} exceeds the durable size bound"
            )
        return None

    def _read_file(self, directory: str, name: str) -> bytes | None:
        dir_fd = self._dir_fd(directory)
        # The entry's kind is checked before it is opened: opening a socket fails, a FIFO
        # can block, a device can act. The descriptor is checked again after the open.
        try:
            entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        problem = self._entry_problem(name, entry)
        if problem is not None:
            raise problem
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENXIO):  # swapped since the stat
                raise self._untrusted(
                    name, "record_is_regular_file", f"{self.layout.noun} is not a regular file"
                ) from None
            raise
        try:
            info = os.fstat(fd)
            problem = self._entry_problem(name, info)
            if (info.st_dev, info.st_ino) != (entry.st_dev, entry.st_ino):
                problem = self._untrusted(
                    name, "record_is_regular_file", f"{self.layout.noun} changed while opened"
                )
            if problem is not None:
                raise problem
            limit = self.layout.max_file_bytes
            chunks: list[bytes] = []
            size = 0
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:
                raise self._untrusted(
                    name, "record_size_bound", f"{self.layout.noun} exceeds the durable size bound"
                )
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _untrusted(
        self, name: str, rule: str, detail: str, field: str | None = None, value: object = None
    ) -> UntrustedRecord:
        return UntrustedRecord(
            self.lifecycle.invariants.code, [rule], detail, name=name, field=field, value=value
        )

    def decode(self, data: bytes, name: str, directory_status: str | None) -> R:
        """Turn a file's bytes into a trusted record, or raise :class:`UntrustedRecord`.

        ``directory_status`` is the status of the directory the file sits in; the
        record's status must equal it. ``name`` must be the record key's file name.
        """
        noun = self.layout.noun
        try:
            text = data.decode("utf-8")
            value = json.loads(
                text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys
            )
        except (UnicodeError, ValueError, RecursionError) as error:
            raise self._untrusted(
                name,
                "record_decodes",
                f"cannot decode {noun} {printable_name(name)}: {type(error).__name__}",
            ) from None
        if not isinstance(value, dict):
            raise self._untrusted(name, "record_is_object", f"{noun} must be an object")
        if set(value) != self._fields:
            missing = sorted(self._fields - set(value))
            unknown = sorted(set(value) - self._fields)
            raise self._untrusted(
                name,
                "record_keys_exact",
                f"{noun} fields invalid: missing={missing} unknown={unknown}",
            )
        try:
            record = self.lifecycle.record_type(**value)
        except FieldRuleViolation as error:
            raise self._untrusted(
                name, error.rule, f"{noun} field {error.field} breaks {error.rule}",
                field=error.field, value=value.get(error.field),
            ) from None
        except (TypeError, ValueError) as error:
            raise self._untrusted(
                name, "record_shape", f"{noun} cannot be built: {error}"
            ) from None
        broken = self.lifecycle.invariants.broken(record)
        if broken:
            raise UntrustedRecord(
                self.lifecycle.invariants.code, broken, f"{noun} breaks {', '.join(broken)}",
                name=name,
            )
        status = str(self.lifecycle.status_of(record))
        if directory_status is not None and status != directory_status:
            raise UntrustedRecord(
                self.lifecycle.invariants.code,
                ["status_matches_directory"],
                f"{directory_status} directory contains state {status!r}",
                name=name,
                field=self.lifecycle.status_field,
                value=status,
                directory=directory_status,
            )
        expected = stem_for(self.lifecycle.key_of(record))
        if not (name == expected + SUFFIX or self._is_quarantine_name_of(name, expected)):
            raise self._untrusted(
                name,
                "file_name_matches_key",
                f"{noun} file name {printable_name(name)} does not match its key",
            )
        return record

    def _is_quarantine_name_of(self, name: str, stem: str) -> bool:
        found = QUARANTINED_NAME.fullmatch(name)
        return bool(found and found["stem"] == stem and not found["error"])

    def read_named(self, status: str, name: str) -> R | None:
        """The trusted record in file ``name`` of ``status``'s directory (``None`` if gone)."""
        with self.locked():
            data = self._read(status, name)
            if data is None:
                return None
            record = self.decode(data, name, status)
            self._memo[("record", self._directory_names.get(status, status), name)] = record
            return record

    def _locate(self, key: str, prefer: str | None = None) -> tuple[R, str] | None:
        """The record under ``key`` and the status directory it is in (staged first).

        ``prefer`` is searched first: a compare-and-set looks where the caller read.
        """
        staged = self._staged
        if staged is not None and key in staged:
            record = staged[key].record
            return record, str(self.lifecycle.status_of(record))
        name = stem_for(key) + SUFFIX
        order = self.layout.search_order
        if prefer in order:
            order = (prefer, *(status for status in order if status != prefer))
        for status in order:
            data = self._read(status, name)
            if data is not None:
                return self.decode(data, name, status), status
        quarantine = self.layout.quarantine_status
        if quarantine is not None:
            for material in self._quarantined_names(stem_for(key)):
                try:
                    record = self.read_named(quarantine, material)
                except UntrustedRecord:
                    continue  # quarantined material that is not a record stays where it is
                if record is not None:
                    return record, quarantine
        return None

    # -- the Store primitives ---------------------------------------------------------

    def get(self, key: str) -> R | None:
        with self.locked():
            found = self._locate(key)
            return None if found is None else found[0]

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

    def write(self, before: R, after: R, row: Row) -> None:
        key = self.lifecycle.key_of(before)
        with self.transaction():
            found = self._unchanged_on_disk(key, before) or self._locate(
                key, prefer=str(self.lifecycle.status_of(before))
            )
            if (
                found is None
                or self.lifecycle.status_of(found[0]) != self.lifecycle.status_of(before)
                or self.token_of(found[0]) != self.token_of(before)
            ):
                raise StaleRecord(f"{key} changed since it was read")
            current, on_disk = found
            if after == current:
                return  # an effect-free self-loop: nothing to write
            self.lifecycle.check(after)
            staged = self._staged
            assert staged is not None
            previous = staged.get(key)
            staged[key] = _Staged(after, previous.on_disk if previous else on_disk)

    def finish_interrupted_move(self, record: R, status: str) -> bool:
        """Remove ``record``'s copy in ``status``'s directory if it is the source of a move
        that reached its destination: a crash (or a failed unlink) between writing the
        destination and unlinking the source leaves both.

        The other copy must be trusted, in another status, and differ from ``record``
        only in fields that a row from ``status`` to that status writes. Anything else
        is not the tail of a row, and stays for the caller to judge. Returns whether the
        copy was removed.
        """
        key = self.lifecycle.key_of(record)
        name = stem_for(key) + SUFFIX
        with self.locked():
            for other in self.layout.search_order:
                if other == status:
                    continue
                try:
                    data = self._read(other, name)
                    if data is None:
                        continue
                    moved = self.decode(data, name, other)
                except UntrustedRecord:
                    return False
                if not self._is_tail_of_a_row(record, moved):
                    return False
                source = self._dir_fd(status)
                if self._read(status, name) != canonical_json(self.values_of(record)) + b"\n":
                    return False  # the copy changed since the caller read it
                self._forget((status, name))
                os.unlink(name, dir_fd=source)
                self._unsynced(source)
                self._note_change(status, -1)
                return True
        return False

    def _is_tail_of_a_row(self, before: R, after: R) -> bool:
        source, dest = str(self.lifecycle.status_of(before)), str(self.lifecycle.status_of(after))
        changed = {
            field for field in self._fields
            if getattr(before, field) != getattr(after, field)
        }
        return any(
            row.source == source and row.dest == dest and changed <= set(self.lifecycle.writes(row))
            for row in self.lifecycle.rows
        )

    def _unchanged_on_disk(self, key: str, before: R) -> tuple[R, str] | None:
        """``(before, status)`` when its directory holds exactly ``before``'s bytes.

        Byte equality proves the record is unchanged without decoding it again; any
        other answer falls back to a full read.
        """
        staged = self._staged
        status = str(self.lifecycle.status_of(before))
        if (staged is not None and key in staged) or status not in self.layout.search_order:
            return None
        name = stem_for(key) + SUFFIX
        if self._memo.get(("record", self._directory_names[status], name)) is before:
            return before, status  # the very record this process last read or wrote there
        data = self._read(status, name)
        if data is None or data != canonical_json(self.values_of(before)) + b"\n":
            return None
        return before, status

    # -- listing ------------------------------------------------------------------

    def first_names(self, status: str, limit: int) -> Listing:
        """The ``limit`` smallest ``*.json`` names in ``status``'s directory, how many
        there are, and which are shadowed (see :meth:`shadowed`), from one pass over the
        directory (no full sort)."""
        with self.locked():
            names = self._names(status)
            return Listing(
                heapq.nsmallest(limit, names), len(names), self._shadowed(status, names)
            )

    def _names(self, status: str) -> list[str]:
        """One pass over a directory: its ``*.json`` names; on the way, the temp files of
        writers that died mid-write are removed (the lock is held: no writer is live)."""
        directory = self._directory_names.get(status, status)
        quarantine = directory == self.layout.quarantine_directory
        dir_fd = self._dir_fd(directory)
        listed = os.listdir(dir_fd)  # names only: no stat, no per-entry objects
        names = list(filter(_IS_JSON, listed))  # filtered in C: this runs on every replay
        if len(names) != len(listed):
            self._remove_leftovers(dir_fd, listed)
        if quarantine:
            names = [name for name in names if not name.endswith(ERROR_SUFFIX)]
        return names

    def sweep(self, status_or_directory: str) -> None:
        """Remove the temporary files that writers killed mid-write left in a directory
        (a writing store only). Listings of a directory do this on the way; this is for
        the directories a caller does not list, when it has a sign that a writer died
        (e.g. a move interrupted before its source was unlinked)."""
        with self.locked():
            self._names(status_or_directory)

    def _remove_leftovers(self, dir_fd: int, listed: list[str]) -> None:
        """Unlink the leftover temp files among ``listed`` (the lock is held: no writer
        is live, so a temp file is a dead writer's)."""
        if not self.create:
            return
        removed = [
            name for name in listed
            if name.startswith(".")
            and TEMPORARY_NAME.fullmatch(name)
            and self._is_leftover(dir_fd, name)
        ]
        for name in removed:
            os.unlink(name, dir_fd=dir_fd)
        if removed:
            self._unsynced(dir_fd)

    @staticmethod
    def _is_leftover(dir_fd: int, name: str) -> bool:
        """Whether a temp-named entry is what a dead writer leaves: a regular file with
        one link. Anything else (a directory, a FIFO, a link) was put there by someone
        else under a look-alike name, and is left alone: never opened, never counted."""
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_nlink == 1

    def shadowed(self, status: str, names: Collection[str]) -> set[str]:
        """Which of ``names`` are in ``status``'s directory *and* in a directory that
        ``search_order`` puts before it: copies :meth:`get` never returns, left by a move
        that was interrupted before it unlinked its source (or planted). They are not
        counted as records of ``status``."""
        with self.locked():
            dir_fd = self._dir_fd(status)
            present = [
                name for name in names
                if os.access(name, os.F_OK, dir_fd=dir_fd, follow_symlinks=False)
            ]
            return self._shadowed(status, present)

    def _shadowed(self, status: str, names: Collection[str]) -> set[str]:
        order = self.layout.search_order
        if not names or status not in order:
            return set()
        found: set[str] = set()
        for other in order[: order.index(status)]:
            dir_fd = self._dir_fd(other)
            entries_guess = os.fstat(dir_fd).st_size // BYTES_PER_ENTRY_GUESS
            if len(names) <= max(PROBE_AT_MOST, entries_guess // 3):
                found.update(
                    name for name in names
                    if os.access(name, os.F_OK, dir_fd=dir_fd, follow_symlinks=False)
                )
            else:
                listed = os.listdir(dir_fd)
                if listed:  # a set of the other listing, not of the (long) names
                    found.update(set(listed).intersection(names))
        return found

    def names(self, status: str) -> list[str]:
        """Every ``*.json`` name in ``status``'s directory (quarantine: material only), unsorted."""
        with self.locked():
            return self._names(status)

    def count(self, status: str) -> int:
        """How many ``*.json`` files ``status``'s directory holds (quarantine: material
        only), not counting copies shadowed by an earlier directory (:meth:`shadowed`)."""
        with self.locked():
            names = self._names(status)
            return len(names) - len(self._shadowed(status, names))

    def exists(self, key: str, status: str) -> bool:
        """Whether anything at all sits at ``key``'s file name in ``status``'s directory."""
        with self.locked():
            return self._present(self._dir_fd(status), stem_for(key) + SUFFIX)

    def _quarantine_listing(self) -> list[str]:
        """Every name in the quarantine directory (remembered while the lock is held)."""
        memo = self._memo
        remembered = ("listing", self.layout.quarantine_directory, "")
        if remembered not in memo:
            dir_fd = self._dir_fd(self.layout.quarantine_directory)
            listed = os.listdir(dir_fd)
            self._remove_leftovers(dir_fd, listed)  # the listing is taken anyway
            memo[remembered] = listed
        names: list[str] = memo[remembered]
        return names

    def _quarantined_names(self, stem: str) -> list[str]:
        prefix = stem + "."
        return sorted(
            name
            for name in self._quarantine_listing()
            if name.startswith(prefix) and name.endswith(SUFFIX) and not name.endswith(ERROR_SUFFIX)
        )

    def has_quarantined(self, key: str) -> bool:
        """Whether the quarantine holds any ``<stem>.*.json`` (material or reason) for ``key``."""
        prefix = stem_for(key) + "."
        with self.locked():
            return any(
                name.startswith(prefix) and name.endswith(SUFFIX)
                for name in self._quarantine_listing()
            )

    def quarantine_material(self, status: str, name: str, reason: str) -> str:
        """Move file ``name`` out of ``status``'s directory into quarantine, with a reason file.

        ``name`` must come from a listing of that directory (one path component). The
        reason file is written first, so material is never found without its reason.
        Returns the quarantined file's name.
        """
        if "/" in name or "\0" in name or name in (".", ".."):
            raise ValueError(f"not a directory entry name: {name!r}")
        stem, original = quarantine_stem(name)
        tag = secrets.token_hex(6)
        target = f"{stem}.{tag}{SUFFIX}"
        with self.locked():
            self._forget((status, name), (self.layout.quarantine_directory, target))
            source = self._dir_fd(status)
            directory = self._dir_fd(self.layout.quarantine_directory)
            self._write(
                directory, f"{stem}.{tag}{ERROR_SUFFIX}", self._reason_bytes(stem, reason, original)
            )
            # Whatever the entry is (a file, a directory, a link, a FIFO), only its name
            # moves: nothing is opened, and a shared inode keeps its content.
            os.replace(name, target, src_dir_fd=source, dst_dir_fd=directory)
            os.fsync(source)
            os.fsync(directory)
            self._note_change(status, -1)
            self._make_private(directory, target)
        return target

    def _make_private(self, dir_fd: int, name: str) -> None:
        """Quarantined material is made 0600, like every file of the store, when it is a
        regular file that this user owns and that no other name shares: anything else
        (a link, a FIFO, a socket, a directory, a hard link to someone's file, a file of
        another user) keeps its mode, since changing it would change what is not ours."""
        def ours(info: os.stat_result) -> bool:
            return (
                stat.S_ISREG(info.st_mode)
                and info.st_nlink == 1
                and info.st_uid == os.geteuid()
            )

        entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not ours(entry) or stat.S_IMODE(entry.st_mode) == 0o600:
            return
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)  # a regular file: opening is inert
        try:
            info = os.fstat(fd)
            if ours(info) and (info.st_dev, info.st_ino) == (entry.st_dev, entry.st_ino):
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)

    def quarantine_entries(self) -> list[QuarantineEntry]:
        """Everything in quarantine with its reason (``None`` when the reason file is missing
        or unreadable), in name order."""
        entries: list[QuarantineEntry] = []
        with self.locked():
            for name in sorted(self._names(self.layout.quarantine_directory)):
                found = QUARANTINED_NAME.fullmatch(name)
                stem, tag = (found["stem"], found["tag"]) if found else (name, "")
                reason = self._read_reason(f"{stem}.{tag}{ERROR_SUFFIX}") if found else None
                entries.append(QuarantineEntry(name=name, stem=stem, reason=reason))
        return entries

    def _read_reason(self, name: str) -> Mapping[str, Any] | None:
        try:
            data = self._read(self.layout.quarantine_directory, name)
            value = json.loads(data.decode("utf-8")) if data is not None else None
        except (UntrustedRecord, UnicodeError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

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
        quarantine = self.layout.quarantine_status
        assert quarantine is not None
        seen: dict[str, R] = {}
        for name in sorted(names):
            try:
                record = self.read_named(quarantine, name)
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

    def next_due(self, now: float, exclude: frozenset[str] = frozenset()) -> R | None:
        lease = self._lease()
        due = [r for r in self._due(now) if self.lifecycle.key_of(r) not in exclude]
        if not due:
            return None
        return min(due, key=lambda r: [getattr(r, field) for field in lease.order_by])

    def _expired(self, now: float) -> list[R]:
        lease = self._lease()
        leased = self.lifecycle.leased
        assert leased is not None
        return [r for r in self._records([leased.value]) if getattr(r, lease.expires_field) <= now]

    def expired_leases(self, now: float) -> list[R]:
        return sorted(self._expired(now), key=self.lifecycle.key_of)

    def count_by_status(self) -> dict[str, int]:
        with self.locked():
            counts = {s.value: self.count(s.value) for s in self.lifecycle.statuses}
            for change in (self._staged or {}).values():
                if change.on_disk is not None:
                    counts[change.on_disk] -= 1
                counts[str(self.lifecycle.status_of(change.record))] += 1
            return counts

    def count_due(self, now: float) -> int:
        return len(self._due(now))

    def count_expired(self, now: float) -> int:
        return len(self._expired(now))

    def scan(self) -> Iterator[R]:
        statuses = [status.value for status in self.lifecycle.statuses]
        with self.locked():
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


@attrs.frozen
class Listing:
    """One pass over a directory: its first names, how many ``*.json`` files it holds,
    and which of them are shadowed by an earlier directory (:meth:`FilesStore.shadowed`)."""

    first: list[str]
    total: int
    shadowed: set[str]


@attrs.frozen
class QuarantineEntry:
    """One piece of quarantined material and its reason document, if readable."""

    name: str
    stem: str
    reason: Mapping[str, Any] | None


__all__ = [
    "FilesLayout",
    "FilesStore",
    "Listing",
    "QuarantineEntry",
    "Reentered",
    "StoreMissing",
    "UnsafePath",
    "UntrustedRecord",
    "canonical_json",
    "printable_name",
    "put_file",
    "quarantine_stem",
    "stem_for",
    "write_file",
]
