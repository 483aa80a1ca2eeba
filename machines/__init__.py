"""How a lifecycle is declared and run, and the lifecycles this project ships."""

from lifecycles.machines.core import (
    DefinitionError,
    Effect,
    EffectContractError,
    Guard,
    Lease,
    Lifecycle,
    LifecycleError,
    Row,
    TransitionRefused,
    effect,
    guard,
)

__all__ = [
    "DefinitionError",
    "Effect",
    "EffectContractError",
    "Guard",
    "Lease",
    "Lifecycle",
    "LifecycleError",
    "Row",
    "TransitionRefused",
    "effect",
    "guard",
]
