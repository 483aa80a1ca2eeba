"""The monitor's public errors, and the one table from a broken rule to its public code.

Every refusal of :class:`~lifecycles.monitor.DurableTerminalProcessingMonitor` is a
:class:`TerminalProcessingMonitorBlocked` whose ``code`` is the reference's string;
each code belongs to one family (input, state, lease, storage) that callers may catch.
Engine and store errors become these at the facade's edge (:func:`public_errors`).

One ``except`` serves a worker loop: every refusal is also a
:class:`~lifecycles.machines._declaration.LifecycleError` (as every store error is), and
``database_unreachable`` is a :class:`DatabaseUnreachable`, which is also a
:class:`~lifecycles.stores._base.StoreUnavailable`, the error
``lifecycles.stores.postgres.connect`` and ``lifecycles.stores.sqlite.connect`` raise.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from lifecycles.invariants._core import InvariantViolation
from lifecycles.invariants.monitor import (
    batch_limit,
    capabilities_rule,
    event_id_rule,
    failure_bound,
    lease_duration,
    reader_rule,
    sha256_hex,
    terminal_status,
    time,
    token,
    worker_id_rule,
)
from lifecycles.machines._audit import PublicError, PublicErrors
from lifecycles.machines._declaration import LifecycleError, TransitionRefused
from lifecycles.machines.lease import LostRace
from lifecycles.machines.monitor import CODE, MONITOR
from lifecycles.stores._base import Store, StoreError, StoreUnavailable, UniqueViolation

__all__ = [
    "MEANINGS",
    "PUBLIC_ERRORS",
    "RULE_CODES",
    "DatabaseUnreachable",
    "InputInvalid",
    "LeaseLost",
    "StateInvalid",
    "StorageBlocked",
    "TerminalProcessingMonitorBlocked",
    "blocked",
    "public_errors",
    "refused",
    "unique_is_collision",
]

# --- errors --------------------------------------------------------------------


class TerminalProcessingMonitorBlocked(RuntimeError, LifecycleError):
    """Stable, content-free processing-observation failure; match on ``code``.

    ``TerminalProcessingMonitorBlocked(code)`` builds the base class, as before.
    Raised errors are instances of a family subclass (``InputInvalid``,
    ``StateInvalid``, ``LeaseLost``, ``StorageBlocked``) so callers can also catch
    a family; :func:`blocked` maps a code to its family. A ``RuntimeError`` as in the
    reference, and a :class:`~lifecycles.machines._declaration.LifecycleError` like every
    error of lifecycles.
    """

    family_codes: ClassVar[frozenset[str]] = frozenset()
    _by_code: ClassVar[dict[str, type[TerminalProcessingMonitorBlocked]]] = {}

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code

    def __init_subclass__(cls, codes: frozenset[str] = frozenset(), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.family_codes = frozenset(CODE + name for name in codes)
        for code in cls.family_codes:
            TerminalProcessingMonitorBlocked._by_code[code] = cls


class InputInvalid(
    TerminalProcessingMonitorBlocked,
    codes=frozenset({
        "capabilities_invalid", "poll_interval_invalid", "delay_invalid", "time_invalid",
        "max_failures_invalid", "notification_invalid", "worker_invalid", "lease_invalid",
        "reader_invalid", "event_invalid", "idempotency_collision", "missing", "limit_invalid",
    }),
):
    """The caller's input was refused; nothing was changed."""


class StateInvalid(TerminalProcessingMonitorBlocked, codes=frozenset({"state_invalid"})):
    """A stored record breaks a named rule; ``rules`` names them, ``event_ids`` the
    stored records found broken (empty when the record was not yet stored)."""

    def __init__(self, code: str, rules: tuple[str, ...] = (), event_ids: tuple[str, ...] = ()):
        super().__init__(code)
        self.rules = rules
        self.event_ids = event_ids


class LeaseLost(
    TerminalProcessingMonitorBlocked,
    codes=frozenset({"claim_lost", "lease_expired", "completion_lost", "failure_lost"}),
):
    """This worker no longer holds the lease it acted on; nothing was changed."""


class StorageBlocked(
    TerminalProcessingMonitorBlocked,
    codes=frozenset({
        "schema_altered", "legacy_unbound", "database_integrity", "transaction_nested",
        "database_unreachable",
    }),
):
    """The database cannot be used as it is. Nothing was changed, except where a
    :class:`DatabaseUnreachable` says the outcome of a commit is unknown."""


