"""Named rules every stored record obeys: field rules and cross-field invariants."""

from lifecycles.invariants.core import (
    FieldRule,
    FieldRuleViolation,
    Invariant,
    InvariantSet,
    InvariantViolation,
    build_record,
    field_rules,
    invariant,
)

__all__ = [
    "FieldRule",
    "FieldRuleViolation",
    "Invariant",
    "InvariantSet",
    "InvariantViolation",
    "build_record",
    "field_rules",
    "invariant",
]
