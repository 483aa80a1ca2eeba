"""Where the checker's exploration of the monitor spends its time, and what that allows.

    python benchmarks/profile_checker.py [--rounds 3] [--high 8]

First the figures ``lifecycles check monitor`` prints, best of ``--rounds``: states/s and
edges/s of the search at the default bounds (max_failures 1..3) and at 1..``--high``.

Then the per-edge breakdown at 1..``--high``: the same work the search does, timed part
by part on the states it reached, with no observer attached unless the part is one:

* ``choices``: each move's ``choices(record)``, once per state and move;
* ``move``: a move's own code around ``fire`` (the monitor reads the receiver's response
  through ``parse_answer`` and its answer rules), per attempt;
* ``select_row``: the table dispatch (every guard of the row it tries), per fire;
* ``coverage``: the Coverage observer (every guard of every candidate row), per fire;
* ``apply_row``: the row's effect, the new record (changed fields validated), every
  invariant and every step invariant, per fired row; the invariants also alone;
* ``abstraction``: the state's key, per edge; ``fingerprint``: its hash, per edge;
* the rest of the search (queue, dedup, graph, traces): the total minus the parts.

The floor is the work that checks the code itself (the move, the dispatch and
``apply_row`` with its invariants): no search over these inputs can be faster, so
``1 / (floor per state)`` bounds states/s on one core. Not a ``bench_*`` file:
``run.py`` does not run it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from lifecycles.machines.exploration import Coverage, Exploration, explore
from lifecycles.machines.monitor_inputs import monitor_exploration


def attempt(step: Callable[..., Any], *args: Any) -> Any:
    """``step(*args)``, or ``None`` when it raises: refusals are part of the work timed."""
    try:
        return step(*args)
    except Exception:
        return None


def best(rounds: int, run: Callable[[], Any]) -> float:
    """The fastest of ``rounds`` runs, in seconds (the machine is shared and noisy)."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def figures(name: str, exploration: Exploration[Any], rounds: int) -> None:
    runs = []
    for _ in range(rounds):
        runs.append(explore(exploration, keep_graph=True))  # as `lifecycles check` runs it
    fastest = min(runs, key=lambda result: result.seconds)
    print(f"{name:<26} {fastest.states:>6} states {fastest.edges:>7} edges "
          f"{fastest.seconds:6.2f} s {fastest.states_per_second:>8,.0f} states/s "
          f"{fastest.edges / fastest.seconds:>9,.0f} edges/s")


