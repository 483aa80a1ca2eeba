"""Exploration inputs, declared beside a table, and the exhaustive bounded search over them.

A lifecycle's transitions are pure functions, so the framework can enumerate them.
Beside its table a lifecycle declares an :class:`Exploration`:

* ``initial``: the records the search starts from (e.g. one per ``max_failures``);
* ``moves``: the kinds of step a caller can take, each a :class:`Move` with a finite
  list of inputs for the checker (which may depend on the record: "just before its
  next poll") and, optionally, a Hypothesis strategy for the generated tests;
* ``abstraction``: what makes two records the same state for the search (absolute
  times become their relation to the record's clock, lease tokens their presence...),
  documented in ``abstraction_doc``;
* ``bounds``: a sentence saying what is explored, printed with the figures.

:func:`explore` is a breadth-first search over ``lifecycle.fire`` alone (no store, no
clock, no I/O). Every record it reaches is checked against every invariant; the first
violation comes with the shortest trace from an initial record, because the search is
breadth-first. It also counts how often each table row fired and which statuses were
reached, so the checker can refuse a table with dead rows. It walks records, not the
table's statuses (that is :mod:`lifecycles.machines._graph`), and reads its traces back
with the same :func:`~lifecycles.machines._graph.trace_back`.

Nothing here imports Hypothesis: strategies are callables that import it themselves,
so a production install never needs it. A declaration may name strategies that live in
test code (:func:`strategy_in`): they are imported only when a generated test draws.
"""

from __future__ import annotations

import gc
import importlib
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs

from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._coverage import Coverage as Coverage  # defined there, read from here
from lifecycles.machines._declaration import Row, TransitionRefused
from lifecycles.machines._graph import trace_back
from lifecycles.machines._memo import Repeats

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from lifecycles.machines._interleaving import Workers
    from lifecycles.machines._mutants import EquivalentMutant

R = TypeVar("R")
C = TypeVar("C")

Fire = Callable[[str, Any, Any], Any]
"""``fire(trigger, record, inputs) -> record``: the pure ``lifecycle.fire`` or a store's."""


@attrs.frozen
class Move(Generic[R, C]):
    """One kind of step: which triggers it may fire, with what inputs, and how.

    ``run(fire, record, choice)`` performs the step through ``fire`` so the checker
    (pure) and the generated tests (through a store) run the very same code. A move
    that fires one trigger with its inputs as they are needs no ``run`` (see
    :func:`trigger_move`). ``choices(record)`` lists the checker's inputs from that
    record; ``strategy(record)`` draws the generated tests' inputs (defaults to the
    choices). ``describe(record, choice)`` is how traces print a choice.
    """

    name: str
    triggers: tuple[str, ...]
    choices: Callable[[R], Sequence[C]]
    run: Callable[[Fire, R, C], R]
    strategy: Callable[[R], SearchStrategy[C]] | None = None
    describe: Callable[[R, C], str] | None = None
    meaning: str = ""

    def perform(self, fire: Fire, record: R, choice: C) -> R:
        return self.run(fire, record, choice)

    def describe_choice(self, record: R, choice: C) -> str:
        return self.describe(record, choice) if self.describe else repr(choice)

    def draw_from(self, record: R) -> SearchStrategy[C]:
        """The Hypothesis strategy for this move's inputs from ``record``.

        Without a declared strategy: the first choice half of the time (declare the
        move's typical case first, so generated runs go deep), any choice otherwise.
        """
        if self.strategy is not None:
            return self.strategy(record)
        from hypothesis import strategies as st

        listed = list(self.choices(record))
        return st.one_of(st.just(listed[0]), st.sampled_from(listed))


