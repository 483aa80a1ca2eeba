"""The pictures of a lifecycle: Mermaid ``stateDiagram-v2``, Graphviz DOT, and SVG.

Every picture is drawn from the lifecycle's resolved rows (``lifecycle.rows``), never
from a model's current state, so the same table always gives the same bytes.

Mermaid. The edges are grouped by (source, dest), parallel rows one label per line
(``<br/>``), each label ``trigger [guard, !unless_guard]`` (:attr:`Row.label`), in
the order the ``transitions`` library's Mermaid engine draws them
(:func:`lifecycles.machines._graph.edges_by_source`). The engine itself is not used to
write the file: it falls short in four ways (see DESIGN.md), so the file is written
here from the table. What is kept from it is the guarantee that ``transitions``
accepts the table for drawing: :func:`check_graph_machine` builds its
``GraphMachine`` and compares the transitions it holds with the rows, structurally.
Where the engine falls short:

* its front-matter title is a bare line, not a ``title:`` key, and Mermaid drops it;
* its ``Class`` styling follows a model's current state (``s_active``), which would
  change the text with runtime state: replaced by fixed classes for the leased and
  the final statuses;
* it marks no final status and labels no creation edge: ``[*] --> initial : <creation
  trigger>`` and ``final --> [*]`` are added;
* a status named like a Mermaid keyword (``state``, ``class``, ``note``,
  ``default``...) or containing characters outside ``[A-Za-z0-9_]`` breaks its output
  or silently loses edges: such a lifecycle's statuses are drawn under safe aliases
  (``state "retry-wait" as status_3``).

Graphviz. The DOT source is written here, not by the ``transitions`` Graphviz engine
(which needs the ``graphviz`` Python package and draws current-state styling): it
needs ranks in the order work flows (left to right from the creation point, final
statuses together in the last column), one edge per row with the trigger in bold
and each guard on its own line, and the leased status filled and thick-bordered.
Rows that leave a status and return to it are drawn as one loop carrying every such
row's label, because parallel loops are nested and cross each other's labels. The SVG
is rendered by the ``dot`` program; its output depends on the Graphviz
version and on the font it resolves, which :func:`find_graphviz` records.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html import escape
from typing import Any

import attrs
from transitions.extensions import GraphMachine

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row
from lifecycles.machines._graph import (
    edges_by_source,
    rows_in_machine_order,
    statuses_in_flow_order,
)

AnyLifecycle = Lifecycle[Any, Any]

FONT = "Helvetica"
MERMAID_SAFE_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Words Mermaid's state-diagram grammar reads as keywords when they stand as a state id.
MERMAID_KEYWORDS = frozenset(
    {
        "as", "choice", "class", "classdef", "click", "default", "direction", "end",
        "fork", "hide", "join", "left", "linkstyle", "note", "of", "right", "state",
        "style", "accdescr", "acctitle",
    }
)
# Parallel rows share one edge, one line per row: separate parallel edges make Mermaid's
# layout stack their labels on top of each other.
MERMAID_LINE_BREAK = "<br/>"
LOOP_ROW_GAP = '<br/><font point-size="5"> </font><br/>'
LEASED_FILL = "#fde68a"
LEASED_STROKE = "#b45309"
FINAL_FILL = "#e5e7eb"
FINAL_STROKE = "#1f2937"


class DiagramError(Exception):
    """A picture could not be drawn; ``code`` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


# --- Mermaid -----------------------------------------------------------------


def mermaid_engine_can_draw(lifecycle: AnyLifecycle) -> bool:
    """True when every status name is a plain identifier Mermaid does not read as a keyword
    (so the diagram can name statuses as they are, as the ``transitions`` engine does)."""
    return all(
        MERMAID_SAFE_ID.fullmatch(status.value) and status.value.lower() not in MERMAID_KEYWORDS
        for status in lifecycle.statuses
    )


class _Blank:
    """A model for the ``transitions`` graph engine; it is never fired."""


