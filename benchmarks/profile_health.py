"""Where monitor health's time goes in SQLite: each rule alone, over every row.

    python benchmarks/profile_health.py [--rows 50000]

Fills a SQLite file with ``--rows`` valid items in every status (as bench_health.py
does), then times, best of 3, the engine's check with and without its re-verification
of the table's CHECK constraints, and one statement per rule that evaluates only that
rule's SQL form over every row, less the same statement with no rule (the cost of
reading the rows). Prints the rules by cost, and what health needs in all. Not a
``bench_*`` file: ``run.py`` does not run it; it explains bench_health.py's figure.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_health import T0, lifecycles_monitor, monitor_on

TABLE = "cms_source_terminal_processing"


def best_ms(call: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        monitor = monitor_on(Path(folder), lifecycles_monitor, args.rows)
        store, connection = monitor.store, monitor.connection
        queries = store.rule_queries()

        def rule_alone(sql: str) -> float:
            statement = f"SELECT sum(CASE WHEN {sql} THEN 0 ELSE 1 END) FROM {TABLE}"
            return best_ms(lambda: connection.execute(statement).fetchall())

        reading = rule_alone("1 = 1")
        costs = [(rule_alone(c.sql) - reading, f"{c.rule.name} ({c.field})")
                 for c in queries.field_checks if c.sql is not None]
        costs += [(rule_alone(c.sql) - reading, c.invariant.name)
                  for c in queries.invariant_checks if c.sql is not None]
        figures = {
            "quick_check": best_ms(store.integrity_problems),
            "quick_check without CHECK constraints": best_ms(
                lambda: store.integrity_problems(constraints=False)),
            "the aggregate statement (every rule, counts)": best_ms(
                lambda: store._fetch(queries.aggregate, (T0, T0))),
            "health()": best_ms(lambda: monitor.health(now=T0)),
        }
        connection.close()
    print(f"monitor health on SQLite, {args.rows:,} valid rows; ms, best of 3")
    for name, ms in figures.items():
        print(f"  {ms:8.1f}  {name}")
    print(f"  {reading:8.1f}  reading every row, no rule")
    print("each rule alone, beyond reading the rows:")
    for ms, name in sorted(costs, reverse=True):
        print(f"  {ms:8.1f}  {name}")
    print(f"  {sum(ms for ms, _ in costs):8.1f}  in all, one statement per rule")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
