"""Interleaved workers: the lease protocol explored with N workers on M records.

The single-record search (:mod:`lifecycles.machines._exploration`) checks what one
record can become. The bugs of leased work are between workers: a worker whose lease
was rescued completes anyway, the same work runs twice, an orphaned lease is never
recovered. This module explores them, as model checkers such as TLC and stateright do,
on the production code: each step runs the real protocol
(:mod:`lifecycles.machines.lease`) on the in-memory store, whose compare-and-set the
conformance suite ties to the SQL stores'.

A *world* is the store's records, the clock and each worker's hand. Its steps:

* **claim** (worker *w*, idle): :func:`~lifecycles.machines.lease.claim` in one
  transaction: every expired lease rescued, then the first due record leased under a
  fresh token;
* **claim_many** (worker *w*, idle; with M >= 2 records and ``Workers.batches``):
  :func:`~lifecycles.machines.lease.claim_many`, what ``run_many`` does: in one
  transaction every expired lease rescued, then up to M due records leased, each under
  a token of its own;
* **complete** (worker *w*, holding leases): its reader or deliver call for one record
  it holds ended one of the declared ways (:class:`Work`), and
  :func:`~lifecycles.machines.lease.complete` writes the finishing step:
  compare-and-set on the record as claimed, else on the record as stored now, where
  the table's guards decide. A batch's records are completed one step each, in any
  order and between other workers' steps: more interleavings than ``run_many``'s one
  completing transaction allows, so nothing it can do is missed;
* **renew** (worker *w*, holding leases; where the lifecycle declares a renewal row,
  ``Handling(renewal=...)``): the worker fires it for one lease it holds, as a worker does
  while a long handler runs, through :func:`~lifecycles.machines.lease.complete`; the
  table's guards must refuse it once the lease was rescued; accepted, the worker holds the
  renewed record (same token, later expiry);
* **stop** (worker *w*, holding leases): the worker dies; its leases are left to expire;
* **tick**: the clock moves to the next moment a record becomes due or a lease expires
  (between two such moments no guard of the protocol changes its answer).

Checked in every world and on every step: the state and step invariants (by the
engine, on every write), and the protocol's own properties: **at most one live lease
per record** (held by a worker, carrying the record's token, not expired); every
**whole-store invariant** (:mod:`lifecycles.invariants._store`), with the workers'
holdings in view; **no
completion from a superseded lease is accepted** (a write by a worker must replace the
record as it leased it: leased status, its own token); **no registered record is lost**;
and, once the search is complete, **every record keeps a way to a final status** from
every world reached. Worlds are the same state when their records are (by the
lifecycle's abstraction, with their due and expiry times relative to the clock) and
their workers' hands are (which record, whether it is still the stored one, whether
its token is still the record's), workers taken as a multiset.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from lifecycles.invariants._core import InvariantViolation
from lifecycles.invariants._store import Holding, StoreView
from lifecycles.machines import _exploration as search
from lifecycles.machines import lease
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row, TransitionRefused
from lifecycles.machines._work import Result, Step
from lifecycles.stores._memory import MemoryStore

if TYPE_CHECKING:
    from lifecycles.machines._exploration import Exploration

R = TypeVar("R")

__all__ = [
    "EFFECT_KEYS", "ExternalEffect", "Finding", "Held", "InterleavedStep", "InterleavingResult",
    "InterleavingViolation", "Work", "Workers", "World", "explore_workers", "replay_interleaving",
]


@attrs.frozen
class Work(Generic[R]):
    """One way a worker's reader or deliver call can end, and the step that finishes it:
    ``step(record, fire)`` fires the lifecycle's trigger(s) on ``record`` through
    ``fire(trigger, record, inputs)`` (see :func:`~lifecycles.machines.lease.complete`)."""

    label: str
    step: lease.StepOn[R]
    calls: str | None = None
    """The external effect (:class:`ExternalEffect`, by name) this way of ending makes
    before its step is written: the provider is paid whether or not the step is then
    accepted."""


EFFECT_KEYS = ("record", "token", "none")


@attrs.frozen
class ExternalEffect(Generic[R]):
    """A call a worker makes outside the store (a payment, a delivery), and how the
    provider tells a repeated call: ``keyed_by`` ``"record"`` (an idempotency key of the
    record's: a second call for it is the first), ``"token"`` (keyed by the lease: a
    rescued lease's call is a new one) or ``"none"`` (every call counts). The
    interleaving keeps a ghost ledger of the calls that took effect, and ``rule(record,
    effected)`` must hold for every final record and the number of effective calls for
    it (``meaning`` says it in a line: "refunded exactly when paid once")."""

    name: str
    keyed_by: str
    rule: Callable[[R, int], bool]
    meaning: str

    def __attrs_post_init__(self) -> None:
        if self.keyed_by not in EFFECT_KEYS:
            raise ValueError(f"{self.name}: keyed_by {self.keyed_by!r} is not one of "
                             f"{EFFECT_KEYS}")


@attrs.frozen
class Workers(Generic[R]):
    """How a leased lifecycle's workers are explored, declared beside its table
    (``Exploration(workers=...)``).

    ``records(m)``: the first ``m`` records, registered and due at the start;
    ``inputs(now, worker, token)``: a worker's inputs for a claim, or for the finishing
    step of the lease ``token`` it holds; ``work(held, inputs)``: the ways its call for
    the record ``held`` (as it claimed it) can end, each finishing the lease with
    ``inputs``. ``count`` workers and ``record_count`` records are explored by default,
    at most ``max_count`` and ``max_records`` (``lifecycles check --workers N
    --records M``). ``calls`` says in a few words what the calls answer, for the bounds.
    """

    records: Callable[[int], Sequence[R]]
    inputs: Callable[[float, str, str], Any]
    work: Callable[[R, Any], Sequence[Work[R]]]
    calls: str
    count: int = 2
    record_count: int = 1
    max_count: int = 3
    max_records: int = 2
    max_states: int = 400_000
    batches: bool = True  # idle workers may also lease every record at once (claim_many)
    effects: tuple[ExternalEffect[R], ...] = ()  # what their calls do outside the store

    def sized(self, count: int | None = None, record_count: int | None = None) -> Workers[R]:
        """These workers with another number of workers or records (``ValueError``
        when outside 1..max)."""
        count = self.count if count is None else count
        record_count = self.record_count if record_count is None else record_count
        if not 1 <= count <= self.max_count:
            raise ValueError(f"workers {count} is not within 1..{self.max_count}")
        if not 1 <= record_count <= self.max_records:
            raise ValueError(f"records {record_count} is not within 1..{self.max_records}")
        return attrs.evolve(self, count=count, record_count=record_count)

    @classmethod
    def from_handling(
        cls, lifecycle: Lifecycle[R, Any], records: Callable[[int], Sequence[R]],
        results: Sequence[tuple[str, Result]], **options: Any,
    ) -> Workers[R]:
        """Workers (``options``: ``lease_seconds``, default 30, and any field of
        :class:`Workers`) whose calls end as the runtime worker's do: each labelled handler
        ``result`` (a :class:`~lifecycles.machines._work.Returned` value or a
        :class:`~lifecycles.machines._work.Raised` error) turned into its finishing step by
        the lifecycle's own :class:`~lifecycles.machines._work.Handling` (its ``inputs``
        and ``finish``), so the checker explores exactly the steps production fires. A
        result the handling leaves (:class:`~lifecycles.machines._work.Leave`) is the
        ``stop`` step already explored."""
        handling = lifecycle.handling
        if handling is None:
            raise ValueError(f"{lifecycle.name} declares no Handling")

        def work(held: R, inputs: Any) -> list[Work[R]]:
            ways = []
            for label, result in results:
                step = handling.finish(held, inputs, result)
                if isinstance(step, Step):
                    ways.append(Work(label, step.fire))
            return ways

        lease_seconds = float(options.pop("lease_seconds", 30.0))

        def inputs(now: float, worker: str, token: str) -> Any:
            return handling.inputs(now, worker, token, lease_seconds)

        calls = options.pop("calls", ", ".join(label for label, _ in results))
        return cls(records=records, inputs=inputs, work=work, calls=calls, **options)

    @property
    def bounds(self) -> str:
        plural = "s" if self.record_count > 1 else ""
        batch = ("; a worker may lease them all in one claim_many"
                 if self.batches and self.record_count > 1 else "")
        return (f"{self.count} workers x {self.record_count} record{plural}; each call "
                f"ends as {self.calls}; workers may stop holding a lease{batch}")


@attrs.frozen
class Held(Generic[R]):
    """A worker's hand: the record as it claimed it, and its lease token."""

    record: R
    token: str


