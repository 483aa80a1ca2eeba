"""Claim latency against the number of due items: flat claims (issue 12).

    python benchmarks/bench_claims.py [--claims N] [--million]

One ``claim`` call of each monitor, the median of N, on a SQLite file on disk (default
synchronous=FULL: every claim commits durably), with 1k, 10k and 100k due items (and
1M with ``--million``): lifecycles (which walks its partial claim-order index), the
reference (which sorts every due item through its lease-order index) and a raw claim in
index order (one SELECT through the claim-order index and one UPDATE, no checks). The
items are written straight into each file with ``executemany`` in one transaction.
Target: lifecycles' claim at 100k due items takes at most 2x its time at 1k.

Then the steady state: 1k and 100k watched items first in claim order, none due, and
200 due behind them. A walk of the claim order passes every watched item (the raw
claim shows it); lifecycles bounds its walk and then asks the due-time range. Same
target: 100k watched items cost at most 2x what 1k cost.

Last, a large fleet: 1k and 100k items leased by other workers, none expired, and 200
due. Before each claim both monitors ask whether a lease has expired; lifecycles reads
its partial index of the leases by expiry, where the lease-order index holds every
leased item. Same target: 100k leases held cost at most 2x what 1k cost.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The figures compare with the reference components: by default those beside the clone.
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from support.monitor import CAPABILITIES
from support.reference import load_reference

import lifecycles.monitor as lifecycles_monitor
from lifecycles.machines import lease
from lifecycles.machines.monitor import MONITOR

reference = load_reference("terminal_processing_monitor")
TABLE = "cms_source_terminal_processing"
TARGET = 2.0  # at most this many times the 1k latency at 100k


def fill(connection: sqlite3.Connection, items: int) -> None:
    """``items`` pending items, all due, created one millisecond apart."""
    connection.execute("BEGIN")  # the connection autocommits: one transaction, by hand
    connection.executemany(
        f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
        " notification_sha256, status, poll_attempts, failures, max_failures,"
        " next_poll_at, created_at, updated_at)"
        " VALUES (?, ?, 'site-1', 'published', ?, 'pending', 0, 0, 5, ?, ?, ?)",
        (
            (f"e{i:08d}", f"n{i:08d}", "a" * 64, i / 1000, i / 1000, i / 1000)
            for i in range(items)
        ),
    )
    connection.execute("COMMIT")


WAITING_DUE = 200  # due items behind the watched ones, in the steady-state table


def fill_waiting(connection: sqlite3.Connection, waiting: int) -> None:
    """``waiting`` watched items first in claim order, none due yet (their next poll is far
    off: a monitor's steady state), then ``WAITING_DUE`` pending items that are due."""
    connection.execute("BEGIN")
    connection.executemany(
        f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
        " notification_sha256, status, poll_attempts, failures, max_failures, next_poll_at,"
        " receiver_status, receiver_attempts, receiver_max_attempts, receiver_next_attempt_at,"
        " receiver_lease_expired, created_at, updated_at)"
        " VALUES (?, ?, 'site-1', 'published', ?, ?, ?, 0, 5, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            *((f"w{i:08d}", f"nw{i:08d}", "a" * 64, "watching", 1, 1e9, "pending", 0, 5, 10.0,
               0, i / 1000, i / 1000) for i in range(waiting)),
            *((f"p{i:08d}", f"np{i:08d}", "a" * 64, "pending", 0, 1e6 + i, None, None, None,
               None, None, 1e6 + i, 1e6 + i) for i in range(WAITING_DUE)),
        ],
    )
    connection.execute("COMMIT")


def fill_held(connection: sqlite3.Connection, held: int) -> None:
    """``held`` items leased by other workers, none expired (a large fleet's steady state),
    then ``WAITING_DUE`` pending items that are due."""
    connection.execute("BEGIN")
    connection.executemany(
        f"INSERT INTO {TABLE} (event_id, notification_id, site_id, terminal_status,"
        " notification_sha256, status, poll_attempts, failures, max_failures, next_poll_at,"
        " lease_owner, lease_token, lease_expires_at, created_at, updated_at)"
        " VALUES (?, ?, 'site-1', 'published', ?, ?, ?, 0, 5, ?, ?, ?, ?, ?, ?)",
        [
            *((f"l{i:08d}", f"nl{i:08d}", "a" * 64, "leased", 1, i / 1000, f"w{i % 64}",
               f"t{i:08d}", 1e9, i / 1000, i / 1000) for i in range(held)),
            *((f"p{i:08d}", f"np{i:08d}", "a" * 64, "pending", 0, 1e6 + i, None, None, None,
               1e6 + i, 1e6 + i) for i in range(WAITING_DUE)),
        ],
    )
    connection.execute("COMMIT")


def raw_claimer(connection: sqlite3.Connection) -> Callable[[float], Any]:
    """A claim in index order with nothing around it: the floor for the other two."""
    claimable = ", ".join(f"'{status}'" for status in lease.claimable_statuses(MONITOR))
    order = ", ".join(MONITOR.lease.order_by) if MONITOR.lease else ""
    select = (
        f"SELECT event_id FROM {TABLE} INDEXED BY {TABLE}_claim_order"
        f" WHERE status IN ({claimable}) AND next_poll_at <= ? ORDER BY {order} LIMIT 1"
    )
    update = (
        f"UPDATE {TABLE} SET status = 'leased', lease_owner = 'w', lease_token = ?,"
        " lease_expires_at = ?, poll_attempts = poll_attempts + 1, updated_at = ?"
        " WHERE event_id = ?"
    )

    def claim(now: float) -> Any:
        connection.execute("BEGIN IMMEDIATE")
        row = connection.execute(select, (now,)).fetchone()
        connection.execute(update, (f"t{now}", now + 600, now, row[0]))
        connection.commit()
        return row

    return claim


