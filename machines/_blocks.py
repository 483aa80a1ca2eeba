"""Retry and lease policies as building blocks: named guards, effects and invariants
made for a record's own field names, which a literal table names.

A leased lifecycle's retry and lease policy is the same few rules every time: a due
record is leased to a worker until ``now + lease_seconds``; the holder of a live lease
finishes it, renews it, or fails it; a failure is retried after a capped exponential
backoff while failures remain, else the record gives up; an expired lease is rescued
and counted as a failure. Written by hand, that is about fifty lines of guards,
effects and backoff arithmetic per lifecycle. Here it is two declarations:

* :class:`Leasing` (the owner, token, expiry and due fields, the claim and expiry
  triggers): guards ``is_due``, ``lease_is_held``, ``lease_is_live``,
  ``lease_has_expired``; effects ``take_lease``, ``extend_lease`` (a renewal),
  ``end_lease``; the invariant that the lease fields are set exactly while leased, and
  the step invariants of the lease protocol;
* :class:`Retry` (the failures count, its maximum, the due and last-error fields, a
  :class:`Backoff`): guards ``failures_remain`` and ``retry_allowed`` (each also read
  with ``unless``: "failures are spent", "no retry"); effects ``schedule_retry``,
  ``give_up``, and the same two for an expired lease counted as a failure
  (``retry_after_expiry``, ``give_up_after_expiry``); invariants
  ``failures_within_max`` and ``error_iff_failures``; the step invariant
  ``failures_never_decrease``.

Each block is a :class:`~lifecycles.machines._core.Guard`, ``Effect``, ``Invariant`` or
``StepInvariant`` like any other, named (the defaults above; ``prefix`` and ``rename``
when two policies share a lifecycle) with a one-line meaning that states its concrete
arithmetic in the author's field names (``failures + 1 < max_failures``). Its function is
generated code with those names substituted, as :func:`lifecycles.machines._builders.builder`
generates a record's constructor, and keeps its source text on the function
(``__lifecycles_source__``): the table version digests it
(:mod:`lifecycles.machines._versioning`), so a changed field name, bound or backoff
changes the version; the auditor page shows it; the checker, ``--mutants`` and the
stores run it as they run a hand-written guard. ``is_due`` and ``take_lease`` are
written with comparisons and sums alone, so a claim row built from them has a symbolic
form (:mod:`lifecycles.machines._symbolic`) and PostgreSQL claims in one statement;
the invariants are expressions (:func:`lifecycles.invariants._core.expressed`), so SQL
health checks them.

The blocks read the transition's inputs by attribute name (:class:`InputNames`; by
default ``now``, ``worker_id``, ``lease_token``, ``lease_seconds``, ``error``,
``retryable``, the fields of :class:`WorkInputs`, which a lifecycle may use as is).

**The backoff, exactly.** For the n-th failure (n = failures after counting it, 1, 2,
...), ``delay(n) = min(cap, base * factor ** (n - 1))`` seconds; the exponent is capped
at the first one whose delay reaches ``cap``, which changes no value and keeps large n
from overflowing. With ``jitter`` j > 0 the delay is shortened by up to ``j`` of itself:
``delay(n) * (1 - j * u)``, where ``u`` in [0, 1) is the first 8 bytes of the SHA-256 of
the UTF-8 text ``"<key>:<n>"`` (the record's key) read as a big-endian integer divided by
2**64. Jitter is pure, as every effect is (no clock, no random source): a retry is the
same in the checker and in production, and records failing together still spread out.
The retry is due at ``now + delay(n)``. The monitor's ``retry_delay`` is this arithmetic
with base 5, cap 300, factor 2 and no jitter.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import keyword
import linecache
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from lifecycles.invariants._core import Invariant, StepInvariant
from lifecycles.invariants._expressions import Attr, Expr, all_of, python_function
from lifecycles.machines._declaration import DefinitionError, Effect, Guard, Lease

__all__ = [
    "Backoff", "InputNames", "Leasing", "Retry", "WorkInputs", "named_in", "source_of",
]

AnyGuard = Guard[Any, Any]
AnyEffect = Effect[Any, Any]


@attrs.frozen
class WorkInputs:
    """What one transition of a leased lifecycle reads besides the record: the time, the
    worker and its lease, and how an attempt failed. The blocks read these by default."""

    now: float
    worker_id: str | None = None
    lease_token: str | None = None
    lease_seconds: float = 300.0
    error: str | None = None
    retryable: bool = False


@attrs.frozen
class InputNames:
    """The attribute names under which the blocks read a transition's inputs."""

    now: str = "now"
    worker_id: str = "worker_id"
    lease_token: str = "lease_token"
    lease_seconds: str = "lease_seconds"
    error: str = "error"
    retryable: str = "retryable"