@attrs.frozen
class World(Generic[R]):
    """The stored records (in key order), the clock, each worker's hand (the leases it
    holds, in claim order; empty: idle), how many tokens were minted (for fresh
    names, not part of the state) and the ghost ledger of external effects."""

    records: tuple[R, ...]
    now: float
    workers: tuple[tuple[Held[R], ...], ...]
    minted: int = 0
    ledger: tuple[tuple[str, str, str], ...] = ()
    """The external calls that took effect: (effect, record key, the provider's key of
    the call), sorted; a repeated provider key is the same call."""


@attrs.frozen
class InterleavedStep:
    """One step of an interleaving: who acted (``worker-2``, ``clock``), how
    (``claim``, ``claim_many``, ``complete``, ``renew``, ``stop``, ``tick``), which of its
    choices, and
    what it did."""

    actor: str
    action: str
    choice: int
    description: str


@attrs.frozen
class Finding:
    """A property that broke, and the shortest interleaving reaching it."""

    kind: str  # invariant, superseded_completion, two_live_leases, store_invariant,
    #            external_effect, record_lost, no_way_to_final, error
    message: str
    rules: tuple[str, ...]
    trace: tuple[InterleavedStep, ...]


@attrs.define
class InterleavingResult:
    """The figures of one interleaving search."""

    lifecycle: str
    workers: int
    records: int
    states: int = 0
    steps: int = 0
    refusals: int = 0
    depth: int = 0
    seconds: float = 0.0
    truncated: bool = False
    cut_at: str | None = None  # the bound that cut the search: "max_states=200000"
    finding: Finding | None = None

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float("inf")


