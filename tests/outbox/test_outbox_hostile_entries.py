"""No single directory entry blocks the outbox or touches anything outside it.

Every kind of entry a directory can hold is planted in each directory the outbox owns
(``pending/``, ``delivered/``, ``quarantine/``): a foreign regular file, an empty one, an
oversize one, a directory, a symbolic link, a FIFO, a UNIX socket, a hard link to a file
outside the store, a name that is not valid UTF-8, and names that look like a writer's
temporary file (a leftover regular one, a directory, a FIFO). Then the outbox is used as
usual, and:

- nothing blocks: no call raises, and none hangs (a FIFO opened for reading without
  ``O_NONBLOCK`` would; an alarm turns a hang into a failure);
- nothing valid is lost: every valid pending record is delivered in the same call, the
  delivered ones still answer ``enqueue``, new intents are accepted;
- every ``*.json`` entry of ``pending/`` that is not a valid record is quarantined with a
  reason; everything else planted is left where it is (the reference ignores what is not
  ``*.json`` too), except a leftover temporary file, which is removed;
- nothing outside the store changes: the mode, content and mtime of every outside file
  (the targets of the links), and the outside directory's listing.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.outbox import alarm, entry_id_of, make_request, store_root

import lifecycles.outbox as outbox
from lifecycles.invariants.outbox import MAX_RECORD_FILE_BYTES
from lifecycles.outbox.cli import outbox_status

RUN = "run-hostile"
DIRECTORIES = ("pending", "delivered", "quarantine")
VALID_PENDING = ("tx-a", "tx-b", "tx-c")
OUTSIDE_MODE = 0o644
ALARM_SECONDS = 20
LEFTOVER_TEMP = ".{name}.0123456789abcdef.tmp"


class Hung(Exception):
    """An outbox call did not return within the alarm."""


def record_bytes(transaction_id: str, state: str = "pending") -> bytes:
    """A valid record file's bytes, written by a scratch outbox (so exactly the format)."""
    request = make_request(outbox, RUN, transaction_id)
    record = {
        **request.intent(),
        "state": state,
        "created_at": "2026-01-02T03:04:05+00:00",
        "attempts": 0,
        "last_attempt_at": None,
        "last_error": None,
    }
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def seeded(state_dir: Path) -> outbox.CloseOutbox:
    """One delivered record, one quarantined one, and the valid pending ones."""
    store = outbox.CloseOutbox(state_dir=state_dir)
    store.enqueue(make_request(outbox, RUN, "tx-delivered"))
    store.replay(lambda request: None)
    (store.pending_dir / f"{entry_id_of(RUN, 'tx-broken')}.json").write_text("{broken")
    assert store.replay(lambda request: None).quarantined == 1
    for transaction_id in VALID_PENDING:
        store.enqueue(make_request(outbox, RUN, transaction_id))
    return store


@contextlib.contextmanager
def inside(directory: Path) -> Iterator[None]:
    """A UNIX socket's path must fit in 108 bytes: bind it by a name relative to here."""
    previous = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


def plant_socket(directory: Path, name: str) -> None:
    with inside(directory):
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(name)
        server.close()  # the socket file stays; nobody listens


