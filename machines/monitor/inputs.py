"""The monitor's exploration inputs, beside its table: what the checker and tests feed it.

Bounds (what ``lifecycles check monitor`` explores, completely):

* one notification, registered at t=1000 with ``max_failures`` 1, 2 and 3;
* the default :class:`RetryPolicy` (poll every 30 s, backoff 5 s doubling to 300 s)
  and a 600 s lease;
* ``claim`` and ``expire_lease`` at the record's clock and one second before, at and
  one second after its next poll time / lease expiry (never before the clock: time
  does not run backwards for one record);
* ``complete_poll``: every kind of receiver response, run through
  :func:`parse_answer` and :func:`complete_with_answer`: the five valid answers
  (pending, leased, leased with its lease expired, retry_wait and failed with an
  error code, succeeded), responses ``parse_answer`` rejects (not a mapping, a field
  missing, another schema, another event, other capabilities, attempts above the
  maximum, an error code on success, leased without expiry), and the two that parse
  but whose record would break an invariant (retry_wait or failed without an error
  code); by the lease holder while the lease is live, and once each by an intruder,
  by the holder with a stale token, and after the lease expired;
* ``reader_error``: a read that raised, retryable or not, with a valid code, an
  invalid code, or none (see :func:`reader_error_code`).

Interleaved workers (:func:`monitor_workers`): 2 workers (up to 3) on 1 notification
(up to 2), registered at t=1000 with ``max_failures`` 2, through ``claim`` and the
facade's own completion (:func:`~lifecycles.machines.lease.complete` of
:func:`poll_step`); each read ends pending, succeeded, failed, with a response
``parse_answer`` rejects, or raising a retryable reader error.

Abstraction (two records are one state when these agree): every field as it is,
except that the monitor's own times (next poll, lease expiry, creation) are replaced
by their relation (before / at / after / none) to the record's clock, ``updated_at``,
the time of its last transition; the receiver's times (reported data that no guard
reads and invariants only test for presence) by their presence; the lease owner and
token by their presence; and ``poll_attempts`` by ``min(poll_attempts, max_failures)``,
because no guard reads it and the one invariant that does (``poll_attempts >=
failures``) can no longer fail once it reaches ``max_failures``. Guards compare times
only with ``now``, and every ``now`` the moves use is placed relative to the record's
own times, so the abstraction loses no behaviour; ``tests/tools/test_checker.py`` checks
that a search with exact time offsets reaches no abstract state this one misses.

The generated tests draw wider inputs than these bounds (any time, other workers and
tokens, generated responses): their Hypothesis strategies are test code, in
:mod:`lifecycles.monitor.strategies`, named here and imported only when a test draws.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import attrs

from lifecycles.invariants.monitor import RESPONSE_INVALID, MonitorRecord, same_notification
from lifecycles.machines._declaration import TransitionRefused
from lifecycles.machines._exploration import (
    AcceptedCycle,
    ExpectationBroken,
    Exploration,
    Fire,
    Move,
    strategy_in,
    time_relation,
    trigger_move,
)
from lifecycles.machines._interleaving import Work, Workers
from lifecycles.machines._memo import LIMIT, ByIdentity, identity_of, memoized
from lifecycles.machines._work import Step
from lifecycles.machines.lease import StepOn
from lifecycles.machines.monitor import (
    MONITOR,
    FireMonitor,
    MonitorInputs,
    ReceiverAnswer,
    RetryPolicy,
    complete_with_answer,
    new_record,
    parse_answer,
    poll_step,
    read_answer,
    reader_error_code,
)
from lifecycles.machines.monitor.mutants import EQUIVALENT_MUTANTS
from lifecycles.machines.monitor.responses import (
    CAPABILITIES_SHA256,
    START,
    failure_responses,
    progress_responses,
    receiver_answer,
    rejected_responses,
    success_responses,
)

__all__ = [
    "ANSWER_ENDS",
    "CLAIMER",
    "EXPLORATION",
    "HELD",
    "IDENTITY",
    "INTRUDER",
    "LEASE_SECONDS",
    "MAX_FAILURES",
    "POLICY",
    "READER_ERRORS",
    "STRATEGIES",
    "Completer",
    "Poll",
    "ReadFailure",
    "ReaderError",
    "abstraction",
    "claim_inputs",
    "expiry_inputs",
    "fail_attempt_choices",
    "held_inputs",
    "initial_records",
    "monitor_exploration",
    "monitor_workers",
    "near",
    "register_inputs",
    "worker_calls",
]

LEASE_SECONDS = 600.0
POLICY = RetryPolicy()
CLAIMER = "worker-a"
INTRUDER = "worker-z"
MAX_FAILURES = (1, 2, 3)
STRATEGIES = "lifecycles.monitor.strategies"
"""Where the generated tests' strategies for these moves live (test code, imported only
when a generated test draws)."""

Completer = Callable[
    [MonitorRecord, ReceiverAnswer | None, MonitorInputs, FireMonitor], MonitorRecord
]


def initial_records(limits: Sequence[int] = MAX_FAILURES) -> list[MonitorRecord]:
    """One registered notification per max_failures in the bounds."""
    return [
        new_record(
            event_id="evt-1", notification_id="ntf-1", site_id="site-1",
            terminal_status="published", notification_sha256="a" * 64,
            max_failures=limit, now=START,
        )
        for limit in limits
    ]


def abstraction(r: MonitorRecord) -> Hashable:
    """See the module docstring: times relative to the clock, tokens by presence."""
    clock = r.updated_at
    return (
        r.status, r.failures, r.max_failures, min(r.poll_attempts, r.max_failures),
        time_relation(r.next_poll_at, clock), r.lease_owner is not None,
        r.lease_token is not None, time_relation(r.lease_expires_at, clock), r.last_error_code,
        r.receiver_status, r.receiver_attempts, r.receiver_max_attempts,
        r.receiver_next_attempt_at is not None, r.receiver_lease_expires_at is not None,
        r.receiver_lease_expired, r.receiver_error_code, r.receiver_processed_at is not None,
        time_relation(r.created_at, clock),
    )


def near(clock: float, *marks: float | None) -> list[float]:
    """The clock, and one second before, at and after each mark, never before the clock."""
    times = {clock}
    for mark in marks:
        if mark is not None:
            times.update(t for t in (mark - 1.0, mark, mark + 1.0) if t >= clock)
    return sorted(times)


def _relative(r: MonitorRecord, now: float) -> str:
    return f"clock{now - r.updated_at:+g}s"


# --- claim and expire_lease -----------------------------------------------------------


def claim_inputs(r: MonitorRecord) -> list[MonitorInputs]:
    token = f"lease-{r.poll_attempts + 1}"
    return [
        MonitorInputs(now=now, policy=POLICY, worker_id=CLAIMER, lease_token=token,
                      lease_seconds=LEASE_SECONDS)
        for now in near(r.updated_at, r.next_poll_at)
    ]


def register_inputs(r: MonitorRecord) -> list[MonitorInputs]:
    """The same notification registered again, then another under the same event id."""
    same = new_record(
        event_id=r.event_id, notification_id=r.notification_id, site_id=r.site_id,
        terminal_status=r.terminal_status, notification_sha256=r.notification_sha256,
        max_failures=r.max_failures, now=r.updated_at,
    )
    other = attrs.evolve(same, notification_id="ntf-other")
    return [MonitorInputs(now=r.updated_at, registration=new) for new in (same, other)]


def _register_again(fire: Fire, record: MonitorRecord, inputs: MonitorInputs) -> MonitorRecord:
    """Registering the very same notification again is accepted and changes nothing."""
    same = inputs.registration is not None and same_notification(inputs.registration, record)
    after: MonitorRecord = _accepted(lambda: fire("register", record, inputs), same,
                                     lambda: "registering the same notification again")
    return after


def expiry_inputs(r: MonitorRecord) -> list[MonitorInputs]:
    times = near(r.updated_at, r.lease_expires_at)
    return [MonitorInputs(now=now, policy=POLICY) for now in times]


def _describe_timed(r: MonitorRecord, i: MonitorInputs) -> str:
    who = f" by {i.worker_id}/{i.lease_token}" if i.worker_id else ""
    return f"now={_relative(r, i.now)}{who}"


# --- the receiver's responses, grouped by the trigger they aim at ---------------------


@attrs.frozen
class Poll:
    """One completed read: who completes it, when, and the raw response it got."""

    inputs: MonitorInputs
    response: object
    label: str
    #: The live lease holder completes: the step must be accepted (the checker's polls).
    must_be_accepted: bool = False


def held_inputs(r: MonitorRecord) -> MonitorInputs:
    return MonitorInputs(now=r.updated_at, policy=POLICY, worker_id=r.lease_owner,
                         lease_token=r.lease_token, lease_seconds=LEASE_SECONDS)


def _live_polls(r: MonitorRecord, kinds: Sequence[tuple[str, object]]) -> list[Poll]:
    """Each response from the holder, at the clock and one second before the lease expires."""
    held = held_inputs(r)
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.updated_at + 1.0
    timed = [attrs.evolve(held, now=now) for now in sorted({r.updated_at, expiry - 1.0})]
    return [Poll(inputs, response, label, must_be_accepted=True)
            for inputs in timed for label, response in kinds]


def _refused_polls(r: MonitorRecord) -> list[Poll]:
    """The same valid answer from an intruder, a stale token, and after the lease expired."""
    held, pending = held_inputs(r), _PROGRESS(r)[0][1]  # receiver_answer(r), built once
    expiry = r.lease_expires_at if r.lease_expires_at is not None else r.updated_at
    return [
        Poll(attrs.evolve(held, worker_id=INTRUDER), pending, "pending"),
        Poll(attrs.evolve(held, lease_token="lease-stale"), pending, "pending"),
        *(Poll(attrs.evolve(held, now=now), pending, "pending") for now in (expiry, expiry + 1.0)),
    ]


def _describe_poll(r: MonitorRecord, poll: Poll) -> str:
    return f"{poll.label!r} {_describe_timed(r, poll.inputs)}"


# --- reader errors: the read raised ---------------------------------------------------


class ReaderError(Exception):
    """A reader failure as a reader raises it (attributes read by reader_error_code)."""

    def __init__(self, code: object, cms_notification_failure: bool, retryable: object) -> None:
        super().__init__(code)
        self.code = code
        self.cms_notification_failure = cms_notification_failure
        self.retryable = retryable

    def __repr__(self) -> str:
        return (f"ReaderError(code={self.code!r}, cms={self.cms_notification_failure}, "
                f"retryable={self.retryable!r})")


READER_ERRORS: tuple[BaseException, ...] = (
    ReaderError("cms.timeout", True, True),
    ReaderError("cms.timeout", True, False),
    ReaderError("cms.timeout", False, True),
    ReaderError("Not A Code", True, True),
    RuntimeError("connection reset"),
)


@attrs.frozen
class ReadFailure:
    """A read that raised ``error`` while ``inputs`` held the lease."""

    inputs: MonitorInputs
    error: BaseException
    must_be_accepted: bool = False


# --- what each kind of answer must lead to (checked on every step the moves take) ------

ANSWER_ENDS: dict[str, str] = {
    **dict.fromkeys(("pending", "leased", "leased, lease expired", "retry_wait with error"),
                    "watching"),
    "succeeded": "succeeded", "failed with error": "failed",
    **dict.fromkeys(("not a mapping", "a field missing", "another schema", "another event",
                     "other capabilities", "attempts above max", "leased without expiry",
                     "retry_wait without error", "failed without error",
                     "error code on success"), RESPONSE_INVALID),
}
"""Where each kind of answer the exploration feeds must end: a valid kind in the status
its trigger leads to, a rejected one failed with response_invalid (every label of
:func:`responses` is here; tests/engine/test_step_invariants.py checks it)."""


def _expect(accepted: bool, rule: str, detail: Callable[[], str]) -> None:
    if not accepted:  # the detail is written only then: this runs on every step
        raise ExpectationBroken(rule, detail())


def _classified(poll: Poll, after: MonitorRecord) -> MonitorRecord:
    """The answer ended as its kind declares (ANSWER_ENDS; a generated answer, drawn by
    the generated tests, declares nothing)."""
    expected = ANSWER_ENDS.get(poll.label)
    invalid = after.last_error_code == RESPONSE_INVALID
    if expected == RESPONSE_INVALID:
        _expect(invalid and after.status == "failed", "rejected_answer_ends_response_invalid",
                lambda: f"{poll.label!r} ended {after.status} with {after.last_error_code}")
    elif expected is not None:
        _expect(not invalid and after.status == expected, "valid_answer_fires_its_trigger",
                lambda: f"{poll.label!r} ended {after.status}, not {expected}")
    return after


def _failure_classified(record: MonitorRecord, code: str, retryable: bool,
                        after: MonitorRecord) -> MonitorRecord:
    """A read failure is retried exactly when reader_error_code says it may be."""
    retried = retryable and record.failures + 1 < record.max_failures
    expected = "retry_wait" if retried else "failed"
    _expect(after.status == expected and after.last_error_code == code,
            "retryability_follows_reader_error_code",
            lambda: f"{code} (retryable={retryable}) ended {after.status}, not {expected}")
    return after


def _accepted(step: Callable[[], MonitorRecord], must: bool, what: Callable[[], str]
              ) -> MonitorRecord:
    try:
        return step()
    except TransitionRefused as refused:
        reason = str(refused)
        _expect(not must, "live_holder_is_never_refused", lambda: f"{what()} refused: {reason}")
        raise


# --- the moves: one per trigger -------------------------------------------------------


# What the moves' choices read of a record (lifecycles.machines._memo): the responses are
# about its notification (IDENTITY, all parse_answer reads of it), the polls are timed by
# its clock and lease (tests/engine/test_checker_memo.py holds each to its function).
IDENTITY = identity_of("event_id", "notification_id", "site_id", "terminal_status",
                       "notification_sha256")
HELD = identity_of("updated_at", "lease_owner", "lease_token", "lease_expires_at",
                   "event_id", "notification_id", "site_id", "terminal_status",
                   "notification_sha256")


# Built once per notification: every poll of it carries the same responses, parsed once.
_PROGRESS = memoized(IDENTITY, progress_responses)
_REJECTED = memoized(IDENTITY, rejected_responses)


class _Once:
    """What an exploration's moves compute once: the responses and read failures its
    memoized choices carry (built there, never changed) read once per notification, each
    poll's step (frozen inputs and answer); what was built elsewhere is read every time.
    Equal inputs are made one object, so the search sees a repeat by its identity."""

    def __init__(self) -> None:
        self.built: dict[int, object] = {}
        self.parsed: ByIdentity[ReceiverAnswer | None] = ByIdentity()
        self.steps: ByIdentity[tuple[ReceiverAnswer | None, Step[MonitorInputs]]] = ByIdentity()
        self.polled: ByIdentity[Step[MonitorInputs]] = ByIdentity()
        self.failures: ByIdentity[tuple[str, bool, MonitorInputs]] = ByIdentity()
        self.canonical: dict[MonitorInputs, MonitorInputs] = {}

    def one(self, inputs: MonitorInputs) -> MonitorInputs:  # the one object equal to it
        if len(self.canonical) >= LIMIT:
            self.canonical.clear()
        return self.canonical.setdefault(inputs, inputs)

    def step(self, poll: Poll, answer: ReceiverAnswer | None) -> Step[MonitorInputs]:
        """:func:`poll_step` of the poll's inputs and answer, kept by both objects."""
        def build() -> tuple[ReceiverAnswer | None, Step[MonitorInputs]]:
            made = poll_step(poll.inputs, answer)
            fallback = made.fallback
            return answer, Step(made.trigger, self.one(made.inputs), None if fallback is None
                                else Step(fallback.trigger, self.one(fallback.inputs)))

        kept, step = self.steps.get(poll.inputs, id(answer), build)  # the entry holds both
        return step if kept is answer else build()[1]

    def failure(self, choice: ReadFailure) -> tuple[str, bool, MonitorInputs]:
        """The code and retryability of the failure, and the inputs that record it."""
        def build() -> tuple[str, bool, MonitorInputs]:
            code, retryable = reader_error_code(choice.error)
            return code, retryable, self.one(
                attrs.evolve(choice.inputs, error_code=code, retryable=retryable))

        if self.built.get(id(choice)) is not choice:
            return build()
        return self.failures.get(choice, None, build)

    def polls(self, reads: Callable[[MonitorRecord], Any],
              compute: Callable[[MonitorRecord], Sequence[Any]]
              ) -> Callable[[MonitorRecord], tuple[Any, ...]]:
        def build(r: MonitorRecord) -> Sequence[Any]:
            made = compute(r)
            if len(self.built) >= LIMIT:
                self.built.clear()
            self.built.update((id(c.response), c.response) for c in made if isinstance(c, Poll))
            self.built.update((id(c), c) for c in made if isinstance(c, ReadFailure))
            return made

        build.__doc__ = compute.__doc__
        cached = memoized(reads, build)
        cached.uncached = compute  # type: ignore[attr-defined]
        return cached

    def answered(self, poll: Poll, record: MonitorRecord) -> Step[MonitorInputs]:
        """:func:`poll_step` of the poll's inputs and its response parsed about ``record``:
        once per poll and notification when the exploration built the poll."""
        def build() -> Step[MonitorInputs]:
            return self.step(poll, self.parse(poll.response, record))

        if self.built.get(id(poll.response)) is not poll.response:
            return build()
        return self.polled.get(poll, IDENTITY(record), build)

    def parse(self, response: object, record: MonitorRecord) -> ReceiverAnswer | None:
        if self.built.get(id(response)) is not response:
            return parse_answer(response, record, CAPABILITIES_SHA256)
        return self.parsed.get(response, IDENTITY(record), lambda: parse_answer(
            response, record, CAPABILITIES_SHA256))