# --- generated code ---------------------------------------------------------------------

_NUMBERS = itertools.count(1)


def _identifier(check: str, role: str, name: object) -> str:
    """``name`` when it is a plain identifier the generated code can read; else refuse."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
            or name.startswith("_"):
        raise DefinitionError(check, f"{role} must name a field: {name!r} is no identifier")
    return name


def _generate(name: str, parameters: str, meaning: str, body: Sequence[str],
              helpers: Sequence[str] = (), space: Mapping[str, Any] | None = None,
              ) -> Callable[..., Any]:
    """The function ``name`` compiled from its source text, kept on it as
    ``__lifecycles_source__`` (with the source of the ``helpers`` it calls) and in
    ``linecache`` (so tracebacks and ``inspect`` show it)."""
    source = "".join(f"{helper}\n\n" for helper in helpers) + (
        f"def {name}({parameters}):\n" + _docstring(meaning, "    ")
        + "".join(f"    {line}\n" for line in body))
    filename = f"<lifecycles block {name} {next(_NUMBERS)}>"
    namespace: dict[str, Any] = {"__name__": __name__, **(space or {})}
    exec(compile(source, filename, "exec"), namespace)  # our own text, from field names
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    function: Callable[..., Any] = namespace[name]
    function.__lifecycles_source__ = source  # type: ignore[attr-defined]
    return function


def source_of(function: object) -> str | None:
    """The source text a building block's function was generated from (``None``: the
    function was written in a module, where ``inspect`` finds its source)."""
    source = getattr(function, "__lifecycles_source__", None)
    return source if isinstance(source, str) else None


def _docstring(meaning: str, indent: str) -> str:
    """``meaning`` as a docstring, wrapped to the page's width (``repr`` when it holds
    what a triple-quoted string cannot)."""
    if '"' in meaning or "\\" in meaning:
        return f"{indent}{meaning!r}\n"
    lines = textwrap.wrap(meaning, 88 - len(indent) - 3, break_on_hyphens=False)
    if len(lines) == 1:
        return f'{indent}"""{lines[0]}"""\n'
    return (f'{indent}"""' + f"\n{indent}".join(lines) + f"\n{indent}" + '"""\n')


def _returned(changes: Sequence[str]) -> list[str]:
    """The lines of ``return {...}``, one change a line."""
    return ["return {", *(f"    {change}," for change in changes), "}"]


def _literal(value: str) -> str:
    """A string as a double-quoted Python literal (JSON's escapes are Python's)."""
    return json.dumps(value)


def _expressed(name: str, meaning: str, expression: Expr) -> Invariant[Any]:
    """An invariant declared as an expression over the record's fields (:class:`Attr`
    nodes), as ``@expressed`` declares one, under a generated name; its compiled Python
    is kept as its source text too."""
    holds = python_function(expression, ("r",), name=name, doc=meaning, module=__name__,
                            record="r")
    body = holds.__python_source__  # type: ignore[attr-defined]
    holds.__lifecycles_source__ = (  # type: ignore[attr-defined]
        f"def {name}(r):\n{_docstring(meaning, '    ')}    return {body}\n")
    return Invariant(name, holds, meaning, expression=expression)


def _input_names(check: str, inputs: InputNames) -> InputNames:
    """``inputs``, once every name in it is one the generated code can read."""
    for field in attrs.fields(InputNames):
        _identifier(check, f"input {field.name}", getattr(inputs, field.name))
    return inputs


class _Names:
    """How a block's default names become the names a table uses."""

    def __init__(self, prefix: str, rename: Mapping[str, str], defaults: Iterable[str]) -> None:
        unknown = sorted(set(rename) - set(defaults))
        if unknown:
            raise DefinitionError("block_names", f"rename names no block: {unknown}")
        self.prefix, self.rename = prefix, dict(rename)

    def __call__(self, default: str) -> str:
        return _identifier("block_names", "a block's name",
                           self.rename.get(default, self.prefix + default))


