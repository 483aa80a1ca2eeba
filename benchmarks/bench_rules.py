"""Per-record cost of the monitor's rules in Python, compiled from their expressions.

    python benchmarks/bench_rules.py [--number N]

Every read makes a record of a stored row (built: its field rules; then checked: every
invariant), every write checks the invariants: microseconds per record, the best of 7
runs of N records each, on valid records in every status. Beside them, the reference's
own row check (``_validated_row``, one boolean of about forty clauses) on the same rows,
as a yardstick. No target: the rules' Python form must stay as fast as the hand-written
predicates it replaced (measured when it did, same machine and records: build + check 12.76 ->
10.33 us, field rules 8.92 -> 8.66 us, invariants 2.99 -> 1.40 us). A store builds a
record read with generated code (``Lifecycle.build``: the same conversions and field
rules in the same order, without a call per validator); the class's own ``__init__``
is shown beside it, and the invariants are asked as one conjunction first.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault(
    "LIFECYCLES_SEEDS", str(Path(__file__).resolve().parents[2] / "shared" / "seeds")
)

from support.monitor import records_in_every_status
from support.reference import load_reference

from lifecycles.invariants._core import build_record
from lifecycles.invariants.monitor import MONITOR_INVARIANTS, STATE_INVALID, MonitorRecord
from lifecycles.machines.monitor import MONITOR

RECORDS = records_in_every_status()
ROWS = [
    {name: str(value) if name == "status" else value for name, value in attrs.asdict(r).items()}
    for r in RECORDS
]


def build_and_check() -> None:
    for values in ROWS:
        MONITOR_INVARIANTS.check(build_record(MONITOR.build, values, STATE_INVALID))


def build() -> None:
    for values in ROWS:
        build_record(MONITOR.build, values, STATE_INVALID)


def build_by_the_class() -> None:
    for values in ROWS:
        build_record(MonitorRecord, values, STATE_INVALID)


def check() -> None:
    for record in RECORDS:
        MONITOR_INVARIANTS.check(record)


def microseconds(call: Callable[[], None], number: int) -> float:
    best = min(timeit.repeat(call, number=number, repeat=7))
    return best / number / len(ROWS) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=5_000, help="runs over the records")
    args = parser.parse_args()
    figures = {
        "build + check (a read)": microseconds(build_and_check, args.number),
        "build (field rules)": microseconds(build, args.number),
        "  by the class's __init__": microseconds(build_by_the_class, args.number),
        "invariants": microseconds(check, args.number),
    }
    reference = load_reference("terminal_processing_monitor")
    validated = reference.DurableTerminalProcessingMonitor._validated_row

    def yardstick() -> None:
        for values in ROWS:
            validated(values)

    figures["reference _validated_row"] = microseconds(yardstick, args.number)
    print(f"rules in Python: us per record, best of 7 x {args.number} x {len(ROWS)} records")
    for name, value in figures.items():
        print(f"{name:>28} {value:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