class InterleavingViolation(AssertionError):
    """A replayed interleaving broke a property (the replay test fails with it)."""


class _Broken(Exception):
    """A property broke; ``said`` is what the step did, when it got that far."""

    def __init__(self, kind: str, message: str, rules: tuple[str, ...] = (),
                 said: str = "") -> None:
        super().__init__(message)
        self.kind, self.message, self.rules, self.said = kind, message, rules, said


@attrs.define
class _Rows:
    """An observer noting the rows a step fired (to say what a claim did)."""

    lifecycle: Lifecycle[Any, Any]
    fired_rows: list[str] = attrs.field(factory=list)
    last_attempt: str = ""

    def attempted(self, lifecycle: Lifecycle[Any, Any], trigger: str, record: Any,
                  inputs: Any) -> None:
        if lifecycle is self.lifecycle:
            self.last_attempt = (f"{trigger} {lifecycle.key_of(record)} from "
                                 f"{lifecycle.status_of(record)}")

    def fired(self, lifecycle: Lifecycle[Any, Any], row: Row, before: Any, after: Any) -> None:
        if lifecycle is self.lifecycle:
            self.fired_rows.append(
                f"{row.trigger} {lifecycle.key_of(before)} {row.source} -> {row.dest}")


def _worker(index: int) -> str:
    return f"worker-{index + 1}"


