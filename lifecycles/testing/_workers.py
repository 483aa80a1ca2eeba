"""Workers in the generated tests: the interleaving's steps, drawn by Hypothesis, on a real store.

For a leased lifecycle whose exploration declares its :class:`~lifecycles.Workers`,
:func:`~lifecycles.testing.build_state_machine` adds the rule of this module,
``workers_act``. It runs a burst of the very steps the checker's interleaving explores
(:mod:`lifecycles.machines._interleaving`), on the store under test instead of the
checker's memory store, each drawn from those possible (:func:`weighted_choices`):

* an idle worker claims through the store's own ``claim`` (or ``claim_many``, a
  batch), which first rescues every expired lease;
* a worker holding leases ends one call one of the declared ways (a success, a stale
  answer, a permanent error...) through :func:`~lifecycles.machines.lease.complete`
  (compare-and-set on the record as claimed, outside any transaction, else the table's
  guards on the record as stored), renews one (where the table declares a renewal
  row), or stops, leaving its leases to expire;
* the clock moves to a boundary instant: a second before, at or after the next due
  time or lease expiry of any record (a late claim, a late completion).

A burst ends early once a record waits again, so that the moves meet it in that status.

After every step the machine checks, besides every record's invariants: **at most one
live lease per record**, **no completion from a superseded lease accepted**, every
**whole-store invariant** with the workers' holdings, the rule of every **external
effect** the workers declare over the ghost ledger of their calls (for the records no
move but the workers' changed: a move fires rows without their calls), and, on a store
other than the memory store, that the step did exactly what it does on the memory store
(the reference). At the end of each example every record must keep a way to a final status:
from the record as stored, with every worker gone, the checker's own search (one
worker, one record) must reach one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from lifecycles.machines import lease
from lifecycles.machines._exploration import Exploration
from lifecycles.machines._interleaving import (
    Workers,
    World,
    _Broken,
    _Model,
    _step_of,
    explore_workers,
)

R = TypeVar("R")

__all__ = ["OnStore", "add_worker_rules"]

WORKER_TOKENS = "worker-lease-"
"""The workers' tokens: never one the exploration's own moves give (``lease-1``...)."""
AT_END_TOKENS = "end-lease-"
"""The tokens of the search run at the end of an example: never one already given."""

# How often each kind of step is drawn, among those possible: completions (where the
# superseded and permanent-error cases live) and the clock (where expiries and late
# claims come from) more than the rest.
_WEIGHTS = {"claim": 2, "claim_many": 1, "complete": 3, "renew": 1, "stop": 1}
_SUPERSEDED = 8  # a completion under a lease rescued and given to another
_LATE = 6  # a claim that rescues an expired lease, or may lease a rescued one again
_BATCH = 16  # a batch claim with more than one record due or expired
_EXPIRED = 2  # a completion under an expired lease not rescued yet
_PAST_EXPIRY = 4  # the clock to or past the expiry of a lease a worker holds
_BURST = 8  # at most this many workers' steps in one rule


class _Reference(_Model[R]):
    """The interleaving's steps on the memory store, what the store under test must
    agree with; the external effects' rules asked only of records no move changed (a
    move fires rows without the workers' calls)."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.moved_by_moves: set[str] = set()  # the machine's, shared

    def ledger_tracks(self, key: str) -> bool:
        return key not in self.moved_by_moves


class OnStore(_Reference[R]):
    """The interleaving's steps on ``store`` (claims through its own ``claim`` and
    ``claim_many``, as the runtime worker makes them), with tokens of their own."""

    def __init__(self, exploration: Exploration[R], workers: Workers[R], store: Any) -> None:
        super().__init__(exploration, workers, records=(), token_prefix=WORKER_TOKENS)
        self.store = store

    def store_for(self, world: World[R]) -> Any:
        return self.store

    def records_in(self, store: Any) -> tuple[R, ...]:
        return tuple(sorted(store.scan(), key=self.lifecycle.key_of))

    def lost(self, world: World[R]) -> list[str]:
        return []  # the machine's invariant says so after the step, as after any other

    def claim_on(self, store: Any, inputs_for: Callable[[int], Any], limit: int) -> list[R]:
        if limit == 1:
            one = store.claim(inputs_for(0))
            return [] if one is None else [one]
        granted: list[R] = store.claim_many(inputs_for, limit)
        return granted