# --- the backoff ------------------------------------------------------------------------


def _finite(check: str, name: str, value: object, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value >= low):
        raise DefinitionError(check, f"{name} must be a finite number >= {low:g}: {value!r}")
    return float(value)


@attrs.frozen
class Backoff:
    """Capped exponential delay before the retry after the n-th failure, with optional
    jitter derived from the record's key (see the module docstring for the arithmetic):
    ``min(cap, base * factor ** (n - 1))``, shortened by up to ``jitter`` of itself."""

    base: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0

    def __attrs_post_init__(self) -> None:
        base = _finite("backoff_declared", "base", self.base, 0.0)
        cap = _finite("backoff_declared", "cap", self.cap, 0.0)
        _finite("backoff_declared", "factor", self.factor, 1.0)
        jitter = _finite("backoff_declared", "jitter", self.jitter, 0.0)
        if base > cap:
            raise DefinitionError("backoff_declared", f"base {base:g} is above cap {cap:g}")
        if jitter > 1.0:
            raise DefinitionError("backoff_declared", f"jitter {jitter:g} is above 1")

    @property
    def saturation(self) -> int:
        """The first exponent whose delay reaches ``cap``: higher ones give ``cap`` too."""
        base, cap, factor = float(self.base), float(self.cap), float(self.factor)
        if base == 0.0 or base >= cap or factor == 1.0:
            return 0
        exponent = max(0, math.ceil(math.log(cap / base) / math.log(factor)))
        while exponent > 0 and base * factor ** (exponent - 1) >= cap:  # float rounding
            exponent -= 1
        while base * factor ** exponent < cap:
            exponent += 1
        return exponent

    def meaning(self, key: str = "the record's key") -> str:
        """The arithmetic in one line, with this backoff's numbers (``key``: the field
        the jitter is derived from)."""
        said = (f"min({float(self.cap)!r}, {float(self.base)!r} * {float(self.factor)!r} "
                "** (n - 1)) seconds")
        if self.jitter:
            said += f" times (1 - {float(self.jitter)!r} * u), u in [0, 1) hashed from {key} and n"
        return said

    def source(self) -> str:
        """The generated ``backoff(key, n)`` (``backoff(n)`` without jitter), as text."""
        cap, base, factor = repr(float(self.cap)), repr(float(self.base)), repr(
            float(self.factor))
        delay = f"min({cap}, {base} * {factor} ** min(max(n - 1, 0), {self.saturation}))"
        said = _docstring(f"The delay after the n-th failure: {self.meaning()}.", "    ")
        if not self.jitter:
            return f"def backoff(n):\n{said}    return {delay}\n"
        return (
            f"def backoff(key, n):\n{said}"
            f"    delay = {delay}\n"
            '    digest = sha256(f"{key}:{n}".encode()).digest()\n'
            '    spread = int.from_bytes(digest[:8], "big") / 18446744073709551616.0\n'
            f"    return delay * (1.0 - {float(self.jitter)!r} * spread)\n")

    def function(self) -> Callable[..., float]:
        """The generated backoff function (:meth:`source`), compiled."""
        space: dict[str, Any] = {"__name__": __name__, "sha256": hashlib.sha256}
        exec(compile(self.source(), f"<lifecycles backoff {next(_NUMBERS)}>", "exec"), space)
        function: Callable[..., float] = space["backoff"]
        return function

    def delay(self, failures: int, key: str = "") -> float:
        """The delay before the retry after failure number ``failures`` of record ``key``."""
        backoff = self.function()
        return backoff(key, failures) if self.jitter else backoff(failures)


# --- the lease --------------------------------------------------------------------------