class _Model(Generic[R]):
    """The steps of a world and the properties checked on them."""

    def __init__(self, exploration: Exploration[R], workers: Workers[R],
                 records: Sequence[R] | None = None, token_prefix: str = "lease-") -> None:
        self.lifecycle: Lifecycle[R, Any] = exploration.lifecycle
        self.token_prefix = token_prefix  # a claim's token: the prefix and a count
        self.declared = lease.declared_lease(self.lifecycle)
        self.abstraction = exploration.abstraction
        self.workers = workers
        handling = self.lifecycle.handling
        self.renewal = handling.renewal if handling is not None else None
        first = sorted(workers.records(workers.record_count) if records is None else records,
                       key=self.lifecycle.key_of)
        for record in first:
            self.lifecycle.check(record)
        self.keys = tuple(self.lifecycle.key_of(record) for record in first)
        start = min((self._due_or_expiry(record) or 0.0 for record in first), default=0.0)
        self.start = start
        self.initial: World[R] = World(tuple(first), start, ((),) * workers.count)

    # -- what a world is, for the search --------------------------------------------

    def _due_or_expiry(self, record: R) -> float | None:
        """When the protocol's answer about ``record`` next changes: its due time when
        claimable, its lease expiry when leased."""
        status = self.lifecycle.status_of(record)
        if status in self.lifecycle.claimable:
            moment: float | None = getattr(record, self.declared.due_field)
            return moment
        if status == self.lifecycle.leased:
            expiry: float | None = getattr(record, self.declared.expires_field)
            return expiry
        return None

    def key(self, world: World[R]) -> Hashable:
        def relation(moment: float | None) -> int:
            return 2 if moment is None else (moment > world.now) - (moment < world.now)

        by_key = dict(zip(self.keys, world.records, strict=True))
        records = tuple(
            (self.abstraction(record), relation(self._due_or_expiry(record)))
            for record in world.records
        )

        def lease_held(held: Held[R]) -> tuple[object, ...]:
            key = self.lifecycle.key_of(held.record)
            stored = by_key[key]
            return key, held.record == stored, held.token == self._token(stored)

        def hand(leases: tuple[Held[R], ...]) -> tuple[tuple[object, ...], ...]:
            return tuple(sorted(map(lease_held, leases)))

        # The ledger by counts: which provider key a call had is not the state.
        effected = tuple(sorted({(effect, key): self.effected(world, effect, key)
                                 for effect, key, _ in world.ledger}.items()))
        return records, tuple(sorted(map(hand, world.workers))), effected

    def _token(self, record: R) -> object:
        return getattr(record, self.declared.token_field)

    def at(self, moment: float) -> str:
        return f"t+{moment - self.start:g}s"

    # -- the store the steps run on -----------------------------------------------------

    def store_for(self, world: World[R]) -> Any:
        """The store a step of ``world`` runs on: a memory store holding its records
        (the generated tests' model runs the same steps on a real store instead)."""
        return MemoryStore(self.lifecycle, world.records)

    def records_in(self, store: Any) -> tuple[R, ...]:
        """The records of ``store`` after a step, in key order."""
        held: tuple[R, ...] = store.held()
        return held

    def claim_on(self, store: Any, inputs_for: Callable[[int], Any], limit: int) -> list[R]:
        """The protocol's claim (``limit`` 1) or batch claim, on ``store``."""
        if limit == 1:
            one = lease.claim(store, self.lifecycle, inputs_for(0))
            return [] if one is None else [one]
        return lease.claim_many(store, self.lifecycle, inputs_for, limit)

    # -- the steps ---------------------------------------------------------------------

    def actions(self, world: World[R]) -> list[tuple[str, str, int]]:
        """Every step possible in ``world``: (actor, action, choice), in a fixed order."""
        found: list[tuple[str, str, int]] = []
        batches = self.workers.batches and len(self.keys) > 1
        for index, hand in enumerate(world.workers):
            name = _worker(index)
            if not hand:
                found.append((name, "claim", 0))
                if batches:
                    found.append((name, "claim_many", 0))
                continue
            # One choice per (lease held, way its call ends), numbered in that order.
            ways = sum(len(self._ways(world, name, held)) for held in hand)
            found.extend((name, "complete", number) for number in range(ways))
            if self.renewal is not None:
                found.extend((name, "renew", position) for position in range(len(hand)))
            found.append((name, "stop", 0))
        if self._next_moment(world) is not None:
            found.append(("clock", "tick", 0))
        return found

    def _ways(self, world: World[R], name: str, held: Held[R]) -> Sequence[Work[R]]:
        return self.workers.work(held.record, self.workers.inputs(world.now, name, held.token))

    def _chosen(self, world: World[R], name: str, hand: tuple[Held[R], ...], choice: int
                ) -> tuple[int, int]:
        """Choice ``choice`` of a completing worker: (which lease, which way it ends)."""
        for position, held in enumerate(hand):
            ways = len(self._ways(world, name, held))
            if choice < ways:
                return position, choice
            choice -= ways
        raise IndexError(f"{name} has no completion choice {choice}")

    def _next_moment(self, world: World[R]) -> float | None:
        later = [moment for moment in map(self._due_or_expiry, world.records)
                 if moment is not None and moment > world.now]
        return min(later, default=None)

    def run(self, world: World[R], actor: str, action: str, choice: int
            ) -> tuple[World[R], str, bool]:
        """The world after one step, what happened, and whether it was a refusal.
        Raises :class:`_Broken` when a property breaks."""
        if action == "tick":
            moment = self._next_moment(world)
            assert moment is not None
            return attrs.evolve(world, now=moment), f"moves to {self.at(moment)}", False
        index = int(actor.rpartition("-")[2]) - 1
        if action in ("claim", "claim_many"):
            return self._claim(world, index, len(self.keys) if action == "claim_many" else 1)
        hand = world.workers[index]
        assert hand
        hands = list(world.workers)
        if action == "stop":
            hands[index] = ()
            left = ", ".join(f"{held.token} of {self.lifecycle.key_of(held.record)}"
                             for held in hand)
            return (attrs.evolve(world, workers=tuple(hands)),
                    f"stops, leaving its lease{'s' if len(hand) > 1 else ''} {left} to expire",
                    False)
        store = self.store_for(world)
        if action == "renew":
            held = hand[choice]
            renewal = self.renewal
            assert renewal is not None
            inputs = self.workers.inputs(world.now, actor, held.token)
            refused, said, renewed = self._write(
                store, world, index, held, f"renews {self.lifecycle.key_of(held.record)}",
                lambda record, fire: fire(renewal, record, inputs), what="renewal")
            # Renewed, it works on under the record it wrote; refused, it still holds its
            # hand, and its completion will be refused in turn.
            if renewed is not None:
                hands[index] = (*hand[:choice], Held(renewed, held.token), *hand[choice + 1:])
            return (attrs.evolve(world, records=self.records_in(store), workers=tuple(hands)),
                    said, refused)
        position, way = self._chosen(world, actor, hand, choice)
        hands[index] = hand[:position] + hand[position + 1:]
        ledger, called = self._called(world, hand[position], self._ways(world, actor,
                                                                       hand[position])[way])
        refused, said = self._complete(store, world, index, hand[position], way)
        return (attrs.evolve(world, records=self.records_in(store), workers=tuple(hands),
                             ledger=ledger), called + said, refused)

    def _called(self, world: World[R], held: Held[R], work: Work[R]
                ) -> tuple[tuple[tuple[str, str, str], ...], str]:
        """The ledger after ``work``'s external call, made before its step is written
        (whatever the store then says), and what the call did."""
        if work.calls is None:
            return world.ledger, ""
        effect = self.effect(work.calls)
        key = self.lifecycle.key_of(held.record)
        provider_key = {"record": key, "token": held.token,
                        "none": f"call-{len(world.ledger) + 1}"}[effect.keyed_by]
        repeat = any(entry[0] == effect.name and entry[2] == provider_key
                     for entry in world.ledger)
        said = (f"calls {effect.name} for {key} (a repeat of the call keyed {provider_key}, "
                "no effect); " if repeat else f"calls {effect.name} for {key}; ")
        if repeat:
            return world.ledger, said
        return tuple(sorted((*world.ledger, (effect.name, key, provider_key)))), said

    def effect(self, name: str) -> ExternalEffect[R]:
        for effect in self.workers.effects:
            if effect.name == name:
                return effect
        raise ValueError(f"a call names the external effect {name!r}, which the workers "
                         "do not declare (Workers(effects=...))")

    def effected(self, world: World[R], effect: str, key: str) -> int:
        """How many of the calls of ``effect`` for ``key`` took effect."""
        return sum(1 for entry in world.ledger if entry[0] == effect and entry[1] == key)

    def _claim(self, world: World[R], index: int, limit: int) -> tuple[World[R], str, bool]:
        """``limit`` 1: a claim (:func:`lease.claim`); more: a batch (:func:`lease.claim_many`)."""
        store = self.store_for(world)
        name = _worker(index)

        def inputs_for(number: int) -> Any:  # each lease its own fresh token
            return self.workers.inputs(world.now, name,
                                       f"{self.token_prefix}{world.minted + number + 1}")

        rows = _Rows(self.lifecycle)
        said = f"claims{f' up to {limit}' if limit > 1 else ''} at {self.at(world.now)}"
        try:
            with self.lifecycle.observing(rows):
                granted = self.claim_on(store, inputs_for, limit)
        except InvariantViolation as error:
            before = f"; fired before it: {', '.join(rows.fired_rows)}" if rows.fired_rows else ""
            raise _Broken("invariant", f"the claim broke a rule at {rows.last_attempt}: "
                          f"{error}{before}", tuple(getattr(error, "rules", ())),
                          f"{said}: {rows.last_attempt} broke a rule") from error
        hands = list(world.workers)
        said += (": " + ", then ".join(rows.fired_rows) if rows.fired_rows else ": nothing due")
        # The worker works under the token each claimed record carries, as run_once does:
        # not necessarily the one it asked for.
        hands[index] = tuple(Held(record, str(self._token(record))) for record in granted)
        for held in hands[index]:
            said += f"; holds {self.lifecycle.key_of(held.record)} under {held.token}"
        minted = world.minted + len(granted)
        return (World(self.records_in(store), world.now, tuple(hands), minted, world.ledger),
                said, not granted)

    def _complete(self, store: MemoryStore[R], world: World[R], index: int, held: Held[R],
                  choice: int) -> tuple[bool, str]:
        inputs = self.workers.inputs(world.now, _worker(index), held.token)
        work = self.workers.work(held.record, inputs)[choice]
        refused, said, _ = self._write(
            store, world, index, held,
            f"completes {self.lifecycle.key_of(held.record)} ({work.label!r})", work.step)
        return refused, said

    def _write(self, store: MemoryStore[R], world: World[R], index: int, held: Held[R],
               doing: str, step: lease.StepOn[R], what: str = "completion",
               ) -> tuple[bool, str, R | None]:
        """Worker ``index``'s ``step`` for the lease it holds, through
        :func:`lease.complete`: (refused, what happened, the record written or ``None``).
        Raises :class:`_Broken` when it breaks a rule or writes over a superseded lease."""
        name = _worker(index)
        written: list[tuple[str, R]] = []

        def watched_step(record: R, fire: Callable[[str, R, Any], R]) -> R:
            def watched(trigger: str, on: R, given: Any) -> R:
                after = fire(trigger, on, given)
                written.append((trigger, on))
                return after
            return step(record, watched)

        key = self.lifecycle.key_of(held.record)
        said = f"{doing} at {self.at(world.now)} under {held.token}: "
        try:
            after = lease.complete(store, self.lifecycle, held.record, watched_step)
        except (TransitionRefused, lease.LostRace) as refusal:
            code = getattr(refusal, "code", type(refusal).__name__)
            return True, said + f"refused ({code})", None
        except InvariantViolation as error:
            raise _Broken("invariant", f"{name}'s step broke a rule: {error}",
                          tuple(getattr(error, "rules", ())), said + "refused") from error
        stored_now = store.get(key)
        now_status = "gone" if stored_now is None else self.lifecycle.status_of(stored_now)
        said += f"{', '.join(trigger for trigger, _ in written)} accepted -> {now_status}"
        for trigger, on in written:
            if (self.lifecycle.status_of(on) != self.lifecycle.leased
                    or self._token(on) != held.token):
                raise _Broken(
                    "superseded_completion",
                    f"a {what} from a superseded lease was accepted: {name} held "
                    f"{key} under {held.token}, but {trigger} wrote over it when it was "
                    f"{self.lifecycle.status_of(on)} under {self._token(on)}", (), said)
        return False, said, after

    def check(self, world: World[R]) -> None:
        """The properties of one world (the invariants were checked on every write)."""
        lost = self.lost(world)
        if lost:
            raise _Broken("record_lost", f"records {lost} were lost")
        for record in world.records:
            if (self.lifecycle.status_of(record) != self.lifecycle.leased
                    or lease.is_expired(self.lifecycle, record, world.now)):
                continue
            key = self.lifecycle.key_of(record)
            holders = [
                _worker(index) for index, hand in enumerate(world.workers) for held in hand
                if self.lifecycle.key_of(held.record) == key and held.token == self._token(record)
            ]
            if len(holders) > 1:
                raise _Broken("two_live_leases",
                              f"{' and '.join(holders)} both hold the live lease "
                              f"{self._token(record)} of {key}")
        for effect in self.workers.effects:
            for record in world.records:
                key = self.lifecycle.key_of(record)
                if (self.lifecycle.status_of(record) not in self.lifecycle.final
                        or not self.ledger_tracks(key)):
                    continue
                count = self.effected(world, effect.name, key)
                if not effect.rule(record, count):
                    raise _Broken(
                        "external_effect",
                        f"{key} is {self.lifecycle.status_of(record)} after {count} "
                        f"{effect.name} call{'s' if count != 1 else ''} that took effect "
                        f"(keyed by {effect.keyed_by}): the rule {effect.meaning!r} is "
                        "broken", (effect.name,))
        if self.lifecycle.invariants.store:
            view = self.view(world)
            broken = self.lifecycle.invariants.broken_across(view)
            if broken:
                raise _Broken("store_invariant", f"the store breaks {', '.join(broken)}: "
                              f"{self.describe(view)}", tuple(broken))

    def ledger_tracks(self, key: str) -> bool:
        """Whether every step on ``key`` was a worker's, so its ledger says all its calls."""
        return True

    def lost(self, world: World[R]) -> list[str]:
        """The keys of the records registered that ``world`` no longer holds."""
        keys = tuple(self.lifecycle.key_of(record) for record in world.records)
        return [] if keys == self.keys else sorted(set(self.keys) - set(keys))

    def view(self, world: World[R]) -> StoreView[R]:
        """``world`` as a whole-store invariant reads it, with each worker's holdings."""
        stored = {self.lifecycle.key_of(record): record for record in world.records}

        def live(held: Held[R]) -> bool:
            record = stored.get(self.lifecycle.key_of(held.record))
            return (record is not None and self.lifecycle.status_of(record) == self.lifecycle.leased
                    and self._token(record) == held.token
                    and not lease.is_expired(self.lifecycle, record, world.now))

        holdings = tuple(Holding(_worker(index), held.record, held.token, live(held))
                         for index, hand in enumerate(world.workers) for held in hand)
        return StoreView(world.records, lambda r: str(self.lifecycle.status_of(r)), world.now,
                         holdings)

    def describe(self, view: StoreView[R]) -> str:
        """Each record's status and each live lease, for a broken whole-store rule."""
        records = ", ".join(f"{self.lifecycle.key_of(r)} {view.status_of(r)}"
                            for r in view.records)
        leases = "; ".join(f"{h.worker} holds {self.lifecycle.key_of(h.record)} under {h.token}"
                           for h in view.holdings or () if h.live) or "no live lease"
        return f"{records}; {leases}"

    def final(self, world: World[R], position: int) -> bool:
        return self.lifecycle.status_of(world.records[position]) in self.lifecycle.final


