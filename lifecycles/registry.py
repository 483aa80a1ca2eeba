"""The lifecycles this installation knows, by name: what `check` and `diagrams` iterate."""

from __future__ import annotations

from typing import Any

from lifecycles.machines.core import Lifecycle


def registered() -> dict[str, Lifecycle[Any, Any]]:
    """Every shipped lifecycle, keyed by name, in a stable order."""
    from lifecycles.machines.monitor import MONITOR
    from lifecycles.machines.outbox import OUTBOX

    found: list[Lifecycle[Any, Any]] = [MONITOR, OUTBOX]
    return {lifecycle.name: lifecycle for lifecycle in found}
