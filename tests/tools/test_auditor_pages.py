"""What an auditor reads on the generated pages (issue 14): the checker's results, every
rule with a meaning, no source markup, direct predecessors of each final status, and
never a link to a file that was not generated."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles._diagrams_markdown import markdown
from lifecycles._diagrams_pictures import find_graphviz
from lifecycles._loading import find_exploration
from lifecycles._registry import registered
from lifecycles.diagrams import generate
from lifecycles.invariants._core import field_rules
from lifecycles.machines._exhaustive import explore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # examples/ imports as from a clone's root

from examples.review.lifecycle import REVIEW  # noqa: E402

SHIPPED = {**registered(), "review": REVIEW}
PAGES = {name: text.decode() for name, text in generate(SHIPPED, None).files.items()
         if name.endswith(".md")}
MARKUP = re.compile(r"(?<!`)``(?!`)|:(?:py:)?(?:func|class|meth|mod|attr|data|ref|obj):`")


@pytest.mark.parametrize("name", sorted(PAGES))
def test_no_page_shows_source_markup_or_an_undeclared_meaning(name: str) -> None:
    text = PAGES[name]
    assert not MARKUP.search(text), MARKUP.search(text)
    assert "no meaning declared" not in text


@pytest.mark.parametrize("lifecycle", SHIPPED.values(), ids=list(SHIPPED))
def test_every_shipped_rule_and_status_has_a_meaning(lifecycle: Any) -> None:
    assert all(rule.meaning for _, rule in field_rules(lifecycle.record_type))
    assert all(lifecycle.status_meanings.get(s.value) for s in lifecycle.statuses)
    assert all(rule.meaning for rule in lifecycle.invariants)
    assert all(rule.meaning for rule in lifecycle.invariants.steps)


@pytest.mark.parametrize(("text", "shown"), [
    ("a ``None`` here", "a `None` here"),
    (":func:`read_answer` reads", "`read_answer` reads"),
    (":class:`~lifecycles.machines._core.Row` rows", "`Row` rows"),
    (":meth:`Lifecycle.fire`", "`Lifecycle.fire`"),
    (":ref:`the title <target>`", "the title"),
    ("as follows::\n\n    code", "as follows:\n\n    code"),
    ("```mermaid``` and `one`", "```mermaid``` and `one`"),
])
def test_docstring_markup_becomes_markdown(text: str, shown: str) -> None:
    assert markdown(text) == shown


def test_a_final_status_lists_its_direct_predecessors_apart() -> None:
    page = PAGES["monitor.md"]
    section = page.split("### `succeeded`", 1)[1].split("###", 1)[0]
    assert ("Reached directly from: `leased`; and through them from: `pending`, "
            "`watching`, `retry_wait`.") in section
    outbox = PAGES["outbox.md"].split("### `delivered`", 1)[1].split("###", 1)[0]
    assert "Reached directly from: `pending`." in outbox


def test_pages_show_what_the_checker_explored() -> None:
    for name, lifecycle in SHIPPED.items():
        found = find_exploration(lifecycle)
        assert found is not None
        result = explore(found[0])
        assert result.coverage is not None
        page = PAGES[f"{name}.md"]
        assert f"Explored: {result.states:,} states, {result.edges:,} edges" in page
        assert f"Statuses reached: {len(result.statuses)} of {len(lifecycle.statuses)}." in page
        for row in lifecycle.rows:
            fired = result.coverage.row_fires[row]
            assert f"`{row.label}` from `{row.source}` {fired:,}" in page


def test_the_monitor_page_shows_its_interleaved_workers() -> None:
    page = PAGES["monitor.md"]
    assert "Interleaved workers: 2 workers x 1 record" in page
    assert "complete, every property holds" in page


def test_without_graphviz_a_page_links_no_svg_that_does_not_exist() -> None:
    drawn_nowhere = generate({"monitor": SHIPPED["monitor"]}, None).files["monitor.md"]
    assert b"monitor.svg" not in drawn_nowhere
    assert b"Graphviz picture: not drawn" in drawn_nowhere
    # An SVG drawn earlier (committed beside the page) is still linked.
    committed = generate({"monitor": SHIPPED["monitor"]}, None, {"monitor.svg"})
    assert b"[Graphviz picture (SVG)](monitor.svg)" in committed.files["monitor.md"]
    graphviz = find_graphviz()
    if graphviz is not None:  # drawn here: linked
        drawn = generate({"monitor": SHIPPED["monitor"]}, graphviz)
        assert "monitor.svg" in drawn.files
        assert b"[Graphviz picture (SVG)](monitor.svg)" in drawn.files["monitor.md"]


def test_the_pages_say_the_version_covers_the_code() -> None:
    for name, lifecycle in SHIPPED.items():
        page = PAGES[f"{name}.md"]
        assert f"Generated from table version **`{lifecycle.table_version}`**" in page
        assert "the source of every guard, effect, invariant and function beside it" in page


def test_the_lease_facts_on_a_page_come_from_the_lease_declaration() -> None:
    """Which statuses a claim takes, in what order, and what expiry fires on, are read
    from the table and its Lease, not written beside them again."""
    from lifecycles.machines._mutants import redeclared

    monitor = SHIPPED["monitor"]
    page = PAGES["monitor.md"]
    assert ("leases the first due record: status `pending`, `watching`, `retry_wait` with "
            "`next_poll_at` <= now, in order of `created_at`, then `event_id`") in page
    assert "on each `leased` record whose `lease_expires_at` <= that claim's now" in page
    reordered = redeclared(monitor, lease=attrs.evolve(monitor.lease, order_by=("event_id",)))
    redrawn = generate({"monitor": reordered}, None).files["monitor.md"].decode()
    assert "in order of `event_id`; a record" in redrawn