def _step_of(model: _Model[R], world: World[R], action: tuple[str, str, int]
             ) -> tuple[World[R], InterleavedStep, bool]:
    actor, kind, choice = action
    try:
        after, said, refused = model.run(world, actor, kind, choice)
    except _Broken:
        raise
    except Exception as error:  # any other escape is a finding, not a crash
        # The trace prints the actor before this: "worker-2 claim raised ...".
        raise _Broken("error", f"{kind} raised {type(error).__name__}: {error}") from error
    try:
        model.check(after)
    except _Broken as broken:  # the step went through: say what it did
        broken.said = broken.said or said
        raise
    return after, InterleavedStep(actor, kind, choice, said), refused


def explore_workers(exploration: Exploration[R], workers: Workers[R] | None = None,
                    start: World[R] | None = None,
                    progress: Callable[[InterleavingResult], None] | None = None,
                    token_prefix: str = "lease-") -> InterleavingResult:
    """Breadth-first search of every world the workers can reach (from ``start``,
    default the declared records, all due, every worker idle); the first property to
    break is the finding, with the shortest interleaving to it. ``progress`` hears the
    figures so far about once a second once the search has run
    :data:`~lifecycles.machines._exploration.PROGRESS_AFTER` seconds. Claims mint
    the tokens ``token_prefix`` 1, 2...: from a ``start`` whose records carry tokens of
    that form, another prefix keeps the new ones new."""
    declared = workers or exploration.workers
    if declared is None:
        raise ValueError(f"{exploration.lifecycle.name} declares no workers to explore")
    model = _Model(exploration, declared, None if start is None else start.records,
                   token_prefix)
    result = InterleavingResult(exploration.lifecycle.name, declared.count,
                                declared.record_count)
    started = time.perf_counter()
    first = start or model.initial
    worlds: list[World[R]] = [first]
    parents: list[tuple[int, InterleavedStep | None]] = [(-1, None)]
    depth = [0]
    index_of: dict[Hashable, int] = {model.key(first): 0}
    edges: list[list[int]] = [[]]
    queue = deque([0])

    def trace(index: int) -> tuple[InterleavedStep, ...]:
        steps: list[InterleavedStep] = []
        while index > 0:
            index, step = parents[index]
            assert step is not None
            steps.append(step)
        return tuple(reversed(steps))

    report_at = started + search.PROGRESS_AFTER  # read now: tests lower it
    while queue and result.finding is None:
        if progress is not None and time.perf_counter() >= report_at:
            result.states, result.seconds = len(worlds), time.perf_counter() - started
            progress(result)
            report_at = time.perf_counter() + 1.0
        index = queue.popleft()
        world = worlds[index]
        for action in model.actions(world):
            try:
                after, step, refused = _step_of(model, world, action)
            except _Broken as broken:
                failed = InterleavedStep(*action, broken.said or broken.message)
                result.finding = Finding(broken.kind, broken.message, broken.rules,
                                         (*trace(index), failed))
                break
            result.steps += 1
            result.refusals += refused
            key = model.key(after)
            target = index_of.get(key)
            if target is None:
                if len(worlds) >= declared.max_states:
                    result.truncated = True
                    result.cut_at = f"max_states={declared.max_states}"
                    continue
                target = len(worlds)
                index_of[key] = target
                worlds.append(after)
                parents.append((index, step))
                depth.append(depth[index] + 1)
                edges.append([])
                queue.append(target)
                result.depth = max(result.depth, depth[target])
            edges[index].append(target)
    result.states = len(worlds)
    if result.finding is None and not result.truncated:
        result.finding = _no_way_to_final(model, worlds, edges, trace)
    result.seconds = time.perf_counter() - started
    return result