def weighted_choices(model: _Model[R], world: World[R]) -> list[tuple[str, str, Any]]:
    """Every step possible in ``world`` that can do something, repeated by how
    interesting it is and most interesting first (Hypothesis draws early entries more
    often): a completion under a lease that was rescued, a claim while a lease lies
    expired (a rescue) or after one was rescued (which may lease it again), a batch
    claim of more than one, the clock to or past a held lease's expiry; then
    the other completions, claims and instants; a completion under an expired lease
    not yet rescued, renewals and stops least. A
    claim while nothing is due or expired is left out (it would change nothing). A
    ``tick`` carries its instant in place of a choice."""
    lifecycle = model.lifecycle
    stored = {lifecycle.key_of(record): record for record in world.records}
    expired = any(lease.is_expired(lifecycle, record, world.now) for record in world.records)
    due_now = sum(lease.is_due(lifecycle, record, world.now) for record in world.records)
    due = expired or due_now > 0
    # A worker holding a lease rescued since: the next claims may lease it again.
    stale = any(model._token(stored[key]) != held.token
                for hand in world.workers for held in hand
                if (key := lifecycle.key_of(held.record)) in stored)
    weighted: list[tuple[int, tuple[str, str, Any]]] = []
    for action in model.actions(world):
        actor, kind, choice = action
        weight = _WEIGHTS.get(kind, 0)
        if kind == "complete":
            hand = world.workers[int(actor.rpartition("-")[2]) - 1]
            held = hand[model._chosen(world, actor, hand, choice)[0]]
            record = stored.get(lifecycle.key_of(held.record))
            if record is None or model._token(record) != held.token:
                weight = _SUPERSEDED
            elif lease.is_expired(lifecycle, record, world.now):
                weight = _EXPIRED
        elif kind == "claim":
            weight = 0 if not due else _LATE if expired or stale else weight
        elif kind == "claim_many":  # a batch of one is a claim
            weight = _BATCH if due_now + expired > 1 else 0
        weighted.append((weight, action))
    held_expiries = {expiry for hand in world.workers for held in hand
                     if (expiry := model._due_or_expiry(held.record)) is not None}
    for instant in boundary_instants(model, world.records, world.now):
        late = any(instant >= expiry for expiry in held_expiries)
        weighted.append((_PAST_EXPIRY if late else 1, ("clock", "tick", instant)))
    weighted.sort(key=lambda entry: -entry[0])  # stable: the order of actions() within
    return [action for weight, action in weighted for _ in range(weight)]


def boundary_instants(model: _Model[R], records: Sequence[R], now: float) -> list[float]:
    """The instants after ``now`` where the protocol's answers change or are about to:
    a second before, at and after each record's due time (claimable) or lease expiry."""
    marks = {moment for moment in map(model._due_or_expiry, records) if moment is not None}
    return sorted({instant for mark in marks for instant in (mark - 1.0, mark, mark + 1.0)
                   if instant > now})