def check_graph_machine(lifecycle: AnyLifecycle) -> None:
    """``transitions``' ``GraphMachine`` (Mermaid engine) accepts the table and holds
    exactly its statuses and rows, in the order the Mermaid edges are written in."""
    machine = GraphMachine(
        model=_Blank(),
        states=[status.value for status in lifecycle.statuses],
        initial=lifecycle.initial.value,
        transitions=[
            {"trigger": row.trigger, "source": row.source, "dest": row.dest, "label": row.label}
            for row in lifecycle.rows
        ],
        auto_transitions=False,
        graph_engine="mermaid",
        title=lifecycle.name,
    )
    markup = machine.get_markup_config()
    held = [(t["trigger"], t["source"], t["dest"], t["label"]) for t in markup["transitions"]]
    expected = [(r.trigger, r.source, r.dest, r.label) for r in rows_in_machine_order(lifecycle)]
    states = [state["name"] for state in markup["states"]]
    if held != expected or states != [status.value for status in lifecycle.statuses]:
        raise DiagramError(
            "lifecycles.diagrams.mermaid_engine_mismatch",
            f"the transitions GraphMachine holds {held} for {lifecycle.name}, "
            f"the table says {expected}",
        )


def mermaid(lifecycle: AnyLifecycle, region: str | None = None) -> str:
    """The lifecycle as a Mermaid ``stateDiagram-v2`` (see the module docstring).

    With ``region`` (a status), only the region of interest around a record holding it:
    that status, the rows leaving it and the statuses they lead to, drawn exactly as
    in the whole diagram (``lifecycles monitor explain --mermaid``).
    """
    check_graph_machine(lifecycle)
    if mermaid_engine_can_draw(lifecycle):
        ids = {status.value: status.value for status in lifecycle.statuses}
    else:
        ids = {
            status.value: f"status_{number}"
            for number, status in enumerate(lifecycle.statuses, start=1)
        }
    edges = [edge for edge in edges_by_source(lifecycle) if region in (None, edge[0])]
    shown = {status.value for status in lifecycle.statuses} if region is None else {
        region, *(dest for _, dest, _ in edges)}
    finals = [s for s in statuses_in_flow_order(lifecycle)
              if s in _finals(lifecycle) and s in shown]
    title = f"{lifecycle.name} lifecycle (table {lifecycle.table_version})"
    lines = [
        "---",
        f"title: {title}" if region is None else f"title: {title}, rows leaving {region}",
        "---",
        "stateDiagram-v2",
        "  direction TB",
        f"  classDef leased_status fill:{LEASED_FILL},stroke:{LEASED_STROKE},"
        "stroke-width:3px,font-weight:bold",
        f"  classDef final_status fill:{FINAL_FILL},stroke:{FINAL_STROKE},stroke-width:2px",
        "",
    ]
    lines += [
        f'  state "{_mermaid_text(name)}" as {ids[name]}'
        for name in (status.value for status in lifecycle.statuses) if name in shown
    ]
    lines.append("")
    if region is None:  # a region is no lifecycle: it has no creation point and no end
        lines.append(f"  [*] --> {ids[lifecycle.initial.value]}: {lifecycle.creation}")
    lines += [
        f"  {ids[source]} --> {ids[dest]}: {MERMAID_LINE_BREAK.join(map(_mermaid_text, labels))}"
        for source, dest, labels in edges
    ]
    if region is None:
        lines += [f"  {ids[name]} --> [*]" for name in finals]
    lines.append("")
    if lifecycle.leased is not None and lifecycle.leased.value in shown:
        lines.append(f"  class {ids[lifecycle.leased.value]} leased_status")
    if finals:
        lines.append(f"  class {', '.join(ids[name] for name in finals)} final_status")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # A label runs to the end of its line; '#' and ';' start entities and statement ends.
    return text.replace("#", "#35;").replace(";", "#59;").replace('"', "#quot;")


def _finals(lifecycle: AnyLifecycle) -> set[str]:
    return {status.value for status in lifecycle.final}


# --- Graphviz ------------------------------------------------------------------


