"""Where the checker's exploration of the monitor spends its time, and what that allows.

    python benchmarks/profile_checker.py [--rounds 3] [--high 8]

First the figures ``lifecycles check monitor`` prints, best of ``--rounds``: states/s and
edges/s of the search at the default bounds (max_failures 1..3) and at 1..``--high``.

Then the per-edge breakdown at 1..``--high``: the same work the search does, timed part
by part on the states it reached, with no observer attached unless the part is one. The
search fires each (trigger, inputs) once per state (:class:`~lifecycles.machines._memo.
Repeats`): the engine's parts are timed on those distinct fires, as the search runs them.

* ``choices``: each move's ``choices(record)`` (memoized), once per state and move;
* ``moves``: every attempt as the search makes it (per state a Repeats fire, the search's
  observer attached: its Coverage), per attempt; of which:
  * ``select_row``: the table dispatch on the guard outcomes coverage hands it (as in the
    search: it runs no guard itself), per distinct fire;
  * ``coverage``: the Coverage observer (every guard of every candidate row), per fire,
    repeats included (the observers see them);
  * ``apply_row``: the row's effect, the new record (changed fields validated), every
    invariant and every step invariant, per distinct fired row; the invariants also alone;
  * ``move around fire``: the rest, the move's own code (the monitor's cached answers and
    steps, its expectations), the repeats' lookups, refusals;
* ``abstraction``: the state's key, per edge; ``fingerprint``: its hash, per edge;
* the rest of the search (queue, dedup, graph, traces): the total minus the parts.

The floor is ``moves``, the work that checks the code itself: no search over these inputs
can be faster, so ``1 / (floor per state)`` bounds states/s on one core. Not a
``bench_*`` file: ``run.py`` does not run it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from lifecycles.machines._coverage import Coverage
from lifecycles.machines._exhaustive import explore
from lifecycles.machines._exploration import Exploration, _Fired
from lifecycles.machines._memo import Repeats
from lifecycles.machines.monitor.inputs import monitor_exploration


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
    by_state: dict[int, list[tuple[Any, Any, Any]]] = {}
    for move, record, choices in work:
        by_state.setdefault(id(record), []).extend((move, record, c) for c in choices)
    attempts = [attempt for listed in by_state.values() for attempt in listed]

    # Every fire the moves make, and the distinct ones the engine runs (Repeats).
    fires: list[tuple[str, Any, Any]] = []
    distinct: list[tuple[str, Any, Any]] = []

    class Recording:
        def __init__(self) -> None:
            self.seen: set[int] = set()

        def fire(self, trigger: str, record: Any, inputs: Any) -> Any:
            fires.append((trigger, record, inputs))
            if id(inputs) not in self.seen:
                self.seen.add(id(inputs))
                distinct.append((trigger, record, inputs))
            return lifecycle.fire(trigger, record, inputs)

    afters = []
    for listed in by_state.values():
        recording = Recording()
        for move, record, choice in listed:
            afters.append(attempt(move.perform, recording.fire, record, choice))
    afters = [after for after in afters if after is not None]
    selected = [(attempt(lifecycle.select_row, trigger, record, inputs), record, inputs)
                for trigger, record, inputs in distinct]
    rows = [(row, record, inputs) for row, record, inputs in selected if row is not None]
    applied = [(record, attempt(lifecycle.apply_row, row, record, inputs))
               for row, record, inputs in rows]
    made = [(record, after) for record, after in applied if after is not None]

    def all_choices() -> None:
        for move, record, _ in work:
            move.choices(record)

    def all_moves() -> None:
        fired = _Fired(lifecycle)  # the search's own observer, its coverage
        repeats = Repeats(lifecycle, fired)
        with lifecycle.observing(fired):
            for listed in by_state.values():
                repeats.start(listed[0][1])
                for move, record, choice in listed:
                    attempt(move.perform, repeats.fire, record, choice)

    coverage = Coverage(lifecycle)
    tolds = [coverage.attempted(lifecycle, *fire) for fire in distinct]

    class Told:  # hands select_row the outcomes coverage found, as the search's observer
        told: int | None = None

        def attempted(self, *args: Any) -> int | None:
            return self.told

        def fired(self, *args: Any) -> None:
            pass

    def all_selects() -> None:
        told = Told()
        with lifecycle.observing(told):
            for (trigger, record, inputs), told.told in zip(distinct, tolds, strict=True):
                attempt(lifecycle.select_row, trigger, record, inputs)


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

    moves = best(rounds, all_moves)
    engine = {
        "  select_row": (best(rounds, all_selects), len(distinct), "per distinct fire"),
        "  coverage observer": (best(rounds, all_coverage), len(fires), "per fire"),
        "  apply_row": (best(rounds, all_applies), len(rows), "per fired row"),
    }
    parts = {
        "choices": (best(rounds, all_choices), len(work), "per (state, move)"),
        "moves": (moves, len(attempts), "per attempt"),
        **engine,
        "    of which invariants": (best(rounds, all_invariants), len(made), "per new record"),
        "    of which step invariants": (best(rounds, all_steps), len(made),
                                         "per new record"),
        "  move around fire": (moves - sum(seconds for seconds, _, _ in engine.values()),
                               len(attempts), "per attempt"),
        "abstraction": (best(rounds, all_abstractions), len(afters), "per edge"),
        "fingerprint (hash of key)": (best(rounds, all_fingerprints), len(keys), "per edge"),
    }
    counted = sum(seconds for name, (seconds, _, _) in parts.items() if not name.startswith(" "))
    print(f"\nper-edge breakdown, {exploration.bounds.split(';')[0]}: {states} states, "
          f"{edges} edges ({edges / states:.1f} per state), {len(attempts)} attempts "
          f"({len(attempts) / states:.1f} per state), {len(fires)} fires of which "
          f"{len(distinct)} distinct, {total.seconds:.2f} s in all")
    print(f"  {'part':<30} {'µs each':>9} {'':<18} {'µs/state':>9} {'share':>6}")
    for name, (seconds, count, unit) in parts.items():
        print(f"  {name:<30} {seconds / count * 1e6:>9.2f} {unit:<18} "
              f"{seconds / states * 1e6:>9.1f} {seconds / total.seconds:>6.0%}")
    rest = total.seconds - counted
    print(f"  {'rest of the search':<30} {'':>9} {'':<18} {rest / states * 1e6:>9.1f} "
          f"{rest / total.seconds:>6.0%}")
    print(f"  floor (the moves: their code, dispatch, coverage, apply_row with every "
          f"invariant): {moves / states * 1e6:.0f} µs/state -> at most "
          f"{states / moves:,.0f} states/s on one core; measured {states / total.seconds:,.0f}"
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
