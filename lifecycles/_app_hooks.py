"""What an app built on a lifecycle tells the generic tools, where its table cannot.

The shipped monitor and outbox are apps: their records are written by facades with
their own inputs, clock and storage layout. ``lifecycles explain`` and the operator
commands (``status``, ``health``) must judge and open those records as the facades do,
without importing the apps: an app declares :class:`AppHooks` in a module its
``Lifecycle(declared_in=...)`` names, and the tools find it through the lifecycle
(:func:`hooks_of`). A lifecycle without one gets the generic behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from lifecycles.machines._core import Lifecycle

AnyLifecycle = Lifecycle[Any, Any]


@attrs.frozen
class AppHooks:
    """How the generic tools treat ``lifecycle``'s records; ``None`` keeps the default."""

    lifecycle: AnyLifecycle
    inputs_now: Callable[[float], Callable[[Any], Mapping[str, Any]]] | None = None
    """The inputs each trigger would get at ``now`` (UNIX seconds), as the app's own calls
    pass them (an :data:`lifecycles._explain.InputsNow`); default: built from the
    lifecycle's Handling or exploration (:func:`lifecycles._explain.lifecycle_inputs_now`)."""
    shown_now: Callable[[float], str] | None = None
    """``now`` (UNIX seconds) as the records write times; default: the seconds."""
    reading_schema: Callable[[Any], Any] | None = None
    """The SQL schema the operator commands open a database connection with, verifying
    and never creating; default: :class:`~lifecycles.stores._sql.SQLSchema`'s."""
    files_layout: Any = None
    """The :class:`~lifecycles.stores._files.FilesLayout` the app's files store keeps;
    default: one directory per status."""
    sql_schema: Callable[[], Any] | None = None
    """The :class:`~lifecycles.stores._sql.SQLSchema` the app's SQL stores keep its records
    in, for the SQL files beside the diagrams; default: the one derived from the record."""
    kept_in_sql: bool = True
    """Whether any SQL store keeps the app's records (no SQL files are drawn if not)."""


def hooks_of(lifecycle: AnyLifecycle) -> AppHooks:
    """The hooks declared for ``lifecycle``, else hooks that change nothing."""
    from lifecycles._loading import declared_beside  # loading imports the whole engine

    return declared_beside(lifecycle, AppHooks) or AppHooks(lifecycle)


__all__ = ["AppHooks", "hooks_of"]