def _completion(complete: Completer, once: _Once | None = None
                ) -> Callable[[Fire, MonitorRecord, Poll], MonitorRecord]:
    once_ = once or _Once()

    def what(poll: Poll) -> Callable[[], str]:
        return lambda: f"the holder's answer {poll.label!r}"

    def run(fire: Fire, record: MonitorRecord, poll: Poll) -> MonitorRecord:
        if complete is _complete:  # complete_with_answer: poll_step(...).fire(record, fire)
            step = once_.answered(poll, record)
            after = _accepted(lambda: step.fire(record, fire), poll.must_be_accepted, what(poll))
        else:
            answer = once_.parse(poll.response, record)
            after = _accepted(lambda: complete(record, answer, poll.inputs, fire),
                              poll.must_be_accepted, what(poll))
        return _classified(poll, after)

    return run


def _fail_attempt(complete: Completer, once: _Once | None = None
                  ) -> Callable[[Fire, MonitorRecord, Any], MonitorRecord]:
    once_ = once or _Once()
    completion = _completion(complete, once_)

    def run(fire: Fire, record: MonitorRecord, choice: ReadFailure | Poll) -> MonitorRecord:
        if isinstance(choice, Poll):
            return completion(fire, record, choice)
        code, retryable, inputs = once_.failure(choice)
        after: MonitorRecord = _accepted(lambda: fire("fail_attempt", record, inputs),
                                         choice.must_be_accepted, lambda: f"the holder's {code}")
        return _failure_classified(record, code, retryable, after)

    return run


