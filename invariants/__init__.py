"""Named rules every stored record obeys: field rules and cross-field invariants."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from lifecycles.invariants.core import (
        FieldRule,
        FieldRuleViolation,
        Invariant,
        InvariantSet,
        InvariantViolation,
        build_record,
        expressed,
        field_rules,
        finite_time,
        integer_between,
        invariant,
        matches,
        one_of,
        step_invariant,
    )
    from lifecycles.invariants.expressions import Expr, Fields

# Each public name and the module that defines it. Nothing is imported until a name is
# used, so importing the package stays cheap (no driver, no checker, no Hypothesis).
_DEFINED_IN: dict[str, str] = {
    "Expr": "lifecycles.invariants.expressions",
    "FieldRule": "lifecycles.invariants.core",
    "FieldRuleViolation": "lifecycles.invariants.core",
    "Fields": "lifecycles.invariants.expressions",
    "Invariant": "lifecycles.invariants.core",
    "InvariantSet": "lifecycles.invariants.core",
    "InvariantViolation": "lifecycles.invariants.core",
    "build_record": "lifecycles.invariants.core",
    "expressed": "lifecycles.invariants.core",
    "field_rules": "lifecycles.invariants.core",
    "finite_time": "lifecycles.invariants.core",
    "integer_between": "lifecycles.invariants.core",
    "invariant": "lifecycles.invariants.core",
    "matches": "lifecycles.invariants.core",
    "one_of": "lifecycles.invariants.core",
    "step_invariant": "lifecycles.invariants.core",
}

__all__ = [
    "Expr",
    "FieldRule",
    "FieldRuleViolation",
    "Fields",
    "Invariant",
    "InvariantSet",
    "InvariantViolation",
    "build_record",
    "expressed",
    "field_rules",
    "finite_time",
    "integer_between",
    "invariant",
    "matches",
    "one_of",
    "step_invariant",
]

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    from lifecycles._exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, globals(), __all__)
