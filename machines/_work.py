"""How a worker runs a lifecycle's records: the declaration beside its table.

A worker (:class:`lifecycles._worker.Worker`) owns the loop: it claims records, calls a
handler, and writes the step that ends each lease. It never decides a status. What a
handler's result *means* (which trigger fires, with which inputs) is declared here,
beside the table, as pure functions, exactly as the monitor's ``poll_step`` is:

* ``inputs(now, worker_id, lease_token, lease_seconds)`` builds the inputs of this
  worker's claim and of every step it fires under that lease (the guards read the holder
  and its token from them);
* ``finish(held, inputs, result)`` turns the handler's :data:`Result` (what it returned,
  or what it raised) into the :class:`Step` that ends the lease, or :class:`Leave` to
  write nothing and leave the lease to expire;
* ``renewal`` names the row a worker fires to extend a live lease while a long handler
  runs (its holder, the same token, a later expiry).

:func:`outcomes` is the common ``finish``: the handler returns ``None`` (the declared
success trigger) or an :class:`Outcome` naming a trigger, and raising fails the attempt
through the declared failure trigger, with the error's code and whether a retry may help.

Everything here is pure: no clock, no I/O. The checker and the generated tests run the
same ``finish`` the worker runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from lifecycles.invariants._core import InvariantViolation, StepViolation

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the inputs type of a lifecycle

__all__ = [
    "Fire",
    "Handling",
    "Leave",
    "Outcome",
    "Permanent",
    "Raised",
    "Result",
    "Returned",
    "Step",
    "error_code_of",
    "outcomes",
]

Fire = Callable[[str, Any, Any], Any]
"""``fire(trigger, record, inputs) -> record``: how a step reaches the table (the pure
``Lifecycle.fire``, or a store's compare-and-set firing)."""


@attrs.frozen
class Returned:
    """The handler returned ``value``."""

    value: Any


@attrs.frozen
class Raised:
    """The handler raised ``error``."""

    error: BaseException


Result = Returned | Raised
"""What one handler call gave."""


class Permanent(Exception):
    """Raise it (or an exception whose ``retryable`` is false) from a handler to fail the
    attempt for good: :func:`outcomes` marks it not retryable, and the table's retry guard
    gives up instead of scheduling another attempt."""

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


@attrs.frozen
class Outcome:
    """What a handler returns to choose how its lease ends: fire ``trigger`` with the
    step's inputs changed by ``inputs`` (field names of the lifecycle's inputs class)."""

    trigger: str
    inputs: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)


@attrs.frozen
class Step(Generic[I]):
    """What a finished call fires: ``trigger`` with ``inputs``; when the record it gives
    would break an invariant (an answer that is well-formed but wrong), ``fallback``
    instead, so nothing invalid is ever written and no bad answer blocks the record."""

    trigger: str
    inputs: I
    fallback: Step[I] | None = None

    def fire(self, record: Any, fire: Fire) -> Any:
        """Fire the step on ``record`` through ``fire``.

        The invariant check that may call for the fallback runs before anything is
        written, so a store's ``fire`` writes exactly once. A step invariant's violation
        is the table's own mistake, never hidden by a fallback; refusals propagate.
        """
        if self.fallback is None:
            return fire(self.trigger, record, self.inputs)
        try:
            return fire(self.trigger, record, self.inputs)
        except StepViolation:
            raise
        except InvariantViolation:
            return self.fallback.fire(record, fire)


@attrs.frozen
class Leave:
    """Write nothing: the record stays as claimed, its lease left to expire (a rescue then
    decides, as after a crash). ``error`` is what the worker reports for it."""

    error: BaseException


@attrs.frozen
class Handling(Generic[R, I]):
    """How workers run a leased lifecycle's records (see the module docstring).

    ``attempt(record)`` numbers the attempt a claim starts (shown to the handler: 1 for a
    first try); ``None`` when the lifecycle keeps no count. ``renew_at`` is the fraction
    of the lease after which a running handler's lease is renewed (``renewal`` rows only).
    ``holder`` names the record field that holds the lease's worker id, where there is
    one: a worker resuming leases after an unconfirmed write checks it besides the token.
    """

    inputs: Callable[[float, str, str, float], I]
    finish: Callable[[R, I, Result], Step[I] | Leave]
    renewal: str | None = None
    renew_at: float = attrs.field(default=0.5)
    attempt: Callable[[R], int] | None = None
    holder: str | None = None

    @renew_at.validator
    def _fraction(self, _: object, value: float) -> None:
        if not 0 < value < 1:
            raise ValueError(f"renew_at must be a fraction of the lease in (0, 1), not {value}")


_CODE_CHARACTERS = re.compile(r"[^a-z0-9_.]+")


def error_code_of(error: BaseException) -> str:
    """A short, stable code for what a handler raised: its ``code`` attribute when it is a
    string, else its class name, as ``lower_snake`` letters, digits, ``_`` and ``.`` (at
    most 64 characters, starting with a letter). Never the message: messages carry data."""
    code = getattr(error, "code", None)
    text = code if isinstance(code, str) and code else type(error).__name__
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text).lower()
    text = _CODE_CHARACTERS.sub("_", text).strip("_.")[:64]
    return text if text[:1].isalpha() else f"error_{text}"[:64]


def outcomes(
    *, success: str, failure: str, error: str = "error", retryable: str = "retryable",
) -> Callable[[Any, Any, Result], Step[Any]]:
    """The common ``finish``: the handler's result names its trigger, raising fails.

    * ``None`` returned: ``success`` fires with the step's inputs;
    * an :class:`Outcome` returned: its trigger fires, with its changes to the inputs;
    * an ``Exception`` raised: ``failure`` fires, with the inputs' ``error`` field set to
      :func:`error_code_of` the exception and ``retryable`` to whether a retry may help
      (false for :class:`Permanent`, or an exception whose ``retryable`` attribute is
      false). Anything else returned is the handler's mistake, failed the same way with
      the code ``handler_result_invalid``, not retryable.

    ``BaseException``\\ s that are not ``Exception``\\ s (``KeyboardInterrupt``) never
    reach ``finish``: the worker lets them stop it.
    """

    def finish(held: Any, inputs: Any, result: Result) -> Step[Any]:
        if isinstance(result, Returned):
            value = result.value
            if value is None:
                return Step(success, inputs)
            if isinstance(value, Outcome):
                return Step(value.trigger, attrs.evolve(inputs, **value.inputs))
            return Step(failure, attrs.evolve(
                inputs, **{error: "handler_result_invalid", retryable: False}))
        raised = result.error
        may_retry = not isinstance(raised, Permanent) and getattr(raised, "retryable", True)
        return Step(failure, attrs.evolve(
            inputs, **{error: error_code_of(raised), retryable: bool(may_retry)}))

    finish.__doc__ = (f"None -> {success}; Outcome(trigger) -> trigger; an exception -> "
                      f"{failure} with its code")
    finish.triggers = (success, failure)  # type: ignore[attr-defined]  # the definition checks
    return finish
