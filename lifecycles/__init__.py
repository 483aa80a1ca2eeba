"""lifecycles: explicit, durable state machines declared as transition tables.

The public API is what this module and the packages lifecycles.machines,
lifecycles.invariants and lifecycles.stores export (``__all__``); the shipped lifecycles
are apps beside it (lifecycles.monitor, lifecycles.outbox, lifecycles.testing). Every
other module may move.
"""

__version__ = "0.1.0"

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
    from lifecycles.machines.audit import FiredBy
    from lifecycles.machines.blocks import (
        Backoff,
        InputNames,
        Leasing,
        Retry,
        WorkInputs,
        named_in,
        source_of,
    )
    from lifecycles.machines.core import Lifecycle
    from lifecycles.machines.declaration import (
        Changes,
        DefinitionError,
        Effect,
        EffectContractError,
        Guard,
        Lease,
        LifecycleError,
        Row,
        TransitionRefused,
        effect,
        guard,
    )
    from lifecycles.machines.exhaustive import explore
    from lifecycles.machines.exploration import (
        AcceptedCycle,
        ExpectationBroken,
        Exploration,
        Move,
        time_relation,
        trigger_move,
    )
    from lifecycles.machines.interleaving import (
        Work,
        Workers,
        explore_workers,
    )
    from lifecycles.machines.lease import (
        LeaseDefaults,
        LeasingStore,
        LostRace,
        NotLeasable,
        due_in_order,
        expired_among,
    )
    from lifecycles.machines.liveness import liveness
    from lifecycles.machines.mutants import EquivalentMutant
    from lifecycles.machines.symbolic import symbolic_row
    from lifecycles.machines.work import (
        Fire,
        Handling,
        Leave,
        Outcome,
        Permanent,
        Step,
        outcomes,
    )
    from lifecycles.stores.base import (
        CommitUncertain,
        SchemaMismatch,
        StaleRecord,
        Store,
        StoreDamaged,
        StoreError,
        StoreUnavailable,
        UniqueViolation,
    )
    from lifecycles.stores.files.store import FilesStore
    from lifecycles.stores.memory import MemoryStore
    from lifecycles.stores.postgres import PostgresStore
    from lifecycles.stores.sqlite import SQLiteStore
    from lifecycles.worker import Worker
    from lifecycles.worker_lease import HeldLease, WorkOutcome

