"""What an auditor must know about a lifecycle that its table cannot say.

Who fires each trigger (a public method, a worker's action, a timer), what each public
error means, and which codes a record can carry are facts about the code around the
table. Each is declared once, as data, beside what it describes (the table's module,
the facade's errors), and the auditor pages (:mod:`lifecycles._diagrams_audit`) render
it; tests hold every declaration complete against the code. Each declaration names
its lifecycle, so a page finds it the way ``lifecycles check`` finds an exploration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from lifecycles.machines._core import Lifecycle


@attrs.frozen
class FiredBy:
    """Who fires each trigger of ``lifecycle``, and its creation: one sentence each.

    When several rows share a trigger the page adds how the row is chosen (the first
    in table order whose guards all hold); the sentence says what the table cannot,
    such as which answer picks the trigger.
    """

    lifecycle: Lifecycle[Any, Any]
    triggers: Mapping[str, str]


@attrs.frozen
class PublicError:
    """One error a caller can meet: its exception class and stable ``code`` (``None``
    for an exception without one), what it means, which calls raise it, and what the
    call changed before it raised."""

    exception: str
    code: str | None
    meaning: str
    raised_by: str
    changed: str


@attrs.frozen
class PublicErrors:
    """Every error a lifecycle's facade raises, and what each guard's refusal means.

    ``guards`` says, per guard, whether a caller ever meets its refusal code and, when
    that code is the reference's (kept because callers match on it) rather than one
    that names the case, why. ``not_allowed`` says the same of the code raised when a
    trigger is not allowed from the record's status.
    """

    lifecycle: Lifecycle[Any, Any]
    errors: tuple[PublicError, ...]
    guards: Mapping[str, str]
    not_allowed: str
    note: str = ""  # how a caller tells the errors apart, in a sentence or two


@attrs.frozen
class RecordedCodes:
    """The values a record's ``field`` can carry, each with when it is written.

    ``others`` says what any value not listed means (for example a code a foreign
    reader supplied), or is empty when the list is closed.
    """

    lifecycle: Lifecycle[Any, Any]
    field: str
    values: Mapping[str, str]
    others: str = ""
