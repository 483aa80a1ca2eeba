"""Logs and metrics of running lifecycles: what a worker claimed, wrote, was refused, rescued.

**Logs.** stdlib :mod:`logging`, one logger per lifecycle, ``lifecycles.<name>`` (children
of ``lifecycles``). Every record carries its fields in ``extra`` under the names of
:data:`FIELDS`, so a JSON formatter (or ``%(lifecycle_key)s`` in a format string) shows
them; a field that does not apply to an event is ``None``. Levels, as an operator of leased
work would set them:

========================  ========  ====================================================
``lifecycle_event``       level     when
========================  ========  ====================================================
``claim``                 DEBUG     a record was leased (one log record per record)
``transition``            DEBUG     a finishing step (or an intake / exclusive step) was
                                    written
``renewal``               DEBUG     a running handler's lease was renewed
``left``                  INFO      the handling left the record leased, to expire
``refusal``               WARNING   the finishing step was refused on the record as the
                                    worker claimed it (its code, the rules it broke)
``lost_race``             WARNING   the finishing step was refused because the record was
                                    no longer leased under this worker's token: another
                                    worker rescued (and maybe claimed) it meanwhile. The
                                    handler's work was done and is not recorded; its side
                                    effects may be repeated by the next holder, which an
                                    operator must see (INFO would hide it at the usual
                                    WARNING threshold, and the rescue that caused it is
                                    logged in whichever process rescued, often another)
``renewal_refused``       WARNING   a renewal was refused: the handler's lease is lost
``rescue``                WARNING   an expired lease was ended by the lease's expiry
                                    trigger (a stalled or crashed holder)
``store_error``           WARNING   the worker loop met an unavailable store (it waits and
                                    reconnects)
``store_error``           ERROR     the worker loop met a damaged record, database or
                                    schema: nothing the worker can mend
========================  ========  ====================================================

No secret is logged: a lease token (the fencing credential a handler passes on) appears
only as ``lifecycle_lease``, the first 8 hex digits of its SHA-256 (:func:`lease_digest`),
enough to tell the leases in a log apart. Records and inputs, which hold the token, are
never formatted into a message, nor is an exception's text (a database driver's message
may quote a refused row): an error is logged as its class and code.

**Metrics.** OpenTelemetry, through ``opentelemetry-api`` (``pip install
lifecycles[otel]``), meter ``lifecycles``: see :data:`INSTRUMENTS`. Without the package
nothing is imported and nothing is called; with it but without an SDK (no meter provider
set), the instruments are not made. :func:`use_meter_provider` names a provider other than
the global one; :func:`watch_health` registers the observable gauges of a store's health.

**Cost when off.** Every hook first asks :meth:`Observer.wants` (the logger's cached
``isEnabledFor`` and whether instruments exist) and builds nothing when it says no;
``benchmarks/bench_observe.py`` measures the worker's cycle against hooks replaced by
no-ops.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lifecycles.machines._work import Leave, Raised

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle

__all__ = [
    "FIELDS",
    "INSTRUMENTS",
    "LOGGER_PREFIX",
    "Observer",
    "lease_digest",
    "observer",
    "use_meter_provider",
    "watch_health",
]

#: Each lifecycle logs to ``LOGGER_PREFIX + lifecycle.name``.
LOGGER_PREFIX = "lifecycles."

#: The ``extra`` fields of every log record, and what each holds.
FIELDS: Mapping[str, str] = {
    "lifecycle": "the lifecycle's name",
    "lifecycle_event": "claim, transition, renewal, left, refusal, lost_race, "
                       "renewal_refused, rescue or store_error",
    "lifecycle_key": "the record's key",
    "lifecycle_trigger": "the trigger fired (or refused)",
    "lifecycle_source": "the record's status before the step",
    "lifecycle_destination": "the record's status after it (None: nothing written)",
    "lifecycle_code": "the error code of a refusal or store error",
    "lifecycle_rules": "the rules a refused step broke (invariants, or the guard that "
                       "blocked), a tuple of names",
    "lifecycle_worker": "the worker id of the lease's holder",
    "lifecycle_lease": "the lease token's digest: first 8 hex of its SHA-256",
    "lifecycle_attempt": "the attempt number the lease started (None: not counted)",
    "lifecycle_seconds": "the handler's duration (claim: the claim's duration)",
    "lifecycle_error": "the class of the exception the handler raised (None: it returned)",
}

#: The OpenTelemetry instruments (meter ``lifecycles``): name -> (kind, unit, attributes).
INSTRUMENTS: Mapping[str, tuple[str, str, str]] = {
    # Finishing steps, rescues and the steps of exclusive work; claims are counted by
    # messaging.client.consumed.messages (a claim made in one SQL statement does not tell
    # which of the claimable statuses it left).
    "lifecycles.transitions": ("counter", "{transition}",
                               "lifecycle, trigger, source, destination"),
    "lifecycles.refusals": ("counter", "{refusal}", "lifecycle, code"),
    "lifecycles.rescues": ("counter", "{rescue}", "lifecycle"),
    "lifecycles.lost_races": ("counter", "{race}", "lifecycle"),
    "lifecycles.claim.duration": ("histogram", "s", "lifecycle"),
    "messaging.process.duration": ("histogram", "s",
                                   "messaging.system, messaging.destination.name, "
                                   "messaging.operation.name, error.type (on failure)"),
    "messaging.client.consumed.messages": ("counter", "{message}",
                                           "messaging.system, messaging.destination.name, "
                                           "messaging.operation.name (claim), "
                                           "messaging.operation.type (receive)"),
    "lifecycles.records": ("observable gauge", "{record}", "lifecycle, status"),
    "lifecycles.records.due": ("observable gauge", "{record}", "lifecycle"),
    "lifecycles.leases.expired": ("observable gauge", "{lease}", "lifecycle"),
}

MESSAGING_SYSTEM = "lifecycles"


def lease_digest(token: object) -> str | None:
    """What a log shows of a lease token: the first 8 hex digits of its SHA-256."""
    if token is None:
        return None
    return hashlib.sha256(str(token).encode()).hexdigest()[:8]


# --- OpenTelemetry, imported on first use and only if installed -----------------------

_lock = threading.Lock()
_otel: Any = None  # the opentelemetry.metrics module, once imported
_otel_missing = False
_chosen_provider: Any = None  # use_meter_provider's; None: the global one
_generation = 0  # bumped by use_meter_provider: observers make their instruments again


def _metrics_api() -> Any:
    """``opentelemetry.metrics``, or ``None`` when the package is not installed (asked once)."""
    global _otel, _otel_missing
    if _otel is None and not _otel_missing:
        try:
            from opentelemetry import metrics
        except ImportError:
            _otel_missing = True
        else:
            _otel = metrics
    return _otel


def _provider() -> Any:
    """The meter provider to use, or ``None``: no package, or no SDK set up yet (the API's
    default provider is a proxy that records nothing until one is)."""
    if _chosen_provider is not None:
        return _chosen_provider
    api = _metrics_api()
    if api is None:
        return None
    provider = api.get_meter_provider()
    # Until an SDK provider is set the API hands out its proxy (or a no-op): nothing to
    # record, so no instruments are made and no call is paid.
    if isinstance(provider, api.NoOpMeterProvider) or type(provider).__name__.startswith(
            "_Proxy"):
        return None
    return provider


def use_meter_provider(provider: Any) -> None:
    """Record the metrics of every lifecycle through ``provider`` (an OpenTelemetry
    ``MeterProvider``) instead of the global one; ``None``: the global one again."""
    global _chosen_provider, _generation
    with _lock:
        _chosen_provider = provider
        _generation += 1


class _Instruments:
    """The synchronous instruments of one meter."""

    __slots__ = ("claim_duration", "consumed", "lost_races", "process_duration", "refusals",
                 "rescues", "transitions")

    def __init__(self, meter: Any) -> None:
        self.transitions = meter.create_counter(
            "lifecycles.transitions", unit="{transition}",
            description="Steps written by workers, by lifecycle, trigger, source, destination")
        self.refusals = meter.create_counter(
            "lifecycles.refusals", unit="{refusal}",
            description="Finishing steps refused on the record as claimed, by code")
        self.rescues = meter.create_counter(
            "lifecycles.rescues", unit="{rescue}", description="Expired leases rescued")
        self.lost_races = meter.create_counter(
            "lifecycles.lost_races", unit="{race}",
            description="Finishing steps refused because the lease was taken meanwhile")
        self.claim_duration = meter.create_histogram(
            "lifecycles.claim.duration", unit="s", description="Duration of a claim call")
        self.process_duration = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Duration of a handler call")
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}",
            description="Records leased to workers")


_meters: dict[int, Any] = {}  # id(provider) -> its "lifecycles" meter


def _meter_of(provider: Any) -> Any:
    with _lock:
        meter = _meters.get(id(provider))
        if meter is None:
            from lifecycles import __version__
            meter = _meters[id(provider)] = (provider, provider.get_meter(
                "lifecycles", __version__))
        return meter[1]


_instruments_of: dict[int, _Instruments] = {}  # id(provider) -> instruments, made once


def _instruments(provider: Any) -> _Instruments:
    made = _instruments_of.get(id(provider))
    if made is None:
        meter = _meter_of(provider)
        with _lock:  # made once per provider, whichever worker thread asks first
            made = _instruments_of.get(id(provider))
            if made is None:
                made = _instruments_of[id(provider)] = _Instruments(meter)
    return made


# --- one lifecycle's logger and instruments --------------------------------------------


class Observer:
    """One lifecycle's logger and instruments, and the events the worker reports to them.

    Callers guard each report with :meth:`wants` (or :meth:`collecting`), so that nothing
    is built while both are off."""

    __slots__ = ("_generation", "_process_attributes", "_retry_at", "_transition_attributes",
                 "logger", "metrics", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.logger = logging.getLogger(LOGGER_PREFIX + name)
        self.metrics: _Instruments | None = None
        self._generation = -1  # the use_meter_provider generation the instruments are of
        self._retry_at = 0.0  # when to look for a global SDK provider again (0: never)
        self._transition_attributes: dict[tuple[str, str, str], dict[str, str]] = {}
        self._process_attributes: dict[str | None, dict[str, str]] = {}

    def collecting(self) -> bool:
        """Whether metrics are being collected (an SDK meter provider is set up)."""
        if self._generation != _generation or (
                self._retry_at and time.monotonic() >= self._retry_at):
            self._refresh()
        return self.metrics is not None

    def wants(self, level: int) -> bool:
        """Whether an event logged at ``level`` or counted would be recorded at all."""
        return self.collecting() or self.logger.isEnabledFor(level)

    def _refresh(self) -> None:
        """Make the instruments again when the provider changed (or first became real)."""
        self._generation = _generation
        provider = _provider()
        self.metrics = None if provider is None else _instruments(provider)
        # The global provider may still be set later (the API's proxy until then): look
        # again once a second, not on every call (asking the API costs a microsecond).
        self._retry_at = (time.monotonic() + 1.0 if provider is None and not _otel_missing
                          and _chosen_provider is None else 0.0)

    # -- logging helpers -----------------------------------------------------------

    def _log(self, level: int, event: str, message: str, **fields: Any) -> None:
        extra = dict.fromkeys(FIELDS)
        extra["lifecycle"] = self.name
        extra["lifecycle_event"] = event
        for name, value in fields.items():
            extra["lifecycle_" + name] = value
        self.logger.log(level, message, extra=extra, stacklevel=3)

    def _process_attrs(self, error_type: str | None) -> dict[str, str]:
        found = self._process_attributes.get(error_type)
        if found is None:
            found = {"messaging.system": MESSAGING_SYSTEM,
                     "messaging.destination.name": self.name,
                     "messaging.operation.name": "process"}
            if error_type is not None:
                found["error.type"] = error_type
            self._process_attributes[error_type] = found
        return found

    def _transition_attrs(self, trigger: str, source: str, destination: str) -> dict[str, str]:
        key = (trigger, source, destination)
        found = self._transition_attributes.get(key)
        if found is None:
            found = self._transition_attributes[key] = {
                "lifecycle": self.name, "trigger": trigger, "source": source,
                "destination": destination}
        return found

    # -- events --------------------------------------------------------------------

    def claimed(self, lifecycle: Lifecycle[Any, Any], worker_id: str,
                claimed: Sequence[Any], seconds: float | None) -> None:
        """``claimed`` (:class:`~lifecycles._worker_lease.Claimed`) were leased by one claim call
        that took ``seconds`` (``None``: not timed)."""
        metrics = self.metrics
        if metrics is not None:
            if seconds is not None:
                metrics.claim_duration.record(seconds, {"lifecycle": self.name})
            if claimed:
                metrics.consumed.add(len(claimed), {
                    "messaging.system": MESSAGING_SYSTEM,
                    "messaging.destination.name": self.name,
                    "messaging.operation.name": "claim",
                    "messaging.operation.type": "receive"})
        if claimed and self.logger.isEnabledFor(logging.DEBUG):
            for item in claimed:
                lease = item.lease
                self._log(logging.DEBUG, "claim",
                          f"{self.name} {lease.key}: leased to {lease.worker_id}",
                          key=lease.key, trigger=_lease_trigger(lifecycle),
                          destination=str(lifecycle.status_of(item.record)),
                          worker=lease.worker_id, lease=lease_digest(lease.token),
                          attempt=lease.attempt, seconds=seconds)

    def finished(self, lifecycle: Lifecycle[Any, Any], claimed: Sequence[Any],
                 outcomes: Sequence[Any], lost: Callable[[int], bool]) -> None:
        """Each of ``outcomes`` (:class:`~lifecycles._worker_lease.WorkOutcome`, durable) of the
        handler calls on ``claimed``; ``lost(n)``: whether the n-th refusal was a lost race."""
        metrics = self.metrics
        logger = self.logger
        debug = logger.isEnabledFor(logging.DEBUG)
        for at, (item, outcome) in enumerate(zip(claimed, outcomes, strict=True)):
            raised = outcome.result.error if isinstance(outcome.result, Raised) else None
            error_type = None if raised is None else type(raised).__qualname__
            source = str(lifecycle.status_of(outcome.claimed))
            trigger = outcome.trigger
            lease = item.lease
            if metrics is not None:
                metrics.process_duration.record(outcome.handler_seconds,
                                                self._process_attrs(error_type))
            refusal = outcome.refusal
            if refusal is None and outcome.record is not None:
                destination = str(outcome.status)
                if metrics is not None:
                    metrics.transitions.add(1, self._transition_attrs(
                        str(trigger), source, destination))
                if debug:
                    self._log(logging.DEBUG, "transition",
                              f"{self.name} {outcome.key}: {trigger} {source} -> {destination}",
                              key=outcome.key, trigger=trigger, source=source,
                              destination=destination, worker=lease.worker_id,
                              lease=lease_digest(lease.token), attempt=lease.attempt,
                              seconds=outcome.handler_seconds, error=error_type)
                continue
            code = getattr(refusal, "code", None) or type(refusal).__qualname__
            if isinstance(outcome.step, Leave):
                if logger.isEnabledFor(logging.INFO):
                    self._log(logging.INFO, "left",
                              f"{self.name} {outcome.key}: left leased ({code})",
                              key=outcome.key, source=source, code=code,
                              worker=lease.worker_id, lease=lease_digest(lease.token),
                              attempt=lease.attempt, seconds=outcome.handler_seconds,
                              error=error_type)
                continue
            race = lost(at)
            if metrics is not None:
                if race:
                    metrics.lost_races.add(1, {"lifecycle": self.name})
                else:
                    metrics.refusals.add(1, {"lifecycle": self.name, "code": code})
            if logger.isEnabledFor(logging.WARNING):
                event = "lost_race" if race else "refusal"
                why = ("the lease was taken meanwhile" if race else "refused")
                self._log(logging.WARNING, event,
                          f"{self.name} {outcome.key}: {trigger or 'step'} from {source} "
                          f"{why} ({code})",
                          key=outcome.key, trigger=trigger, source=source, code=code,
                          rules=rules_of(refusal), worker=lease.worker_id,
                          lease=lease_digest(lease.token), attempt=lease.attempt,
                          seconds=outcome.handler_seconds, error=error_type)

    def renewed(self, item: Any, refusal: BaseException | None) -> None:
        """The lease of ``item`` (a :class:`~lifecycles._worker_lease.Claimed`) was renewed, or the
        renewal was refused (``refusal``): the lease is lost."""
        lease = item.lease
        if refusal is None:
            if self.logger.isEnabledFor(logging.DEBUG):
                self._log(logging.DEBUG, "renewal",
                          f"{self.name} {lease.key}: lease renewed until {lease.expires_at}",
                          key=lease.key, worker=lease.worker_id,
                          lease=lease_digest(lease.token), attempt=lease.attempt)
        elif self.logger.isEnabledFor(logging.WARNING):
            code = getattr(refusal, "code", None) or type(refusal).__qualname__
            self._log(logging.WARNING, "renewal_refused",
                      f"{self.name} {lease.key}: renewal refused, the lease is lost ({code})",
                      key=lease.key, code=code, rules=rules_of(refusal),
                      worker=lease.worker_id, lease=lease_digest(lease.token),
                      attempt=lease.attempt)

    def rescued(self, lifecycle: Lifecycle[Any, Any], grants: Iterable[Any]) -> None:
        """Each of ``grants`` (:class:`~lifecycles.machines.lease.Grant`) ended an expired
        lease, committed."""
        metrics = self.metrics
        warn = self.logger.isEnabledFor(logging.WARNING)
        lease = lifecycle.lease
        handling = getattr(lifecycle, "handling", None)
        holder_field = getattr(handling, "holder", None)
        for grant in grants:
            before = grant.before
            source = str(lifecycle.status_of(before))
            destination = str(lifecycle.status_of(grant.after))
            if metrics is not None:
                metrics.rescues.add(1, {"lifecycle": self.name})
                metrics.transitions.add(1, self._transition_attrs(
                    grant.row.trigger, source, destination))
            if warn and lease is not None:
                key = lifecycle.key_of(before)
                holder = getattr(before, holder_field) if holder_field else None
                self._log(logging.WARNING, "rescue",
                          f"{self.name} {key}: expired lease rescued, {grant.row.trigger} "
                          f"{source} -> {destination}",
                          key=key, trigger=grant.row.trigger, source=source,
                          destination=destination, worker=holder,
                          lease=lease_digest(getattr(before, lease.token_field)))

    def store_error(self, error: BaseException, worker_id: str, *, transient: bool) -> None:
        """A worker met ``error``: WARNING when it is transient (the store is unavailable:
        the worker reconnects), ERROR when nothing the worker does can mend it."""
        level = logging.WARNING if transient else logging.ERROR
        if self.logger.isEnabledFor(level):
            code = getattr(error, "code", None) or type(error).__qualname__
            # Never the error's text: a driver's message may quote the row it refused
            # (PostgreSQL's "Failing row contains (...)"), lease token included.
            self._log(level, "store_error",
                      f"{self.name}: worker {worker_id}: {type(error).__name__} ({code})",
                      code=code, worker=worker_id, rules=rules_of(error))

    def stepped(self, lifecycle: Lifecycle[Any, Any], before: Any, after: Any, trigger: str,
                seconds: float | None, error_type: str | None) -> None:
        """One step written without a lease (:class:`~lifecycles._worker_steps.ExclusiveWork`'s
        intake and finishing steps)."""
        source = str(lifecycle.status_of(before))
        destination = str(lifecycle.status_of(after))
        metrics = self.metrics
        if metrics is not None:
            metrics.transitions.add(1, self._transition_attrs(trigger, source, destination))
            if seconds is not None:
                metrics.process_duration.record(seconds, self._process_attrs(error_type))
        if self.logger.isEnabledFor(logging.DEBUG):
            key = lifecycle.key_of(before)
            self._log(logging.DEBUG, "transition",
                      f"{self.name} {key}: {trigger} {source} -> {destination}",
                      key=key, trigger=trigger, source=source, destination=destination,
                      seconds=seconds, error=error_type)


def rules_of(error: BaseException | None) -> tuple[str, ...] | None:
    """The rules a refusal names: an invariant violation's, or the guard that blocked."""
    rules = getattr(error, "rules", None)
    if rules:
        return tuple(rules)
    guard = getattr(error, "guard", None)
    return (guard,) if guard else None