# Each public name and the module that defines it. Nothing is imported until a name is
# used: `import lifecycles` loads no engine, store, driver, checker or Hypothesis.
_DEFINED_IN: dict[str, str] = {
    "AcceptedCycle": "lifecycles.machines.exploration",
    "Backoff": "lifecycles.machines.blocks",
    "Changes": "lifecycles.machines.declaration",
    "CommitUncertain": "lifecycles.stores.base",
    "DefinitionError": "lifecycles.machines.declaration",
    "Effect": "lifecycles.machines.declaration",
    "EffectContractError": "lifecycles.machines.declaration",
    "EquivalentMutant": "lifecycles.machines.mutants",
    "ExpectationBroken": "lifecycles.machines.exploration",
    "Exploration": "lifecycles.machines.exploration",
    "Expr": "lifecycles.invariants.expressions",
    "FieldRule": "lifecycles.invariants.core",
    "FieldRuleViolation": "lifecycles.invariants.core",
    "Fields": "lifecycles.invariants.expressions",
    "FilesStore": "lifecycles.stores.files.store",
    "Fire": "lifecycles.machines.work",
    "FiredBy": "lifecycles.machines.audit",
    "Guard": "lifecycles.machines.declaration",
    "Handling": "lifecycles.machines.work",
    "HeldLease": "lifecycles.worker_lease",
    "InputNames": "lifecycles.machines.blocks",
    "Invariant": "lifecycles.invariants.core",
    "InvariantSet": "lifecycles.invariants.core",
    "InvariantViolation": "lifecycles.invariants.core",
    "Lease": "lifecycles.machines.declaration",
    "Leasing": "lifecycles.machines.blocks",
    "Leave": "lifecycles.machines.work",
    "Lifecycle": "lifecycles.machines.core",
    "LifecycleError": "lifecycles.machines.declaration",
    "LeaseDefaults": "lifecycles.machines.lease",
    "LeasingStore": "lifecycles.machines.lease",
    "LostRace": "lifecycles.machines.lease",
    "NotLeasable": "lifecycles.machines.lease",
    "due_in_order": "lifecycles.machines.lease",
    "expired_among": "lifecycles.machines.lease",
    "MemoryStore": "lifecycles.stores.memory",
    "Move": "lifecycles.machines.exploration",
    "Outcome": "lifecycles.machines.work",
    "Permanent": "lifecycles.machines.work",
    "PostgresStore": "lifecycles.stores.postgres",
    "Retry": "lifecycles.machines.blocks",
    "Row": "lifecycles.machines.declaration",
    "SQLiteStore": "lifecycles.stores.sqlite",
    "SchemaMismatch": "lifecycles.stores.base",
    "StaleRecord": "lifecycles.stores.base",
    "Step": "lifecycles.machines.work",
    "Store": "lifecycles.stores.base",
    "StoreDamaged": "lifecycles.stores.base",
    "StoreError": "lifecycles.stores.base",
    "StoreUnavailable": "lifecycles.stores.base",
    "TransitionRefused": "lifecycles.machines.declaration",
    "UniqueViolation": "lifecycles.stores.base",
    "Work": "lifecycles.machines.interleaving",
    "WorkInputs": "lifecycles.machines.blocks",
    "WorkOutcome": "lifecycles.worker_lease",
    "Worker": "lifecycles.worker",
    "Workers": "lifecycles.machines.interleaving",
    "build_record": "lifecycles.invariants.core",
    "effect": "lifecycles.machines.declaration",
    "explore": "lifecycles.machines.exhaustive",
    "explore_workers": "lifecycles.machines.interleaving",
    "expressed": "lifecycles.invariants.core",
    "field_rules": "lifecycles.invariants.core",
    "finite_time": "lifecycles.invariants.core",
    "guard": "lifecycles.machines.declaration",
    "integer_between": "lifecycles.invariants.core",
    "invariant": "lifecycles.invariants.core",
    "liveness": "lifecycles.machines.liveness",
    "matches": "lifecycles.invariants.core",
    "named_in": "lifecycles.machines.blocks",
    "one_of": "lifecycles.invariants.core",
    "outcomes": "lifecycles.machines.work",
    "source_of": "lifecycles.machines.blocks",
    "step_invariant": "lifecycles.invariants.core",
    "symbolic_row": "lifecycles.machines.symbolic",
    "time_relation": "lifecycles.machines.exploration",
    "trigger_move": "lifecycles.machines.exploration",
}

__all__ = [
    "AcceptedCycle",
    "Backoff",
    "Changes",
    "CommitUncertain",
    "DefinitionError",
    "Effect",
    "EffectContractError",
    "EquivalentMutant",
    "ExpectationBroken",
    "Exploration",
    "Expr",
    "FieldRule",
    "FieldRuleViolation",
    "Fields",
    "FilesStore",
    "Fire",
    "FiredBy",
    "Guard",
    "Handling",
    "HeldLease",
    "InputNames",
    "Invariant",
    "InvariantSet",
    "InvariantViolation",
    "Lease",
    "LeaseDefaults",
    "Leasing",
    "LeasingStore",
    "Leave",
    "Lifecycle",
    "LifecycleError",
    "LostRace",
    "MemoryStore",
    "Move",
    "NotLeasable",
    "Outcome",
    "Permanent",
    "PostgresStore",
    "Retry",
    "Row",
    "SQLiteStore",
    "SchemaMismatch",
    "StaleRecord",
    "Step",
    "Store",
    "StoreDamaged",
    "StoreError",
    "StoreUnavailable",
    "TransitionRefused",
    "UniqueViolation",
    "Work",
    "WorkInputs",
    "WorkOutcome",
    "Worker",
    "Workers",
    "__version__",
    "build_record",
    "due_in_order",
    "effect",
    "expired_among",
    "explore",
    "explore_workers",
    "expressed",
    "field_rules",
    "finite_time",
    "guard",
    "integer_between",
    "invariant",
    "liveness",
    "matches",
    "named_in",
    "one_of",
    "outcomes",
    "source_of",
    "step_invariant",
    "symbolic_row",
    "time_relation",
    "trigger_move",
]

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    from lifecycles._exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, globals(), __all__)