class ExpectationBroken(InvariantViolation):
    """A move's declared expectation about its own step broke: a step the exploration
    says must be accepted was refused, or one ended elsewhere than declared (the checker
    reports it as any broken rule, with the shortest trace)."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__("lifecycles.expectation_broken", [rule])
        self.detail = detail

    def __str__(self) -> str:
        return f"{super().__str__()}: {self.detail}"


def trigger_move(
    trigger: str,
    choices: Callable[[R], Sequence[Any]],
    *,
    strategy: Callable[[R], SearchStrategy[Any]] | None = None,
    describe: Callable[[R, Any], str] | None = None,
    name: str | None = None,
    meaning: str = "",
) -> Move[R, Any]:
    """A move that fires ``trigger`` with each choice as the lifecycle's inputs."""

    def run(fire: Fire, record: R, inputs: Any) -> R:
        result: R = fire(trigger, record, inputs)
        return result

    return Move(
        name=name or trigger, triggers=(trigger,), choices=choices, run=run,
        strategy=strategy, describe=describe, meaning=meaning or f"fire {trigger}",
    )


def strategy_in(module: str, name: str) -> Callable[..., SearchStrategy[Any]]:
    """The strategy function ``name`` of ``module``, imported when it is first called.

    For a :class:`Move`'s ``strategy`` or an :class:`Exploration`'s ``new_records``
    declared beside a table whose strategies are test code: the declaration names them
    without importing that code, or Hypothesis, until a generated test draws.
    """

    def strategy(*args: Any) -> SearchStrategy[Any]:
        declared: Callable[..., SearchStrategy[Any]] = getattr(
            importlib.import_module(module), name
        )
        return declared(*args)

    strategy.__name__ = strategy.__qualname__ = name
    return strategy


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


@attrs.frozen
class AcceptedCycle:
    """A cycle of a lifecycle that may go on for ever without reaching a final status,
    declared beside its table: the triggers it is made of, and why it is intended (the
    liveness check accepts a cycle whose rows all fire these triggers, and prints why)."""

    triggers: frozenset[str] = attrs.field(converter=_names)
    reason: str


@attrs.frozen
class Exploration(Generic[R]):
    """Everything the checker and the generated tests need to drive one lifecycle."""

    lifecycle: Lifecycle[R, Any]
    initial: Callable[[], Sequence[R]]
    moves: tuple[Move[R, Any], ...]
    abstraction: Callable[[R], Hashable]
    abstraction_doc: str
    bounds: str
    new_records: Callable[[], SearchStrategy[R]] | None = None
    #: For a leased lifecycle: the inputs of a claim made through the lease protocol
    #: (``Store.claim``/``claim_many``) at ``now`` by a worker with lease ``token``; the
    #: generated tests then run the protocol itself on the store, against the memory
    #: store's answers.
    lease_inputs: Callable[[float, str], Any] | None = None
    max_depth: int = 100
    max_states: int = 500_000
    #: Cycles without a final status that are intended (see :mod:`..liveness`).
    accepted_cycles: tuple[AcceptedCycle, ...] = ()
    #: Bounds the command line may change (``lifecycles check --bound NAME=LOW..HIGH``):
    #: each one's (low, high) here, and ``rebound`` builds the exploration for others.
    tunable: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    rebound: Callable[[Mapping[str, tuple[int, int]]], Exploration[R]] | None = None
    #: For a leased lifecycle: its workers, explored interleaved on the lease protocol
    #: (:mod:`lifecycles.machines._interleaving`).
    workers: Workers[R] | None = None
    #: Table mutants declared harmless, with why (``lifecycles check --mutants``).
    equivalent_mutants: tuple[EquivalentMutant, ...] = ()
    #: Why a search cut at ``max_depth``/``max_states`` (or the workers' ``max_states``)
    #: is enough. Without it, a cut search fails ``lifecycles check``: what lies past the
    #: bound (liveness, rows never fired, the states not reached) was never checked.
    incomplete_ok: str | None = None

    def sources(self, move: Move[R, Any]) -> frozenset[str]:
        """Statuses ``move`` may start from: the sources of its triggers in the table."""
        return frozenset(
            str(status) for trigger in move.triggers for status in self.lifecycle.sources(trigger)
        )

    def move(self, name: str) -> Move[R, Any]:
        for candidate in self.moves:
            if candidate.name == name:
                return candidate
        raise KeyError(f"{self.lifecycle.name} declares no move {name!r}")

    def new_record_strategy(self) -> SearchStrategy[R]:
        """Records the generated tests create (defaults to the initial records)."""
        if self.new_records is not None:
            return self.new_records()
        from hypothesis import strategies as st

        return st.sampled_from(list(self.initial()))


