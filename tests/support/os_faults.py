"""Real operating-system faults for the tests of what a store does when the OS refuses.

- :func:`full_file_system`: a small tmpfs mounted for the test (root only; the test
  skips with the reason otherwise), to be filled with :func:`fill`: writes then fail
  with ``ENOSPC`` for real, and freeing the filler ends the fault.
- :func:`run_unprivileged`: runs a function as an unprivileged user, for whom a
  read-only directory is read-only (root ignores modes): in this process when it is not
  root, else in a forked child that drops to ``nobody`` (skips when it cannot).
  :func:`unprivileged_directory` makes a directory that user may use.
- :func:`injected_errno`: one ``os`` function failing with an errno, for faults no
  real file system here can produce on demand (``EUCLEAN``, a damaged file system).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

UNPRIVILEGED_ID = 65534  # nobody / nogroup
NOT_ROOT_REASON = "mounting a tmpfs needs root; the ENOSPC tests run as root only"


@contextlib.contextmanager
def full_file_system(where: Path, *, size: str = "512k", inodes: int | None = None
                     ) -> Iterator[Path]:
    """A tmpfs of ``size`` (and at most ``inodes`` inodes) mounted at ``where`` while the
    block runs; skips the test when it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip(NOT_ROOT_REASON)
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount(8) on this machine; the ENOSPC tests need one")
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run([mount, "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
                    "the ENOSPC tests need CAP_SYS_ADMIN")
    try:
        yield where
    finally:
        subprocess.run([umount, str(where)], check=True)


def fill(directory: Path) -> Path:
    """Write a filler file into ``directory`` until its file system is full; returns it
    (unlink it to end the fault)."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    while True:  # the last partial block, byte by byte
        try:
            with open(filler, "ab", buffering=0) as handle:
                handle.write(b"\0")
        except OSError as error:
            if error.errno == errno.ENOSPC:
                return filler
            raise


def unprivileged_directory(parent: str = "/tmp") -> Path:
    """A new directory that :func:`run_unprivileged`'s user owns (pytest's own temporary
    directories are root's, 0700: nobody else can enter them). Remove it when done."""
    directory = Path(tempfile.mkdtemp(prefix="lifecycles-unprivileged-", dir=parent))
    if os.geteuid() == 0:
        os.chown(directory, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
    return directory


def run_unprivileged(function: Callable[[], Any]) -> Any:
    """``function()``, run by a user without root's privileges; its result must be JSON.

    As root, a forked child drops to ``nobody`` and runs it (everything it needs must be
    imported already: the child may not be able to read the interpreter's files); an
    exception in the child fails the test with its traceback.
    """
    if os.geteuid() != 0:
        return function()
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            os.setgroups([])
            os.setresgid(UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
            os.setresuid(UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
            document: dict[str, Any] = {"result": function()}
        except BaseException:
            document, code = {"crash": traceback.format_exc()}, 1
        with os.fdopen(writing, "w") as channel:
            channel.write(json.dumps(document))
        os._exit(code)
    os.close(writing)
    with os.fdopen(reading) as channel:
        answer = channel.read()
    _, status = os.waitpid(child, 0)
    if not answer:
        pytest.fail(f"the unprivileged child died without an answer (status {status})")
    document = json.loads(answer)
    if "crash" in document:
        if "PermissionError" in document["crash"] and "setres" in document["crash"]:
            pytest.skip("cannot drop to an unprivileged user here (no CAP_SETUID)")
        pytest.fail("the unprivileged child failed:\n" + document["crash"])
    return document["result"]


@contextlib.contextmanager
def injected_errno(name: str, number: int, *, after: int = 0) -> Iterator[None]:
    """``os.<name>`` raises ``OSError(number)`` from its ``after + 1``-th call on, while
    the block runs."""
    real = getattr(os, name)
    calls = 0

    def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > after:
            raise OSError(number, f"injected {os.strerror(number)}")
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, name, failing)
        yield