class DatabaseUnreachable(
    StorageBlocked, StoreUnavailable, codes=frozenset({"database_unreachable"})
):
    """The connection is closed or broke, or the database cannot be used right now
    (locked past the busy timeout, a full disk, an I/O error).

    ``outcome_unknown`` says whether the call's write may have committed:

    * ``False``: the failure came before any commit was sent; nothing was changed.
    * ``True``: the connection failed while a commit was on its way (PostgreSQL: after
      ``COMMIT``, or a one-statement write, was sent and before its answer came; SQLite:
      an I/O error while committing). The write may have committed or not.

    What is safe next, on a new connection if this one broke: ``register`` and
    ``register_many`` are idempotent, retry them (they answer what is stored);
    ``status`` and ``health`` only read. ``claim``, ``run_once`` and ``run_many`` may
    leave a lease held by this worker (a claim that committed unseen, a completion that
    did not commit); the same ``worker_id``'s next claim in this process takes it up
    again while it is live (:class:`~lifecycles.machines.lease.Doubt`), instead of
    leasing another item and stranding that one until its lease expires. Also a
    :class:`~lifecycles.stores._base.StoreUnavailable`, as ``connect()``'s errors are.
    """

    def __init__(self, code: str, outcome_unknown: bool = False):
        super().__init__(code)
        self.outcome_unknown = outcome_unknown


def blocked(
    code: str, rules: tuple[str, ...] = (), event_ids: tuple[str, ...] = (),
    *, outcome_unknown: bool = False,
) -> TerminalProcessingMonitorBlocked:
    """The error for ``code``, as an instance of its family (``outcome_unknown``: of a
    ``database_unreachable``, see :class:`DatabaseUnreachable`)."""
    family = TerminalProcessingMonitorBlocked._by_code.get(code, TerminalProcessingMonitorBlocked)
    if family is StateInvalid:
        return StateInvalid(code, rules, event_ids)
    if family is DatabaseUnreachable:
        return DatabaseUnreachable(code, outcome_unknown)
    return family(code)


@contextmanager
def public_errors(store: Store[Any] | None = None) -> Iterator[None]:
    """Translate engine and store errors into the facade's one exception type.

    With ``store``, an exception of its database driver becomes the store error it
    means (:meth:`Store.driver_error`), so no ``sqlite3`` or ``psycopg`` exception
    leaves a public method.
    """
    try:
        yield
    except TerminalProcessingMonitorBlocked:
        raise  # already public (a DatabaseUnreachable is a StoreError too)
    except InvariantViolation as error:
        raise blocked(error.code, error.rules, error.keys) from error
    except LostRace as error:  # a store's StaleRecord, or the lease protocol's own
        raise blocked(CODE + "claim_lost") from error
    except StoreUnavailable as error:
        raise blocked(error.code, outcome_unknown=error.outcome_unknown) from error
    except (TransitionRefused, StoreError) as error:
        raise blocked(error.code) from error
    except Exception as error:
        meant = None if store is None else store.driver_error(error)
        if meant is None:
            raise
        raise blocked(meant.code) from error


@contextmanager
def unique_is_collision() -> Iterator[None]:
    """Another event already holds this notification_id: a collision, not a crash."""
    try:
        yield
    except UniqueViolation as error:
        raise blocked(CODE + "idempotency_collision") from error


# --- input checks: a broken rule's name -> its public code, in one table ----------

# Every rule is declared once (lifecycles.invariants.monitor, machines.monitor's
# RetryPolicy); an argument checked by several rules maps each to its one code.
RULE_CODES: Mapping[str, str] = {
    time.name: "time_invalid",  # every `now`, and a duration that is no time at all
    capabilities_rule.name: "capabilities_invalid",
    "poll_interval_bounds": "poll_interval_invalid",
    "delay_bounds": "delay_invalid",
    "base_delay_within_max_delay": "delay_invalid",
    failure_bound.name: "max_failures_invalid",
    lease_duration.name: "lease_invalid",
    batch_limit.name: "limit_invalid",
    worker_id_rule.name: "worker_invalid",
    event_id_rule.name: "event_invalid",
    reader_rule.name: "reader_invalid",
    # A notification is refused whole, whichever of its rules it breaks.
    **dict.fromkeys((
        "notification_is_object", "notification_readable", "notification_fields_exact",
        "notification_schema_is_notification_schema", token.name, terminal_status.name,
        sha256_hex.name, "notification_json", "notification_digest_matches",
    ), "notification_invalid"),
}


