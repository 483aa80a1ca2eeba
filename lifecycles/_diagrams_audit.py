"""The auditor's sections that the table alone cannot fill, and the index's checklist.

On each lifecycle's page: who fires each trigger, and every error code with what it
means, which call raises it and what changed. They render the declarations of
:mod:`lifecycles.machines._audit`, found through the lifecycle: in the module that declares
it or one its ``declared_in`` names (:func:`lifecycles._loading.declared_beside`). On
``diagrams/README.md``: an auditor's checklist and a glossary. Everything is rendered
in declaration and table order, so the same code gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from lifecycles._diagrams_markdown import cell, plain, table_entries, table_row, table_section
from lifecycles._loading import declared_beside
from lifecycles.machines._audit import FiredBy, PublicErrors, RecordedCodes
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.machines._graph import statuses_in_flow_order

AnyLifecycle = Lifecycle[Any, Any]
D = TypeVar("D", FiredBy, PublicErrors, RecordedCodes)


def declared(lifecycle: AnyLifecycle, kind: type[D]) -> D | None:
    """The ``kind`` declaration whose ``lifecycle`` is ``lifecycle``, or ``None``."""
    return declared_beside(lifecycle, kind)


def sections(lifecycle: AnyLifecycle) -> list[str]:
    """The page's sections "Who fires each trigger" and "Error codes"."""
    return fired_by(lifecycle) + error_codes(lifecycle)


# --- who fires each trigger ---------------------------------------------------------


def fired_by(lifecycle: AnyLifecycle) -> list[str]:
    found = declared(lifecycle, FiredBy)
    said: Mapping[str, str] = found.triggers if found else {}
    grouped: dict[str, list[list[Row]]] = {}
    for rows in table_entries(lifecycle):
        grouped.setdefault(rows[0].trigger, []).append(rows)
    order = list(lifecycle.triggers)
    if lifecycle.creation not in order:
        order.insert(0, lifecycle.creation)
    intro = (
        "Which public method, worker action or timer fires each trigger. A trigger that "
        "several rows share fires the first of them, in table order, whose source is the "
        "record's status and whose guards all hold; its rows are listed in that order."
    )
    if found is None:
        intro += " No `FiredBy` is declared beside this table, so the second column is empty."
    leased = _lease_facts(lifecycle)
    return table_section(
        "Who fires each trigger", intro, ("trigger", "fired by", "rows (#, from → to, when)"),
        (table_row(f"`{trigger}`",
              cell(" ".join(part for part in (said.get(trigger, "-"), leased.get(trigger))
                             if part)),
              _rows_cell(lifecycle, trigger, grouped.get(trigger, [])))
         for trigger in order),
    )


def _lease_facts(lifecycle: AnyLifecycle) -> dict[str, str]:
    """What the lease protocol does with the claim and expiry triggers, from the
    ``Lease`` declaration and the table (never written beside them a second time)."""
    declared_lease = lifecycle.lease
    if declared_lease is None:
        return {}
    claimable = [name for name in statuses_in_flow_order(lifecycle)
                 if lifecycle.statuses(name) in lifecycle.claimable]
    order = ", then ".join(f"`{name}`" for name in declared_lease.order_by)
    return {
        declared_lease.trigger: (
            "The lease protocol leases the first due record: status "
            + ", ".join(f"`{name}`" for name in claimable)
            + f" with `{declared_lease.due_field}` <= now, in order of {order}; a record "
            "its guards refuse is passed over, never raised."),
        declared_lease.expiry_trigger: (
            "The lease protocol fires it first, inside every claim, on each "
            f"`{lifecycle.leased}` record whose `{declared_lease.expires_field}` <= that "
            "claim's now."),
    }


def _rows_cell(lifecycle: AnyLifecycle, trigger: str, entries: list[list[Row]]) -> str:
    lines = []
    if trigger == lifecycle.creation:
        lines.append(f"creation: a new record in `{lifecycle.initial.value}`")
    for rows in entries:
        first = rows[0]
        sources = ", ".join(f"`{row.source}`" for row in rows)
        dests = {row.dest for row in rows}
        dest = f"`{first.dest}`" if len(dests) == 1 else "the same status"
        line = f"#{first.index + 1} {sources} → {dest}"
        if len(entries) > 1:
            line += f", {_when(first)}"
        lines.append(line)
    return "<br>".join(lines) or "-"


def _when(row: Row) -> str:
    guards = [f"`{name}`" for name in row.conditions]
    guards += [f"NOT `{name}`" for name in row.unless]
    return "when " + " and ".join(guards) if guards else "always"


# --- error codes --------------------------------------------------------------------