def _describe_fail_attempt(r: MonitorRecord, choice: ReadFailure | Poll) -> str:
    if isinstance(choice, Poll):
        return _describe_poll(r, choice)
    return f"{choice.error!r} {_describe_timed(r, choice.inputs)}"


def fail_attempt_choices(r: MonitorRecord) -> list[ReadFailure | Poll]:
    failures = [ReadFailure(held_inputs(r), e, must_be_accepted=True) for e in READER_ERRORS]
    return [*failures, *_live_polls(r, _REJECTED(r))]


# --- the declaration ----------------------------------------------------------------------


def _complete(record: MonitorRecord, answer: ReceiverAnswer | None, inputs: MonitorInputs,
              fire: FireMonitor) -> MonitorRecord:
    return complete_with_answer(record, answer, inputs, fire)


# --- interleaved workers ------------------------------------------------------------------


def _worker_inputs(now: float, worker: str, token: str) -> MonitorInputs:
    return MonitorInputs(now=now, policy=POLICY, worker_id=worker, lease_token=token,
                         lease_seconds=LEASE_SECONDS)


def _read(response: object, held: MonitorRecord, inputs: MonitorInputs) -> StepOn[MonitorRecord]:
    """The facade's poll: the reader's response about ``held`` read as it reads it."""
    return lambda record, fire: poll_step(
        inputs, read_answer(response, held, CAPABILITIES_SHA256)).fire(record, fire)