def add_worker_rules(machine_class: type[Any], exploration: Exploration[R], workers: Workers[R],
                     coverage: Any, compare: bool) -> None:
    """Add ``worker_claims``, ``worker_acts`` and ``clock_moves`` to ``machine_class``
    (a machine of :func:`~lifecycles.testing.build_state_machine`), with
    ``workers.count`` workers. ``coverage`` hears the rows their steps fire;
    ``compare``: check each step against the memory store."""
    from hypothesis import strategies as st
    from hypothesis.stateful import precondition, rule

    lifecycle = exploration.lifecycle
    reference: _Reference[R] = _Reference(exploration, workers, records=(),
                                          token_prefix=WORKER_TOKENS)

    def world_of(machine: Any) -> World[R]:
        if machine.clock is None:  # the first worker step: the clock starts at the first due
            moments = [m for m in map(reference._due_or_expiry, machine.model.values())
                       if m is not None]
            machine.clock = min(moments, default=0.0)
            reference.start = on_store(machine).start = machine.clock  # traces say t+Ns
        records = tuple(machine.model[key] for key in sorted(machine.model))
        return World(records, machine.clock, machine.hands, machine.minted, machine.ledger)

    def on_store(machine: Any) -> OnStore[R]:
        if machine.on_store is None:
            machine.on_store = OnStore(exploration, workers, machine.store)
            machine.on_store.moved_by_moves = machine.moved_by_moves
        model: OnStore[R] = machine.on_store
        return model

    def run(machine: Any, action: tuple[str, str, int]) -> None:
        world = world_of(machine)
        model = on_store(machine)
        model.keys = reference.keys = tuple(sorted(machine.model))
        reference.moved_by_moves = machine.moved_by_moves
        actor, kind, _ = action
        number = len(machine.steps) + 1
        machine.steps.append(f"{actor} {kind} (step {number})")
        expected = None
        if compare:
            try:
                expected = _step_of(reference, world, action)
            except _Broken:
                expected = None  # the store's own run says what broke
        with lifecycle.observing(coverage), lifecycle.observing(machine.progress_watch()):
            try:
                after, step, _ = _step_of(model, world, action)
            except _Broken as broken:
                machine.steps[-1] = f"{actor} {broken.said or broken.message}"
                raise machine.failure(f"{broken.kind}: {broken.message}") from None
        machine.steps[-1] = f"{actor} {step.description}"
        if expected is not None:
            machine.expect(after.records == expected[0].records,
                           f"the store's records after {actor} {kind} differ from the "
                           f"memory store's: {after.records!r} != {expected[0].records!r}")
            # The hands, not the words: stores may rescue expired leases in another order.
            machine.expect(after.workers == expected[0].workers,
                           f"the store did {step.description!r}, the memory store "
                           f"{expected[1].description!r}")
        before = machine.model
        machine.model = {lifecycle.key_of(record): record for record in after.records}
        machine.hands, machine.minted, machine.ledger = after.workers, after.minted, after.ledger
        machine.progressed(before)

    def waiting(record: R) -> bool:
        status = lifecycle.status_of(record)
        return status != lifecycle.leased and status not in lifecycle.final

    def workers_act(machine: Any, data: st.DataObject) -> None:
        # A burst of steps: a late completion needs four in a row (claim, the clock past
        # the expiry, a rescue, the completion), which single rules among the moves'
        # would rarely draw in sequence.
        for _ in range(data.draw(st.integers(1, _BURST), label="steps")):
            world = world_of(machine)
            choices = weighted_choices(on_store(machine), world)
            if not choices:
                return
            chosen = data.draw(st.sampled_from(choices), label="step")
            if chosen[1] == "tick":
                machine.clock = float(chosen[2])
                machine.steps.append(f"clock moves to {reference.at(machine.clock)}")
                continue
            before = dict(machine.model)
            run(machine, chosen)
            if any(record != before.get(key) and waiting(record)
                   for key, record in machine.model.items()):
                return  # a record waits again: the moves' turn, in that status

    enabled = precondition(lambda machine: bool(machine.model))
    machine_class.workers_act = enabled(rule(data=st.data())(workers_act))

    def no_record_stranded(machine: Any) -> None:
        """Every record keeps a way to a final status with every worker gone: the
        checker's search from the record as stored, one worker, one record."""
        if machine.clock is None:
            return
        alone = workers.sized(1, 1)
        for key in sorted(machine.model):
            record = machine.model[key]
            if lifecycle.status_of(record) in lifecycle.final:
                continue
            start: World[R] = World((record,), machine.clock, ((),), ledger=tuple(
                entry for entry in machine.ledger if entry[1] == key))
            result = explore_workers(exploration, alone, start=start, token_prefix=AT_END_TOKENS)
            if result.finding is not None:
                ahead = "\n".join(f"    {step.actor} {step.description}"
                                  for step in result.finding.trace)
                raise machine.failure(
                    f"at the end, with every worker gone, {result.finding.kind}: "
                    f"{result.finding.message}"
                    + (f"\n  then, with one worker:\n{ahead}" if ahead else ""))

    machine_class.check_at_end = no_record_stranded

