"""Filesystem primitives of the files store: each one relative to a directory descriptor.

Nothing here knows records: these functions open directories without following links,
put bytes at a name atomically and durably, read a regular file within a bound after
checking what kind of entry it is, and tell a dead writer's leftover from a look-alike.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import attrs

from lifecycles.stores._base import StoreDamaged, StoreError, StoreUnavailable

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(StoreError):
    """A directory or the lock file is a symbolic link or not what it must be."""

    code = "lifecycles.store_unsafe_path"


class StoreMissing(StoreError):
    """The store directory does not exist and the store was opened without ``create``."""

    code = "lifecycles.store_missing"


# The errno values with which a file system reports damage to itself (ext4 and XFS
# spell EFSCORRUPTED as EUCLEAN and EFSBADCRC as EBADMSG). Every other OS error says
# the directory cannot be used now: EIO, ENOSPC, EDQUOT, EACCES, EROFS, EMFILE, ...
DAMAGE_ERRNOS = frozenset({errno.EUCLEAN, errno.EBADMSG})


class FilesUnavailable(StoreUnavailable, OSError):
    """An OS error made the store's directory unusable for this call: an I/O error, a
    full device or quota, no permission, a read-only file system, a directory that
    vanished under the open store. Nothing the call did not finish is acknowledged, and
    every file it wrote is whole or absent.

    Also an ``OSError`` carrying the original ``errno``, ``strerror`` and ``filename``,
    so code written for the raw error still catches it (``except OSError``); the
    original is its ``__cause__``.
    """

    code = "lifecycles.store_unavailable"

    def __init__(self, message: str, cause: OSError) -> None:
        super().__init__(message)
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, cause.filename

    def __str__(self) -> str:
        return str(self.args[0])  # the message, not OSError's "[Errno N] ..."


class FilesDamaged(StoreDamaged, OSError):
    """The file system reports damage to itself (``EUCLEAN``, ``EBADMSG``) under the
    store's directory. An ``OSError`` too, like :class:`FilesUnavailable`."""

    code = "lifecycles.store_damaged"

    def __init__(self, message: str, cause: OSError) -> None:
        super().__init__(message)
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, cause.filename

    def __str__(self) -> str:
        return str(self.args[0])


def store_error_of(error: OSError, where: str) -> FilesUnavailable | FilesDamaged:
    """What an OS error met by ``where`` (the store and the call) means for the caller."""
    number = error.errno
    name = errno.errorcode.get(number, str(number)) if number is not None else "no errno"
    kind = FilesDamaged if number in DAMAGE_ERRNOS else FilesUnavailable
    return kind(f"{where}: {error.strerror or error} ({name})", error)


@contextlib.contextmanager
def os_errors_as_store_errors(where: str) -> Iterator[None]:
    """Raise an ``OSError`` escaping the block as :func:`store_error_of` says (store
    errors pass unchanged: the files store's own are ``OSError`` too)."""
    try:
        yield
    except StoreError:
        raise
    except OSError as error:
        raise store_error_of(error, where) from error


def vanished(name: str, where: str) -> FilesUnavailable:
    """A directory of the layout is gone under an open store (removed, or its file
    system unmounted): the store does not create it again, since what it held is
    elsewhere or lost, and a new empty one would hide that."""
    cause = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    return FilesUnavailable(
        f"{where}: directory {name} vanished under the open store (removed, or its file "
        "system unmounted); nothing was created again (ENOENT)", cause,
    )


class UnfitEntry(Exception):
    """A directory entry that cannot hold a record: ``rule`` names why, ``detail`` says it."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail


def kind_of(mode: int) -> str:
    """What an entry of this ``st_mode`` is, in words, when it is not a regular file."""
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


def close_quietly_after(error: BaseException, fd: int) -> None:
    """Close ``fd`` while ``error`` propagates; a failure to close becomes a note on it."""
    try:
        os.close(fd)
    except OSError as close_error:
        error.add_note(f"closing fd {fd} also failed: {close_error!r}")


def unlink_after(error: BaseException, name: str, dir_fd: int) -> None:
    """Remove ``name`` while ``error`` propagates; a failure to remove becomes a note on it."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as cleanup_error:
        error.add_note(f"removing {name} also failed: {cleanup_error!r}")


