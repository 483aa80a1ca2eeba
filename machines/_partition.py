"""The checker's search split by initial record over processes, giving the serial result.

States reached from different initial records often never meet: the monitor's
``max_failures`` is written by no effect, so each notification's states are its own.
Then each initial record can be searched alone, in parallel, and the parts put together
are exactly the serial breadth-first search: the same states, numbered in the same order,
the same edges, counts, coverage and shortest traces. That holds when the parts share no
state, which is checked, never assumed: every state's abstraction key is computed here
and any key found in two parts gives up the split (as does a violation, a cut search or
anything unexpected), and the caller searches serially instead, so a finding is always
the serial search's own, with its shortest trace.

Why the numbering matches: with no state shared, every edge stays inside its part, so the
serial queue holds each part's states in that part's own order; breadth-first, it takes
them level by level, each level in the order of the parents that found them. The states
are renumbered so (:func:`_serial_order`).

The work is shared through a pipe of initial record numbers, largest last declared first
(the monitor's later records allow more failures, hence more states): this process and
``processes - 1`` forked ones each take the next number until none is left. A fork costs
a few milliseconds, so small searches gain little; results come back pickled.
"""

from __future__ import annotations

import mmap
import os
import pickle
import select
import signal
import struct
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import attrs

from lifecycles.machines import _exploration as _exploration
from lifecycles.machines._coverage import Coverage
from lifecycles.machines._exploration import (
    Exploration,
    ExplorationResult,
    Graph,
    Node,
    node_trace,
    search,
)

R = TypeVar("R")


@attrs.frozen
class Part:
    """One initial record searched alone: its number, the figures, the states and their
    edges, and the coverage as counts (a Coverage or a Graph holds what does not pickle)."""

    initial: int
    result: ExplorationResult
    nodes: list[Node[Any]]
    final: list[bool]
    edges: list[list[tuple[int, frozenset[str], bool]]]
    fires: list[int]  # per row, in table order
    attempts: int
    outcomes: dict[str, dict[bool, int]]


_FIGURES = struct.Struct("qqq")  # states, edges and depth found so far by one process


def explore_apart(
    exploration: Exploration[R], processes: int, *, keep_records: bool, keep_graph: bool,
    progress: Callable[[ExplorationResult], None] | None,
    moves_start_as: Exploration[R] | None,
) -> ExplorationResult | None:
    """The serial search's result, searched apart; ``None`` when it cannot be (see above)."""
    started = time.perf_counter()
    count = len(exploration.initial())
    if count < 2 or count > 4096 or not hasattr(os, "fork"):
        return None
    lifecycle = exploration.lifecycle
    for record in exploration.initial():  # a refused one: the serial search reports it
        try:
            lifecycle.create(record)
        except Exception:
            return None
    processes = min(processes, count)
    tasks_out, tasks_in = os.pipe()
    os.write(tasks_in, b"".join(struct.pack("i", n) for n in reversed(range(count))))
    os.close(tasks_in)
    shared = mmap.mmap(-1, _FIGURES.size * processes)
    children: list[tuple[int, int]] = []
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for slot in range(1, processes):
            out, into = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: search, send the parts back, exit at once
                os.close(out)
                _child(exploration, moves_start_as, tasks_out, into, shared, slot)
            os.close(into)
            children.append((pid, out))
        state = _Progress(lifecycle.name, progress, started, shared, processes)
        try:
            parts = _take(exploration, moves_start_as, tasks_out, state, None, 0)
        except Exception:  # the serial search raises it again, where the caller expects it
            return None
        while children:
            pid, out = children[0]
            payload = _read_all(out, state)
            os.waitpid(pid, 0)
            children.pop(0)
            received = pickle.loads(payload) if payload else None
            if received is None:
                return None
            parts.extend(received)
    finally:
        os.close(tasks_out)
        for pid, out in children:  # only on the way out early: stop them, then reap them
            os.kill(pid, signal.SIGKILL)
            os.close(out)
            os.waitpid(pid, 0)
    return _merged(exploration, parts, started, keep_records=keep_records,
                   keep_graph=keep_graph)


def _child(exploration: Exploration[Any], moves_start_as: Exploration[Any] | None,
           tasks: int, into: int, shared: mmap.mmap, slot: int) -> None:
    try:
        parts = _take(exploration, moves_start_as, tasks, None, shared, slot)
        payload = pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # anything: the parent searches serially instead
        payload = pickle.dumps(None)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(into, view):]
    finally:
        os._exit(0)