class Leasing:
    """The lease blocks over a record's owner, token, expiry and due fields.

    ``claim`` and ``expiry`` are the table's claiming and rescuing triggers, and
    ``order_by`` the claim order: :attr:`lease` is the lifecycle's
    :class:`~lifecycles.machines._declaration.Lease`. ``codes`` prefixes the refusal codes
    (``<codes>not_due``, ``lease_lost``, ``lease_expired``, ``lease_live``); ``updated``,
    when given, is a field every effect sets to now; ``status`` the status field.
    """

    DEFAULTS = ("is_due", "lease_is_held", "lease_is_live", "lease_has_expired",
                "take_lease", "extend_lease", "end_lease", "lease_fields_iff_leased",
                "claim_mints_a_new_token", "renewal_keeps_the_lease",
                "lease_moved_by_holder_or_expiry", "claimed_only_when_due")

    def __init__(self, *, owner: str, token: str, expires: str, due: str,
                 order_by: Sequence[str], claim: str, expiry: str, codes: str,
                 updated: str | None = None, status: str = "status",
                 inputs: InputNames = InputNames(), prefix: str = "",
                 rename: Mapping[str, str] | None = None) -> None:
        check = "lease_blocks"
        self.owner = _identifier(check, "owner", owner)
        self.token = _identifier(check, "token", token)
        self.expires = _identifier(check, "expires", expires)
        self.due = _identifier(check, "due", due)
        self.updated = None if updated is None else _identifier(check, "updated", updated)
        self.status = _identifier(check, "status", status)
        self.inputs = _input_names(check, inputs)
        self.fields: tuple[str, ...] = (self.owner, self.token, self.expires)
        """The lease's own fields: set exactly while leased (``Retry(clears=...)``)."""
        self.lease = Lease(trigger=claim, token_field=self.token, expires_field=self.expires,
                           due_field=self.due, order_by=tuple(order_by), expiry_trigger=expiry)
        self.codes = codes
        name = _Names(prefix, rename or {}, self.DEFAULTS)
        r, i, n = "r.", "i.", self.inputs
        stamp = [] if self.updated is None else [f'"{self.updated}": {i}{n.now}']
        stamped = () if self.updated is None else (self.updated,)

        def guard(default: str, code: str, meaning: str, test: str) -> AnyGuard:
            return Guard(name(default), _generate(name(default), "r, i", meaning, [
                f"return {test}"]), codes + code, meaning)

        def effect(default: str, writes: tuple[str, ...], meaning: str,
                   changes: list[str]) -> AnyEffect:
            return Effect(name(default), _generate(name(default), "r, i", meaning,
                                                   _returned([*changes, *stamp])),
                          (*writes, *stamped), meaning)

        # Comparisons alone (no and/or/is): the claim's symbolic form, one SQL statement.
        self.is_due = guard("is_due", "not_due", f"The record is due: {due} <= i.{n.now}.",
                            f"{r}{due} <= {i}{n.now}")
        self.lease_is_held = guard(
            "lease_is_held", "lease_lost",
            f"The caller holds the lease: {owner} == i.{n.worker_id} and {token} == "
            f"i.{n.lease_token}.",
            f"{r}{owner} == {i}{n.worker_id} and {r}{token} == {i}{n.lease_token}")
        self.lease_is_live = guard(
            "lease_is_live", "lease_expired",
            f"The lease has not expired: i.{n.now} < {expires}.",
            f"{r}{expires} is not None and {i}{n.now} < {r}{expires}")
        self.lease_has_expired = guard(
            "lease_has_expired", "lease_live",
            f"The lease has expired: {expires} <= i.{n.now}.",
            f"{r}{expires} is not None and {r}{expires} <= {i}{n.now}")
        self.take_lease = effect(
            "take_lease", self.fields,
            f"Lease the record to the caller: {owner} = i.{n.worker_id}, {token} = "
            f"i.{n.lease_token} (a new token), {expires} = i.{n.now} + i.{n.lease_seconds}.",
            [f'"{owner}": {i}{n.worker_id}', f'"{token}": {i}{n.lease_token}',
             f'"{expires}": {i}{n.now} + {i}{n.lease_seconds}'])
        self.extend_lease = effect(
            "extend_lease", (self.expires,),
            f"Renew the holder's lease: {expires} = max({expires}, i.{n.now} + "
            f"i.{n.lease_seconds}); the same {owner} and {token}.",
            [f'"{expires}": max({r}{expires}, {i}{n.now} + {i}{n.lease_seconds})'])
        self.end_lease = effect(
            "end_lease", self.fields,
            f"End the lease: {owner}, {token} and {expires} = None.",
            [f'"{field}": None' for field in self.fields])
        self.guards: tuple[AnyGuard, ...] = (
            self.is_due, self.lease_is_held, self.lease_is_live, self.lease_has_expired)
        self.effects: tuple[AnyEffect, ...] = (self.take_lease, self.extend_lease,
                                                self.end_lease)
        self._name = name

    def leased_status(self, table: Sequence[Mapping[str, Any]]) -> str:
        """The status the claim trigger leads to in ``table`` (the lifecycle's leased
        status, derived as :attr:`~lifecycles.machines._core.Lifecycle.leased` is)."""
        dests = {str(entry["dest"]) for entry in table if entry.get("trigger") ==
                 self.lease.trigger}
        if len(dests) != 1 or "=" in dests:
            raise DefinitionError("lease_blocks", f"claim trigger {self.lease.trigger} must "
                                  f"lead to one status, not {sorted(dests)}")
        return dests.pop()

    def invariants(self, table: Sequence[Mapping[str, Any]]) -> tuple[Invariant[Any], ...]:
        """``lease_fields_iff_leased``: the lease fields are set exactly while leased."""
        leased, fields = self.leased_status(table), self.fields
        listed = ", ".join(fields[:-1]) + f" and {fields[-1]}"

        status = Attr(self.status)
        held = all_of(status == leased, *(Attr(field).is_not_none() for field in fields))
        free = all_of(status != leased, *(Attr(field).is_none() for field in fields))
        name = self._name("lease_fields_iff_leased")
        return (_expressed(name, f"{listed} are all set in {leased}, and all empty "
                           "otherwise.", held | free),)

    def step_invariants(self, table: Sequence[Mapping[str, Any]]
                        ) -> tuple[StepInvariant[Any], ...]:
        """The lease protocol over one step: a claim mints a new token and happens only
        when due; a renewal keeps the token and does not shorten the lease; a leased
        record moves by its holder while the lease is live, and by another worker once
        it expired (a holder's late completion, an early rescue: never)."""
        leased, n = self.leased_status(table), self.inputs
        status, owner, token, expires, due = (self.status, self.owner, self.token,
                                               self.expires, self.due)
        quoted = _literal(leased)
        claimed = f"a.{status} == {quoted} and b.{status} != {quoted}"

        def step(default: str, parameters: str, meaning: str, body: list[str]
                 ) -> StepInvariant[Any]:
            declared = self._name(default)
            return StepInvariant(declared, _generate(declared, parameters, meaning, body),
                                 meaning, reads_inputs=parameters.count(",") == 2)

        return (
            step("claim_mints_a_new_token", "b, a, i",
                 f"A claim (into {leased} from another status) writes {token} = "
                 f"i.{n.lease_token}, a token other than the one before.",
                 [f"if not ({claimed}):", "    return True",
                  f"return a.{token} == i.{n.lease_token} and a.{token} != b.{token}"]),
            step("claimed_only_when_due", "b, a, i",
                 f"A claim (into {leased} from another status) happens only once the "
                 f"record is due: {due} <= i.{n.now}.",
                 [f"if not ({claimed}):", "    return True", f"return b.{due} <= i.{n.now}"]),
            step("renewal_keeps_the_lease", "b, a",
                 f"A renewal ({leased} to {leased}) keeps {owner} and {token}, and never "
                 f"moves {expires} earlier.",
                 [f"if not (a.{status} == {quoted} and b.{status} == {quoted}):",
                  "    return True",
                  f"if a.{expires} is None or b.{expires} is None:",
                  "    return False",
                  f"return a.{owner} == b.{owner} and a.{token} == b.{token} and "
                  f"a.{expires} >= b.{expires}"]),
            step("lease_moved_by_holder_or_expiry", "b, a, i",
                 f"A {leased} record changes by its holder ({owner} == i.{n.worker_id} and"
                 f" {token} == i.{n.lease_token}) while the lease is live, and by another "
                 f"once it expired ({expires} <= i.{n.now}), never otherwise.",
                 [f"if b.{status} != {quoted}:", "    return True",
                  f"live = b.{expires} is not None and i.{n.now} < b.{expires}",
                  f"holder = i.{n.worker_id} == b.{owner} and i.{n.lease_token} == b.{token}",
                  "return holder == live"]),
        )

    def __repr__(self) -> str:
        return f"<Leasing {self.owner}/{self.token}/{self.expires} due {self.due}>"


