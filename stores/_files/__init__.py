"""A filesystem store: one directory per status, one canonical-JSON file per record.

Any lifecycle whose records are JSON-serialisable can live here. The layout::

    <root>/.lock                      flock'ed around every operation
    <root>/<status dir>/<stem>.json   one record, canonical JSON + newline, mode 0600
    <root>/quarantine/<stem>.<tag>.json        material the store cannot trust
    <root>/quarantine/<stem>.<tag>.error.json  {"entry_id", "quarantined_at", "reason"}

``<stem>`` is the record's key when it matches ``SAFE_STEM``, otherwise ``_`` and the
key's SHA-256, so no path is ever built from unchecked input. Directories are 0700 and
files 0600 whatever the umask.

The modules, one job each:

* :mod:`.layout` - where each status lives, and every name the store builds;
* :mod:`.fs` - filesystem primitives, each relative to a directory descriptor;
* :mod:`.locking` - the ``flock``, the per-process lock registry, deferred fsync;
* :mod:`.view` - the one cache: what this process knows while it holds the lock;
* :mod:`.codec` - record bytes, and the strict reading that tells untrusted material;
* :mod:`.quarantine` - material set aside with its reason;
* :mod:`.contract` - :class:`FilesExtension`, what a facade may call beyond ``Store``;
* :mod:`.store` - :class:`FilesStore`, which sequences them.

Guarantees (beyond :mod:`lifecycles.stores._base`):

* **Durability.** A write is: temp file in the destination directory (``O_EXCL``),
  write, ``fsync``, ``rename`` over the final name, ``fsync`` of the directory. A move
  to another status writes the destination that way, then unlinks the source; the
  source directory is synced by the next write into it or when the outermost lock is
  released. When a store call (or the outermost ``locked()`` block) returns, what it
  wrote is on disk; a reader never sees a partly written file under a final name. A
  new file whose directory cannot be synced is removed again.
* **Transactions.** Writes inside ``transaction()`` are staged and applied on exit
  (inner transactions are savepoints); an exception discards them. The apply writes
  every temp file, fsyncs them all at once (concurrent fsyncs share a journal commit
  on ext4 and XFS), renames each over its name, then syncs each directory once, then
  unlinks the sources of moves, so many records share a directory's fsync. A crash
  *during* it can leave part of a multi-record transaction applied, each file whole.
* **Interrupted moves.** A crash (or a failed unlink) between a move's two steps
  leaves the record in both directories: ``get`` trusts the first of the layout's
  ``search_order``, and the shadowed copy is not counted; ``discard_shadowed`` removes
  it once its caller judged it the tail of a move. Temp files of writers that died
  mid-write are removed by the next listing of their directory (a writing store only),
  or by ``sweep`` for directories a caller does not list.
* **Locking.** Every operation holds an exclusive ``flock`` on ``.lock``: safe across
  processes; within a process a re-entrant guard per lock file (keyed by its inode)
  lets nested use by the same thread proceed, even through a second store object, and
  serialises threads. While this process holds the lock nobody else writes, so what
  it listed, read or wrote is remembered (:class:`~.view.HeldView`) until it changes
  those files or releases the lock.
* **OS errors.** No ``OSError`` leaves a public method (the constructor included) as
  it is: an I/O error, a full device or quota, a denied permission, a read-only file
  system or a directory that vanished under the open store is
  :class:`FilesUnavailable` (``lifecycles.store_unavailable``), damage the file system
  reports (``EUCLEAN``, ``EBADMSG``) :class:`FilesDamaged`
  (``lifecycles.store_damaged``): the contract's ``StoreUnavailable`` and
  ``StoreDamaged``, and ``OSError`` too, with the original ``errno``, so code written
  for the raw error keeps working. What the call had not finished is not
  acknowledged; every file is whole or absent.
* **No symlinks followed.** Below the caller's parent directory, every open is
  relative to a directory descriptor with ``O_NOFOLLOW``; directories are opened with
  ``O_DIRECTORY | O_NOFOLLOW``. A planted link at a directory or the lock file makes
  the store refuse to operate (:class:`UnsafePath`), on every call: each one checks
  every directory of the layout under the lock (one ``lstat`` each), so a store opened
  before the link was planted refuses it as a store opened afterwards does. One at a
  record path is material it cannot trust.
* **Quarantine.** Material that is not a valid record (unreadable, too big, not JSON,
  wrong keys, broken rules, in the wrong directory) is reported as
  :class:`UntrustedRecord`; ``quarantine_material`` moves it aside with a reason file.
  The lease queries quarantine it themselves, so one bad file never blocks a queue.
  Material keeps its own stem unless that is not a safe file name
  (:func:`quarantine_stem`).
* **Hostile entries.** No directory entry blocks the store or makes it touch anything
  outside it. An entry's kind is checked (``lstat``) before it is opened: a directory,
  link, FIFO, socket or device under a record name is untrusted material, never
  opened; so is a regular file with more than one hard link, and no inode with more
  than one link is ever re-moded or written (a quarantine moves its name only). Names
  that are not UTF-8 are handled as the surrogate-escaped text ``os.listdir`` gives,
  and written into reasons as escaped text (:func:`printable_name`). Entries that are
  not ``*.json`` and not a writer's leftover temporary file (a regular file with one
  link) are ignored, as the reference ignores them.
"""

from lifecycles.invariants._core import canonical_json
from lifecycles.stores._files.codec import UntrustedRecord
from lifecycles.stores._files.contract import FilesExtension, Listing
from lifecycles.stores._files.fs import (
    FilesDamaged,
    FilesUnavailable,
    StoreMissing,
    UnsafePath,
    put_file,
    write_file,
)
from lifecycles.stores._files.layout import (
    SAFE_STEM,
    TEMPORARY_NAME,
    FilesLayout,
    printable_name,
    quarantine_stem,
    stem_for,
)
from lifecycles.stores._files.locking import Reentered
from lifecycles.stores._files.quarantine import QuarantineEntry
from lifecycles.stores._files.store import FilesStore

__all__ = [
    "SAFE_STEM",
    "TEMPORARY_NAME",
    "FilesDamaged",
    "FilesExtension",
    "FilesLayout",
    "FilesStore",
    "FilesUnavailable",
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
