"""The files store's batched writes: staged files synced together, then renamed.

A batch (a replay's attempts, its outcomes) writes every file first, fsyncs them all at
once (the filesystem commits concurrent fsyncs together), then renames each over its
name and syncs each directory once. Crash and fault safety of the whole store are
tested in tests/outbox (test_outbox_faults.py fails every fsync of a batch in turn);
these tests pin the primitives.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import pytest

from lifecycles.stores._files import fs


def staged_in(directory: Path, count: int) -> tuple[int, list[fs.StagedFile]]:
    dir_fd = os.open(directory, fs.DIRECTORY_FLAGS)
    return dir_fd, [fs.stage_file(dir_fd, f"r{n}.json", b'{"n": %d}\n' % n)
                    for n in range(count)]


def test_staged_files_appear_only_once_renamed(tmp_path: Path) -> None:
    dir_fd, staged = staged_in(tmp_path, 3)
    try:
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []
        fs.sync_files(staged)
        for file in staged:
            fs.finish_file(file)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r0.json", "r1.json", "r2.json"]
        assert (tmp_path / "r2.json").read_bytes() == b'{"n": 2}\n'
    finally:
        os.close(dir_fd)


def test_a_failed_fsync_in_a_batch_is_raised_after_every_fsync_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dir_fd, staged = staged_in(tmp_path, 4)
    real_fsync, tried = os.fsync, []

    def failing(fd: int) -> None:
        if fd == staged[0].fd:
            tried.append(fd)
            raise OSError(errno.EIO, "injected")
        time.sleep(0.05)  # the others end well after the failure is known
        real_fsync(fd)
        tried.append(fd)  # ended: only now may its descriptor be closed

    monkeypatch.setattr(os, "fsync", failing)
    try:
        with pytest.raises(OSError) as raised:
            fs.sync_files(staged)
        assert raised.value.errno == errno.EIO
        assert sorted(tried) == sorted(file.fd for file in staged)
        fs.discard_staged(raised.value, staged)
        assert list(tmp_path.iterdir()) == []  # no temporary file left, nothing renamed
    finally:
        os.close(dir_fd)


def test_a_forked_child_syncs_a_batch_without_its_parents_threads(tmp_path: Path) -> None:
    dir_fd, staged = staged_in(tmp_path, 2)
    fs.sync_files(staged)  # the parent's pool now has threads
    for file in staged:
        fs.finish_file(file)
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        signal.alarm(30)  # a pool waiting for threads the fork did not copy hangs: die
        try:
            _, more = staged_in(tmp_path, 3)
            fs.sync_files(more)
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    os.close(dir_fd)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
