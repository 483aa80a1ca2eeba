"""How a lifecycle is declared, run and checked: the public names of lifecycles.machines."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from lifecycles.machines._audit import FiredBy
    from lifecycles.machines._blocks import (
        Backoff,
        InputNames,
        Leasing,
        Retry,
        WorkInputs,
        named_in,
        source_of,
    )
    from lifecycles.machines._core import Lifecycle
    from lifecycles.machines._declaration import (
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
    from lifecycles.machines._exhaustive import explore
    from lifecycles.machines._exploration import (
        AcceptedCycle,
        ExpectationBroken,
        Exploration,
        Move,
        time_relation,
        trigger_move,
    )
    from lifecycles.machines._interleaving import (
        ExternalEffect,
        Work,
        Workers,
        explore_workers,
    )
    from lifecycles.machines._liveness import liveness
    from lifecycles.machines._mutants import EquivalentMutant
    from lifecycles.machines._symbolic import symbolic_row
    from lifecycles.machines._work import (
        Fire,
        Handling,
        Leave,
        Outcome,
        Permanent,
        Step,
        outcomes,
    )
    from lifecycles.machines.lease import (
        LeaseDefaults,
        LeasingStore,
        LostRace,
        NotLeasable,
        due_in_order,
        expired_among,
    )

# Each public name and the module that defines it. Nothing is imported until a name is
# used, so importing the package stays cheap (no driver, no checker, no Hypothesis).
_DEFINED_IN: dict[str, str] = {
    "AcceptedCycle": "lifecycles.machines._exploration",
    "Backoff": "lifecycles.machines._blocks",
    "Changes": "lifecycles.machines._declaration",
    "DefinitionError": "lifecycles.machines._declaration",
    "Effect": "lifecycles.machines._declaration",
    "EffectContractError": "lifecycles.machines._declaration",
    "EquivalentMutant": "lifecycles.machines._mutants",
    "ExpectationBroken": "lifecycles.machines._exploration",
    "Exploration": "lifecycles.machines._exploration",
    "ExternalEffect": "lifecycles.machines._interleaving",
    "Fire": "lifecycles.machines._work",
    "FiredBy": "lifecycles.machines._audit",
    "Guard": "lifecycles.machines._declaration",
    "Handling": "lifecycles.machines._work",
    "InputNames": "lifecycles.machines._blocks",
    "Lease": "lifecycles.machines._declaration",
    "LeaseDefaults": "lifecycles.machines.lease",
    "Leasing": "lifecycles.machines._blocks",
    "LeasingStore": "lifecycles.machines.lease",
    "Leave": "lifecycles.machines._work",
    "Lifecycle": "lifecycles.machines._core",
    "LifecycleError": "lifecycles.machines._declaration",
    "LostRace": "lifecycles.machines.lease",
    "Move": "lifecycles.machines._exploration",
    "NotLeasable": "lifecycles.machines.lease",
    "Outcome": "lifecycles.machines._work",
    "Permanent": "lifecycles.machines._work",
    "Retry": "lifecycles.machines._blocks",
    "Row": "lifecycles.machines._declaration",
    "Step": "lifecycles.machines._work",
    "TransitionRefused": "lifecycles.machines._declaration",
    "Work": "lifecycles.machines._interleaving",
    "WorkInputs": "lifecycles.machines._blocks",
    "Workers": "lifecycles.machines._interleaving",
    "due_in_order": "lifecycles.machines.lease",
    "effect": "lifecycles.machines._declaration",
    "expired_among": "lifecycles.machines.lease",
    "explore": "lifecycles.machines._exhaustive",
    "explore_workers": "lifecycles.machines._interleaving",
    "guard": "lifecycles.machines._declaration",
    "liveness": "lifecycles.machines._liveness",
    "named_in": "lifecycles.machines._blocks",
    "outcomes": "lifecycles.machines._work",
    "source_of": "lifecycles.machines._blocks",
    "symbolic_row": "lifecycles.machines._symbolic",
    "time_relation": "lifecycles.machines._exploration",
    "trigger_move": "lifecycles.machines._exploration",
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
    "ExternalEffect",
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
    "liveness",
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