def _no_way_to_final(model: _Model[R], worlds: list[World[R]], edges: list[list[int]],
                     trace: Callable[[int], tuple[InterleavedStep, ...]]) -> Finding | None:
    """Every record keeps a way to a final status from every world: for each record,
    the worlds that can reach one where it is final (backwards over the edges)."""
    incoming: list[list[int]] = [[] for _ in worlds]
    for source, targets in enumerate(edges):
        for target in targets:
            incoming[target].append(source)
    for position, key in enumerate(model.keys):
        can = [model.final(world, position) for world in worlds]
        queue = deque(index for index, ok in enumerate(can) if ok)
        while queue:
            for source in incoming[queue.popleft()]:
                if not can[source]:
                    can[source] = True
                    queue.append(source)
        if not all(can):
            stuck = can.index(False)  # the first found: the shortest interleaving
            status = model.lifecycle.status_of(worlds[stuck].records[position])
            return Finding(
                "no_way_to_final",
                f"{key} can never reach a final status from here (it is {status}; "
                f"{can.count(False)} of {len(worlds)} worlds are like this)", (), trace(stuck))
    return None


def replay_interleaving(exploration: Exploration[R], workers: int, records: int,
                        steps: Sequence[tuple[str, str, int]]) -> World[R]:
    """Replay an interleaving found by the checker, checking every property on the way.

    Raises :class:`InterleavingViolation` where a property breaks (at the end, too,
    when a record can no longer reach a final status), and
    :class:`~lifecycles.machines._exploration.TraceMismatch` when a step is not possible
    (the exploration's declarations changed since the trace was written). Returns the
    world reached, when every property held.
    """
    from lifecycles.machines._exploration import TraceMismatch

    declared = exploration.workers
    if declared is None:
        raise TraceMismatch(f"{exploration.lifecycle.name} declares no workers")
    model = _Model(exploration, declared.sized(workers, records))
    world = model.initial
    for number, action in enumerate(steps, 1):
        action = (action[0], action[1], int(action[2]))
        if action not in model.actions(world):
            raise TraceMismatch(f"step {number} {action} is not possible in the world reached")
        try:
            world, _, _ = _step_of(model, world, action)
        except _Broken as broken:
            raise InterleavingViolation(f"step {number}: {broken.message}") from None
    ahead = explore_workers(exploration, model.workers, start=world)
    if ahead.finding is not None and ahead.finding.kind == "no_way_to_final" \
            and not ahead.finding.trace:
        raise InterleavingViolation(ahead.finding.message)
    return world