@attrs.frozen
class StagedFile:
    """A temporary file written beside ``name`` in ``dir_fd``, open as ``fd``: not yet
    synced, not yet renamed over ``name``."""

    dir_fd: int
    name: str
    temp: str
    fd: int


def stage_file(dir_fd: int, name: str, data: bytes) -> StagedFile:
    """Write ``data`` to a new temporary file beside ``name`` (removed again on error)."""
    temp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except BaseException as error:
        close_quietly_after(error, fd)
        unlink_after(error, temp, dir_fd)
        raise
    return StagedFile(dir_fd, name, temp, fd)


_sync_pool: ThreadPoolExecutor | None = None


def _forget_sync_pool() -> None:
    global _sync_pool  # a forked child has none of its parent's threads
    _sync_pool = None


os.register_at_fork(after_in_child=_forget_sync_pool)


def sync_files(staged: Sequence[StagedFile]) -> None:
    """fsync every staged file, all at once when there are several: the filesystem
    commits concurrent fsyncs in one journal transaction (ext4, XFS), where one after
    another each waits for its own. Raises the first failure, after every fsync ended."""
    global _sync_pool
    if len(staged) < 2:
        for file in staged:
            os.fsync(file.fd)
        return
    if _sync_pool is None:
        _sync_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lifecycles-fsync")
    futures = [_sync_pool.submit(os.fsync, file.fd) for file in staged]
    # Every fsync must have ended before anyone may close these descriptors (a failure
    # discards the batch): only then is the first failure raised.
    wait(futures)
    for future in futures:
        future.result()


def finish_file(file: StagedFile) -> None:
    """Close a synced staged file and rename it over its name (removed again on error)."""
    try:
        os.close(file.fd)
        os.replace(file.temp, file.name, src_dir_fd=file.dir_fd, dst_dir_fd=file.dir_fd)
    except BaseException as error:
        unlink_after(error, file.temp, file.dir_fd)
        raise


def discard_staged(error: BaseException, staged: Sequence[StagedFile]) -> None:
    """Close and remove staged files not renamed, while ``error`` propagates."""
    for file in staged:
        close_quietly_after(error, file.fd)
        unlink_after(error, file.temp, file.dir_fd)


def put_file(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically put ``data`` at ``name``: temp file, write, fsync, rename over ``name``.

    Durable once the directory is synced (:func:`write_file` does both).
    """
    file = stage_file(dir_fd, name, data)
    try:
        sync_files([file])
    except BaseException as error:
        discard_staged(error, [file])
        raise
    finish_file(file)


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
            unlink_after(error, name, dir_fd)
        raise


def open_directory(
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
                make_private_directory(name, dir_fd)
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
        make_owned_private(fd, 0o700)
    except BaseException as error:
        close_quietly_after(error, fd)
        raise
    return fd


def make_private_directory(name: str, dir_fd: int | None) -> None:
    """``mkdir`` ``name`` with mode 0700 exactly, whatever the umask.

    The umask may take the owner's own bits off 0700 (under 0o777 the directory is made
    0000, which its owner then cannot open to tighten), so the mode is set on the inode
    just made, through an ``O_PATH`` handle, which needs no permission on it, and the
    process's ``/proc/self/fd`` entry for it: never through a name another process could
    have swapped meanwhile. Without ``/proc``, the name is chmodded (the store's own
    directories live under directories only this user may write).
    """
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    try:
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        except FileNotFoundError:  # no /proc mounted
            os.chmod(name, 0o700, dir_fd=dir_fd)
    finally:
        os.close(handle)


def make_private_parents(path: Path) -> None:
    """Every missing directory of ``path``, made 0700 exactly (:func:`make_private_directory`),
    from the first that exists down; existing ones are left as they are. (``os.makedirs``
    applies its mode to the last one only, and the umask to every one.)"""
    missing: list[Path] = []
    at = path
    while not at.exists():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a racing creator made it first
            make_private_directory(str(directory), None)


def make_owned_private(fd: int, mode: int) -> None:
    """Set ``fd``'s mode to ``mode`` when it differs and this user owns the inode."""
    info = os.fstat(fd)
    if stat.S_IMODE(info.st_mode) != mode and info.st_uid == os.geteuid():
        os.fchmod(fd, mode)