def outside_files(tmp_path: Path) -> Path:
    """Files outside the store for the links to point at: junk, and a valid record."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "junk").write_bytes(b"someone else's file\n")
    (outside / "record.json").write_bytes(record_bytes("tx-outside-hardlink"))
    (outside / "symlinked").write_bytes(b"a symbolic link's target\n")
    for path in outside.iterdir():
        path.chmod(OUTSIDE_MODE)
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    return outside


def plant(directory: Path, where: str, outside: Path) -> dict[str, str]:
    """Every kind of entry in ``directory``; returns its name -> kind."""
    record_name = f"{entry_id_of(RUN, f'tx-planted-{where}')}.json"
    planted: dict[str, str] = {}

    def at(name: str, kind: str) -> Path:
        planted[name] = kind
        return directory / name

    at(f"regular-{where}.json", "regular").write_bytes(b'{"not": "a record"}\n')
    at(f"empty-{where}.json", "empty").write_bytes(b"")
    at(f"oversize-{where}.json", "oversize").write_bytes(b" " * (MAX_RECORD_FILE_BYTES + 1))
    at(f"directory-{where}.json", "directory").mkdir()
    (directory / f"directory-{where}.json" / "inside").write_bytes(b"x")
    at(f"symlink-{where}.json", "symlink").symlink_to(outside / "symlinked")
    os.mkfifo(at(f"fifo-{where}.json", "fifo"))
    at(f"socket-{where}.json", "socket")
    plant_socket(directory, f"socket-{where}.json")
    os.link(outside / "junk", at(f"hardlink-{where}.json", "hard link"))
    # a hard link that looks exactly like a record of this store
    os.link(outside / "record.json", at(record_name, "hard-linked record"))
    # a name that is not UTF-8, holding a valid record
    raw = os.fsencode(directory) + b"/non-utf8-\xff-" + where.encode() + b".json"
    with open(raw, "wb") as handle:
        handle.write(record_bytes(f"tx-non-utf8-{where}"))
    planted[os.fsdecode(os.path.basename(raw))] = "non-utf8"
    with open(os.fsencode(directory) + b"/\xfe", "wb") as handle:
        handle.write(b"not even a json name")
    planted[os.fsdecode(b"\xfe")] = "non-utf8, not json"
    # names of a writer's temporary file: a leftover of a killed writer (removed from
    # the directories a call lists; delivered/ is swept when a replay finds a sign of an
    # interrupted one, see the test below), and things that only look like one (left
    # alone: no writer makes them)
    if where != "delivered":
        at(LEFTOVER_TEMP.format(name=record_name), "leftover temp").write_bytes(b'{"half')
    at(".x.json.00112233445566778899aabbccddeeff.tmp", "temp-named directory").mkdir()
    os.mkfifo(at(".y.json.0123456789abcdef.tmp", "temp-named fifo"))
    return planted


def outside_state(outside: Path) -> dict[str, tuple[int, bytes, int]]:
    found = {}
    for path in sorted(outside.iterdir()):
        info = os.lstat(path)
        found[path.name] = (stat.S_IMODE(info.st_mode), path.read_bytes(), info.st_mtime_ns)
    return found


def names_in(directory: Path) -> set[str]:
    return set(os.listdir(directory))


@pytest.mark.parametrize("where", [*DIRECTORIES, "everywhere"])
def test_no_entry_blocks_the_queue_loses_a_record_or_touches_the_outside(
    tmp_path: Path, where: str
) -> None:
    state_dir = tmp_path / "state"
    seeded(state_dir)
    root = store_root(state_dir)
    outside = outside_files(tmp_path)
    targets = DIRECTORIES if where == "everywhere" else (where,)
    planted = {directory: plant(root / directory, directory, outside) for directory in targets}
    outside_before = outside_state(outside)
    quarantine_before = names_in(root / "quarantine")

    with alarm(ALARM_SECONDS, Hung):
        opened = outbox.CloseOutbox(state_dir=state_dir)
        opened.pending_count()
        delivered: list[str] = []
        report = opened.replay(lambda request: delivered.append(request.transaction_id))
        assert sorted(delivered) == sorted(VALID_PENDING), "a valid record was not delivered"
        assert report.delivered == len(VALID_PENDING)
        assert report.remaining == opened.pending_count() == 0
        again = opened.replay(lambda request: pytest.fail("nothing is left to deliver"))
        assert again == outbox.ReplayReport()
        # delivered ones still answer, new intents are accepted, planted ones never answer
        for transaction_id in ("tx-delivered", *VALID_PENDING):
            receipt = opened.enqueue(make_request(outbox, RUN, transaction_id))
            assert (receipt.created, receipt.state) == (False, "delivered")
        assert opened.enqueue(make_request(outbox, RUN, "tx-new")).created
        for directory in ("pending", "delivered"):
            if directory in targets:
                with pytest.raises(outbox.OutboxCorruptError):
                    opened.enqueue(make_request(outbox, RUN, f"tx-planted-{directory}"))
        status = outbox_status(state_dir)
        json.dumps(status, ensure_ascii=False).encode("utf-8")  # printable, whatever the names

    assert outside_state(outside) == outside_before, "something outside the store changed"
    assert sorted(os.listdir(outside)) == sorted(outside_before)

    for directory, entries in planted.items():
        present = names_in(root / directory)
        for name, kind in entries.items():
            if kind == "leftover temp":
                assert name not in present, f"{directory}/{name}: a leftover temp file stayed"
            elif directory == "pending" and name.endswith(".json"):
                assert name not in present, f"pending/{name!r} ({kind}) was not quarantined"
            else:
                assert name in present, f"{directory}/{name!r} ({kind}) was touched"
    if "pending" in planted:
        quarantined = names_in(root / "quarantine") - quarantine_before
        material = {n for n in quarantined if not n.endswith(".error.json")}
        expected = [n for n in planted["pending"] if n.endswith(".json")]
        assert len(material) == len(expected), sorted(material)
        for name in material:
            reason_name = name.removesuffix(".json") + ".error.json"
            assert reason_name in quarantined, f"quarantine/{name} has no reason"
            reason = json.loads((root / "quarantine" / reason_name).read_bytes())
            assert reason["reason"]
        # the hard links were moved, never copied or re-moded: still the outside inodes
        outside_inodes = {os.stat(outside / n).st_ino for n in ("junk", "record.json")}
        moved = {os.lstat(root / "quarantine" / n).st_ino for n in material}
        assert outside_inodes <= moved


def test_a_replay_after_an_interrupted_one_removes_its_temporary_files(tmp_path: Path) -> None:
    """A replay killed while writing its outcomes leaves temp files in delivered/ (and
    quarantine/), and its entries pending with their attempt counted and no outcome.
    The next replay sees that sign and sweeps those directories; a replay without it
    lists neither (delivered/ grows without bound)."""
    state_dir = tmp_path / "state"
    store = seeded(state_dir)
    first = sorted(entry_id_of(RUN, t) for t in VALID_PENDING)[0]
    leftovers = [
        store.delivered_dir / LEFTOVER_TEMP.format(name=f"{first}.json"),
        store.quarantine_dir / LEFTOVER_TEMP.format(name=f"{first}.0123456789ab.error.json"),
    ]
    for path in leftovers:
        path.write_bytes(b'{"half')
    assert store.replay(lambda request: None, limit=1).delivered == 1  # no sign: kept
    assert all(path.exists() for path in leftovers)
    second = sorted(entry_id_of(RUN, t) for t in VALID_PENDING)[1]
    values = json.loads((store.pending_dir / f"{second}.json").read_bytes())
    values.update(attempts=1, last_attempt_at="2026-01-02T03:04:05+00:00")
    (store.pending_dir / f"{second}.json").write_bytes(
        json.dumps(values, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    )
    report = store.replay(lambda request: None)
    assert (report.delivered, report.remaining) == (2, 0)
    assert not any(path.exists() for path in leftovers)


def test_a_hard_linked_record_is_quarantined_by_moving_its_name_only(tmp_path: Path) -> None:
    """Its content is a valid record, but another name shares the inode: whoever holds
    that name can change it at will, and any chmod would change their file too."""
    state_dir = tmp_path / "state"
    store = seeded(state_dir)
    outside = outside_files(tmp_path)
    link = store.pending_dir / f"{entry_id_of(RUN, 'tx-outside-hardlink')}.json"
    os.link(outside / "record.json", link)
    before = outside_state(outside)
    report = store.replay(lambda request: None)
    assert (report.delivered, report.quarantined) == (len(VALID_PENDING), 1)
    assert outside_state(outside) == before
    (reason_file,) = store.quarantine_dir.glob(f"{link.stem}.*.error.json")
    reason = json.loads(reason_file.read_bytes())["reason"]
    assert "hard link" in reason and "record_single_link" in reason
    material = reason_file.with_name(reason_file.name.replace(".error.json", ".json"))
    assert os.lstat(material).st_ino == os.stat(outside / "record.json").st_ino
    assert stat.S_IMODE(os.lstat(material).st_mode) == OUTSIDE_MODE


@pytest.mark.parametrize("kind", ["directory", "fifo", "socket", "hard link"])
def test_a_lock_that_is_not_a_private_regular_file_is_refused_with_an_outbox_error(
    tmp_path: Path, kind: str
) -> None:
    state_dir = tmp_path / "state"
    seeded(state_dir)
    lock = store_root(state_dir) / ".lock"
    lock.unlink()
    outside = outside_files(tmp_path)
    if kind == "directory":
        lock.mkdir()
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "socket":
        plant_socket(lock.parent, ".lock")
    else:
        os.link(outside / "junk", lock)
    before = outside_state(outside)
    with alarm(ALARM_SECONDS, Hung):
        with pytest.raises(outbox.OutboxUnsafePathError, match="lock"):
            outbox.CloseOutbox(state_dir=state_dir)
        status: Any = None
        with pytest.raises(Exception) as refused:
            status = outbox_status(state_dir)
        assert type(refused.value).__name__ == "UnsafePath", status
    assert outside_state(outside) == before
