"""Named rules every stored record obeys: field rules and cross-field invariants."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from lifecycles.invariants._core import (
        FieldRule,
        FieldRuleViolation,
        Invariant,
        InvariantSet,
        InvariantViolation,
        build_record,
        canonical_json,
        expressed,
        field_rules,
        finite_time,
        integer_between,
        invariant,
        is_integer,
        is_time,
        matches,
        non_negative_integer,
        one_of,
        step_invariant,
    )
    from lifecycles.invariants._expressions import Expr, Fields
    from lifecycles.invariants._store import (
        GroupLimit,
        Holding,
        StoreInvariant,
        StoreView,
        at_most_per,
        store_invariant,
        unique_across,
    )

# Each public name and the module that defines it. Nothing is imported until a name is
# used, so importing the package stays cheap (no driver, no checker, no Hypothesis).
_DEFINED_IN: dict[str, str] = {
    "Expr": "lifecycles.invariants._expressions",
    "FieldRule": "lifecycles.invariants._core",
    "FieldRuleViolation": "lifecycles.invariants._core",
    "Fields": "lifecycles.invariants._expressions",
    "GroupLimit": "lifecycles.invariants._store",
    "Holding": "lifecycles.invariants._store",
    "Invariant": "lifecycles.invariants._core",
    "InvariantSet": "lifecycles.invariants._core",
    "InvariantViolation": "lifecycles.invariants._core",
    "StoreInvariant": "lifecycles.invariants._store",
    "StoreView": "lifecycles.invariants._store",
    "at_most_per": "lifecycles.invariants._store",
    "build_record": "lifecycles.invariants._core",
    "canonical_json": "lifecycles.invariants._core",
    "expressed": "lifecycles.invariants._core",
    "field_rules": "lifecycles.invariants._core",
    "finite_time": "lifecycles.invariants._core",
    "integer_between": "lifecycles.invariants._core",
    "invariant": "lifecycles.invariants._core",
    "is_integer": "lifecycles.invariants._core",
    "is_time": "lifecycles.invariants._core",
    "matches": "lifecycles.invariants._core",
    "non_negative_integer": "lifecycles.invariants._core",
    "one_of": "lifecycles.invariants._core",
    "step_invariant": "lifecycles.invariants._core",
    "store_invariant": "lifecycles.invariants._store",
    "unique_across": "lifecycles.invariants._store",
}

__all__ = [
    "Expr",
    "FieldRule",
    "FieldRuleViolation",
    "Fields",
    "GroupLimit",
    "Holding",
    "Invariant",
    "InvariantSet",
    "InvariantViolation",
    "StoreInvariant",
    "StoreView",
    "at_most_per",
    "build_record",
    "canonical_json",
    "expressed",
    "field_rules",
    "finite_time",
    "integer_between",
    "invariant",
    "is_integer",
    "is_time",
    "matches",
    "non_negative_integer",
    "one_of",
    "step_invariant",
    "store_invariant",
    "unique_across",
]

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    from lifecycles._exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, globals(), __all__)
