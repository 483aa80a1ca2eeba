"""One stored record explained, for an operator or an auditor investigating it.

:func:`explain` is a pure function from a lifecycle, a record's stored values and the
inputs an operator would face now to an :class:`Explanation`: the record's status,
every row open from it with each guard true or false, which row each trigger would
fire (asked of the engine itself, :meth:`Lifecycle.select_row`), and every rule
(field rule, invariant) the record satisfies or breaks. It starts from the stored
*values*, not from a record a store admitted, so a record that breaks its rules is
explained rather than refused: that is when an operator needs it most.

The inputs "now" are assumed, and each explanation says which (:class:`Assumed`): an
app's :class:`~lifecycles._app_hooks.AppHooks` build what its facade itself would pass
(:func:`inputs_now_for`). :func:`render_text` prints an explanation; the region of
interest is drawn by :func:`lifecycles._diagrams_pictures.mermaid`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from lifecycles._app_hooks import hooks_of
from lifecycles._diagrams_pictures import mermaid
from lifecycles._loading import CheckerError, at, declared_exploration, one_line, where
from lifecycles.invariants._core import field_rules
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row, TransitionRefused

AnyLifecycle = Lifecycle[Any, Any]

# Who the explanation assumes is asking for a claim: a worker that never held the lease,
# and the token it would be given; neither is ever stored.
NEW_WORKER = "explain-new-worker"
NEW_TOKEN = "explain-new-token"


@attrs.frozen
class Assumed:
    """The inputs a trigger is judged with, and who would pass them, in words."""

    inputs: Any
    who: str


InputsNow = Callable[[Any], Mapping[str, Assumed]]
"""The inputs each trigger would get now, from the record (built from its values)."""


@attrs.frozen
class GuardCheck:
    """One guard of a row: its value now, and the value the row needs (``False`` for
    an ``unless`` guard). ``value`` is ``None`` when the guard raised on this record."""

    name: str
    needs: bool
    value: bool | None
    meaning: str

    @property
    def passes(self) -> bool:
        return self.value is self.needs


@attrs.frozen
class RowCheck:
    """One row open from the record's status, its guards now, and whether it fires."""

    index: int
    trigger: str
    dest: str
    label: str
    guards: tuple[GuardCheck, ...]
    fires: bool


@attrs.frozen
class Verdict:
    """What firing ``trigger`` now would do, as the engine decides: the row it fires
    (``row``), or the refusal (``refusal``: its code; ``guard``: the blocking guard,
    ``None`` when no row leaves the status). Both ``None``: the engine raised on this
    record, which only a record breaking its rules can make it do."""

    trigger: str
    who: str
    row: int | None = None
    dest: str | None = None
    refusal: str | None = None
    guard: str | None = None


@attrs.frozen
class RuleCheck:
    """A named rule and whether the record satisfies it (``None``: it cannot be judged,
    its predicate raised on fields that break their own rules)."""

    name: str
    holds: bool | None
    meaning: str
    field: str | None = None


@attrs.frozen
class Explanation:
    """Everything :func:`render_text` prints about one stored record."""

    lifecycle: str
    table_version: str
    key: str
    where: str
    now: str
    status: str
    status_meaning: str
    final: bool
    rows: tuple[RowCheck, ...]
    verdicts: tuple[Verdict, ...]
    invariants: tuple[RuleCheck, ...]
    field_rules: tuple[RuleCheck, ...]
    store_findings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    values: Mapping[str, Any] = attrs.field(factory=dict)
    inputs_failure: str | None = None
    """What failed, at which ``file:line`` of the lifecycle's code, when the inputs
    assumed now could not be built for a record that could (nothing is judged then)."""

    @property
    def broken(self) -> tuple[str, ...]:
        """The rules the record breaks or that cannot be judged on it."""
        return tuple(rule.name for rule in (*self.field_rules, *self.invariants)
                     if rule.holds is not True)

    @property
    def trusted(self) -> bool:
        return not self.broken and not self.store_findings

    def as_json(self) -> dict[str, Any]:
        document = attrs.asdict(self, recurse=True)
        document["broken"] = list(self.broken)
        return document