def _lease_trigger(lifecycle: Lifecycle[Any, Any]) -> str | None:
    lease = lifecycle.lease
    return None if lease is None else lease.trigger


_observers: dict[str, Observer] = {}


def observer(lifecycle: Lifecycle[Any, Any]) -> Observer:
    """The :class:`Observer` of ``lifecycle`` (one per lifecycle name, made once)."""
    found = _observers.get(lifecycle.name)
    if found is None:
        with _lock:
            found = _observers.setdefault(lifecycle.name, Observer(lifecycle.name))
    return found


# --- observable gauges from a store's health -------------------------------------------


def watch_health(store: Any, lifecycle: Lifecycle[Any, Any], *,
                 clock: Callable[[], float] | None = None, provider: Any = None) -> Any:
    """Register the observable gauges ``lifecycles.records`` (by status),
    ``lifecycles.records.due`` and ``lifecycles.leases.expired`` of ``lifecycle``, read
    from ``store.health(now)`` at each collection (one health read serves the three).

    ``provider``: the meter provider (default: :func:`use_meter_provider`'s, else the
    global one). Returns the three instruments; ``None`` when OpenTelemetry is not
    installed or no provider is set up. A collection that cannot read the store reports
    nothing for it (a gauge with no point), rather than failing the exporter.
    """
    chosen = provider if provider is not None else _provider()
    if chosen is None:
        return None
    api = _metrics_api()
    meter = _meter_of(chosen)
    now_of = clock or time.time
    name = lifecycle.name
    cache: dict[str, Any] = {}

    def health() -> Any:
        # The three callbacks of one collection run back to back: one read serves them.
        at = time.monotonic()
        if cache.get("at") is None or at - cache["at"] > 0.5:
            try:
                cache["health"] = store.health(now_of())
            except Exception as error:
                cache["health"] = None
                observer(lifecycle).store_error(error, "health", transient=True)
            cache["at"] = at
        return cache["health"]

    def records(_options: Any) -> list[Any]:
        found = health()
        if found is None:
            return []
        return [api.Observation(count, {"lifecycle": name, "status": status})
                for status, count in sorted(found.counts.items())]

    def due(_options: Any) -> list[Any]:
        found = health()
        return [] if found is None else [api.Observation(found.due, {"lifecycle": name})]

    def expired(_options: Any) -> list[Any]:
        found = health()
        return [] if found is None else [api.Observation(found.expired, {"lifecycle": name})]

    return (
        meter.create_observable_gauge("lifecycles.records", [records], unit="{record}",
                                      description="Records by status"),
        meter.create_observable_gauge("lifecycles.records.due", [due], unit="{record}",
                                      description="Claimable records that are due"),
        meter.create_observable_gauge("lifecycles.leases.expired", [expired],
                                      unit="{lease}", description="Leases expired"),
    )
