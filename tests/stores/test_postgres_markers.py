"""The PostgreSQL store numbers psycopg's ``%s`` markers once per statement (no server)."""

from __future__ import annotations

import pytest

from lifecycles.stores.postgres import numbered_markers


@pytest.mark.parametrize(
    ("statement", "numbered"),
    [
        ("SELECT %s", "SELECT $1"),
        ("UPDATE t SET a = %s WHERE b = %s AND c = %s",
         "UPDATE t SET a = $1 WHERE b = $2 AND c = $3"),
        ("SELECT 1 WHERE a LIKE 'x%%' AND b = %s", "SELECT 1 WHERE a LIKE 'x%' AND b = $1"),
        ("SELECT 100 %% 7, %s", "SELECT 100 % 7, $1"),
        ("SELECT 1", "SELECT 1"),
    ],
)
def test_markers_are_numbered_in_order_and_doubled_percents_are_one(
    statement: str, numbered: str
) -> None:
    assert numbered_markers(statement) == numbered


@pytest.mark.parametrize(
    "statement",
    ["SELECT %(name)s", "SELECT %b", "SELECT %s, %t", "SELECT 5 %"],
)
def test_any_other_marker_is_left_to_psycopg(statement: str) -> None:
    assert numbered_markers(statement) is None
