"""The monitor's public errors, and the one table from a broken rule to its public code.

Every refusal of :class:`~lifecycles.monitor.DurableTerminalProcessingMonitor` is a
:class:`TerminalProcessingMonitorBlocked` whose ``code`` is the reference's string;
each code belongs to one family (input, state, lease, storage) that callers may catch.
Engine and store errors become these at the facade's edge (:func:`public_errors`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

from lifecycles.invariants.core import InvariantViolation
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
from lifecycles.machines.core import TransitionRefused
from lifecycles.machines.monitor import CODE
from lifecycles.stores.base import StaleRecord, Store, StoreError, UniqueViolation

# --- errors --------------------------------------------------------------------


class TerminalProcessingMonitorBlocked(RuntimeError):
    """Stable, content-free processing-observation failure; match on ``code``.

    ``TerminalProcessingMonitorBlocked(code)`` builds the base class, as before.
    Raised errors are instances of a family subclass (``InputInvalid``,
    ``StateInvalid``, ``LeaseLost``, ``StorageBlocked``) so callers can also catch
    a family; :func:`blocked` maps a code to its family.
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
    """The database cannot be used as it is; nothing was changed."""


def blocked(
    code: str, rules: tuple[str, ...] = (), event_ids: tuple[str, ...] = ()
) -> TerminalProcessingMonitorBlocked:
    """The error for ``code``, as an instance of its family."""
    family = TerminalProcessingMonitorBlocked._by_code.get(code, TerminalProcessingMonitorBlocked)
    if family is StateInvalid:
        return StateInvalid(code, rules, event_ids)
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
    except InvariantViolation as error:
        raise blocked(error.code, error.rules, error.keys) from error
    except StaleRecord as error:
        raise blocked(CODE + "claim_lost") from error
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
