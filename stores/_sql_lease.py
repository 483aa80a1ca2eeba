"""The lease queries of a SQL store, written once from the lease declaration and a dialect.

A claim asks for the first due records in claim order. SQLite's planner, without
statistics, can only be told one plan, and two are each slow somewhere: walking the
claim-order index passes over every claimable record that is not yet due (a monitor's
steady state: thousands of watched items, a few due), sorting the due records costs
their number (a backlog). So where the dialect bounds the walk (``walk_bound``), the
claim walks only to the claim-order key of the ``walk_bound``-th claimable record, and
beyond it asks the due-time range when few records are due, the whole walk when many
are (:meth:`lifecycles.stores._sql.SQLStore.due`). PostgreSQL plans with statistics and
row locks: it keeps the one walk, ``FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from lifecycles.machines import lease as lease_protocol

if TYPE_CHECKING:
    from lifecycles.machines._core import Lifecycle
    from lifecycles.stores._sql_dialect import Dialect
    from lifecycles.stores._sql_schema import SQLSchema

# Beyond a bounded walk, the due-time range is asked when at most this many records are
# due: sorting them costs about as much as a walk of a few thousand index entries.
SORTED_AT_MOST = 256

Query = tuple[str, str]
"""(where, order): a key exclusion goes between them; the order ends with a LIMIT marker."""


def excluding(query: Query, left_out: str) -> str:
    """``query`` as one statement, with ``left_out`` (the dialect's exclusion of some
    keys, or nothing) between its condition and its order."""
    where, order = query
    return where + left_out + order


def due_clause(d: Dialect, lifecycle: Lifecycle[Any, Any], now: str) -> str:
    """The protocol's ``is_due`` in SQL: claimable, its due time ``<= now`` (a marker)."""
    lease = lease_protocol.declared_lease(lifecycle)
    return f"{d.claimable_clause(lifecycle)} AND {d.quote(lease.due_field)} <= {now}"


def expired_clause(d: Dialect, lifecycle: Lifecycle[Any, Any], now: str, alias: str = "") -> str:
    """The protocol's ``is_expired`` in SQL: leased, its expiry ``<= now``; columns of
    table ``alias`` when one is given."""
    lease = lease_protocol.declared_lease(lifecycle)
    of = f"{alias}." if alias else ""
    return (f"{of}{d.quote(lifecycle.status_field)} = "
            f"{d.literal(lease_protocol.leased_status(lifecycle))}"
            f" AND {of}{d.quote(lease.expires_field)} <= {now}")


@attrs.frozen
class LeaseStatements:
    """Every lease query of one store, as text."""

    due: Query
    due_walk_all: Query
    due_range: Query
    count_due_capped: str
    bounded: bool
    expired: str
    glance: str
    count_due: str
    count_expired: str
    #: The live leases under given tokens: (where, order), the token list between them.
    live_under: Query

    @classmethod
    def build(cls, d: Dialect, schema: SQLSchema, select: str) -> LeaseStatements:
        lifecycle = schema.lifecycle
        lease = lease_protocol.declared_lease(lifecycle)
        quote, p, table = d.quote, d.param, d.quote(schema.table)
        claimable, due_by = d.claimable_clause(lifecycle), f"{quote(lease.due_field)} <= {p}"
        due = due_clause(d, lifecycle, p)
        expired = expired_clause(d, lifecycle, p)
        order = ", ".join(map(quote, lease.order_by))
        # The claim walks the partial claim-order index (its WHERE is `claimable`, as text).
        walk = (
            f"{select} WHERE {d.likely(claimable)} AND {d.likely(due_by)}",
            f" ORDER BY {order} LIMIT {p}{d.skip_locked}",
        )
        first = lease.order_by[0]
        bounded = bool(d.walk_bound) and any(
            c.name == first and c.kind in ("integer", "bigint", "real") for c in schema.columns
        )
        hint = d.due_range_hint(schema)
        count_due_capped = (
            f"SELECT count(*) FROM (SELECT 1 FROM {table}{hint}"
            f" WHERE {due} LIMIT {SORTED_AT_MOST + 1}) AS due"
        )
        bounded_walk = walk
        if bounded:
            # Up to the claim-order key of the `walk_bound`-th claimable record (found by
            # skipping that many entries of the same index, not by reading their rows).
            bound = (
                f"(SELECT {quote(first)} FROM {table} WHERE {d.likely(claimable)}"
                f" ORDER BY {order} LIMIT 1 OFFSET {d.walk_bound - 1})"
            )
            bounded_walk = (
                f"{walk[0]} AND {quote(first)} <= COALESCE({bound}, {d.infinity})", walk[1])
        # Where rows are locked, in claim order: recoveries running at once share the work.
        locked = f" ORDER BY {order}{d.skip_locked}" if d.skip_locked else ""
        listed_c = ", ".join(f"c.{quote(name)}" for name in schema.column_names)
        # Counted only when the walk found nothing: otherwise it is not needed, and it
        # reads up to SORTED_AT_MOST + 1 index entries.
        counted = (
            f"CASE WHEN c.{quote(schema.lifecycle.key_field)} IS NULL"
            f" THEN ({count_due_capped}) ELSE 0 END" if bounded else "0"
        )
        return cls(
            due=bounded_walk,
            due_walk_all=walk,
            due_range=(f"{select}{hint} WHERE {due}", f" ORDER BY {order} LIMIT {p}"),
            count_due_capped=count_due_capped,
            bounded=bounded,
            expired=f"{select} WHERE {expired}{locked}",
            # Whether any lease has expired, how many records are due (capped, where the
            # walk is bounded), and the first due record in the bounded walk.
            glance=(
                f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {expired}), {counted},"
                f" {listed_c} FROM (SELECT 1) AS one"
                f" LEFT JOIN ({bounded_walk[0]}{bounded_walk[1]}) AS c ON TRUE"
            ),
            count_due=f"SELECT count(*) FROM {table} WHERE {due}",
            count_expired=f"SELECT count(*) FROM {table} WHERE {expired}",
            # The expiry queries' status literal and expiry range: the lease-expiry index.
            live_under=(
                f"{select} WHERE {quote(lifecycle.status_field)} = "
                f"{d.literal(lease_protocol.leased_status(lifecycle))}"
                f" AND {quote(lease.expires_field)} > {p} AND {quote(lease.token_field)} IN ",
                f" ORDER BY {order}",
            ),
        )
