"""Outbox figures: lifecycles against the reference, beside the raw fsync rate, in one run.

    python benchmarks/bench_outbox.py [--records 400] [--backlog 10000] [--repeats 9]

Both implementations work on real directories in one temporary directory on the
filesystem of /tmp (`--dir` to choose another), with real fsync. Every durable store is
bound by the disk's fsync rate, so that rate is measured in the same run, and each
figure is also given in "fsyncs' worth" of time.

The machine is shared and its disk is noisy (the fsync rate swings tenfold within a
minute), so the contestants run interleaved call by call, in alternating order: step i
of the reference, of lifecycles and of the disk probes run back to back, and a burst of
load hits them all alike. Compare the ratios, not the absolute figures.

- enqueue per s: distinct new intents into a fresh store, one call each;
- replay deliveries per s: the same intents drained with `replay(limit=10)` calls;
- `replay(limit=10)` with a backlog of 10,000 pending records: one call on a store
  opened just before (median of `--repeats`); the reference lists and sorts the whole
  pending directory, then lists it again to count what remains;
  beside it, the fsync calls that one call makes and an estimate of its time beyond
  them (listing, reading, encoding), which is where the two implementations differ most;
- `pending_count()` with the same backlog (no target; the operator's view).

Targets (printed PASS/FAIL, never asserted in tests): enqueue and replay rates at least
the reference's; `replay(limit=10)` with the backlog at most a fifth of the reference's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The figures compare with the reference components: by default those beside the clone.
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from support.outbox import entry_id_of
from support.reference import load_reference

import lifecycles.outbox as lifecycles_outbox

IMPLEMENTATIONS: dict[str, ModuleType] = {
    "reference": load_reference("close_outbox"),
    "lifecycles": lifecycles_outbox,
}
REPLAY_BATCH = 10

Step = Callable[[int], Any]


def interleaved(contestants: dict[str, Step], steps: int) -> dict[str, list[float]]:
    """Seconds of each step of each contestant, the contestants taking turns call by
    call, in an order reversed at every step."""
    seconds: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    for step in range(steps):
        for name in names if step % 2 == 0 else reversed(names):
            started = time.perf_counter()
            contestants[name](step)
            seconds[name].append(time.perf_counter() - started)
    return seconds


def fsync_calls(step: Step) -> float:
    """How many fsync calls one (untimed) call of `step` makes."""
    real_fsync = os.fsync
    calls = 0

    def counting_fsync(fd: FileDescriptorLike) -> None:
        nonlocal calls
        calls += 1
        real_fsync(fd)

    os.fsync = counting_fsync
    try:
        step(0)
    finally:
        os.fsync = real_fsync
    return float(calls)


def deliver_nothing(request: Any) -> None:
    """A receiver that accepts every delivery at once."""


def request(module: ModuleType, index: int) -> Any:
    return module.CloseRequest(
        run_id="bench-run",
        transaction_id=f"tx-{index}",
        action="complete",
        result={"index": index, "summary": "closed by the benchmark", "items": [1, 2, 3]},
    )


# --- the bound: what the disk allows -----------------------------------------------


class DiskProbes:
    """Raw durable operations on one directory, one per step."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        self.file_fd = os.open(directory / "fsync-probe", os.O_WRONLY | os.O_CREAT, 0o600)

    def fsync(self, step: int) -> None:
        """write(64 bytes) + fsync of one file."""
        os.write(self.file_fd, b"x" * 64)
        os.fsync(self.file_fd)

    def publish(self, step: int) -> None:
        """One durable file publication: temp file, write, fsync, rename, directory fsync
        (what any store must do at least once to make a new record durable)."""
        temporary = f".probe-{step}.tmp"
        descriptor = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self.directory_fd
        )
        try:
            os.write(descriptor, b"x" * 400)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(
            temporary,
            f"probe-{step % 50}.json",
            src_dir_fd=self.directory_fd,
            dst_dir_fd=self.directory_fd,
        )
        os.fsync(self.directory_fd)

    def close(self) -> None:
        os.close(self.file_fd)
        os.close(self.directory_fd)


# --- the backlog -------------------------------------------------------------------