def error_codes(lifecycle: AnyLifecycle) -> list[str]:
    errors = declared(lifecycle, PublicErrors)
    out = ["## Error codes", ""]
    if errors is None:
        out += [
            "No facade declares this lifecycle's public errors: a caller that fires the "
            "table meets the codes below, and "
            f"`{lifecycle.invariants.code}` when a record would break an invariant.",
            "",
        ]
    else:
        if errors.note:
            out += [plain(errors.note), ""]
        out += _subsection(
            "Every public error",
            "Every exception a public call raises on purpose, with its stable code.",
            ("exception", "code", "what it means", "raised by", "what changed"),
            (table_row(f"`{error.exception}`", f"`{error.code}`" if error.code else "-",
                  cell(error.meaning), cell(error.raised_by), cell(error.changed))
             for error in errors.errors),
        )
    out += _guard_codes(lifecycle, errors)
    out += _recorded(lifecycle)
    return out


def _guard_codes(lifecycle: AnyLifecycle, errors: PublicErrors | None) -> list[str]:
    notes: Mapping[str, str] = errors.guards if errors else {}

    def note(name: str, meaning: str) -> str:
        if name in notes:
            return cell(notes[name])
        return cell(f"Refuses when it does not hold: {meaning}")

    rows = [
        table_row(f"`{name}`", f"`{guard.refusal_code}`", note(name, guard.meaning))
        for name, guard in lifecycle.guards.items()
    ]
    not_allowed = errors.not_allowed if errors else (
        "The trigger has no row from the record's status.")
    rows.append(table_row("(the trigger is not allowed from the status)",
                     f"`{lifecycle.not_allowed_code}`", cell(not_allowed)))
    return _subsection(
        "The code each guard refuses with",
        "When every row of a trigger refuses, nothing changes and the caller gets the "
        "refusal code of the first guard that blocked. Whether a caller ever meets it, "
        "and why it is this code:",
        ("guard", "refusal code", "when a caller meets it, and why this code"), rows,
    )


def _recorded(lifecycle: AnyLifecycle) -> list[str]:
    codes = declared(lifecycle, RecordedCodes)
    if codes is None:
        return []
    out = _subsection(
        f"Codes a record carries in `{codes.field}`",
        f"Every value the table's effects and the logic beside it write into "
        f"`{codes.field}`, and when.",
        ("value", "when"),
        (table_row(f"`{value}`", cell(when)) for value, when in codes.values.items()),
    )
    if codes.others:
        out = [*out[:-1], "", plain(codes.others), ""]
    return out


def _subsection(title: str, intro: str, columns: tuple[str, ...],
                rows: Iterable[str]) -> list[str]:
    """A table section one level down (``###``), under the page's ``## Error codes``."""
    return ["#" + line if line.startswith("## ") else line
            for line in table_section(title, intro, columns, rows)]


# --- diagrams/README.md: the checklist and the glossary --------------------------------


def checklist(lifecycles: Mapping[str, AnyLifecycle]) -> list[str]:
    """What an auditor verifies and how, then the words the pages use."""
    versions = ", ".join(f"`{name}` `{lifecycle.table_version}`"
                         for name, lifecycle in lifecycles.items()) or "none"
    finals = sorted({s.value for lc in lifecycles.values() for s in lc.final})
    steps = [
        ("The pages match the code that generated them",
         "In a checkout of the deployed commit, run `lifecycles diagrams --check`. Exit 0: "
         "every page, picture and this index is what the lifecycles' code generates "
         "now. Exit 1 names each drifted, missing or extra file. SVG files are compared "
         "only where the installed Graphviz is the one `graphviz-version.txt` records."),
        ("The pinned version is the deployed one",
         f"This commit pins the table versions {versions}. On the deployed installation, "
         "`lifecycles check --json` prints each lifecycle's `table_version` (plain "
         "`lifecycles check` prints it as `NAME (table vVERSION)`); each must equal the "
         "version pinned here and on its page, else these pages describe another table or "
         "other code."),
        ("The checker passes",
         "Run `lifecycles check` (the project's lifecycles, or `lifecycles check NAME`). "
         "It exits 0 and ends with `all OK` when: the definition checks pass; no status "
         "that stored records may hold (`lifecycle-statuses.json`) was removed; every "
         "invariant holds in every state within the bounds each page states; every row "
         "fires and every status is reached; every state can still reach a final status, "
         "except on the accepted cycles each page lists; and, for a leased lifecycle that "
         "declares workers, every interleaving of them keeps the lease protocol's "
         "properties. Exit 1 is a finding (its trace is printed); exit 2 means the check "
         "could not run, with one line saying why."),
        ("A mistaken row would be caught",
         "Run `lifecycles check --mutants`: it makes every mistaken row an author could "
         "write (a guard dropped or flipped, a row sent elsewhere or deleted, a row out of "
         "a final status, an invariant unregistered) and checks each. It exits 0 when every "
         "one fails the check, except the mutants each page declares equivalent with the "
         "reason they are harmless; it prints the mutation score, and with "
         "`--mutant-traces` how each mistake was caught."),
        ("The rules are the business's rules",
         "On each page read Invariants, Step invariants and Field rules: every stored "
         "record obeys every invariant and field rule (checked before every write and on "
         "every read), and every transition every step invariant. A rule the business "
         "needs that is not listed there is not checked on records."),
        ("Every way to a final status is intended",
         "On each page read Transitions, How a record reaches each final status, Who "
         "fires each trigger and Error codes: which rows lead to "
         + (", ".join(f"`{name}`" for name in finals) or "a final status")
         + ", under which guards, fired by whom, and what a caller sees when a "
         "row refuses."),
        ("Follow a trace",
         "When `lifecycles check` finds a violation it prints the shortest trace (the "
         "initial record, then each step with its inputs) and writes it as a pytest file "
         "under `lifecycles-traces/` (`--trace-dir DIR`), printing `replay: pytest FILE`; "
         "that command replays it from any directory and fails until the violation is "
         "fixed. A finding among interleaved workers is printed and written the same way."),
    ]
    steps.append(_stored_record_step(shipped={"monitor", "outbox"} & set(lifecycles)))
    out = ["", "## An auditor's checklist", ""]
    out += [f"{number}. **{title}.** {plain(how)}"
            for number, (title, how) in enumerate(steps, 1)]
    out += ["", "## Glossary", ""]
    out += [f"- **{word}**: {plain(meaning)}" for word, meaning in GLOSSARY]
    return out