def present(dir_fd: int, name: str) -> bool:
    """Whether anything at all (a file, a link, a FIFO...) sits at ``name``."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def is_leftover(dir_fd: int, name: str) -> bool:
    """Whether a temp-named entry is what a dead writer leaves: a regular file with
    one link. Anything else (a directory, a FIFO, a link) was put there by someone
    else under a look-alike name, and is left alone: never opened, never counted."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def entry_problem(info: os.stat_result, max_bytes: int, noun: str) -> UnfitEntry | None:
    """Why the entry ``info`` describes cannot hold a record (``None``: it may)."""
    if not stat.S_ISREG(info.st_mode):
        return UnfitEntry("record_is_regular_file", f"{noun} is {kind_of(info.st_mode)}")
    if info.st_nlink > 1:
        # Whoever holds the other name can change the content at will, and a chmod
        # or rewrite in place would change their file: the store trusts and touches
        # only files that it alone names.
        return UnfitEntry(
            "record_single_link",
            f"{noun} has {info.st_nlink} hard links (another name shares its file)",
        )
    if info.st_size > max_bytes:
        return UnfitEntry("record_size_bound", f"{noun} exceeds the durable size bound")
    return None


def read_entry(dir_fd: int, name: str, max_bytes: int, noun: str) -> bytes | None:
    """The bytes of regular file ``name`` (``None`` if absent), at most ``max_bytes``.

    Raises :class:`UnfitEntry` for anything that cannot hold a record. The entry's kind
    is checked before it is opened (opening a socket fails, a FIFO can block, a device
    can act), and the descriptor is checked again after the open.
    """
    try:
        entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    problem = entry_problem(entry, max_bytes, noun)
    if problem is not None:
        raise problem
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # swapped since the stat
            raise UnfitEntry("record_is_regular_file", f"{noun} is not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        problem = entry_problem(info, max_bytes, noun)
        if (info.st_dev, info.st_ino) != (entry.st_dev, entry.st_ino):
            problem = UnfitEntry("record_is_regular_file", f"{noun} changed while opened")
        if problem is not None:
            raise problem
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise UnfitEntry("record_size_bound", f"{noun} exceeds the durable size bound")
        return b"".join(chunks)
    finally:
        os.close(fd)


def make_private(dir_fd: int, name: str) -> None:
    """Make ``name`` 0600 when it is a regular file that this user owns and that no other
    name shares: anything else (a link, a FIFO, a socket, a directory, a hard link to
    someone's file, a file of another user) keeps its mode, since changing it would
    change what is not ours."""
    def ours(info: os.stat_result) -> bool:
        return stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == os.geteuid()

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


__all__ = [
    "DAMAGE_ERRNOS",
    "FilesDamaged",
    "FilesUnavailable",
    "StagedFile",
    "StoreMissing",
    "UnfitEntry",
    "UnsafePath",
    "discard_staged",
    "entry_problem",
    "finish_file",
    "is_leftover",
    "make_private",
    "open_directory",
    "os_errors_as_store_errors",
    "present",
    "put_file",
    "read_entry",
    "stage_file",
    "store_error_of",
    "sync_files",
    "vanished",
    "write_file",
]
