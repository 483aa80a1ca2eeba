"""Outbox figures: lifecycles against the reference, beside the raw fsync rate, in one run.

    python benchmarks/bench_outbox.py [--records N] [--rounds R] [--backlog 10000]

Both implementations work on real directories in one temporary directory on the
filesystem of /tmp (`--dir` to choose another), with real fsync. Every durable store is
bound by the disk's fsync rate, so that rate is measured first, in the same run, and
each operation is also shown as "fsyncs' worth of time" per call.

- enqueue: distinct new intents into a fresh store, one call each;
- replay: deliveries per second, draining those intents with `replay(limit=100)`;
- `replay(limit=10)` with a backlog of pending records (10,000 by default): the time of
  one call on a freshly opened store (median of several), the reference lists and sorts
  the whole pending directory and lists it again to count what remains;
- `pending_count()` with the same backlog (no target; shown for the operator's view).

Targets (printed PASS/FAIL, never asserted in tests): enqueue and replay rates at least
the reference's; `replay(limit=10)` with the backlog at most a fifth of the reference's
time. The machine is shared and noisy: the implementations alternate round by round and
the medians are compared, so read the ratios rather than the absolute figures.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from outbox_support import entry_id_of
from reference import load_reference

import lifecycles.outbox as lifecycles_outbox

IMPLEMENTATIONS: dict[str, ModuleType] = {
    "reference": load_reference("close_outbox"),
    "lifecycles": lifecycles_outbox,
}


def timed(action: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """Seconds taken by `action(*args, **kwargs)` (arguments are prepared beforehand)."""
    started = time.perf_counter()
    action(*args, **kwargs)
    return time.perf_counter() - started


def deliver_nothing(request: Any) -> None:
    """A receiver that accepts every delivery at once."""


def request(module: ModuleType, index: int, run_id: str = "bench-run") -> Any:
    return module.CloseRequest(
        run_id=run_id,
        transaction_id=f"tx-{index}",
        action="complete",
        result={"index": index, "summary": "closed by the benchmark", "items": [1, 2, 3]},
    )


# --- the bound: what the disk allows -----------------------------------------------


def raw_fsync_rate(directory: Path, seconds: float) -> float:
    """write(64 bytes) + fsync on one file, as many as fit in `seconds`."""
    path = directory / "fsync-probe"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            os.write(descriptor, b"x" * 64)
            os.fsync(descriptor)
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        os.close(descriptor)
        path.unlink()


def atomic_file_write_rate(directory: Path, seconds: float) -> float:
    """One durable file publication: temp file, write, fsync, rename, directory fsync."""
    directory_descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            temporary = directory / f".probe-{count}.tmp"
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(descriptor, b"x" * 400)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(temporary, directory / f"probe-{count % 50}.json")
            os.fsync(directory_descriptor)
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        os.close(directory_descriptor)


# --- the outbox operations ---------------------------------------------------------


def enqueue_and_replay_rates(module: ModuleType, state_dir: Path, records: int) -> dict[str, float]:
    outbox = module.CloseOutbox(state_dir=state_dir)
    requests = [request(module, index) for index in range(records)]
    enqueue_seconds = timed(lambda: [outbox.enqueue(r) for r in requests])
    delivered = 0

    def drain() -> None:
        nonlocal delivered
        while True:
            report = outbox.replay(deliver_nothing, limit=100)
            delivered += report.delivered
            if report.remaining == 0:
                return

    replay_seconds = timed(drain)
    if delivered != records:
        raise RuntimeError(f"{module.__name__} delivered {delivered} of {records}")
    return {"enqueue": records / enqueue_seconds, "replay": records / replay_seconds}


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


def backlog_times(module: ModuleType, state_dir: Path, repeats: int) -> dict[str, float]:
    """Median seconds of one `replay(limit=10)` and one `pending_count()` on a store
    opened just before (so nothing is carried over from an earlier call)."""
    replays: list[float] = []
    counts: list[float] = []
    for _ in range(repeats):
        replays.append(
            timed(module.CloseOutbox(state_dir=state_dir).replay, deliver_nothing, limit=10)
        )
        counts.append(timed(module.CloseOutbox(state_dir=state_dir).pending_count))
    return {"replay10": statistics.median(replays), "count": statistics.median(counts)}


# --- the report --------------------------------------------------------------------


@contextmanager
def work_directory(parent: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="bench-outbox-", dir=parent) as directory:
        yield Path(directory)


def filesystem_of(path: Path) -> str:
    best = ("?", "?")
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


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300, help="intents per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    parser.add_argument("--backlog", type=int, default=10_000, help="pending records")
    parser.add_argument("--repeats", type=int, default=5, help="replay(limit=10) calls")
    parser.add_argument("--dir", default="/tmp", help="parent of the temporary directory")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args()

    with work_directory(args.dir) as work:
        fsync_rates: list[float] = []
        publish_rates: list[float] = []
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in IMPLEMENTATIONS}
        # Alternate the implementations so a burst of load on this shared machine hits both,
        # and probe the disk between them so the bound is measured under the same load.
        for round_number in range(args.rounds):
            fsync_rates.append(raw_fsync_rate(work, 0.5))
            publish_rates.append(atomic_file_write_rate(work, 0.5))
            for name, module in IMPLEMENTATIONS.items():
                state_dir = work / f"{name}-rates-{round_number}"
                rounds[name].append(enqueue_and_replay_rates(module, state_dir, args.records))
        for name in IMPLEMENTATIONS:
            write_backlog(work / f"{name}-backlog", args.backlog)
        os.sync()  # so writeback of the backlog does not land inside a timed call
        backlog: dict[str, list[dict[str, float]]] = {name: [] for name in IMPLEMENTATIONS}
        for _ in range(2):
            fsync_rates.append(raw_fsync_rate(work, 0.5))
            for name, module in IMPLEMENTATIONS.items():
                backlog[name].append(backlog_times(module, work / f"{name}-backlog", args.repeats))
        filesystem = filesystem_of(work)
    fsync_rate = statistics.median(fsync_rates)
    publish_rate = statistics.median(publish_rates)

    figures = {
        name: {
            "enqueue": statistics.median(r["enqueue"] for r in rounds[name]),
            "replay": statistics.median(r["replay"] for r in rounds[name]),
            "replay10": statistics.median(b["replay10"] for b in backlog[name]),
            "count": statistics.median(b["count"] for b in backlog[name]),
        }
        for name in IMPLEMENTATIONS
    }
    ours, theirs = figures["lifecycles"], figures["reference"]
    print(
        f"outbox: {args.rounds} alternating rounds of {args.records} intents, medians; "
        f"backlog {args.backlog:,} pending; {filesystem} ({args.dir})"
    )
    print(
        f"raw fsync (write 64 B + fsync), median of probes:  {fsync_rate:8.0f} /s  "
        f"(min {min(fsync_rates):.0f}, max {max(fsync_rates):.0f})"
    )
    print(f"durable file write (tmp, fsync, rename, dir fsync):  {publish_rate:6.0f} /s")
    print()
    header = f"{'figure':<38}{'reference':>11}{'lifecycles':>11}{'ratio':>8}  {'target':<10}"
    print(header + " result   fsyncs' worth (ref / lc)")
    rows: list[tuple[str, str, str, Callable[[float], bool] | None, bool]] = [
        ("enqueue per s", "enqueue", ">= 1.00", at_least_the_reference, True),
        ("replay deliveries per s", "replay", ">= 1.00", at_least_the_reference, True),
        (
            f"replay(limit=10), {args.backlog:,} pending, s",
            "replay10",
            "<= 0.20",
            at_most_a_fifth,
            False,
        ),
        (f"pending_count(), {args.backlog:,} pending, s", "count", "-", None, False),
    ]
    failed = False
    for label, key, target, check, is_rate in rows:
        ratio = ours[key] / theirs[key]
        result = "" if check is None else verdict(check(ratio))
        failed = failed or result == "FAIL"
        if is_rate:
            worth = f"{fsync_rate / theirs[key]:.1f} / {fsync_rate / ours[key]:.1f} per call"
            values = f"{theirs[key]:>11.0f}{ours[key]:>11.0f}"
        else:
            worth = f"{theirs[key] * fsync_rate:.0f} / {ours[key] * fsync_rate:.0f}"
            values = f"{theirs[key]:>11.4f}{ours[key]:>11.4f}"
        print(f"{label:<38}{values}{ratio:>8.2f}  {target:<10} {result:<8} {worth}")
    print()
    print("ratio = lifecycles / reference; fsyncs' worth = the call's time in raw fsyncs")
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