def _stored_record_step(shipped: set[str]) -> tuple[str, str]:
    how = ("`lifecycles status NAME` and `lifecycles health NAME` show what the runtime "
           "reads from the store (the project's `store` setting, or `--db FILE`, `--dsn DSN` "
           "or `--root DIR`), without changing anything; `lifecycles explain NAME KEY` shows "
           "one record's status, the rows open from it, which of their guards hold now and "
           "the rules it keeps (`--mermaid` draws that part of the diagram); "
           "`lifecycles health NAME --format prometheus` prints the same figures for a "
           "metrics collector.")
    if shipped:
        how += (" The drop-ins keep their own commands too: `lifecycles monitor status --db "
                "FILE --capabilities SHA EVENT_ID` (or `--dsn DSN`), `lifecycles monitor "
                "explain ... EVENT_ID`, `lifecycles outbox status [--state-dir DIR]` and "
                "`lifecycles outbox explain ENTRY_ID`.")
    return ("Look at a stored record", how)


GLOSSARY: tuple[tuple[str, str], ...] = (
    ("status", "the stage a record is in, one field of the record. A final status is "
     "never left; a row may fire on it without leaving it."),
    ("trigger", "the name of an event that may change a record, such as `claim`. Each "
     "page says who fires it: a public method, a worker's action or a timer."),
    ("row", "one line of the transition table: a trigger, the statuses it fires from, "
     "the status it leads to, its guards and its effect."),
    ("guard", "a named condition a row needs; `!guard` on a diagram means it must not "
     "hold. When every row of a trigger refuses, the caller gets the refusal code of the "
     "first guard that blocked, and nothing changes."),
    ("refusal code", "the stable string a caller matches on when a transition is "
     "refused; each page lists them under Error codes."),
    ("effect", "a named function that computes the new values of exactly the fields it "
     "declares; a row applies it when it fires."),
    ("invariant", "a named rule every stored record obeys: checked before every write "
     "and on every read."),
    ("step invariant", "a named rule over a record before and after one transition, "
     "checked whenever a row fires."),
    ("field rule", "the rule one field's value must meet whenever a record is built."),
    ("lease", "one worker's exclusive, time-limited hold on a record. Its token is a "
     "fencing token: every write compares it, so a worker whose lease was taken cannot "
     "write. An expired lease is recovered by the lifecycle's expiry trigger."),
    ("table version", "a short digest of a lifecycle's table and of the source of every "
     "guard, effect, invariant and function beside it, pinned on its page and printed by "
     "`lifecycles check`; a different version means different rules or different code."),
    ("bounds", "the limits within which `lifecycles check` explores every state (each "
     "page states them); what lies beyond them is not explored."),
    ("accepted cycle", "a cycle of triggers that never reaches a final status, declared "
     "beside the table with its reason; any other such cycle fails the check."),
    ("interleaving", "one order in which several workers' steps (claim, a batch claim, "
     "complete, stop, the clock moving) run against one store; the checker tries every "
     "order within its bounds."),
    ("mutant", "the lifecycle with one mistake made on purpose in its declaration; "
     "`lifecycles check --mutants` checks each one, and a mutant the check passes "
     "survives: that mistake would go unnoticed. An equivalent mutant is one declared "
     "harmless, with the reason, on the page."),
    ("trace", "the shortest sequence of steps from an initial record to a violation, "
     "printed by `lifecycles check` and written as a replay file for pytest."),
    ("drift", "a committed generated file that no longer matches what `lifecycles "
     "diagrams` generates; `lifecycles diagrams --check` fails on it."),
)
