"""How a lifecycle is declared, run and checked: the public names of lifecycles.machines."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
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

# Each public name and the module that defines it. Nothing is imported until a name is
# used, so importing the package stays cheap (no driver, no checker, no Hypothesis).
_DEFINED_IN: dict[str, str] = {
    "AcceptedCycle": "lifecycles.machines.exploration",
    "Backoff": "lifecycles.machines.blocks",
    "Changes": "lifecycles.machines.declaration",
    "DefinitionError": "lifecycles.machines.declaration",
    "Effect": "lifecycles.machines.declaration",
    "EffectContractError": "lifecycles.machines.declaration",
    "EquivalentMutant": "lifecycles.machines.mutants",
    "ExpectationBroken": "lifecycles.machines.exploration",
    "Exploration": "lifecycles.machines.exploration",
    "Fire": "lifecycles.machines.work",
    "FiredBy": "lifecycles.machines.audit",
    "Guard": "lifecycles.machines.declaration",
    "Handling": "lifecycles.machines.work",
    "InputNames": "lifecycles.machines.blocks",
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
    "Move": "lifecycles.machines.exploration",
    "Outcome": "lifecycles.machines.work",
    "Permanent": "lifecycles.machines.work",
    "Retry": "lifecycles.machines.blocks",
    "Row": "lifecycles.machines.declaration",
    "Step": "lifecycles.machines.work",
    "TransitionRefused": "lifecycles.machines.declaration",
    "Work": "lifecycles.machines.interleaving",
    "WorkInputs": "lifecycles.machines.blocks",
    "Workers": "lifecycles.machines.interleaving",
    "effect": "lifecycles.machines.declaration",
    "explore": "lifecycles.machines.exhaustive",
    "explore_workers": "lifecycles.machines.interleaving",
    "guard": "lifecycles.machines.declaration",
    "named_in": "lifecycles.machines.blocks",
    "outcomes": "lifecycles.machines.work",
    "source_of": "lifecycles.machines.blocks",
    "symbolic_row": "lifecycles.machines.symbolic",
    "time_relation": "lifecycles.machines.exploration",
    "trigger_move": "lifecycles.machines.exploration",
}

__all__ = [
    "AcceptedCycle",
    "Backoff",
    "Changes",
    "DefinitionError",
    "Effect",
    "EffectContractError",
    "EquivalentMutant",
    "ExpectationBroken",
    "Exploration",
    "Fire",
    "FiredBy",
    "Guard",
    "Handling",
    "InputNames",
    "Lease",
    "LeaseDefaults",
    "Leasing",
    "LeasingStore",
    "Leave",
    "Lifecycle",
    "LifecycleError",
    "LostRace",
    "Move",
    "NotLeasable",
    "Outcome",
    "Permanent",
    "Retry",
    "Row",
    "Step",
    "TransitionRefused",
    "Work",
    "WorkInputs",
    "Workers",
    "due_in_order",
    "effect",
    "expired_among",
    "explore",
    "explore_workers",
    "guard",
    "named_in",
    "outcomes",
    "source_of",
    "symbolic_row",
    "time_relation",
    "trigger_move",
]

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    from lifecycles._exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, globals(), __all__)