# --- judging stored values ------------------------------------------------------


def _judge_fields(record_type: type, values: Mapping[str, Any]) -> list[RuleCheck]:
    """Every field rule of ``record_type`` on ``values``: the broken ones, and one
    ``record_shape`` rule when fields are missing or unknown."""
    names = {field.name for field in attrs.fields(record_type)}
    found: list[RuleCheck] = []
    if set(values) != names:
        missing, unknown = sorted(names - set(values)), sorted(set(values) - names)
        found.append(RuleCheck("record_shape", False,
                               f"exactly the record's fields (missing {missing}, "
                               f"unknown {unknown})"))
    for field, rule in field_rules(record_type):
        if field not in values:
            continue
        value = values[field]
        try:
            holds = (value is None and rule.optional) or bool(rule.check(value))
        except Exception:  # a value of a kind the predicate cannot even compare
            holds = False
        found.append(RuleCheck(rule.name, holds, rule.meaning or rule.name, field))
    return found


def _build(record_type: type, values: Mapping[str, Any], checked: bool) -> Any:
    """The record of ``values``, or ``None`` when it cannot be built at all. Unchecked
    (field rules off) for values that break a field rule: the invariants and guards
    are still asked, each answer guarded, rather than nothing explained. (attrs' switch
    is process-wide: meant for a command's one call, not for a threaded server.)"""
    try:
        if checked:
            return record_type(**values)
        with attrs.validators.disabled():
            return record_type(**values)
    except Exception:  # a converter or the shape refused: the values are reported as read
        return None


def _asked(predicate: Callable[..., object], *arguments: Any) -> bool | None:
    try:
        return bool(predicate(*arguments))
    except Exception:  # a predicate over fields that break their own rules
        return None


def explain(
    lifecycle: AnyLifecycle,
    values: Mapping[str, Any],
    inputs_now: InputsNow,
    *,
    where: str,
    now: str,
    store_findings: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    status: str | None = None,
) -> Explanation:
    """Explain the record stored as ``values`` (see the module docstring); ``status`` is
    the one the store files it under, for values that do not say (unreadable material)."""
    fields = _judge_fields(lifecycle.record_type, values)
    record = _build(lifecycle.record_type, values, all(rule.holds for rule in fields))
    status = str(values.get(lifecycle.status_field, status))
    declared = {str(s.value): s for s in lifecycle.statuses}
    invariants = tuple(
        RuleCheck(rule.name, None if record is None else _asked(rule.holds, record),
                  rule.meaning)
        for rule in lifecycle.invariants
    )
    assumed: Mapping[str, Assumed] = {}
    failure: str | None = None
    if record is not None and status in declared:
        try:
            assumed = inputs_now(record)
        except Exception as error:
            # On a record that breaks its rules the inputs may fail on its fields; on one
            # that keeps them, the lifecycle's own code failed: say where.
            assumed = {}
            if all(rule.holds for rule in fields):
                failure = inputs_failure(error)
    verdicts = tuple(_verdict(lifecycle, trigger, record, assumed[trigger])
                     for trigger in lifecycle.triggers if trigger in assumed)
    # One table row yields one Row per source: out of one status, its index names it.
    fired = {verdict.row for verdict in verdicts if verdict.row is not None}
    rows = tuple(
        _row_check(lifecycle, row, record, assumed[row.trigger], fired)
        for row in lifecycle.rows if row.source == status and row.trigger in assumed
    )
    meaning = lifecycle.status_meanings.get(status, "") if status in declared else (
        "not a status of this lifecycle: no row can leave it")
    return Explanation(
        lifecycle=lifecycle.name, table_version=lifecycle.table_version,
        key=str(values.get(lifecycle.key_field)), where=where, now=now, status=status,
        status_meaning=meaning, final=status in {s.value for s in lifecycle.final},
        rows=rows, verdicts=verdicts, invariants=invariants,
        field_rules=tuple(rule for rule in fields if rule.holds is not True),
        store_findings=store_findings, notes=notes, values=_shown(lifecycle, values),
        inputs_failure=failure,
    )