def worker_calls(held: MonitorRecord, inputs: MonitorInputs) -> list[Work[MonitorRecord]]:
    """How a worker's read of ``held`` can end, each finished as ``run_once`` does."""
    raised = ReaderError("cms.timeout", True, True)
    return [
        Work("pending", _read(receiver_answer(held), held, inputs)),
        Work("succeeded", _read(receiver_answer(held, processing_status="succeeded",
                                                attempts=1, processed_at=START + 5.0),
                                held, inputs)),
        Work("failed", _read(receiver_answer(held, processing_status="failed", attempts=5,
                                             last_error_code="cms.publication_failed"),
                             held, inputs)),
        Work("rejected response", _read(["pending"], held, inputs)),
        Work("reader raised", lambda record, fire: poll_step(inputs, raised).fire(record, fire)),
    ]


def monitor_workers(max_failures: int = 2) -> Workers[MonitorRecord]:
    """The monitor's interleaved workers (see the module docstring)."""
    def records(count: int) -> list[MonitorRecord]:
        return [
            new_record(event_id=f"evt-{n}", notification_id=f"ntf-{n}", site_id="site-1",
                       terminal_status="published", notification_sha256="a" * 64,
                       max_failures=max_failures, now=START)
            for n in range(1, count + 1)
        ]

    return Workers(
        records=records, inputs=_worker_inputs, work=worker_calls,
        calls="pending, succeeded, failed, a rejected response or a reader error",
    )