def time_relation(value: float | None, clock: float) -> str:
    """An absolute time as the abstraction keeps it: ``-`` (none), before, at or after clock."""
    if value is None:
        return "-"
    if value < clock:
        return "before"
    return "at" if value == clock else "after"


# --- the search ----------------------------------------------------------------


@attrs.frozen
class Step:
    """One step of a trace: the move, the index of its choice, and how it reads."""

    move: str
    choice: int
    description: str


@attrs.frozen
class Violation:
    """What went wrong in a reached state, and the shortest way there."""

    kind: str  # "invariant" (a rule broke) or "error" (a step raised something else)
    message: str
    rules: tuple[str, ...]
    initial: int
    trace: tuple[Step, ...]
    error_type: str


@attrs.define
class ExplorationResult:
    """The figures of one search."""

    lifecycle: str
    states: int = 0
    edges: int = 0
    refusals: int = 0
    depth: int = 0
    seconds: float = 0.0
    truncated: bool = False
    cut_at: str | None = None  # the bound that cut the search: "max_depth=100", ...
    statuses: set[str] = attrs.field(factory=set)
    coverage: Coverage | None = None
    violation: Violation | None = None
    records: list[Any] = attrs.field(factory=list)  # one per state, with keep_records
    graph: Graph | None = None  # with keep_graph

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float("inf")


@attrs.define
class Graph:
    """The explored state graph: for each state (in the order found), whether its status
    is final, its edges (target state, the triggers whose rows fired, whether the record
    changed at all) and the shortest trace to it."""

    final: list[bool] = attrs.field(factory=list)
    edges: list[list[tuple[int, frozenset[str], bool]]] = attrs.field(factory=list)
    trace_to: Callable[[int], tuple[int, tuple[Step, ...]]] = lambda index: (0, ())


@attrs.define
class _Fired(Coverage):
    """The search's observer: its coverage, and what one move fired: the triggers of the
    rows, the last row and the record it made (the engine checked its invariants: the
    search need not again). One observer, so one call per attempt and per row fired.

    ``triggers`` is a frozenset shared by every move that fired the same ones (most fire
    one row): the graph keeps it as it is, with no set built per attempt or per edge."""

    NONE: ClassVar[frozenset[str]] = frozenset()

    triggers: frozenset[str] = attrs.field(default=NONE, init=False, repr=False)
    last: Any = attrs.field(default=None, init=False, repr=False)
    row: Row | None = attrs.field(default=None, init=False, repr=False)
    _with: dict[tuple[frozenset[str], str], frozenset[str]] = attrs.field(
        factory=dict, init=False, repr=False)

    def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any, after: Any) -> None:
        Coverage.fired(self, lifecycle, row, before, after)
        triggers, trigger = self.triggers, row.trigger
        if trigger not in triggers:
            key = (triggers, trigger)
            found = self._with.get(key)
            if found is None:
                found = self._with[key] = triggers | {trigger}
            self.triggers = found
        self.last = after
        self.row = row


@attrs.frozen
class Node(Generic[R]):
    """One state found: its first record, how it was reached, from which initial record."""

    record: R
    parent: int  # -1 for an initial record
    step: Step | None
    depth: int
    initial: int


def node_trace(nodes: list[Node[Any]], index: int) -> tuple[int, tuple[Step, ...]]:
    """The initial record's number and the steps from it to node ``index``."""

    def parent(at: int) -> tuple[int, Step] | None:
        node = nodes[at]
        return None if node.step is None else (node.parent, node.step)

    root, steps = trace_back(index, parent)
    return nodes[root].initial, tuple(steps)


_UNKNOWN = object()  # not a key: no state's key in ``recent``

RECENT_KEYS = 4096
"""States whose keys a search keeps at once (see ``recent`` in :func:`search`)."""