def inputs_failure(error: BaseException) -> str:
    """``file:line: Type: message`` of the user's code that raised ``error`` (a loading
    failure's own message already says where)."""
    if isinstance(error, CheckerError):
        return error.message
    return f"{at(where(error))}{one_line(error)}"


def _shown(lifecycle: AnyLifecycle, values: Mapping[str, Any]) -> dict[str, Any]:
    """The values to print: a lease token is the holder's proof of its lease (a fencing
    token), so only whether one is set is shown, as ``monitor status`` does."""
    shown = dict(values)
    token = lifecycle.lease.token_field if lifecycle.lease else None
    if token is not None and shown.get(token) is not None:
        shown[token] = "(set, not shown)"
    return shown


def _row_check(
    lifecycle: AnyLifecycle, row: Row, record: Any, assumed: Assumed, fired: set[int]
) -> RowCheck:
    guards = tuple(
        GuardCheck(name, needs, _asked(lifecycle.guards[name].test, record, assumed.inputs),
                   lifecycle.guards[name].meaning)
        for names, needs in ((row.conditions, True), (row.unless, False)) for name in names
    )
    return RowCheck(row.index, row.trigger, row.dest, row.label, guards,
                    fires=row.index in fired)


def _verdict(lifecycle: AnyLifecycle, trigger: str, record: Any, assumed: Assumed) -> Verdict:
    try:
        row = lifecycle.select_row(trigger, record, assumed.inputs)
    except TransitionRefused as refused:
        return Verdict(trigger, assumed.who, refusal=refused.code, guard=refused.guard)
    except Exception:  # a guard raised on a record that breaks its rules
        return Verdict(trigger, assumed.who)
    return Verdict(trigger, assumed.who, row=row.index, dest=row.dest)


# --- the inputs an operator faces now ------------------------------------------------


DEFAULT_LEASE_SECONDS = 60.0
"""The lease a new worker's claim is assumed to ask for (``lifecycles worker``'s default)."""
NO_LEASE_TOKEN = "explain-no-lease"
HOLDER_FIELDS = ("worker_id", "lease_owner", "owner", "holder")
"""Where a record keeps its lease holder when its Handling names no ``holder`` field."""


class NoInputsDeclared(Exception):
    """The lifecycle declares nothing to build its inputs from."""


def _at_now(example: Any, now: float) -> Any:
    """Inputs of ``example``'s class at ``now`` with every other field at its default,
    else ``example`` moved to ``now``; as it is when it has no ``now``."""
    if not (attrs.has(type(example)) and "now" in attrs.fields_dict(type(example))):
        return example
    try:
        return type(example)(now=now)
    except TypeError:  # other fields without defaults: keep the declared example's
        return attrs.evolve(example, now=now)


