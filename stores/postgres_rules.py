"""The lifecycle's rules as named PostgreSQL ``CHECK`` constraints, from the same declarations.

lifecycles checks every rule in Python before each write and in SQL on every claim and
health query. A database shared with other writers (a migration script, an operator's
``psql``, a service in another language) can carry the rules itself: each field rule and
invariant with an SQL form (:mod:`lifecycles.stores._sql_rules`, the same text health
runs) becomes one ``CHECK`` constraint on the store's table, so the server refuses a
write that breaks it, whoever sends it::

    from lifecycles.stores.postgres_rules import install_rule_constraints

    changes = install_rule_constraints(monitor.store)   # idempotent; one transaction

or ``lifecycles monitor constraints --dsn DSN --capabilities SHA --install``.

* Names: ``lc_<field>__<rule>`` for a field rule, ``lc_<invariant>`` for an invariant
  (shortened with a digest past PostgreSQL's 63 bytes); each carries a comment with the
  digest of its expression, so a later install replaces a constraint whose rule changed
  and drops one whose rule is gone. Constraints not named ``lc_`` are never touched.
* A ``CHECK`` passes on NULL; each is written ``CHECK ((rule) IS TRUE)`` so that a NULL
  verdict breaks it, as it breaks the rule in health and in Python.
* Installing refuses, adding nothing, when a stored row breaks a rule: the lifecycle's
  state-invalid code, the rules and the first keys, as ``health()`` names them.
* Rules with no SQL form stay Python-only: :attr:`RuleConstraints.left_out` says which
  and why.
* A write that breaks a constraint raises ``psycopg.errors.CheckViolation``; the store
  reports it as ``database_integrity`` (its own writes were checked in Python first, so
  only a disagreement between the two forms could get there), and a claim re-decides
  in its transaction, where the read refuses the record as ``state_invalid``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs

from lifecycles.stores._sql import SQLStore
from lifecycles.stores.postgres import PostgresStore

__all__ = [
    "ConstraintChanges",
    "RuleConstraint",
    "RuleConstraints",
    "install_rule_constraints",
    "installed_rule_constraints",
    "rule_constraints",
]

PREFIX = "lc_"
MAX_NAME = 63  # PostgreSQL's identifier length in bytes (NAMEDATALEN - 1)


@attrs.frozen
class RuleConstraint:
    """One declared rule as a ``CHECK`` constraint of the store's table."""

    name: str
    rule: str
    field: str | None  # None: an invariant over the whole record
    check: str  # the rule's SQL form, true when the row keeps it

    @property
    def digest(self) -> str:
        """What the constraint's comment records: a changed rule gets a new one."""
        return "lifecycles " + hashlib.sha256(self.check.encode()).hexdigest()[:16]


@attrs.frozen
class RuleConstraints:
    constraints: tuple[RuleConstraint, ...]
    left_out: dict[str, str]  # rule -> why it has no SQL form here


@attrs.frozen
class ConstraintChanges:
    """What :func:`install_rule_constraints` did, by constraint name."""

    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


def constraint_name(rule: str, field: str | None) -> str:
    name = PREFIX + (f"{field}__{rule}" if field else rule)
    if len(name.encode()) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name.encode()[: MAX_NAME - 9].decode(errors="ignore") + "_" + digest


def _postgres(store: SQLStore[Any]) -> PostgresStore[Any]:
    if not isinstance(store, PostgresStore):
        raise TypeError(f"rule constraints are PostgreSQL's: {type(store).__name__} has none")
    return store


def rule_constraints(store: SQLStore[Any]) -> RuleConstraints:
    """Every rule of ``store``'s lifecycle that has an SQL form, as a constraint."""
    queries = _postgres(store).rule_queries()
    constraints = [
        RuleConstraint(constraint_name(c.rule.name, c.field), c.rule.name, c.field, c.sql)
        for c in queries.field_checks if c.sql is not None
    ] + [
        RuleConstraint(constraint_name(c.invariant.name, None), c.invariant.name, None, c.sql)
        for c in queries.invariant_checks if c.sql is not None
    ]
    names = [constraint.name for constraint in constraints]
    if len(set(names)) != len(names):  # two rules shortened alike: never one for another
        raise ValueError(f"constraint names collide: {sorted(names)}")
    left_out = {
        **{c.rule.name: c.why for c in queries.field_checks if c.sql is None},
        **{c.invariant.name: c.why for c in queries.invariant_checks if c.sql is None},
    }
    return RuleConstraints(tuple(constraints), left_out)


def installed_rule_constraints(store: SQLStore[Any]) -> dict[str, str | None]:
    """The ``lc_`` constraints on ``store``'s table: name -> the digest in its comment."""
    rows = _postgres(store).run(
        "SELECT conname, obj_description(oid, 'pg_constraint') FROM pg_constraint"
        " WHERE conrelid = to_regclass(%s) AND contype = 'c' AND starts_with(conname, %s)"
        " ORDER BY conname",
        (store.dialect.quote(store.schema.table), PREFIX),
    )
    return {str(name): None if comment is None else str(comment) for name, comment in rows}


def install_rule_constraints(store: SQLStore[Any]) -> ConstraintChanges:
    """Make the table's ``lc_`` constraints exactly the declared rules, in one transaction.

    Refuses with :class:`InvariantViolation` (the lifecycle's state-invalid code, the
    broken rules, the first broken keys: what ``health()`` names), changing nothing,
    while a stored row breaks any rule.
    """
    wanted = rule_constraints(store).constraints
    quote = store.dialect.quote
    table = quote(store.schema.table)
    with store.transaction():
        # No write may slip in between the rows checked below and the constraints added
        # (ALTER TABLE takes this lock anyway); two installs at once: one waits.
        store.run(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        # Health's own statements find the broken rows (its counts, which read the
        # clock, go unused here).
        store.health(now=0.0).raise_broken()
        present = installed_rule_constraints(store)
        changing = [c for c in wanted if present.get(c.name) != c.digest]
        names = {c.name for c in wanted}
        removed = [name for name in present if name not in names]
        for name in [*removed, *(c.name for c in changing if c.name in present)]:
            store.run(f"ALTER TABLE {table} DROP CONSTRAINT {quote(name)}")
        for constraint in changing:
            store.run(f"ALTER TABLE {table} ADD CONSTRAINT {quote(constraint.name)}"
                      f" CHECK (({constraint.check}) IS TRUE)")
            store.run(f"COMMENT ON CONSTRAINT {quote(constraint.name)} ON {table}"
                      f" IS {store.dialect.literal(constraint.digest)}")
    return ConstraintChanges(
        added=tuple(c.name for c in changing if c.name not in present),
        replaced=tuple(c.name for c in changing if c.name in present),
        removed=tuple(removed),
        kept=tuple(c.name for c in wanted if c not in changing),
    )
