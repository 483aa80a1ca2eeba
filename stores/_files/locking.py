"""Who may touch a files store when: the ``flock``, the per-process registry, deferred fsync.

Every operation holds an exclusive ``flock`` on the store's lock file: safe across
processes. Within a process, one :class:`ProcessLock` per lock file (keyed by its inode)
makes the lock re-entrant for the thread holding it, even through a second store
object, and serialises threads. A thread's :class:`Handles` hold the directory
descriptors it opened under the lock, and the directories whose unlinks are not yet
synced: the next write into such a directory syncs it, and so does the release of the
outermost lock, so a call that returns has made durable what it wrote.

Each outermost hold also checks, under the lock, that every directory of the layout is
still a directory at its name (one ``lstat`` each): a store opened before one became a
link or a file refuses it on every call, as a store opened afterwards does. Only the
store's constructor creates directories; one that vanished under an open store is not
created again. Every ``OSError`` met while taking or releasing the lock leaves as a
store error (:func:`~lifecycles.stores._files.fs.store_error_of`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import attrs

from lifecycles.stores._base import StoreError
from lifecycles.stores._files.fs import (
    FilesUnavailable,
    StoreMissing,
    UnsafePath,
    close_quietly_after,
    kind_of,
    make_owned_private,
    open_directory,
    store_error_of,
    vanished,
    write_file,
)
from lifecycles.stores._files.view import HeldView

# O_NONBLOCK: a FIFO planted at the lock's name must not hang the open (it is refused).
LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_LOCK_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # flock: no write


class Reentered(StoreError):
    """A section that must not be re-entered was entered again by the thread inside it."""

    code = "lifecycles.store_reentered"


@attrs.define
class ProcessLock:
    """One per lock file (by inode) in this process: the threads' lock and the flock holder."""

    guard: threading.RLock = attrs.field(factory=threading.RLock)
    depth: int = 0
    view: HeldView = attrs.field(factory=HeldView)
    # Sections (FilesStore.exclusive) the holding thread is inside.
    sections: set[str] = attrs.field(factory=set)


_REGISTRY: dict[tuple[int, int], ProcessLock] = {}
_REGISTRY_GUARD = threading.Lock()


def _reset_registry_in_child() -> None:
    # A forked child holds none of its parent's locks (flock is not inherited as held
    # by the child's own logic); start with a clean registry.
    global _REGISTRY_GUARD
    _REGISTRY.clear()
    _REGISTRY_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_reset_registry_in_child)


def process_lock(identity: tuple[int, int]) -> ProcessLock:
    """The registry's entry for the lock file of this ``(st_dev, st_ino)``."""
    with _REGISTRY_GUARD:
        entry = _REGISTRY.get(identity)
        if entry is None:
            entry = _REGISTRY[identity] = ProcessLock()
        return entry


@attrs.define
class Handles:
    """Directory descriptors and the lock held by one thread for one store."""

    root: int
    directories: dict[str, int]
    process_lock: ProcessLock
    lock_fd: int
    create: bool
    where: str = "files store"  # names the store in error messages
    depth: int = 1
    # Directories with an unlink not yet fsynced: synced by the next write into them,
    # or when the outermost lock is released, whichever comes first.
    unsynced: set[int] = attrs.field(factory=set)

    @property
    def view(self) -> HeldView:
        return self.process_lock.view

    def directory(self, name: str) -> int:
        """The directory's descriptor, opened on first use (never created: the store's
        constructor made the layout)."""
        fd = self.directories.get(name)
        if fd is None:
            try:
                fd = open_directory(name, self.root, create=False, check_mode=False)
            except StoreMissing:
                raise self.missing(name) from None
            self.directories[name] = fd
        return fd

    def missing(self, name: str) -> StoreMissing | FilesUnavailable:
        """The error for a directory of the layout that is not there: a reader's store
        is missing; a writer's vanished under it (:func:`~.fs.vanished`)."""
        if self.create:
            return vanished(name, self.where)
        return StoreMissing(f"directory {name} does not exist")

    def check_layout(self, directories: Sequence[str]) -> None:
        """Each of ``directories`` is a directory at its name now, not a link, a file
        or nothing: one ``lstat`` each, so a change made under an open store is refused
        on its next call as when the store is opened."""
        for name in directories:
            try:
                info = os.stat(name, dir_fd=self.root, follow_symlinks=False)
            except FileNotFoundError:
                raise self.missing(name) from None
            if not stat.S_ISDIR(info.st_mode):
                raise UnsafePath(f"{name} is a symbolic link or not a directory")

    def unsynced_unlink(self, dir_fd: int) -> None:
        """An entry of ``dir_fd`` was unlinked: sync it later (see ``unsynced``)."""
        self.unsynced.add(dir_fd)

    def synced(self, dir_fd: int) -> None:
        """``dir_fd`` was just synced: its pending unlinks are durable too."""
        self.unsynced.discard(dir_fd)

    def write(self, dir_fd: int, name: str, data: bytes, *, fresh: bool = False) -> None:
        """:func:`~lifecycles.stores._files.fs.write_file`, which syncs the directory's
        pending unlinks too."""
        write_file(dir_fd, name, data, fresh=fresh)
        self.synced(dir_fd)