def lifecycle_inputs_now(
    lifecycle: AnyLifecycle, now: float, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
) -> InputsNow:
    """What a user lifecycle's triggers would get at ``now``, from its declarations.

    With a :class:`~lifecycles.machines._work.Handling` (a worker runs it): the claim and
    the rescue as a new worker's claim (``Handling.inputs``); the renewal, the success
    and the failure as the lease holder (the record's holder and token) firing what
    ``Handling.finish`` answers for a handler that returns, or raises a retryable
    error. Without one, the exploration declared for the checker gives the inputs
    (``lease_inputs``, else a move's first choice). Every other trigger (an operator's,
    the application's) gets those inputs at ``now``, other fields at their defaults.
    Whatever the lifecycle's code raises propagates: :func:`explain` says where."""
    from lifecycles.machines._work import Leave, Raised, Returned

    handling, lease = lifecycle.handling, lifecycle.lease

    def explored(record: Any) -> tuple[Any, str]:
        found = declared_exploration(lifecycle)
        if found is None:
            raise NoInputsDeclared(
                f"{lifecycle.name} declares no Handling and no exploration (in "
                f"{lifecycle.module} or its declared_in) to build its inputs from")
        exploration, spec = found
        if exploration.lease_inputs is not None:
            return exploration.lease_inputs(now, NEW_TOKEN), f"as {spec} builds a claim's"
        for move in exploration.moves:
            for choice in move.choices(record):
                return choice, f"as {spec} builds {move.name}'s"
        raise NoInputsDeclared(f"{spec} offers no inputs for {lifecycle.name}'s "
                               f"{lifecycle.status_of(record)} record")

    def inputs(record: Any) -> Mapping[str, Assumed]:
        if handling is not None:
            fresh = handling.inputs(now, NEW_WORKER, NEW_TOKEN, lease_seconds)
            how = "as its Handling.inputs builds them"
        else:
            fresh, how = explored(record)
        assumed: dict[str, Assumed] = {}
        base = _at_now(fresh, now)
        for trigger in lifecycle.triggers:
            if trigger != lifecycle.creation:
                assumed[trigger] = Assumed(base, f"the application or an operator at now "
                                                 f"(inputs {how}, defaults besides now)")
        if lease is not None:
            worker = f" ({NEW_WORKER})" if handling is not None else ""
            claim = Assumed(fresh, f"a claim by a new worker{worker} at now ({how})")
            assumed[lease.trigger] = claim
            assumed[lease.expiry_trigger] = Assumed(
                fresh, "any worker's claim at now (it rescues expired leases first)")
        token = getattr(record, lease.token_field) if lease is not None else None
        if handling is None or token is None:
            return assumed
        names = [handling.holder] if handling.holder else [
            name for name in HOLDER_FIELDS if name in attrs.fields_dict(type(record))]
        holder = getattr(record, names[0]) if names else None
        held = handling.inputs(now, holder or NEW_WORKER, token, lease_seconds)
        who = f"the lease holder {holder} with its own token" if holder else (
            "the lease holder (its own token)")
        if handling.renewal is not None:
            assumed[handling.renewal] = Assumed(held, f"{who}, renewing its lease at now")
        for result, what in ((Returned(None), "its handler returning"),
                             (Raised(RuntimeError("explain")),
                              "its handler raising a retryable error")):
            step = handling.finish(record, held, result)
            if not isinstance(step, Leave):
                assumed[step.trigger] = Assumed(step.inputs, f"{who}, {what} at now")
        return assumed

    return inputs


def inputs_now_for(lifecycle: AnyLifecycle, now: float) -> InputsNow:
    """The inputs assumed at ``now`` (UNIX seconds): those the app declares in its
    :class:`~lifecycles._app_hooks.AppHooks` (the shipped facades' own), else
    :func:`lifecycle_inputs_now`."""
    hooks = hooks_of(lifecycle)
    if hooks.inputs_now is not None:
        return hooks.inputs_now(now)
    return lifecycle_inputs_now(lifecycle, now)


def shown_now(lifecycle: AnyLifecycle, now: float) -> str:
    """``now`` as the lifecycle's records write times: as its app declares (the outbox:
    an ISO timestamp), else UNIX seconds."""
    hooks = hooks_of(lifecycle)
    return hooks.shown_now(now) if hooks.shown_now is not None else str(now)


# --- text ----------------------------------------------------------------------------


def _truth(value: bool | None) -> str:
    return {True: "true", False: "false", None: "raised"}[value]