def median_ms(claim: Callable[[float], Any], claims: int, now: float) -> float:
    for warm in range(3):
        assert claim(now + warm) is not None
    times = []
    for n in range(claims):
        started = time.perf_counter()
        found = claim(now + 3 + n)
        times.append(time.perf_counter() - started)
        assert found is not None
    return statistics.median(times) * 1000


def measure_table(
    path_of: Callable[[str], Path], fill_table: Callable[[sqlite3.Connection], None],
    now: float, claims: int,
) -> dict[str, float]:
    """Median claim latency of each monitor (and the raw claim on lifecycles' file) on a
    table ``fill_table`` writes, every claim at or after ``now``."""
    figures: dict[str, float] = {}
    for name, module in (("lifecycles", lifecycles_monitor), ("reference", reference)):
        connection = sqlite3.connect(path_of(name), isolation_level=None)
        monitor = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        fill_table(connection)
        figures[name] = median_ms(
            lambda at, m=monitor: m.claim("w1", now=at, lease_seconds=600), claims, now
        )
        if name == "lifecycles":  # the same file, through the same index, bare
            connection.row_factory = None
            figures["raw"] = median_ms(raw_claimer(connection), claims, now + claims + 10)
        connection.close()
    return figures


def measure(directory: Path, items: int, claims: int) -> dict[str, float]:
    return measure_table(  # every item is due
        lambda name: directory / f"{name}-{items}.db",
        lambda connection: fill(connection, items), items / 1000 + 1.0, claims,
    )


def measure_waiting(directory: Path, waiting: int, claims: int) -> dict[str, float]:
    return measure_table(  # the watched items' next poll is far off; the pending ones are due
        lambda name: directory / f"{name}-w{waiting}.db",
        lambda connection: fill_waiting(connection, waiting), 2e6, claims // 2,
    )


def measure_held(directory: Path, held: int, claims: int) -> dict[str, float]:
    return measure_table(  # the leases expire far off; the pending items are due
        lambda name: directory / f"{name}-l{held}.db",
        lambda connection: fill_held(connection, held), 2e6, claims // 2,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=25, help="claims timed per figure")
    parser.add_argument("--million", action="store_true", help="also 1M due items")
    args = parser.parse_args()
    sizes = [1_000, 10_000, 100_000, *([1_000_000] if args.million else [])]
    rows: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for items in sizes:
            rows[items] = measure(Path(directory), items, args.claims)
    print(f"claims: median of {args.claims} claim calls (ms), SQLite file on disk, all items due")
    print(f"{'due items':>10}{'lifecycles':>12}{'reference':>12}{'raw index':>12}")
    for items, figures in rows.items():
        print(
            f"{items:>10,}{figures['lifecycles']:>12.3f}{figures['reference']:>12.3f}"
            f"{figures['raw']:>12.3f}"
        )
    names = ("lifecycles", "reference", "raw")
    for label, size in (("100k/1k", 100_000), ("1M/1k", 1_000_000)):
        if size in rows:
            ratio = "".join(f"{rows[size][n] / rows[1_000][n]:>12.2f}" for n in names)
            print(f"{label:>10}{ratio}")
    ratios = {name: rows[100_000][name] / rows[1_000][name] for name in names}
    verdict = "PASS" if ratios["lifecycles"] <= TARGET else "FAIL"
    print(f"target: lifecycles' claim at 100k due items <= {TARGET:g}x its 1k time: "
          f"{ratios['lifecycles']:.2f}x {verdict}")
    with tempfile.TemporaryDirectory() as directory:
        waiting = {n: measure_waiting(Path(directory), n, args.claims)
                   for n in (1_000, 100_000)}
    print(f"steady state: claims (ms) with N watched items ahead in claim order, none due,"
          f" then {WAITING_DUE} due (raw: the unbounded walk of the claim-order index)")
    print(f"{'watched':>10}{'lifecycles':>12}{'reference':>12}{'raw index':>12}")
    for count, figures in waiting.items():
        print(f"{count:>10,}" + "".join(f"{figures[n]:>12.3f}" for n in names))
    steady = waiting[100_000]["lifecycles"] / waiting[1_000]["lifecycles"]
    verdict = "PASS" if steady <= TARGET else "FAIL"
    print(f"target: with 100k watched items ahead <= {TARGET:g}x its time with 1k: "
          f"{steady:.2f}x {verdict}")
    with tempfile.TemporaryDirectory() as directory:
        held = {n: measure_held(Path(directory), n, args.claims) for n in (1_000, 100_000)}
    print(f"leases held: claims (ms) with N items leased by other workers, none expired, and"
          f" {WAITING_DUE} due (a claim first asks whether any lease has expired; raw asks not)")
    print(f"{'leased':>10}{'lifecycles':>12}{'reference':>12}{'raw index':>12}")
    for count, figures in held.items():
        print(f"{count:>10,}" + "".join(f"{figures[n]:>12.3f}" for n in names))
    steady = held[100_000]["lifecycles"] / held[1_000]["lifecycles"]
    verdict = "PASS" if steady <= TARGET else "FAIL"
    print(f"target: with 100k leases held <= {TARGET:g}x its time with 1k: "
          f"{steady:.2f}x {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