class StoreLock:
    """The lock of one store object: ``held()`` yields this thread's :class:`Handles`.

    ``open_root(opening)`` opens the store directory (creating it only while
    ``opening``); ``directories`` are checked on every outermost hold but the opening
    one, whose caller makes them; ``where`` names the store in error messages.
    """

    def __init__(
        self,
        open_root: Callable[[bool], int],
        lock_name: str,
        directories: Sequence[str],
        *,
        create: bool,
        where: str,
    ) -> None:
        self._open_root = open_root
        self._lock_name = lock_name
        self._directories = tuple(directories)
        self._create = create
        self._where = where
        self._local = threading.local()

    @property
    def current(self) -> Handles | None:
        """This thread's handles while it holds the lock through this object, else ``None``."""
        handles: Handles | None = getattr(self._local, "handles", None)
        return handles

    @contextmanager
    def held(self, *, opening: bool = False) -> Iterator[Handles]:
        """Hold the exclusive lock (re-entrant within a thread, across store objects).

        The outermost hold checks the layout's directories first, unless ``opening``
        (the store's constructor, which creates or opens them itself).
        """
        handles = self.current
        if handles is not None:
            handles.depth += 1
            try:
                yield handles
            finally:
                handles.depth -= 1
            return
        # try/except rather than os_errors_as_store_errors: this runs on every call.
        try:
            handles = self._acquire(opening)
        except StoreError:
            raise
        except OSError as error:
            raise store_error_of(error, self._where) from error
        self._local.handles = handles
        try:
            if not opening:
                try:
                    handles.check_layout(self._directories)
                except StoreError:
                    raise
                except OSError as error:
                    raise store_error_of(error, self._where) from error
            yield handles
        finally:
            self._local.handles = None
            try:
                self._release(handles)
            except StoreError:
                raise
            except OSError as error:
                raise store_error_of(error, self._where) from error

    @contextmanager
    def exclusive(self, section: str) -> Iterator[None]:
        """Hold the lock for a block the thread inside it must not enter again, through
        this or any other store object on the same lock file: a second entry raises
        :class:`Reentered`, changing nothing."""
        with self.held() as handles:
            sections = handles.process_lock.sections
            if section in sections:
                raise Reentered(f"{section} was called again from inside itself")
            sections.add(section)
            try:
                yield
            finally:
                sections.discard(section)

    def _acquire(self, opening: bool) -> Handles:
        root_fd = self._open_root(opening)
        opened = [root_fd]
        try:
            lock_fd = self._open_lock(root_fd)
            opened.append(lock_fd)
            identity = os.fstat(lock_fd)
            entry = process_lock((identity.st_dev, identity.st_ino))
            entry.guard.acquire()
            try:
                if entry.depth == 0:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                entry.depth += 1
            except BaseException:
                entry.guard.release()
                raise
        except BaseException as error:
            for fd in reversed(opened):
                close_quietly_after(error, fd)
            raise
        return Handles(root_fd, {}, entry, lock_fd, self._create, self._where)

    def _open_lock(self, root_fd: int) -> int:
        name = self._lock_name
        try:
            if self._create:
                fd = os.open(name, LOCK_FLAGS, 0o600, dir_fd=root_fd)
            else:
                fd = os.open(name, READ_LOCK_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            # A reader creates nothing. No lock file means no writer has run an operation
            # yet (the reference creates it lazily): lock the store directory instead.
            return os.dup(root_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise UnsafePath(f"lock file {name} is a symbolic link") from None
            if error.errno in (errno.EISDIR, errno.ENXIO):  # a directory; a socket
                raise UnsafePath(f"lock file {name} is not a regular file") from None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UnsafePath(
                    f"lock file {name} is {kind_of(info.st_mode)}, not a regular file"
                )
            if info.st_nlink > 1:
                # Another name shares the inode: re-moding it would change that file too,
                # and flock on it would contend with whoever uses that name.
                raise UnsafePath(f"lock file {name} has {info.st_nlink} hard links")
            if self._create:
                make_owned_private(fd, 0o600)
        except BaseException as error:
            close_quietly_after(error, fd)
            raise
        return fd

    @staticmethod
    def _release(handles: Handles) -> None:
        entry = handles.process_lock
        try:
            for dir_fd in sorted(handles.unsynced):
                os.fsync(dir_fd)
            handles.unsynced.clear()
        finally:
            try:
                entry.depth -= 1
                if entry.depth == 0:
                    entry.view.clear()  # others may write once the flock is released
                    fcntl.flock(handles.lock_fd, fcntl.LOCK_UN)
            finally:
                entry.guard.release()
                _close_all((*handles.directories.values(), handles.lock_fd, handles.root))


def _close_all(fds: tuple[int, ...]) -> None:
    """Close every one of ``fds``, then raise the first failure: one that fails to close
    must not leave the others open."""
    failure: OSError | None = None
    for fd in fds:
        try:
            os.close(fd)
        except OSError as error:
            failure = failure or error
    if failure is not None:
        raise failure


__all__ = ["Handles", "ProcessLock", "Reentered", "StoreLock", "process_lock"]