def write_backlog(state_dir: Path, count: int) -> None:
    """`count` pending records in the contract's on-disk format (canonical JSON), written
    directly: enqueuing them one fsync'ed call at a time would only slow the setup."""
    pending = state_dir / "close-outbox" / "pending"
    pending.mkdir(parents=True)
    for directory in (pending.parent, pending):
        directory.chmod(0o700)
    created_at = datetime.now(UTC).isoformat()
    for index in range(count):
        run_id, transaction_id = "backlog-run", f"tx-{index}"
        record = {
            "version": "1",
            "entry_id": entry_id_of(run_id, transaction_id),
            "run_id": run_id,
            "transaction_id": transaction_id,
            "action": "complete",
            "result": {"index": index, "summary": "waiting in the backlog"},
            "error": "",
            "reopen": False,
            "state": "pending",
            "created_at": created_at,
            "attempts": 0,
            "last_attempt_at": None,
            "last_error": None,
        }
        data = json.dumps(
            record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
        path = pending / f"{record['entry_id']}.json"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(descriptor, data + b"\n")
        finally:
            os.close(descriptor)


# --- the measurements --------------------------------------------------------------


def measure(work: Path, records: int, backlog: int, repeats: int) -> dict[str, dict[str, float]]:
    probes = DiskProbes(work / "probes")
    try:
        stores = {
            name: module.CloseOutbox(state_dir=work / f"{name}-rates")
            for name, module in IMPLEMENTATIONS.items()
        }
        requests = {
            name: [request(module, index) for index in range(records)]
            for name, module in IMPLEMENTATIONS.items()
        }

        def enqueuer(name: str) -> Step:
            return lambda step: stores[name].enqueue(requests[name][step])

        enqueues = interleaved(
            {
                **{name: enqueuer(name) for name in IMPLEMENTATIONS},
                "fsync": probes.fsync,
                "publish": probes.publish,
            },
            records,
        )

        delivered = dict.fromkeys(IMPLEMENTATIONS, 0)

        def replayer(name: str) -> Step:
            def step(_: int) -> None:
                report = stores[name].replay(deliver_nothing, limit=REPLAY_BATCH)
                delivered[name] += report.delivered

            return step

        replays = interleaved(
            {name: replayer(name) for name in IMPLEMENTATIONS},
            -(-records // REPLAY_BATCH),
        )
        for name, count in delivered.items():
            if count != records:
                raise RuntimeError(f"{name} delivered {count} of {records}")

        for name in IMPLEMENTATIONS:
            write_backlog(work / f"{name}-backlog", backlog)
        os.sync()  # so writeback of the backlog does not land inside a timed call

        def backlog_replayer(name: str) -> Step:
            module = IMPLEMENTATIONS[name]

            def step(_: int) -> None:
                module.CloseOutbox(state_dir=work / f"{name}-backlog").replay(
                    deliver_nothing, limit=10
                )

            return step

        def backlog_counter(name: str) -> Step:
            return lambda _: outboxes[name].pending_count()

        backlog_replays = interleaved(
            {
                **{name: backlog_replayer(name) for name in IMPLEMENTATIONS},
                "fsync": probes.fsync,
            },
            repeats,
        )
        outboxes = {
            name: module.CloseOutbox(state_dir=work / f"{name}-backlog")
            for name, module in IMPLEMENTATIONS.items()
        }
        counts = interleaved({name: backlog_counter(name) for name in IMPLEMENTATIONS}, repeats)
        fsyncs_per_replay = {name: fsync_calls(backlog_replayer(name)) for name in IMPLEMENTATIONS}
    finally:
        probes.close()

    fsync_seconds = [*enqueues["fsync"], *backlog_replays["fsync"]]
    figures: dict[str, dict[str, float]] = {
        name: {
            "enqueue": records / sum(enqueues[name]),
            "replay": records / sum(replays[name]),
            "replay10": statistics.median(backlog_replays[name]),
            "count": statistics.median(counts[name]),
            "replay10-fsyncs": fsyncs_per_replay[name],
        }
        for name in IMPLEMENTATIONS
    }
    # What one replay(limit=10) costs beyond its fsyncs (listing, reading, encoding),
    # estimated with the median single fsync measured between those very calls.
    one_fsync = statistics.median(backlog_replays["fsync"])
    for name in IMPLEMENTATIONS:
        figures[name]["replay10-beyond-fsync"] = max(
            figures[name]["replay10"] - fsyncs_per_replay[name] * one_fsync, 0.0
        )
    figures["disk"] = {
        "fsync": len(fsync_seconds) / sum(fsync_seconds),
        "fsync-fastest": 1 / min(fsync_seconds),
        "fsync-slowest": 1 / max(fsync_seconds),
        "publish": records / sum(enqueues["publish"]),
    }
    return figures


# --- the report --------------------------------------------------------------------


@contextmanager
def work_directory(parent: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="bench-outbox-", dir=parent) as directory:
        yield Path(directory)


def filesystem_of(path: Path) -> str:
    best = ("", "unknown filesystem")
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                device, mount_point, kind = line.split()[:3]
                if str(path).startswith(mount_point) and len(mount_point) >= len(best[0]):
                    best = (mount_point, f"{kind} on {device}")
    except OSError:
        pass
    return best[1]


def at_least_the_reference(ratio: float) -> bool:
    return ratio >= 1.0


def at_most_a_fifth(ratio: float) -> bool:
    return ratio <= 0.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=400, help="intents enqueued and replayed")
    parser.add_argument("--backlog", type=int, default=10_000, help="pending records")
    parser.add_argument("--repeats", type=int, default=9, help="calls timed on the backlog")
    parser.add_argument("--dir", default="/tmp", help="parent of the temporary directory")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args()

    with work_directory(args.dir) as work:
        figures = measure(work, args.records, args.backlog, args.repeats)
        filesystem = filesystem_of(work)

    disk, ours, theirs = figures["disk"], figures["lifecycles"], figures["reference"]
    fsync_rate = disk["fsync"]
    print(
        f"outbox: {args.records} intents, backlog {args.backlog:,} pending, "
        f"{filesystem} ({args.dir}); contestants interleaved call by call"
    )
    print(
        f"raw fsync (write 64 B + fsync):                      {fsync_rate:7.0f} /s"
        f"   (single calls from {disk['fsync-slowest']:.0f} to {disk['fsync-fastest']:.0f} /s)"
    )
    print(f"durable file write (tmp, fsync, rename, dir fsync):  {disk['publish']:7.0f} /s")
    print()
    print(
        f"{'figure':<40}{'reference':>11}{'lifecycles':>11}{'ratio':>7}  {'target':<8}"
        f"{'result':<8}fsyncs' worth (ref / lc)"
    )
    rows: list[tuple[str, str, str, Callable[[float], bool] | None, bool | None]] = [
        ("enqueue per s", "enqueue", ">= 1.00", at_least_the_reference, True),
        ("replay deliveries per s", "replay", ">= 1.00", at_least_the_reference, True),
        (f"replay(limit=10), {args.backlog:,} pending, s", "replay10", "<= 0.20",
         at_most_a_fifth, False),
        ("  fsync calls in that one call", "replay10-fsyncs", "-", None, None),
        ("  its time beyond those fsyncs (est.), s", "replay10-beyond-fsync", "-", None, False),
        (f"pending_count(), {args.backlog:,} pending, s", "count", "-", None, False),
    ]  # fmt: skip
    failed = False
    for label, key, target, check, is_rate in rows:
        ratio = ours[key] / theirs[key]
        result = "" if check is None else ("PASS" if check(ratio) else "FAIL")
        failed = failed or result == "FAIL"
        if is_rate is None:  # a count, not a time
            values = f"{theirs[key]:>11.0f}{ours[key]:>11.0f}"
            worth = ""
        elif is_rate:
            values = f"{theirs[key]:>11.0f}{ours[key]:>11.0f}"
            worth = f"{fsync_rate / theirs[key]:.1f} / {fsync_rate / ours[key]:.1f} per call"
        else:
            values = f"{theirs[key]:>11.4f}{ours[key]:>11.4f}"
            worth = f"{theirs[key] * fsync_rate:.1f} / {ours[key] * fsync_rate:.1f}"
        print(f"{label:<40}{values}{ratio:>7.2f}  {target:<8}{result:<8}{worth}")
    print()
    print("ratio = lifecycles / reference; fsyncs' worth = time of one call / time of one fsync")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