PROGRESS_AFTER = 2.0
"""Seconds into a search after which ``progress`` hears from it, about once a second."""

YOUNG_OBJECTS = 20_000
"""The garbage collector's first threshold while a search runs (CPython's is 700). A search
makes many short-lived objects (records, refusals, tracebacks) that reference counts free,
and keeps every state it finds: at 700 the collector ran every few states, and its older
generations walked every kept state again. Restored when the last search running ends."""


class _Collections:
    """Raises the collector's first threshold while any search runs (threads included)."""

    def __init__(self) -> None:
        self.lock, self.running, self.found = threading.Lock(), 0, gc.get_threshold()

    @contextmanager
    def fewer(self) -> Iterator[None]:
        with self.lock:
            if self.running == 0:
                self.found = gc.get_threshold()
                if 0 < self.found[0] < YOUNG_OBJECTS:  # 0: automatic collection is off
                    gc.set_threshold(YOUNG_OBJECTS, *self.found[1:])
            self.running += 1
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1
                if self.running == 0:
                    gc.set_threshold(*self.found)


_COLLECTIONS = _Collections()


def search(
    exploration: Exploration[R], *, keep_records: bool = False, keep_graph: bool = False,
    progress: Callable[[ExplorationResult], None] | None = None,
    moves_start_as: Exploration[R] | None = None, initial: Sequence[int] | None = None,
) -> tuple[ExplorationResult, list[Node[R]]]:
    """:func:`~lifecycles.machines._exhaustive.explore` in this process, and the states
    found (record, parent, step, depth); ``initial``: the numbers of the initial records
    searched from (default: all)."""
    started = time.perf_counter()
    run = _Search(exploration, keep_graph=keep_graph, moves_start_as=moves_start_as)
    result = run.result
    if not run.add_initial_records(initial):  # a refused initial record: no search at all
        result.seconds = time.perf_counter() - started
        return result, run.nodes
    with exploration.lifecycle.observing(run.fired), _COLLECTIONS.fewer():
        run.breadth_first(started, progress)
    result.states, result.edges, result.refusals = len(run.nodes), run.edges, run.refusals
    result.seconds = time.perf_counter() - started
    if keep_records:
        result.records = [node.record for node in run.nodes]
    return result, run.nodes


_Performer = Callable[[Fire, Any, Any], Any]