def _take(exploration: Exploration[Any], moves_start_as: Exploration[Any] | None, tasks: int,
          state: _Progress | None, shared: mmap.mmap | None, slot: int) -> list[Part]:
    """Search the initial records numbered in the pipe ``tasks``, one by one, until none
    is left (a read of 4 bytes from a pipe is atomic: each number goes to one process)."""
    parts: list[Part] = []
    states = edges = depth = 0

    def report(more_states: int, more_edges: int, deeper: int) -> None:
        figures = (states + more_states, edges + more_edges, max(depth, deeper))
        if shared is not None:
            _FIGURES.pack_into(shared, _FIGURES.size * slot, *figures)
        if state is not None:
            state.done(*figures)

    def during(so_far: ExplorationResult) -> None:
        report(so_far.states, so_far.edges, so_far.depth)

    while len(number := os.read(tasks, 4)) == 4:
        (initial,) = struct.unpack("i", number)
        result, nodes = search(exploration, keep_graph=True, moves_start_as=moves_start_as,
                               initial=[initial], progress=during)
        coverage, graph = result.coverage, result.graph
        assert coverage is not None and graph is not None
        fires = [coverage.row_fires.get(row, 0) for row in exploration.lifecycle.rows]
        part = Part(initial, result, nodes, graph.final, graph.edges, fires,
                    coverage.attempts, coverage.guard_outcomes)
        result.coverage, result.graph = None, None
        parts.append(part)
        states, edges = states + result.states, edges + result.edges
        depth = max(depth, result.depth)
        report(0, 0, 0)
        if result.violation is not None or result.truncated:
            break  # the serial search decides; no need to go on
    return parts


class _Progress:
    """The progress line of a split search: this process's figures and the children's."""

    def __init__(self, name: str, progress: Callable[[ExplorationResult], None] | None,
                 started: float, shared: mmap.mmap, processes: int) -> None:
        self.name, self.progress, self.started, self.shared = name, progress, started, shared
        self.processes, self.mine = processes, (0, 0, 0)
        self.report_at = started + _exploration.PROGRESS_AFTER

    def done(self, states: int, edges: int, depth: int) -> None:
        self.mine = (states, edges, depth)
        self.tick()

    def tick(self) -> None:
        now = time.perf_counter()
        if self.progress is None or now < self.report_at:
            return
        states, edges, depth = self.mine
        for slot in range(1, self.processes):
            more = _FIGURES.unpack_from(self.shared, _FIGURES.size * slot)
            states, edges, depth = states + more[0], edges + more[1], max(depth, more[2])
        self.progress(ExplorationResult(self.name, states=states, edges=edges, depth=depth,
                                        seconds=now - self.started))
        self.report_at = now + 1.0


def _read_all(out: int, state: _Progress) -> bytes:
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([out], [], [], 1.0)
            if not ready:
                state.tick()
                continue
            chunk = os.read(out, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(out)


def _serial_order(parts: list[Part]) -> list[tuple[int, int]]:
    """(part, state) pairs in the serial search's order: level by level from the initial
    records in their order, each level in the order of the parents that found it."""
    children: list[list[list[int]]] = []
    for part in parts:
        below: list[list[int]] = [[] for _ in part.nodes]
        for index, node in enumerate(part.nodes):
            if node.parent >= 0:
                below[node.parent].append(index)
        children.append(below)
    level = [(at, 0) for at in sorted(range(len(parts)), key=lambda at: parts[at].initial)]
    order: list[tuple[int, int]] = []
    while level:
        order.extend(level)
        level = [(at, child) for at, index in level for child in children[at][index]]
    return order


def _merged(exploration: Exploration[Any], parts: list[Part], started: float, *,
            keep_records: bool, keep_graph: bool) -> ExplorationResult | None:
    lifecycle, abstraction = exploration.lifecycle, exploration.abstraction
    if len(parts) != len(exploration.initial()) or any(
            part.result.violation is not None or part.result.truncated for part in parts):
        return None
    keys: set[Hashable] = set()
    for part in parts:
        keys.update(abstraction(node.record) for node in part.nodes)
    if len(keys) != sum(len(part.nodes) for part in parts):
        return None  # a state reached from two initial records: only the serial search
    order = _serial_order(parts)
    number = {place: index for index, place in enumerate(order)}
    nodes: list[Node[Any]] = []
    for at, index in order:
        node = parts[at].nodes[index]
        nodes.append(Node(node.record, number[(at, node.parent)] if node.parent >= 0 else -1,
                          node.step, node.depth, parts[at].initial))
    result = ExplorationResult(lifecycle.name, coverage=Coverage(lifecycle))
    coverage = result.coverage
    assert coverage is not None
    for part in parts:
        result.edges += part.result.edges
        result.refusals += part.result.refusals
        result.depth = max(result.depth, part.result.depth)
        result.statuses |= part.result.statuses
        coverage.add(dict(zip(lifecycle.rows, part.fires, strict=True)), part.attempts,
                     part.outcomes)
    result.states = len(nodes)
    if keep_graph:
        result.graph = Graph(
            final=[parts[at].final[index] for at, index in order],
            edges=[[(number[(at, target)], triggers, changed)
                    for target, triggers, changed in parts[at].edges[index]]
                   for at, index in order],
            trace_to=lambda index: node_trace(nodes, index))
    if keep_records:
        result.records = [node.record for node in nodes]
    result.seconds = time.perf_counter() - started
    return result