def monitor_exploration(
    complete: Completer = _complete,
    max_failures: tuple[int, int] = (MAX_FAILURES[0], MAX_FAILURES[-1]),
) -> Exploration[MonitorRecord]:
    """The monitor's exploration; ``complete`` is the answer rule under test (default:
    :func:`complete_with_answer`; the tests swap in the reference's defect);
    ``max_failures`` the (low, high) of the notifications explored, within 1..20."""
    low, high = max_failures
    if not 1 <= low <= high <= 20:
        raise ValueError(f"max_failures {low}..{high} is not within 1..20")
    once = _Once()
    completion = _completion(complete, once)

    def observe(trigger: str, kinds: Callable[[MonitorRecord], Sequence[tuple[str, object]]],
                strategy: str, refusals: bool = False) -> Move[MonitorRecord, Poll]:
        def choices(r: MonitorRecord) -> list[Poll]:
            return _live_polls(r, kinds(r)) + (_refused_polls(r) if refusals else [])

        return Move(
            name=trigger, triggers=(trigger, "fail_attempt"), choices=once.polls(HELD, choices),
            run=completion,
            strategy=strategy_in(STRATEGIES, strategy), describe=_describe_poll,
            meaning=f"the lease holder completes the poll with an answer aimed at {trigger}",
        )

    moves: Sequence[Move[MonitorRecord, Any]] = (
        Move(name="register", triggers=("register",), choices=memoized(identity_of(
                 "updated_at", "max_failures", "event_id", "notification_id", "site_id",
                 "terminal_status", "notification_sha256"), register_inputs),
             run=_register_again, meaning="the same event id is registered again"),
        trigger_move("claim", memoized(identity_of(
                         "updated_at", "next_poll_at", "poll_attempts"), claim_inputs),
                     strategy=strategy_in(STRATEGIES, "claim_strategy"),
                     describe=_describe_timed, meaning="a worker leases the item"),
        trigger_move("expire_lease", memoized(identity_of(
                         "updated_at", "lease_expires_at"), expiry_inputs),
                     strategy=strategy_in(STRATEGIES, "expiry_strategy"),
                     describe=_describe_timed, meaning="recovery of an expired lease"),
        observe("observe_progress", _PROGRESS, "progress_strategy", refusals=True),
        observe("observe_success", memoized(IDENTITY, success_responses), "success_strategy"),
        observe("observe_failure", memoized(IDENTITY, failure_responses), "failure_strategy"),
        Move(name="fail_attempt", triggers=("fail_attempt",),
             choices=once.polls(HELD, fail_attempt_choices), run=_fail_attempt(complete, once),
             strategy=strategy_in(STRATEGIES, "fail_attempt_strategy"),
             describe=_describe_fail_attempt,
             meaning="the read raised, or its response was rejected by parse_answer"),
    )
    return Exploration(
        lifecycle=MONITOR,
        initial=lambda: initial_records(range(low, high + 1)),
        moves=tuple(moves),
        abstraction=abstraction,
        abstraction_doc=(
            "monitor times as before/at/after updated_at; receiver times, lease owner "
            "and token by presence; poll_attempts capped at max_failures"
        ),
        bounds=(
            f"max_failures {low}..{high}; 16 receiver responses (6 valid, 8 rejected by "
            "parse_answer, 2 that parse but break an invariant); 5 reader errors; now at "
            "the clock and 1 s "
            "before/at/after the next poll and the lease expiry; holder, intruder, stale token"
        ),
        new_records=strategy_in(STRATEGIES, "new_records"),
        lease_inputs=lambda now, token: MonitorInputs(
            now=now, policy=POLICY, worker_id=CLAIMER, lease_token=token,
            lease_seconds=LEASE_SECONDS),
        accepted_cycles=(
            AcceptedCycle(
                {"claim", "observe_progress"},
                "the monitor polls for as long as the receiver reports the notification "
                "unfinished (pending, leased, retry_wait), as the reference does: the "
                "receiver decides when it ends, not a bound on polls"),
            AcceptedCycle(
                {"claim", "observe_progress", "fail_attempt", "expire_lease"},
                "failed reads and lost leases between two answers: each answer resets "
                "failures, so max_failures bounds the failures in a row, not in all"),
        ),
        tunable={"max_failures": (low, high)},
        workers=monitor_workers(),
        equivalent_mutants=EQUIVALENT_MUTANTS,
        rebound=lambda bounds: monitor_exploration(complete, bounds["max_failures"]),
    )


EXPLORATION = monitor_exploration()