def refused(rule: str) -> TerminalProcessingMonitorBlocked:
    """The public error for an argument that breaks ``rule`` (:data:`RULE_CODES`)."""
    return blocked(CODE + RULE_CODES[rule])


# --- what each public error means, for the auditor page ---------------------------

_NOTHING = "Nothing."
_POLL = "`run_once` raises it; `run_many` returns it in that item's place"
_LOST = (
    "Nothing: the record stays as the other worker left it. The reader was called, but "
    "its answer is not recorded."
)

# code (without the prefix) -> (what it means, which calls raise it, what changed).
# Every code of every family is here; tests/tools/test_diagrams_audit.py holds it so.
MEANINGS: Mapping[str, tuple[str, str, str]] = {
    "capabilities_invalid": (
        "`expected_capabilities_sha256` is not 64 lowercase hex digits.",
        "The constructor.", _NOTHING),
    "poll_interval_invalid": (
        "`poll_interval_seconds` is not a duration above 0 and at most 86,400 seconds.",
        "The constructor.", _NOTHING),
    "delay_invalid": (
        "`base_delay_seconds` or `max_delay_seconds` is not a duration above 0 and at "
        "most 86,400 seconds, or the base delay exceeds the maximum.",
        "The constructor.", _NOTHING),
    "time_invalid": (
        "A `now`, or a duration, is not a finite, non-negative number.",
        "Every call that takes `now`; the constructor's and the claim's durations.",
        _NOTHING),
    "max_failures_invalid": (
        "`max_failures` is not an integer from 1 to 20.",
        "`register`, `register_many`.", _NOTHING),
    "notification_invalid": (
        "The notification is not exactly the notification schema, or its SHA-256 is not "
        "the digest of its canonical JSON.",
        "`register`; `register_many` returns it in that pair's place.",
        "Nothing for that notification."),
    "worker_invalid": (
        "`worker_id` is not a token of 1 to 128 characters (letters, digits, `_.:-`).",
        "`claim`, `run_once`, `run_many`.", _NOTHING),
    "lease_invalid": (
        "`lease_seconds` is not a duration above 0 and at most 86,400 seconds.",
        "`claim`, `run_once`, `run_many`.", _NOTHING),
    "reader_invalid": (
        "`reader` is not callable.", "`run_once`, `run_many`.", _NOTHING),
    "event_invalid": (
        "`event_id` is not a token of 1 to 256 characters.", "`status`.", _NOTHING),
    "idempotency_collision": (
        "The event id, or the notification id, is already registered with a different "
        "notification.",
        "`register`; `register_many` returns it in that pair's place.",
        "Nothing: the stored record is unchanged."),
    "missing": ("No record has this event id.", "`status`.", _NOTHING),
    "limit_invalid": (
        "`limit` is not an integer from 1 to 1000. Not in the reference, which has no "
        "`run_many`.",
        "`run_many`.", _NOTHING),
    "state_invalid": (
        "A stored record breaks a named rule (an invariant or a field rule), or a write "
        "would produce one that does; the error's `rules` names the rules and "
        "`event_ids` the stored records found broken.",
        "Every call that reads or writes records: `register`, `claim`, `run_once`, "
        "`run_many` (per item), `status`, `health`.",
        "Nothing: a record that breaks a rule is never written."),
    "claim_lost": (
        "This worker no longer holds the lease it acted on: the record is no longer "
        "leased to it (its lease expired and another worker's claim rescued it, maybe "
        "claimed it again), or it is no longer stored.",
        f"{_POLL}.", _LOST),
    "lease_expired": (
        "The worker's lease had expired (`lease_expires_at` <= now) when its answer was "
        "to be written.",
        f"{_POLL}.",
        "Nothing: the record stays `leased` under the expired lease, for the next claim "
        "to rescue. The reader was called, but its answer is not recorded."),
    "completion_lost": (
        "Writing the receiver's answer lost a compare-and-set race with another writer.",
        f"{_POLL}.", _LOST),
    "failure_lost": (
        "Writing the failed attempt lost a compare-and-set race with another writer.",
        f"{_POLL}.", _LOST),
    "schema_altered": (
        "The tables or the meta row are not the monitor's schema (changed by another "
        "connection, or half missing), or the database is bound to other capabilities.",
        "The constructor and every call (each checks the schema first).", _NOTHING),
    "legacy_unbound": (
        "A version-1 database that holds records cannot be bound to capabilities: "
        "nothing says which capabilities wrote them.",
        "The constructor.", "Nothing: the database is left at version 1."),
    "database_integrity": (
        "The database reports itself damaged (the integrity check, or a driver error "
        "that is neither a lost connection nor a changed schema).",
        "`health`, and any call whose statement the driver refuses so.", _NOTHING),
    "transaction_nested": (
        "The connection is already inside a transaction the monitor did not open.",
        "The constructor and every call that writes.", _NOTHING),
    "database_unreachable": (
        "The connection is closed or broke, or the database cannot be used right now "
        "(locked past the busy timeout, a full disk, an I/O error). A `StorageBlocked`, "
        "and a `StoreUnavailable` like `connect()`'s errors. Its `outcome_unknown` is "
        "true when the connection failed while a commit was on its way (PostgreSQL: after "
        "`COMMIT` or a one-statement write was sent, before its answer; SQLite: an I/O "
        "error while committing). Not in the reference, which let the driver's exception "
        "out.",
        "Every call.",
        "Nothing, unless `outcome_unknown` is true: then the write may have committed or "
        "not. "
        "`register` and `register_many` are idempotent: retry them, they answer what is "
        "stored. `status` and `health` only read. After `claim`, `run_once` or "
        "`run_many`, a lease may be left to the worker (a claim committed unseen, a "
        "completion not committed): the same worker id's next claim in this process "
        "takes it up again while it is live, and the reader is called for it again."),
}