class _Search(Generic[R]):
    """One breadth-first search: the states found, how each is looked up, the queue.

    Deduplication is by fingerprint, as TLC and stateright do: ``seen`` maps the 64-bit
    ``hash`` of a state's abstraction key to the first state that had it, instead of
    holding every key. A hit is confirmed against that state's key, recomputed from its
    record (the abstraction is pure), so a collision is never taken for a visited state:
    the colliding key is then kept whole in ``collided``. For well-spread hashes a
    collision among n states has probability about n^2 / 2^65 (3e-13 for 3,000 states,
    3e-8 for a million), but some distinct values share a hash (hash(-1) == hash(-2)):
    either way the states found never depend on the hash, only the memory used does.
    ``recent`` holds the keys of the states found lately (most edges lead to a few of
    them), so a hit is confirmed without computing its key again; bounded, unlike keeping
    every key.
    """

    def __init__(self, exploration: Exploration[R], *, keep_graph: bool,
                 moves_start_as: Exploration[R] | None) -> None:
        self.exploration = exploration
        self.lifecycle = lifecycle = exploration.lifecycle
        self.abstraction = exploration.abstraction
        self.result = ExplorationResult(lifecycle.name)
        self.fired = self.result.coverage = _Fired(lifecycle)
        self.nodes: list[Node[R]] = []
        self.seen: dict[int, int] = {}
        self.collided: dict[Hashable, int] = {}
        self.recent: dict[int, Hashable] = {}
        self.queue: deque[int] = deque()
        self.graph = Graph(trace_to=lambda index: node_trace(self.nodes, index)) \
            if keep_graph else None
        self.result.graph = self.graph
        self.edges = self.refusals = 0  # counted here, into the result when it is read
        # The moves that may start from each status (their triggers' sources), found once.
        self.sources = {move.name: (moves_start_as or exploration).sources(move)
                        for move in exploration.moves}
        self.moves_from: dict[str, tuple[tuple[Move[R, Any], _Performer], ...]] = {}

    # -- the states found ------------------------------------------------------------

    def find(self, key: Hashable, fingerprint: int) -> int | None:
        """The state whose key is ``key``, if one was reached."""
        target = self.seen.get(fingerprint)
        if target is None:
            return None
        recent = self.recent
        known = recent.get(target)
        if known is None:
            if len(recent) >= RECENT_KEYS:
                recent.clear()
            known = recent[target] = self.abstraction(self.nodes[target].record)
        return target if known == key else self.collided.get(key)

    def add_node(self, node: Node[R], key: Hashable, fingerprint: int) -> int:
        """Keep ``node`` as a new state (its key ``key``) and queue it; its number."""
        nodes, recent = self.nodes, self.recent
        index = len(nodes)
        nodes.append(node)
        if len(recent) >= RECENT_KEYS:
            recent.clear()
        recent[index] = key
        if fingerprint in self.seen:
            self.collided[key] = index
        else:
            self.seen[fingerprint] = index
        status = self.lifecycle.status_of(node.record)
        if self.graph is not None:
            self.graph.final.append(status in self.lifecycle.final)
            self.graph.edges.append([])
        self.result.statuses.add(str(status))
        self.queue.append(index)
        return index

    def fail(self, kind: str, error: BaseException | None, message: str,
             rules: tuple[str, ...], parent: int, step: Step | None) -> None:
        """Record the violation found, with the shortest trace to it."""
        initial, trace = node_trace(self.nodes, parent) if parent >= 0 else (0, ())
        if step is not None:
            trace = (*trace, step)
        self.result.violation = Violation(
            kind, message, rules, initial, trace, type(error).__name__ if error else kind
        )

    # -- the steps of the search -----------------------------------------------------

    def add_initial_records(self, numbers: Sequence[int] | None) -> bool:
        """Admit and keep the initial records (those numbered ``numbers``, default all);
        False when one is refused, which is the search's finding."""
        records = list(enumerate(self.exploration.initial()))
        for number, record in records if numbers is None else [records[at] for at in numbers]:
            try:
                self.lifecycle.create(record)
            except (InvariantViolation, TransitionRefused) as error:
                self.fail("invariant", error, f"initial record {number} is refused: {error}",
                          tuple(getattr(error, "rules", ())), -1, None)
                return False
            key = self.abstraction(record)
            if self.find(key, hash(key)) is None:
                self.add_node(Node(record, -1, None, 0, number), key, hash(key))
        return True

    def breadth_first(self, started: float,
                      progress: Callable[[ExplorationResult], None] | None) -> None:
        """Take states from the queue until none is left or a violation is found; a state
        at the depth bound is not expanded (the search is then cut)."""
        result, queue, nodes = self.result, self.queue, self.nodes
        repeats = Repeats(self.lifecycle, self.fired)
        max_depth = self.exploration.max_depth
        report_at = started + PROGRESS_AFTER
        while queue and result.violation is None:
            if progress is not None and time.perf_counter() >= report_at:
                result.states, result.seconds = len(nodes), time.perf_counter() - started
                result.edges, result.refusals = self.edges, self.refusals
                progress(result)
                report_at = time.perf_counter() + 1.0
            index = queue.popleft()
            if nodes[index].depth >= max_depth:
                result.truncated, result.cut_at = True, f"max_depth={max_depth}"
                continue
            repeats.start(nodes[index].record)
            self.expand(index, repeats.fire)

    def moves_out_of(self, status: str) -> tuple[tuple[Move[R, Any], _Performer], ...]:
        """The moves that may start from ``status``, each with how it is performed (its
        run, unless a subclass performs it otherwise)."""
        moves = self.moves_from.get(status)
        if moves is None:
            moves = self.moves_from[status] = tuple(
                (move, move.run if type(move).perform is Move.perform else move.perform)
                for move in self.exploration.moves if status in self.sources[move.name])
        return moves

    def expand(self, index: int, fire: Fire) -> None:
        """Try every move and choice from state ``index``; stop at the first violation."""
        node = self.nodes[index]
        record, fired, none = node.record, self.fired, _Fired.NONE
        broken_in = self.lifecycle.invariants.broken
        abstraction, seen, recent = self.abstraction, self.seen, self.recent
        out = self.graph.edges[index] if self.graph is not None else None
        edges = refusals = 0  # locals in the loop, added to the counts once
        try:
            for move, perform in self.moves_out_of(str(self.lifecycle.status_of(record))):
                for number, choice in enumerate(move.choices(record)):
                    fired.triggers, fired.last = none, None
                    try:
                        after = perform(fire, record, choice)
                    except TransitionRefused:
                        refusals += 1
                        continue
                    except Exception as error:  # any other escape is a finding, not a crash
                        step = Step(move.name, number, move.describe_choice(record, choice))
                        self.fail("invariant" if isinstance(error, InvariantViolation) else "error",
                                  error, f"{type(error).__name__}: {error}",
                                  tuple(getattr(error, "rules", ())), index, step)
                        return
                    edges += 1
                    # A record the engine made passed its invariants there; any other (a move
                    # that wrote around the engine) is checked here.
                    broken = () if after is fired.last else tuple(broken_in(after))
                    if broken:
                        step = Step(move.name, number, move.describe_choice(record, choice))
                        self.fail("invariant", None, f"reached a record breaking "
                                  f"{', '.join(broken)}", broken, index, step)
                        return
                    key = abstraction(after)
                    fingerprint = hash(key)
                    target = seen.get(fingerprint)  # most edges: a state whose key is recent
                    if target is None or recent.get(target, _UNKNOWN) != key:
                        target = self.find(key, fingerprint)
                        if target is None:
                            target = self.new_state(after, key, fingerprint, index, move, number,
                                                    choice)
                    if target is not None and out is not None:
                        # another state's key: another record, unequal
                        out.append((target, fired.triggers, target != index or after != record))
        finally:
            self.edges += edges
            self.refusals += refusals


    def new_state(self, after: R, key: Hashable, fingerprint: int, parent: int,
                  move: Move[R, Any], number: int, choice: Any) -> int | None:
        """Keep ``after``, reached from state ``parent``, as a new state; None when the
        state bound is reached (the search is then cut)."""
        if len(self.nodes) >= self.exploration.max_states:
            self.result.truncated = True
            self.result.cut_at = f"max_states={self.exploration.max_states}"
            return None
        node = self.nodes[parent]
        step = Step(move.name, number, move.describe_choice(node.record, choice))
        self.result.depth = max(self.result.depth, node.depth + 1)
        return self.add_node(Node(after, parent, step, node.depth + 1, node.initial), key,
                             fingerprint)


class TraceMismatch(AssertionError):
    """A recorded trace no longer applies: the declaration's choices changed since."""


def replay(exploration: Exploration[R], initial: int, steps: Sequence[tuple[str, int, str]],
           fire: Fire | None = None) -> R:
    """Run a recorded trace from initial record ``initial``; returns the last record.

    Each step is ``(move, choice index, description)``; the description must still
    match, so a changed declaration fails loudly instead of replaying something else.
    Any error a step raises propagates, which is what a replayed violation shows.
    """
    lifecycle = exploration.lifecycle
    fire_ = fire or lifecycle.fire
    record = exploration.initial()[initial]
    for number, (name, choice, description) in enumerate(steps):
        move = exploration.move(name)
        choices = move.choices(record)
        if choice >= len(choices) or move.describe_choice(record, choices[choice]) != description:
            raise TraceMismatch(
                f"step {number} ({name} #{choice}) no longer reads {description!r}: "
                "the exploration inputs changed; re-run `lifecycles check` for a fresh trace"
            )
        record = move.perform(fire_, record, choices[choice])
        lifecycle.invariants.check(record)
    return record