# --- retries ----------------------------------------------------------------------------


class Retry:
    """The retry blocks over a record's failures count, its maximum, and its due and
    last-error fields.

    ``max_failures`` is a field name or a constant (an int >= 1); ``backoff`` the delay
    before the next attempt (with jitter it reads the record's ``key`` field);
    ``clears`` the fields set to ``None`` when a failure ends the lease
    (``Leasing.fields``); ``expired_error`` what ``last_error`` records when an expired
    lease is counted as a failure; ``codes`` prefixes the refusal codes
    (``<codes>failures_spent``, ``retry_not_allowed``); ``updated``, when given, a
    field every effect sets to now.
    """

    DEFAULTS = ("failures_remain", "retry_allowed", "schedule_retry", "give_up",
                "retry_after_expiry", "give_up_after_expiry", "failures_within_max",
                "error_iff_failures", "failures_never_decrease")

    def __init__(self, *, failures: str, max_failures: str | int, due: str, error: str,
                 backoff: Backoff, codes: str, clears: Iterable[str] = (),
                 key: str | None = None, updated: str | None = None,
                 expired_error: str = "lease_expired", inputs: InputNames = InputNames(),
                 prefix: str = "", rename: Mapping[str, str] | None = None) -> None:
        check = "retry_blocks"
        self.failures = _identifier(check, "failures", failures)
        if isinstance(max_failures, str):
            bound = f"r.{_identifier(check, 'max_failures', max_failures)}"
        elif isinstance(max_failures, int) and not isinstance(max_failures, bool) \
                and max_failures >= 1:
            bound = repr(max_failures)
        else:
            raise DefinitionError(check, "max_failures must name a field or be an int >= 1: "
                                  f"{max_failures!r}")
        self.max_failures = max_failures
        self.due = _identifier(check, "due", due)
        self.error = _identifier(check, "error", error)
        self.clears = tuple(_identifier(check, "clears", field) for field in clears)
        self.updated = None if updated is None else _identifier(check, "updated", updated)
        if not isinstance(backoff, Backoff):
            raise DefinitionError(check, f"backoff must be a Backoff: {backoff!r}")
        if backoff.jitter and key is None:
            raise DefinitionError(check, "a backoff with jitter needs key= (the record's key "
                                  "field) to derive it from")
        self.key = None if key is None else _identifier(check, "key", key)
        if not isinstance(expired_error, str):
            raise DefinitionError(check, f"expired_error must be a string: {expired_error!r}")
        self.backoff, self.expired_error, self.codes = backoff, expired_error, codes
        self.inputs = _input_names(check, inputs)
        name = _Names(prefix, rename or {}, self.DEFAULTS)
        n, shown = inputs, str(max_failures)
        count = f"r.{failures} + 1"
        writes = (failures, self.error, *self.clears,
                  *(() if self.updated is None else (self.updated,)))
        ended = [f'"{field}": None' for field in self.clears]
        stamp = [] if self.updated is None else [f'"{self.updated}": i.{n.now}']
        helpers = (backoff.source(),)
        space = {"sha256": hashlib.sha256}
        delay = f"backoff(r.{self.key}, failures)" if backoff.jitter else "backoff(failures)"
        lease_ends = f"; the lease ends: {', '.join(self.clears)} = None" if self.clears else ""

        def guard(default: str, code: str, meaning: str, test: str) -> AnyGuard:
            return Guard(name(default), _generate(name(default), "r, i", meaning, [
                f"return {test}"]), codes + code, meaning)

        def effect(default: str, meaning: str, error: str, retried: bool) -> AnyEffect:
            body = [f"failures = {count}"]
            changes = [f'"{failures}": failures', f'"{self.error}": {error}', *ended, *stamp]
            if retried:
                changes.insert(1, f'"{due}": i.{n.now} + {delay}')
            body.extend(_returned(changes))
            return Effect(name(default), _generate(
                name(default), "r, i", meaning, body, helpers if retried else (), space),
                (*writes[:1], *((due,) if retried else ()), *writes[1:]), meaning)

        self.failures_remain = guard(
            "failures_remain", "failures_spent",
            f"Another failure is allowed: {failures} + 1 < {shown}.", f"{count} < {bound}")
        self.retry_allowed = guard(
            "retry_allowed", "retry_not_allowed",
            f"The error is retryable and another failure is allowed: i.{n.retryable} and "
            f"{failures} + 1 < {shown}.", f"i.{n.retryable} and {count} < {bound}")
        retry = (f"due again at {due} = i.{n.now} + backoff({failures} + 1), backoff(n) = "
                 f"{backoff.meaning(self.key or 'the key')}")
        self.schedule_retry = effect(
            "schedule_retry",
            f"Count the failure: {failures} + 1, {self.error} = i.{n.error}; {retry}"
            f"{lease_ends}.", f"i.{n.error}", True)
        self.give_up = effect(
            "give_up", f"Count the failure and give up: {failures} + 1, {self.error} = "
            f"i.{n.error}{lease_ends}.", f"i.{n.error}", False)
        self.retry_after_expiry = effect(
            "retry_after_expiry",
            f"Count the expired lease as a failure: {failures} + 1, {self.error} = "
            f"'{expired_error}'; {retry}{lease_ends}.", _literal(expired_error), True)
        self.give_up_after_expiry = effect(
            "give_up_after_expiry",
            f"Count the expired lease as a failure and give up: {failures} + 1, "
            f"{self.error} = '{expired_error}'{lease_ends}.", _literal(expired_error), False)
        self.guards: tuple[AnyGuard, ...] = (self.failures_remain, self.retry_allowed)
        self.effects: tuple[AnyEffect, ...] = (
            self.schedule_retry, self.give_up, self.retry_after_expiry,
            self.give_up_after_expiry)

        counted, last = Attr(failures), Attr(self.error)
        limit = Attr(max_failures) if isinstance(max_failures, str) else max_failures
        self.failures_within_max = _expressed(
            name("failures_within_max"),
            f"{failures} never exceeds {shown}: {failures} <= {shown}.", counted <= limit)
        self.error_iff_failures = _expressed(
            name("error_iff_failures"),
            f"{self.error} is set exactly when a failure was counted: {failures} > 0.",
            ((counted == 0) & last.is_none()) | ((counted != 0) & last.is_not_none()))
        self.invariants: tuple[Invariant[Any], ...] = (self.failures_within_max,
                                                       self.error_iff_failures)
        never = name("failures_never_decrease")
        meaning = f"{failures} never decreases."
        self.failures_never_decrease: StepInvariant[Any] = StepInvariant(
            never, _generate(never, "b, a", meaning, [f"return a.{failures} >= b.{failures}"]),
            meaning)
        self.steps: tuple[StepInvariant[Any], ...] = (self.failures_never_decrease,)

    def __repr__(self) -> str:
        return f"<Retry {self.failures} of {self.max_failures}, {self.backoff!r}>"