# Why a guard that no call lets refuse still carries the reference's generic claim_lost.
_KEPT = (
    "`claim_lost` is the reference's generic code, kept because callers match on the "
    "reference's codes; since no call raises it, none is misled."
)
_PASSED_OVER = (
    "Never raised: a claim asks the store for due records only, and passes over a "
    "record its guards refuse to lease the next one. A refusal here would mean "
    "\"{case}\", not \"lost\": " + _KEPT
)
_CHOOSES_ROW = (
    "Never raised: it only chooses between the two rows of its trigger, and the other "
    "row (`!{guard}`) fires when it is false. " + _KEPT
)

PUBLIC_ERRORS = PublicErrors(
    MONITOR,
    errors=(
        *(
            PublicError(blocked(CODE + name).__class__.__name__, CODE + name, *meant)
            for name, meant in MEANINGS.items()
        ),
        PublicError(
            "TypeError", None, "The connection is neither a `sqlite3.Connection` nor a "
            "psycopg connection.", "The constructor.", _NOTHING),
    ),
    guards={
        "same_registration": (
            "Raised by `register` as `idempotency_collision`: it names the case, and is "
            "the reference's code."),
        "poll_is_due": _PASSED_OVER.format(case="not yet due"),
        "failures_remain": _PASSED_OVER.format(case="no failures left"),
        "lease_has_expired": (
            "Never raised: `expire_lease` fires only on records whose lease has expired. "
            + _KEPT),
        "another_failure_allowed": _CHOOSES_ROW.format(guard="another_failure_allowed"),
        "lease_is_held": (
            "Raised by `run_once` / `run_many` when the worker's lease was taken from it: "
            "`claim_lost` says what happened, and is the reference's code for it."),
        "lease_is_live": (
            "Raised by `run_once` / `run_many` when the lease expired before the answer "
            "was written: `lease_expired` says what happened, and is the reference's "
            "code for it."),
        "retry_is_allowed": _CHOOSES_ROW.format(guard="retry_is_allowed"),
    },
    not_allowed=(
        "Raised by `run_once` / `run_many` when the record is no longer `leased` (its "
        "expired lease was rescued): `claim_lost`, the reference's code for it."
    ),
    note=(
        "Every refusal is a `TerminalProcessingMonitorBlocked` whose `code` is the "
        "reference's string (callers match on it), raised as an instance of its family "
        "(`InputInvalid`, `StateInvalid`, `LeaseLost`, `StorageBlocked`), which callers "
        "may catch instead. Each is also a `LifecycleError`, and `database_unreachable` "
        "a `StoreUnavailable`, so one `except` catches them with `connect()`'s errors."
    ),
)