def breakdown(exploration: Exploration[Any], rounds: int) -> None:
    lifecycle = exploration.lifecycle
    total = min((explore(exploration, keep_graph=True) for _ in range(rounds)),
                key=lambda result: result.seconds)
    records = explore(exploration, keep_records=True).records
    states, edges = total.states, total.edges

    # The work of the search, listed once: (move, record, choices) per state and move.
    work = []
    for record in records:
        status = str(lifecycle.status_of(record))
        for move in exploration.moves:
            if status in exploration.sources(move):
                work.append((move, record, list(move.choices(record))))
    attempts = [(move, record, choice) for move, record, choices in work for choice in choices]

    # Every fire the moves make, with its result: what the engine's parts are timed on.
    fires: list[tuple[str, Any, Any]] = []

    def recording(trigger: str, record: Any, inputs: Any) -> Any:
        fires.append((trigger, record, inputs))
        return lifecycle.fire(trigger, record, inputs)

    performed = [attempt(move.perform, recording, record, choice)
                 for move, record, choice in attempts]
    afters = [after for after in performed if after is not None]
    selected = [(attempt(lifecycle.select_row, trigger, record, inputs), record, inputs)
                for trigger, record, inputs in fires]
    rows = [(row, record, inputs) for row, record, inputs in selected if row is not None]
    applied = [(record, attempt(lifecycle.apply_row, row, record, inputs))
               for row, record, inputs in rows]
    made = [(record, after) for record, after in applied if after is not None]

    def all_choices() -> None:
        for move, record, _ in work:
            move.choices(record)

    def all_moves() -> None:
        for move, record, choice in attempts:
            attempt(move.perform, lifecycle.fire, record, choice)

    def all_fires() -> None:
        for trigger, record, inputs in fires:
            attempt(lifecycle.fire, trigger, record, inputs)

    def all_selects() -> None:
        for trigger, record, inputs in fires:
            attempt(lifecycle.select_row, trigger, record, inputs)

    coverage = Coverage(lifecycle)

    def all_coverage() -> None:
        for trigger, record, inputs in fires:
            coverage.attempted(lifecycle, trigger, record, inputs)

    def all_applies() -> None:
        for row, record, inputs in rows:
            attempt(lifecycle.apply_row, row, record, inputs)

    def all_invariants() -> None:
        for _, after in made:
            lifecycle.invariants.broken(after)

    def all_steps() -> None:
        for before, after in made:
            lifecycle.invariants.broken_steps(before, after)

    def all_abstractions() -> None:
        for after in afters:
            exploration.abstraction(after)

    keys = [exploration.abstraction(after) for after in afters]

    def all_fingerprints() -> None:
        for key in keys:
            hash(key)

    parts = {
        "choices": (best(rounds, all_choices), len(work), "per (state, move)"),
        "move (around fire)": (best(rounds, all_moves) - best(rounds, all_fires),
                               len(attempts), "per attempt"),
        "select_row": (best(rounds, all_selects), len(fires), "per fire"),
        "coverage observer": (best(rounds, all_coverage), len(fires), "per fire"),
        "apply_row": (best(rounds, all_applies), len(rows), "per fired row"),
        "  of which invariants": (best(rounds, all_invariants), len(made), "per new record"),
        "  of which step invariants": (best(rounds, all_steps), len(made), "per new record"),
        "abstraction": (best(rounds, all_abstractions), len(afters), "per edge"),
        "fingerprint (hash of key)": (best(rounds, all_fingerprints), len(keys), "per edge"),
    }
    counted = sum(seconds for name, (seconds, _, _) in parts.items() if not name.startswith(" "))
    print(f"\nper-edge breakdown, {exploration.bounds.split(';')[0]}: {states} states, "
          f"{edges} edges ({edges / states:.1f} per state), {len(attempts)} attempts "
          f"({len(attempts) / states:.1f} per state), {len(fires)} fires, "
          f"{total.seconds:.2f} s in all")
    print(f"  {'part':<28} {'µs each':>9} {'':<18} {'µs/state':>9} {'share':>6}")
    for name, (seconds, count, unit) in parts.items():
        print(f"  {name:<28} {seconds / count * 1e6:>9.2f} {unit:<18} "
              f"{seconds / states * 1e6:>9.1f} {seconds / total.seconds:>6.0%}")
    rest = total.seconds - counted
    print(f"  {'rest of the search':<28} {'':>9} {'':<18} {rest / states * 1e6:>9.1f} "
          f"{rest / total.seconds:>6.0%}")
    floor = best(rounds, all_moves)
    print(f"  floor (the moves themselves: their code, dispatch, apply_row with every "
          f"invariant): {floor / states * 1e6:.0f} µs/state -> at most "
          f"{states / floor:,.0f} states/s on one core; measured {states / total.seconds:,.0f}"
          f" (5,000 states/s needs <= 200 µs/state in all)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--high", type=int, default=8, help="max_failures 1..HIGH (default 8)")
    options = parser.parse_args()
    wide = monitor_exploration(max_failures=(1, options.high))
    figures("monitor (max_failures 1..3)", monitor_exploration(), options.rounds)
    figures(f"monitor (max_failures 1..{options.high})", wide, options.rounds)
    breakdown(wide, options.rounds)


if __name__ == "__main__":
    main()