# --- choosing what a table names -----------------------------------------------------------


def named_in(table: Sequence[Mapping[str, Any]], *declared: Any
             ) -> tuple[list[AnyGuard], list[AnyEffect]]:
    """The guards and the effects a lifecycle passes to ``Lifecycle(guards=...,
    effects=...)``: those among ``declared`` (blocks, guards, effects, or lists of them)
    that ``table`` names, in the order the table first names them. A name declared
    twice over is refused; a name declared nowhere is left to the definition checks."""
    guards: dict[str, AnyGuard] = {}
    effects: dict[str, AnyEffect] = {}

    def offer(item: Any) -> None:
        if isinstance(item, (Leasing, Retry)):
            for part in (*item.guards, *item.effects):
                offer(part)
        elif isinstance(item, (Guard, Effect)):
            into: dict[str, Any] = guards if isinstance(item, Guard) else effects
            if into.get(item.name, item) is not item:
                raise DefinitionError("block_names", f"{item.name} is declared twice")
            into[item.name] = item
        elif isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
            for part in item:
                offer(part)
        else:
            raise TypeError(f"named_in takes blocks, guards and effects, not {item!r}")

    offer(declared)
    order: dict[str, None] = {}
    for entry in table:
        for key in ("conditions", "unless", "after"):
            value = entry.get(key)
            names = [value] if isinstance(value, str) else list(value or ())
            order.update(dict.fromkeys(str(name) for name in names))
    return ([guards[name] for name in order if name in guards],
            [effects[name] for name in order if name in effects])
