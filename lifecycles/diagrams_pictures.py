"""The pictures of a lifecycle: Mermaid ``stateDiagram-v2``, Graphviz DOT, and SVG.

Every picture is drawn from the lifecycle's resolved rows (``lifecycle.rows``), never
from a model's current state, so the same table always gives the same bytes.

Mermaid. The edges come from the ``transitions`` library's own Mermaid engine
(``GraphMachine(graph_engine="mermaid")``): it groups the rows by (source, dest),
keeps table order and joins the labels of parallel rows (shown here one per line,
``<br/>``, where the engine writes `` | ``). Each row is
passed to it with its label (``trigger [guard, !unless_guard]``, from
:attr:`Row.label`); its output is parsed back and verified edge by edge against the
table. The engine falls short in four ways (see DESIGN.md), so the rest of the file
is written here from the same table:

* its front-matter title is a bare line, not a ``title:`` key, and Mermaid drops it;
* its ``Class`` styling follows a model's current state (``s_active``), which would
  change the text with runtime state: replaced by fixed classes for the leased and
  the final statuses;
* it marks no final status and labels no creation edge: ``[*] --> initial : <creation
  trigger>`` and ``final --> [*]`` are added;
* a status named like a Mermaid keyword (``state``, ``class``, ``note``,
  ``default``...) or containing characters outside ``[A-Za-z0-9_]`` breaks its output
  or silently loses edges: for such a lifecycle the whole diagram is generated here
  from the table, with safe aliases (``state "retry-wait" as status_3``).

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
from collections import deque
from collections.abc import Iterable
from html import escape
from typing import Any

import attrs
from transitions.extensions import GraphMachine

from lifecycles.machines.core import Lifecycle, Row

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


# --- shared reading of the table ----------------------------------------------


def statuses_in_flow_order(lifecycle: AnyLifecycle) -> list[str]:
    """Statuses in the order work reaches them: breadth-first from the initial status,
    ties in declaration order; final statuses last; unreachable ones after that."""
    declared = [status.value for status in lifecycle.statuses]
    depth = distances_from_initial(lifecycle)
    finals = {status.value for status in lifecycle.final}

    def order(name: str) -> tuple[int, int, int]:
        return (name in finals, depth.get(name, len(declared)), declared.index(name))

    return sorted(declared, key=order)


def distances_from_initial(lifecycle: AnyLifecycle) -> dict[str, int]:
    """How many transitions each status is from the initial status (unreachable: absent)."""
    depth = {lifecycle.initial.value: 0}
    queue = deque([lifecycle.initial.value])
    while queue:
        status = queue.popleft()
        for row in lifecycle.rows:
            if row.source == status and row.dest not in depth:
                depth[row.dest] = depth[status] + 1
                queue.append(row.dest)
    return depth


def grouped_edges(rows: Iterable[Row]) -> list[tuple[str, str, list[str]]]:
    """(source, dest, labels) per pair, in order of first appearance, labels in table order."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        pairs.setdefault((row.source, row.dest), []).append(row.label)
    return [(source, dest, labels) for (source, dest), labels in pairs.items()]


# --- Mermaid -----------------------------------------------------------------


def mermaid_engine_can_draw(lifecycle: AnyLifecycle) -> bool:
    """True when every status name is a plain identifier Mermaid does not read as a keyword."""
    return all(
        MERMAID_SAFE_ID.fullmatch(status.value) and status.value.lower() not in MERMAID_KEYWORDS
        for status in lifecycle.statuses
    )


class _Blank:
    """A model for the ``transitions`` graph engine; it is never fired."""


_ENGINE_STATE = re.compile(r'state "(?P<label>[^"]*)" as (?P<id>\S+)')
_ENGINE_EDGE = re.compile(r"(?P<source>\S+) --> (?P<dest>\S+): (?P<labels>.*)")


def engine_edges(lifecycle: AnyLifecycle) -> list[tuple[str, str, list[str]]]:
    """The edges as the ``transitions`` Mermaid engine draws them, checked against the table."""
    model = _Blank()
    GraphMachine(
        model=model,
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
    source: str = model.get_graph().source  # type: ignore[attr-defined]
    drawn_states: list[str] = []
    edges: list[tuple[str, str, list[str]]] = []
    for line in (text.strip() for text in source.splitlines()):
        if state := _ENGINE_STATE.fullmatch(line):
            drawn_states.append(state["id"])
        elif edge := _ENGINE_EDGE.fullmatch(line):
            edges.append((edge["source"], edge["dest"], edge["labels"].split(" | ")))
    expected = grouped_edges(lifecycle.rows)
    declared = [status.value for status in lifecycle.statuses]
    if sorted(edges) != sorted(expected) or drawn_states != declared:
        raise DiagramError(
            "lifecycles.diagrams.mermaid_engine_mismatch",
            f"the transitions Mermaid engine drew {edges} for {lifecycle.name}, "
            f"the table says {expected}",
        )
    return edges


def mermaid(lifecycle: AnyLifecycle) -> str:
    """The lifecycle as a Mermaid ``stateDiagram-v2`` (see the module docstring)."""
    if mermaid_engine_can_draw(lifecycle):
        ids = {status.value: status.value for status in lifecycle.statuses}
        edges = engine_edges(lifecycle)
    else:
        ids = {
            status.value: f"status_{number}"
            for number, status in enumerate(lifecycle.statuses, start=1)
        }
        edges = grouped_edges(lifecycle.rows)
    finals = [s for s in statuses_in_flow_order(lifecycle) if s in _finals(lifecycle)]
    lines = [
        "---",
        f"title: {lifecycle.name} lifecycle (table {lifecycle.table_version})",
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
        for name in (status.value for status in lifecycle.statuses)
    ]
    lines += ["", f"  [*] --> {ids[lifecycle.initial.value]}: {lifecycle.creation}"]
    lines += [
        f"  {ids[source]} --> {ids[dest]}: {MERMAID_LINE_BREAK.join(map(_mermaid_text, labels))}"
        for source, dest, labels in edges
    ]
    lines += [f"  {ids[name]} --> [*]" for name in finals]
    lines.append("")
    if lifecycle.leased is not None:
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
