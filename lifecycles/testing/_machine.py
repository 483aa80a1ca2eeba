"""Generated stateful tests for any lifecycle on any store, with transition coverage.

:func:`build_state_machine` turns a lifecycle's exploration inputs (declared beside its
table, see :mod:`lifecycles.machines._exploration`) and a store factory into a Hypothesis
``RuleBasedStateMachine``:

* ``create`` (first, then up to ``max_records`` more times): admit a record drawn
  from the lifecycle's ``new_records`` strategy (repeating a key is idempotent: the
  stored record must not change; once every record is final it tries for a new key);
  ``create_again`` (up to ``max_records`` times, at least 3) repeats a creation already made, in
  whatever status its record is now;
* one rule per move (a move per trigger, or a named function beside the table that
  chooses among triggers, like the monitor's ``complete_with_answer``), enabled only
  when some stored record holds a status the table lets it fire from; it draws a record
  and inputs, runs the move through the store in one transaction and through the pure
  machine, and asserts they agree: same refusal code, or the same new record;
* after every step: every stored record holds every invariant, no record was lost or
  appeared (the model's keys are exactly the store's), each stored record equals the
  model's, and ``count_by_status`` agrees.

A generated test leaves out Hypothesis' *explain* phase (``Machine.TestCase.settings``
is the loaded profile minus ``Phase.explain``): on a failing stateful run it replays
variations of every step, and a planted bug in document review took 104 s to report
with it, 7 s without (``python benchmarks/bench_plugin_failure.py [--explain]``).
Shrinking stays on; it is bounded by the profile's ``stateful_step_count`` (the length
of an example) and by Hypothesis' own limits (500 shrinks, 5 minutes). Settings put
in ``TestX.settings`` by hand replace these: wrap them in
:func:`generated_test_settings`. ``pytest --hypothesis-explain`` keeps the explain
phase.

Coverage (rows fired, guards seen true and false) is recorded for every store run and,
under pytest, printed at the end; ``pytest --lifecycles-require-coverage`` fails the
run when no generated test of a lifecycle (on any store) exercised one of its table
rows. A row whose firing made a step fail (its effect broke an invariant, say) counts
as exercised and is reported as "fired, failed".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from lifecycles.invariants._store import StoreView
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._coverage import Coverage
from lifecycles.machines._declaration import Row, TransitionRefused
from lifecycles.machines._exploration import Exploration, Move
from lifecycles.machines._interleaving import World

if TYPE_CHECKING:
    from hypothesis import settings as Settings
    from hypothesis.stateful import RuleBasedStateMachine

    from lifecycles.stores._base import Store

R = TypeVar("R")
S = TypeVar("S", bound="Store[Any]")

COVERAGE_RUNS: dict[str, Coverage] = {}
"""Coverage of every generated machine that ran a step in this process, by name."""


class StepFailed(AssertionError):
    """A generated step went wrong; the message holds the steps of this example so far."""


@attrs.define
class StepCoverage(Coverage):
    """:class:`Coverage` that also counts the rows whose firing made a step fail.

    The engine tells observers of a row only once its record passed every invariant,
    so without this a row whose effect breaks one would read "never fired".
    """

    row_failures: dict[Row, int] = attrs.field(factory=dict)

    def failed(self, row: Row) -> None:
        self.attempts += 1
        self.row_failures[row] = self.row_failures.get(row, 0) + 1

    def merge(self, other: Coverage) -> None:
        super().merge(other)
        if isinstance(other, StepCoverage):
            for row, count in other.row_failures.items():
                self.row_failures[row] = self.row_failures.get(row, 0) + count

    @property
    def unfired_rows(self) -> list[Row]:
        return [row for row in super().unfired_rows if row not in self.row_failures]

    @property
    def failed_rows(self) -> list[Row]:
        return [row for row in self.lifecycle.rows if row in self.row_failures]

    def report(self) -> str:
        lines = super().report().split("\n")
        # One line per row, in table order, after the title line.
        for index, row in enumerate(self.lifecycle.rows, 1):
            if row in self.row_failures:
                lines[index] = (lines[index].removesuffix("   <-- never fired")
                                + f"   <-- fired, failed {self.row_failures[row]} times")
        return "\n".join(lines)


def _exploration_of(subject: Exploration[R] | Lifecycle[R, Any]) -> Exploration[R]:
    if isinstance(subject, Exploration):
        return subject
    from lifecycles._loading import find_exploration

    found = find_exploration(subject)
    if found is None:
        raise LookupError(f"{subject.name} declares no exploration inputs beside its table")
    exploration: Exploration[R] = found[0]
    return exploration


def build_state_machine(
    subject: Exploration[R] | Lifecycle[R, Any],
    store_factory: Callable[[], S],
    *,
    name: str | None = None,
    record_coverage: bool = True,
    max_records: int | None = None,
    teardown: Callable[[S], None] | None = None,
    lease_protocol: bool = True,
    workers: int | None = None,
) -> type[RuleBasedStateMachine]:
    """A ``RuleBasedStateMachine`` driving ``subject`` on fresh stores from ``store_factory``.

    ``subject`` is an :class:`Exploration` or a lifecycle whose exploration is declared
    beside its table. ``name`` labels the coverage report (default
    ``"<lifecycle> on <factory>"``); with ``record_coverage=False`` the run is left out of
    the session's coverage report and ``--lifecycles-require-coverage`` (for machines
    built to fail, like a defect demonstration). The class's ``coverage`` attribute holds
    the counts either way. Every run starts by creating one record, and ``create`` may
    run ``max_records`` times more (default 3, or with workers 2 or the records their
    interleaving explores, if more; a repeated key is an idempotent insert; more when every
    record is final), so the remaining steps go to transitions.
    ``teardown(store)`` runs after each example (close a connection, say). For a
    leased lifecycle whose exploration declares its ``workers``, ``workers`` of them
    (default the declared count; 0 for none) claim, complete, renew and stop through
    the real lease protocol on the store while the clock moves
    (:mod:`lifecycles.testing._workers`); each of their steps is checked against the
    memory store's, unless ``lease_protocol=False`` (on the memory store itself it
    would compare the store with itself). Without workers, an exploration declaring
    ``lease_inputs`` gets a ``claim_due`` rule: ``Store.claim`` and
    ``Store.claim_many`` at any instant, against the memory store's answers.
    Along every example each record's path is watched for a cycle the exploration
    does not accept (the record back in a state it held, by the exploration's
    abstraction, through triggers no ``AcceptedCycle`` declares), as the checker's
    liveness check would report it.
    Use it as ``TestX = build_state_machine(...).TestCase``: its settings are the profile
    loaded when ``.TestCase`` is read, without the explain phase.
    """
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        initialize,
        invariant,
        precondition,
        rule,
    )

    exploration = _exploration_of(subject)
    lifecycle = exploration.lifecycle
    factory_name = getattr(store_factory, "__name__", type(store_factory).__name__)
    label = name or f"{lifecycle.name} on {factory_name}"
    coverage = StepCoverage(lifecycle)
    new_records = exploration.new_record_strategy()
    movable = frozenset().union(*(exploration.sources(move) for move in exploration.moves))
    declared_workers = exploration.workers if lifecycle.lease is not None else None
    if declared_workers is not None and workers != 0:
        declared_workers = declared_workers.sized(workers)
    else:
        declared_workers = None
    worker_count = 0 if declared_workers is None else declared_workers.count
    if max_records is None:
        # With workers, fewer: the steps go to what workers do to each other on the
        # same records (a late completion needs its record claimed again).
        max_records = 3 if declared_workers is None else max(2, declared_workers.record_count)
    repeats = max(3, max_records)  # create_again's budget per example

    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store: S = store_factory()
            self.model: dict[str, R] = {}
            self.steps: list[str] = []
            self.creates = self.repeats = 0
            self.created: dict[str, R] = {}  # each record as it was first created
            self.paths: dict[str, list[tuple[Hashable, frozenset[str]]]] = {}
            self.watch = _Progress(lifecycle)
            # The workers' side (lifecycles.testing._workers): the clock, once a worker
            # acted, each worker's hand, the tokens minted, the steps' model on the store.
            self.clock: float | None = None
            self.hands: tuple[tuple[Any, ...], ...] = ((),) * worker_count
            self.minted = 0
            self.ledger: tuple[tuple[str, str, str], ...] = ()  # the external calls made
            self.moved_by_moves: set[str] = set()  # records a move, not a worker, changed
            self.on_store: Any = None
            if record_coverage:
                COVERAGE_RUNS.setdefault(label, coverage)

        @classmethod
        @functools.cache
        def _to_test_case(cls) -> Any:
            # Hypothesis builds the TestCase class, with settings from the loaded profile,
            # when ``.TestCase`` is first read; this is its only hook.
            case = super()._to_test_case()
            case.settings = generated_test_settings(case.settings)
            return case

        def teardown(self) -> None:
            try:
                self.check_at_end()
            finally:
                if teardown is not None:
                    teardown(self.store)

        def check_store_invariants(self, records: tuple[R, ...]) -> None:
            """Every whole-store invariant, with the workers' holdings once they acted."""
            if self.on_store is not None and self.clock is not None:
                view = self.on_store.view(World(records, self.clock, self.hands))
            else:
                view = StoreView(records, lambda r: str(lifecycle.status_of(r)), self.clock)
            broken = lifecycle.invariants.broken_across(view)
            if broken:
                described = ("" if self.on_store is None
                             else f": {self.on_store.describe(view)}")
                raise self.failure(f"the store breaks {', '.join(broken)}{described}")

        def check_at_end(self) -> None:
            """What must hold once an example is over (the workers' rules add to it)."""

        def progress_watch(self) -> _Progress:
            """A fresh observer of the rows a step fires, read by :meth:`progressed`."""
            self.watch = _Progress(lifecycle)
            return self.watch

        def progressed(self, before: dict[str, R]) -> None:
            """Each record a step changed (``before``: the model before it), on its path:
            back in a state it held, through triggers no accepted cycle declares, is a
            cycle the checker would report. The triggers are those the step fired on the
            record (an attempt whose compare-and-set lost fired one too: never fewer)."""
            for key, triggers in self.watch.triggers.items():
                after = self.model.get(key)
                if after is None or after == before.get(key):
                    continue
                if lifecycle.status_of(after) in lifecycle.final:
                    self.paths.pop(key, None)
                    continue
                state = exploration.abstraction(after)
                path = self.paths.setdefault(key, [])
                earlier = next((n for n, (seen, _) in enumerate(path) if seen == state), None)
                if earlier is None:
                    path.append((state, frozenset(triggers)))
                    continue
                fired = frozenset(triggers).union(*(t for _, t in path[earlier + 1:]))
                if not any(fired <= cycle.triggers for cycle in exploration.accepted_cycles):
                    raise self.failure(
                        f"{key} is back in a state it held ({lifecycle.status_of(after)}, "
                        f"{state!r}) through {', '.join(sorted(fired))}: a cycle without a "
                        "final status that no AcceptedCycle declares")
                del path[earlier + 1:]

        def can_move(self) -> bool:
            return any(str(lifecycle.status_of(r)) in movable for r in self.model.values())

        def expect(self, condition: bool, message: str) -> None:
            if not condition:
                raise self.failure(message)

        def failure(self, message: str) -> StepFailed:
            trace = "\n".join(f"  {n}. {s}" for n, s in enumerate(self.steps, 1))
            return StepFailed(f"{label}: {message}\nsteps of this example:\n{trace}")

        @precondition(lambda self: self.creates < max_records or not self.can_move())
        @rule(data=st.data())
        def create(self, data: st.DataObject) -> None:
            record = data.draw(new_records, label="record")
            if lifecycle.key_of(record) in self.model and not self.can_move():
                # Every record is final: a new key gives the example a life again (a
                # repeated creation is create_again's to make).
                record = self.renamed(record)
            self.insert(record)

        def renamed(self, record: R) -> R:
            """``record`` under a key not stored yet, if its rules allow one."""
            key = lifecycle.key_of(record)
            for number in range(2, 100):
                fresh = f"{key.rstrip('0123456789')}{number}" if key[-1:].isdigit() else \
                    f"{key}-{number}"
                if fresh in self.model:
                    continue
                try:
                    renamed: R = lifecycle.check(attrs.evolve(  # type: ignore[misc]
                        record, **{lifecycle.key_field: fresh}))
                except Exception:  # the key's own rules refuse it: keep the repeat
                    return record
                return renamed
            return record

        @initialize(record=exploration.new_record_strategy())
        def create_first(self, record: R) -> None:
            self.insert(record)

        def insert(self, record: R) -> None:
            key = lifecycle.key_of(record)
            self.creates += 1
            self.steps.append(f"create {key}")
            lifecycle.create(record)
            stored = self.store.insert(record)
            if key in self.model:
                self.expect(stored == self.model[key], f"insert of {key} changed it")
            else:
                self.expect(stored == record, f"insert of {key} returned another")
                self.model[key] = record
                self.created[key] = record
                if lifecycle.status_of(record) not in lifecycle.final:
                    self.paths[key] = [(exploration.abstraction(record), frozenset())]

        @precondition(lambda self: bool(self.created) and self.repeats < repeats)
        @rule(data=st.data())
        def create_again(self, data: st.DataObject) -> None:
            # The same creation repeated (a client retrying), whatever status the record
            # reached since: a budget of its own, so every status meets one.
            key = data.draw(st.sampled_from(sorted(self.created)), label="key")
            self.repeats += 1
            self.steps.append(f"create {key} again")
            stored = self.store.insert(self.created[key])
            self.expect(stored == self.model[key], f"insert of {key} again changed it")

        @invariant()
        def every_record_valid_none_lost(self) -> None:
            stored = {lifecycle.key_of(record): record for record in self.store.scan()}
            lost = sorted(set(self.model) - set(stored))
            self.expect(not lost, f"records lost: {lost}")
            appeared = sorted(set(stored) - set(self.model))
            self.expect(not appeared, f"records appeared: {appeared}")
            for key, record in stored.items():
                broken = lifecycle.invariants.broken(record)
                self.expect(not broken, f"{key} breaks {broken}")
                self.expect(record == self.model[key], f"{key} differs from the model")
            if lifecycle.invariants.store:
                self.check_store_invariants(tuple(stored[key] for key in sorted(stored)))
            counts = self.store.count_by_status()
            expected = {status.value: 0 for status in lifecycle.statuses}
            for record in self.model.values():
                expected[str(lifecycle.status_of(record))] += 1
            self.expect(counts == expected, f"count_by_status {counts} != {expected}")

    def add_move_rule(move: Move[R, Any]) -> None:
        sources = exploration.sources(move)

        def enabled(machine: LifecycleMachine) -> bool:
            return any(str(lifecycle.status_of(r)) in sources for r in machine.model.values())

        def step(machine: LifecycleMachine, data: st.DataObject) -> None:
            keys = sorted(k for k, r in machine.model.items()
                          if str(lifecycle.status_of(r)) in sources)
            key = data.draw(st.sampled_from(keys), label="key")
            before = machine.model[key]
            choice = data.draw(move.draw_from(before), label=move.name)
            machine.steps.append(f"{move.name} {key}: {move.describe_choice(before, choice)}")
            applied: list[Row] = []

            def pure_fire(trigger: str, record: R, inputs: Any) -> R:
                # Lifecycle.fire in its two steps, to know the row if its effect fails.
                row = lifecycle.select_row(trigger, record, inputs)
                applied.append(row)
                fired: R = lifecycle.apply_row(row, record, inputs)
                return fired

            try:
                expected: R | TransitionRefused = move.perform(pure_fire, before, choice)
            except TransitionRefused as refusal:
                expected = refusal
            except Exception as error:
                if applied:
                    coverage.failed(applied[-1])
                raise machine.failure(f"{move.name} raised {type(error).__name__}: {error}"
                                      ) from error

            def store_fire(trigger: str, record: R, inputs: Any) -> R:
                fired: R = machine.store.fire(record, trigger, inputs)
                return fired

            try:
                with (lifecycle.observing(coverage), lifecycle.observing(machine.progress_watch()),
                      machine.store.transaction()):
                    current = machine.store.get(key)
                    if current is None:
                        raise machine.failure(f"{key} vanished")
                    outcome: R | TransitionRefused = move.perform(store_fire, current, choice)
            except TransitionRefused as refusal:
                outcome = refusal
            except AssertionError:
                raise
            except Exception as error:
                if applied:  # the row the pure machine fired, which the store could not
                    coverage.failed(applied[-1])
                raise machine.failure(f"{move.name} through the store raised "
                                      f"{type(error).__name__}: {error}") from error
            if isinstance(expected, TransitionRefused) or isinstance(outcome, TransitionRefused):
                if not (
                    isinstance(expected, TransitionRefused)
                    and isinstance(outcome, TransitionRefused)
                    and expected.code == outcome.code
                ):
                    raise machine.failure(f"store gave {outcome!r}, pure machine {expected!r}")
                after = machine.store.get(key)
                machine.expect(after == before, f"refused {move.name} changed {key}")
                machine.steps[-1] += f" -> refused {outcome.code}"
                return
            machine.expect(outcome == expected, "store and pure machine disagree")
            earlier = dict(machine.model)
            if outcome != before:
                machine.moved_by_moves.add(key)
            machine.model[key] = outcome
            machine.steps[-1] += f" -> {lifecycle.status_of(outcome)}"
            machine.progressed(earlier)

        step.__name__ = move.name
        guarded = precondition(enabled)(rule(data=st.data())(step))
        setattr(LifecycleMachine, move.name, guarded)

    for move in exploration.moves:
        add_move_rule(move)
    if declared_workers is not None:
        from lifecycles.testing._workers import add_worker_rules

        add_worker_rules(LifecycleMachine, exploration, declared_workers, coverage,
                         compare=lease_protocol)
    elif lease_protocol and lifecycle.lease is not None and exploration.lease_inputs is not None:
        add_claim_rule(LifecycleMachine, lifecycle, exploration.lease_inputs, coverage)
    LifecycleMachine.__name__ = f"{lifecycle.name.title()}StateMachine"
    LifecycleMachine.__qualname__ = LifecycleMachine.__name__
    LifecycleMachine.coverage = coverage
    return LifecycleMachine