def dot(lifecycle: AnyLifecycle) -> str:
    """The lifecycle as Graphviz DOT, laid out left to right in the order work flows."""
    finals = _finals(lifecycle)
    leased = lifecycle.leased.value if lifecycle.leased is not None else None
    order = statuses_in_flow_order(lifecycle)
    title = f"{lifecycle.name} lifecycle  (table {lifecycle.table_version})"
    lines = [
        f"digraph {_dot_id(lifecycle.name)} {{",
        f"  graph [rankdir=LR, fontname={_dot_id(FONT)}, fontsize=16, labelloc=t,",
        f"         label={_dot_id(title)}, nodesep=0.6, ranksep=1.1, newrank=true];",
        f"  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname={_dot_id(FONT)},",
        "        fontsize=13, margin=\"0.2,0.1\"];",
        f"  edge [fontname={_dot_id(FONT)}, fontsize=10, arrowsize=0.8];",
        "",
        "  __created__ [shape=point, width=0.18, label=\"\", style=filled, fillcolor=black];",
        "  __done__ [shape=doublecircle, width=0.12, label=\"\", style=filled, fillcolor=black];",
    ]
    for name in order:
        lines.append(f"  {_dot_id(name)} [{_node_attributes(lifecycle, name, leased, finals)}];")
    lines.append("")
    lines.append(
        f"  __created__ -> {_dot_id(lifecycle.initial.value)} "
        f"[label=<<b>{escape(lifecycle.creation)}</b>>];"
    )
    loops: dict[str, list[Row]] = {}
    for row in lifecycle.rows:
        if row.source == row.dest:
            loops.setdefault(row.source, []).append(row)
            continue
        # minlen=2 puts the final statuses in a column of their own, after the loops.
        extra = ", color=\"#7f1d1d\", minlen=2" if row.dest in finals else ""
        lines.append(
            f"  {_dot_id(row.source)} -> {_dot_id(row.dest)} [label=<{_edge_label(row)}>{extra}];"
        )
    # Parallel self-loops are drawn nested and cross each other's labels: one loop per
    # status carries every row that stays there, one block of lines per row.
    for status, rows in loops.items():
        label = LOOP_ROW_GAP.join(_edge_label(row) for row in rows)
        lines.append(f"  {_dot_id(status)} -> {_dot_id(status)} [label=<{label}>];")
    for name in order:
        if name in finals:
            lines.append(f"  {_dot_id(name)} -> __done__ [style=dotted, arrowhead=none];")
    lines.append("")
    if finals:
        members = "; ".join(_dot_id(name) for name in order if name in finals)
        lines.append(f"  {{ rank=same; {members}; }}")
        lines.append("  { rank=max; __done__; }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_attributes(
    lifecycle: AnyLifecycle, name: str, leased: str | None, finals: set[str]
) -> str:
    roles = []
    if name == lifecycle.initial.value:
        roles.append("initial")
    if name == leased:
        roles.append("worker holds a lease")
    if name in finals:
        roles.append("final")
    label = f"<b>{escape(name)}</b>"
    if roles:
        label += f'<br/><font point-size="10">{escape(", ".join(roles))}</font>'
    attributes = [f"label=<{label}>"]
    if name == leased:
        attributes += [f'fillcolor="{LEASED_FILL}"', f'color="{LEASED_STROKE}"', "penwidth=3"]
    elif name in finals:
        attributes += [f'fillcolor="{FINAL_FILL}"', f'color="{FINAL_STROKE}"', "peripheries=2"]
    return ", ".join(attributes)


def _edge_label(row: Row) -> str:
    guards = [*row.conditions, *(f"!{name}" for name in row.unless)]
    parts = [f"<b>{escape(row.trigger)}</b>"]
    if guards:
        listed = [escape(name) for name in guards]
        parts.append("[" + ",<br/> ".join(listed) + "]")
    return "<br/>".join(parts)


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@attrs.frozen
class Graphviz:
    """The installed ``dot`` program and what its SVG output depends on."""

    executable: str
    identity: str

    def svg(self, source: str) -> bytes:
        """Render DOT ``source`` to SVG bytes, or raise :class:`DiagramError`."""
        done = subprocess.run(
            [self.executable, "-Tsvg"], input=source.encode(), capture_output=True, check=False
        )
        if done.returncode != 0:
            raise DiagramError(
                "lifecycles.diagrams.graphviz_failed",
                f"dot exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}",
            )
        return done.stdout


def find_graphviz() -> Graphviz | None:
    """The ``dot`` on PATH with its identity (version line and resolved font), or ``None``."""
    executable = shutil.which("dot")
    if executable is None:
        return None
    version = subprocess.run([executable, "-V"], capture_output=True, text=True, check=False)
    identity = [(version.stderr or version.stdout).strip()]
    fc_match = shutil.which("fc-match")
    for pattern in (FONT, f"{FONT}:bold"):  # labels use the regular and the bold face
        if fc_match is None:
            identity.append(f"font {pattern}: (fc-match not installed)")
            continue
        font = subprocess.run(
            [fc_match, "-f", "%{file}", pattern], capture_output=True, text=True, check=False
        )
        identity.append(f"font {pattern}: {font.stdout.strip()}")
    return Graphviz(executable, "\n".join(identity) + "\n")