def render_text(explanation: Explanation) -> str:
    """The explanation as lines for a terminal (see ``lifecycles monitor explain``)."""
    e = explanation
    lines = [
        f"{e.lifecycle} record {e.key} (table {e.table_version}), read from {e.where}",
        f"status: {e.status}{' (final)' if e.final else ''}"
        + (f": {e.status_meaning}" if e.status_meaning else ""),
        f"now: {e.now}",
    ]
    lines += [f"note: {note}" for note in e.notes]
    lines += [f"the store refuses it: {finding}" for finding in e.store_findings]
    leaving = [row for row in e.rows if row.dest != e.status]
    lines.append(f"rows open from {e.status} (numbered as on the auditor page): {len(e.rows)}"
                 + ("" if leaving or not e.rows else " (none leaves the status)"))
    for row in e.rows:
        verdict = "fires now" if row.fires else "does not fire now"
        lines.append(f"  row #{row.index + 1}: {row.trigger} -> {row.dest}  ({verdict})"
                     + ("" if row.guards else "; no guard"))
        for check in row.guards:
            needed = "" if check.needs else " (unless: must be false)"
            mark = "ok " if check.passes else "NO "
            lines.append(f"    {mark} {check.name} = {_truth(check.value)}{needed}: "
                         f"{check.meaning}")
    lines.append("triggers now (the row the engine picks, for the inputs assumed):")
    judged = [v for v in e.verdicts if v.refusal is None or v.guard is not None]
    width = max((len(v.trigger) for v in judged), default=0)
    for v in judged:
        if v.row is not None:
            outcome = f"fires row #{v.row + 1} -> {v.dest}"
        elif v.refusal is None:
            outcome = "cannot be judged: a guard raised on this record"
        else:
            outcome = f"refused: guard {v.guard} ({v.refusal})"
        lines.append(f"  {v.trigger:<{width}}  {outcome}")
        lines.append(f"  {'':<{width}}  assumed: {v.who}")
    closed: dict[str, list[str]] = {}
    for v in e.verdicts:
        if v.refusal is not None and v.guard is None:
            closed.setdefault(v.refusal, []).append(v.trigger)
    lines += [f"  not allowed from {e.status} ({code}): {', '.join(triggers)}"
              for code, triggers in closed.items()]
    if e.inputs_failure is not None:
        lines.append(f"  (none judged: the inputs assumed now cannot be built: "
                     f"{e.inputs_failure}; fix the code there)")
    elif not e.verdicts:
        lines.append("  (none judged: the record cannot be built from its values)")
    held = sum(rule.holds is True for rule in e.invariants)
    lines.append(f"invariants: {held} of {len(e.invariants)} hold")
    for rule in e.invariants:
        state = {True: "holds ", False: "BROKEN", None: "cannot be judged"}[rule.holds]
        lines.append(f"  {state} {rule.name}: {rule.meaning}")
    if e.field_rules:
        lines.append("field rules broken:")
        lines += [f"  BROKEN {rule.name} ({rule.field}): {rule.meaning}"
                  for rule in e.field_rules]
    else:
        lines.append("field rules: every field holds its rule")
    return "\n".join(lines) + "\n"


def print_explanation(
    lifecycle: AnyLifecycle, explanation: Explanation, as_json: bool, as_mermaid: bool
) -> int:
    """Print the explanation (text, JSON, or the Mermaid region of its status); the
    exit code: 0 when the record keeps every rule, 1 when it breaks some or when the
    lifecycle's code failed building the inputs assumed now (also one line on stderr)."""
    declared = explanation.status in {status.value for status in lifecycle.statuses}
    region = mermaid(lifecycle, explanation.status) if as_mermaid and declared else None
    if as_json:
        document = explanation.as_json()
        if as_mermaid:
            document["mermaid"] = region
        print(json.dumps(document, ensure_ascii=False, default=str))
    elif as_mermaid and region is None:
        print(f"lifecycles: {explanation.status!r} is no status of {lifecycle.name}: "
              "there is no region to draw", file=sys.stderr)
    else:
        print(region if region is not None else render_text(explanation), end="")
    if explanation.inputs_failure is not None:
        print(f"lifecycles: {explanation.inputs_failure} (raised building the inputs "
              f"{lifecycle.name} assumes now); fix the code there", file=sys.stderr)
    return 0 if explanation.trusted and explanation.inputs_failure is None else 1


__all__ = [
    "Assumed",
    "Explanation",
    "GuardCheck",
    "InputsNow",
    "NoInputsDeclared",
    "RowCheck",
    "RuleCheck",
    "Verdict",
    "explain",
    "inputs_failure",
    "inputs_now_for",
    "lifecycle_inputs_now",
    "print_explanation",
    "render_text",
    "shown_now",
]
