"""Markdown for the generated pages: tables, cells, and docstrings shown as Markdown.

Both page builders use these, :mod:`lifecycles._diagrams_page` (a lifecycle's page and
the index) and :mod:`lifecycles._diagrams_audit` (its auditor sections and the
checklist), so every table and every escaped cell looks the same on every page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Row

__all__ = ["cell", "markdown", "plain", "table_entries", "table_row", "table_section"]

_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def table_section(title: str, intro: str | None, columns: Sequence[str],
                   rows: Iterable[str]) -> list[str]:
    """``## title``, an optional paragraph, and a Markdown table of ``rows`` (each one
    :func:`table_row`) under ``columns``: the shape of every tabular section of a page."""
    out = [f"## {title}", ""]
    if intro is not None:
        out += [intro, ""]
    out += [table_row(*columns), "|" + " --- |" * len(columns), *rows]
    return [*out, ""]


def table_row(*cells: str) -> str:
    """One line of a Markdown table; every cell is already escaped (:func:`cell`)."""
    return "| " + " | ".join(cells) + " |"


def table_entries(lifecycle: Lifecycle[Any, Any]) -> list[list[Row]]:
    """The resolved rows grouped back into the table's rows (one per table entry)."""
    grouped: dict[int, list[Row]] = {}
    for row in lifecycle.rows:
        grouped.setdefault(row.index, []).append(row)
    return [grouped[index] for index in sorted(grouped)]


def plain(text: str) -> str:
    """Text that Markdown shows as written: docstring markup made Markdown
    (:func:`markdown`), a ``<`` that could open an HTML tag escaped."""
    return _TAG_START.sub("&lt;", markdown(text))


_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]*?)(?:\s*<([^`>]*)>)?`")
_LITERAL = re.compile(r"(?<!`)``([^`]+)``(?!`)")


def markdown(text: str) -> str:
    """reStructuredText markup of a docstring as Markdown: ````x```` and ``:func:`x```
    become code (``:func:`~a.b``` shows ``b``; ``:ref:`title <target>``` the title), a
    paragraph ending in ``::`` ends in ``:``."""
    def role(found: re.Match[str]) -> str:
        tilde, shown, target = found.groups()
        if target is not None:
            return shown.strip() or f"`{target}`"
        return f"`{shown.rpartition('.')[2] if tilde else shown}`"

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(lambda found: f"`{found[1]}`", text)
    return re.sub(r"(?<=\S)::$", ":", text, flags=re.MULTILINE)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return plain(text).replace("|", "\\|").replace("\n", " ")