@attrs.define
class _Progress:
    """An observer of one step: the triggers of the rows it fired, by record."""

    lifecycle: Lifecycle[Any, Any]
    triggers: dict[str, list[str]] = attrs.field(factory=dict)

    def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                  inputs: Any) -> None:
        pass

    def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any, after: Any) -> None:
        if lifecycle is self.lifecycle and before != after:  # no change, no progress
            self.triggers.setdefault(lifecycle.key_of(after), []).append(row.trigger)


def add_claim_rule(
    machine_class: type[Any], lifecycle: Lifecycle[Any, Any],
    lease_inputs: Callable[[float, str], Any], coverage: StepCoverage,
) -> None:
    """A ``claim_due`` rule: the lease protocol itself, on the store and on the model.

    It draws a moment (each record's due time and lease expiry, and a second after)
    and a batch size: 1 runs ``Store.claim`` (which may glance), more runs
    ``Store.claim_many``. The same claim runs on a memory store holding the model's
    records, the reference answers; the granted records and every record written
    (rescues included) must agree.
    """
    from hypothesis import strategies as st
    from hypothesis.stateful import precondition, rule

    from lifecycles.stores._memory import MemoryStore

    lease = lifecycle.lease
    assert lease is not None

    def moments(model: dict[str, Any]) -> list[float]:
        marks = {float(getattr(r, field)) for r in model.values()
                 for field in (lease.due_field, lease.expires_field)
                 if getattr(r, field) is not None}
        return sorted(marks | {mark + 1.0 for mark in marks})

    def claim_due(machine: Any, data: Any) -> None:
        now = data.draw(st.sampled_from(moments(machine.model)), label="now")
        limit = data.draw(st.sampled_from([1, 2, 3]), label="limit")
        step = len(machine.steps)
        machine.steps.append(f"claim_due now={now:g} limit={limit}")

        def inputs_for(n: int) -> Any:
            return lease_inputs(now, f"claim-{step}-{n}")

        reference: MemoryStore[Any] = MemoryStore(lifecycle)
        for record in machine.model.values():
            reference.insert(record)
        try:
            with lifecycle.observing(coverage):
                if limit == 1:
                    got = machine.store.claim(inputs_for(0))
                    granted = [] if got is None else [got]
                else:
                    granted = machine.store.claim_many(inputs_for, limit)
        except Exception as error:  # with the steps so far, not raw
            raise machine.failure(f"claim_due raised {type(error).__name__}: {error}"
                                  ) from error
        try:
            expected_one = reference.claim(inputs_for(0)) if limit == 1 else None
            expected = (([] if expected_one is None else [expected_one]) if limit == 1
                        else reference.claim_many(inputs_for, limit))
        except Exception as error:
            raise machine.failure(f"claim_due on the memory store raised "
                                  f"{type(error).__name__}: {error}") from error
        machine.expect(granted == expected, f"claimed {granted!r}, the protocol {expected!r}")
        machine.model = {lifecycle.key_of(r): r for r in reference.scan()}
        machine.steps[-1] += f" -> {[lifecycle.key_of(r) for r in granted]}"

    claim_due.__name__ = "claim_due"
    guarded = precondition(lambda machine: bool(machine.model))(
        rule(data=st.data())(claim_due))
    machine_class.claim_due = guarded


def coverage_of(machine: type[RuleBasedStateMachine]) -> StepCoverage:
    """The coverage a class from :func:`build_state_machine` has recorded so far."""
    coverage: StepCoverage = getattr(machine, "coverage")  # noqa: B009 - set on the built class
    return coverage


_keep_explain = False
"""Set by the plugin (:func:`keep_explain_phase`) under ``pytest --hypothesis-explain``."""


def keep_explain_phase(keep: bool) -> None:
    """Whether generated tests keep Hypothesis' explain phase (the plugin's switch)."""
    global _keep_explain
    _keep_explain = keep


def generated_test_settings(base: Settings | None = None) -> Settings:
    """``base`` (default: the loaded profile) without the explain phase.

    What a generated ``TestCase`` runs with; pass it your own settings when you replace
    ``TestX.settings``, to keep the explain phase out of those too.
    """
    from hypothesis import Phase, settings

    base = base if base is not None else settings()
    if _keep_explain:
        return base
    return settings(base, phases=[phase for phase in base.phases if phase is not Phase.explain])
