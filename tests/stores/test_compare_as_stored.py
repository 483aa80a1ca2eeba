"""A SQL store's compare-and-set compares the row with the values it read, not with the
record encoded again.

Another program may write a structured (JSON) column in its own spelling: other spaces,
another key order. The record read from it is the same, but its canonical encoding is
not what the row holds, so a compare against the encoding would call every write of
that record a lost race, for ever. The store remembers the column values of the
records it read or wrote lately (``SQLStore._remember``) and compares with those.
"""

from __future__ import annotations

import sqlite3
from enum import StrEnum
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.postgres import connect_in, temporary_schema

from lifecycles.invariants._core import InvariantSet
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import Changes, effect
from lifecycles.stores import _sql as sql
from lifecycles.stores._base import StaleRecord
from lifecycles.stores._sql import SQLStore
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore


class DocStatus(StrEnum):
    OPEN = "open"
    DONE = "done"


@attrs.frozen
class Doc:
    key: str
    status: DocStatus
    tags: dict[str, Any]
    note: str


@effect("tags")
def tag_done(record: Doc, inputs: Any) -> Changes:
    """Add the tag done."""
    return {"tags": {**record.tags, "done": True}}


DOCS: Lifecycle[Doc, Any] = Lifecycle(
    module=__name__,
    name="docs", statuses=DocStatus,
    table=[{"trigger": "finish", "source": "open", "dest": "done", "after": "tag_done"}],
    initial=DocStatus.OPEN, final=[DocStatus.DONE], creation="create", guards=[],
    effects=[tag_done], invariants=InvariantSet("docs.state_invalid", []), record_type=Doc,
    key_field="key", not_allowed_code="docs.not_allowed", description="Documents.",
)
OTHER_SPELLING = '{"b": 1,  "a": [2, 3]}'  # what another program wrote: spaces, key order


def spelled_otherwise(store: SQLStore[Doc], marker: str) -> Doc:
    """A stored record whose tags another program rewrote in its own spelling; read back."""
    store.insert(Doc("d1", DocStatus.OPEN, {"a": [2, 3], "b": 1}, "n"))
    store.connection.execute(f"UPDATE {store.schema.table} SET tags = {marker}",
                             (OTHER_SPELLING,))
    if isinstance(store.connection, sqlite3.Connection):
        store.connection.commit()
    found = store.get("d1")
    assert found is not None and found.tags == {"a": [2, 3], "b": 1}
    return found


def sqlite_store(tmp_path: Path) -> SQLiteStore[Doc]:
    return SQLiteStore(DOCS, sqlite3.connect(tmp_path / "docs.db"))


def test_a_record_read_from_another_spelling_takes_its_transitions(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    read = spelled_otherwise(store, "?")
    done = store.fire(read, "finish", None)
    assert done.status == DocStatus.DONE
    assert store.get("d1") == done


def test_a_record_changed_since_it_was_read_is_still_refused(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    read = spelled_otherwise(store, "?")
    store.connection.execute(f"UPDATE {store.schema.table} SET note = 'changed'")
    store.connection.commit()
    with pytest.raises(StaleRecord):
        store.fire(read, "finish", None)
    assert store.get("d1") == attrs.evolve(read, note="changed")  # nothing written


def test_a_respelling_alone_since_the_read_counts_as_a_change(tmp_path: Path) -> None:
    """The compare is on the row as read: a program rewriting the same tags in another
    spelling after the read has still changed the row, and the write is refused."""
    store = sqlite_store(tmp_path)
    read = spelled_otherwise(store, "?")
    store.connection.execute(f"UPDATE {store.schema.table} SET tags = ?", ('{"a":[2,3],"b":1}',))
    store.connection.commit()
    with pytest.raises(StaleRecord):
        store.fire(read, "finish", None)


def test_a_record_forgotten_is_compared_by_its_encoding(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory is bounded; past it a write compares the encoded record, as before: right
    for canonical rows, a lost race for another spelling, which a fresh read then wins."""
    monkeypatch.setattr(sql, "AS_STORED_LIMIT", 1)
    store = sqlite_store(tmp_path)
    read = spelled_otherwise(store, "?")
    store.insert(Doc("d2", DocStatus.OPEN, {}, "n"))  # forgets d1's values
    with pytest.raises(StaleRecord):
        store.fire(read, "finish", None)
    fresh = store.get("d1")
    assert fresh is not None
    assert store.fire(fresh, "finish", None).status == DocStatus.DONE
    other = store.get("d2")
    store.insert(Doc("d3", DocStatus.OPEN, {}, "n"))  # forgets d2's values: canonical row
    assert other is not None
    assert store.fire(other, "finish", None).tags == {"done": True}


def test_the_same_on_postgresql() -> None:
    with temporary_schema() as schema, connect_in(schema) as connection:
        store: PostgresStore[Doc] = PostgresStore(DOCS, connection)
        read = spelled_otherwise(store, "%s")
        done = store.fire(read, "finish", None)
        assert store.get("d1") == done
