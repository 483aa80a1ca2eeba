"""``put_many``: a batch's writes, each a compare-and-set on the whole record as read.

A batch (``run_many``'s completions, a batch claim's grants) writes many records at once;
``put_many`` says of each whether it was written. A record another connection changed
since it was read is not written, whichever way the store runs the statements: one by
one, back to back in a transaction, or (under SQLite's write lock) after reading the
batch's records again and writing those still as read by their key alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from pathlib import Path

import attrs
import pytest
from support.postgres import connect_in, require_postgres, temporary_schema
from test_compare_as_stored import DOCS, Doc, DocStatus

from lifecycles.stores._sql import SQLStore
from lifecycles.stores.postgres import PostgresStore
from lifecycles.stores.sqlite import SQLiteStore

FINISH = next(row for row in DOCS.rows if row.trigger == "finish")


Opener = Callable[[], SQLStore[Doc]]


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the test's store. Without a server, opening the PostgreSQL one skips the
    test from support/postgres.py (a skip in the fixture would be reported per test)."""
    with ExitStack() as stack:
        def opened() -> SQLStore[Doc]:
            if request.param == "sqlite":
                connection = stack.enter_context(closing(sqlite3.connect(tmp_path / "docs.db")))
                return SQLiteStore(DOCS, connection)
            require_postgres()
            schema = stack.enter_context(temporary_schema())
            return PostgresStore(DOCS, stack.enter_context(connect_in(schema)))

        yield opened


def other_program_sets_note(store: SQLStore[Doc], key: str) -> None:
    """Another connection's write (on SQLite a second connection, committed)."""
    if isinstance(store.connection, sqlite3.Connection):
        path = store.connection.execute("PRAGMA database_list").fetchone()[2]
        with sqlite3.connect(path) as other:
            other.execute(f"UPDATE {store.schema.table} SET note = 'theirs' WHERE key = ?",
                          (key,))
        other.close()
    else:
        store.connection.execute(
            f"UPDATE {store.schema.table} SET note = 'theirs' WHERE key = %s", (key,))


def read_four(store: SQLStore[Doc]) -> list[Doc]:
    for key in ("d1", "d2", "d3", "d4"):
        store.insert(Doc(key, DocStatus.OPEN, {}, "n"))
    found = [doc for key in ("d1", "d2", "d3", "d4") if (doc := store.get(key)) is not None]
    assert len(found) == 4
    return found


def finished(doc: Doc) -> Doc:
    return attrs.evolve(doc, status=DocStatus.DONE, tags={"done": True})


def stored(store: SQLStore[Doc]) -> list[Doc | None]:
    return [store.get(key) for key in ("d1", "d2", "d3", "d4")]


@pytest.mark.parametrize("in_transaction", [False, True])
def test_a_record_changed_since_it_was_read_is_not_written_and_the_others_are(
    open_store: Opener, in_transaction: bool,
) -> None:
    store = open_store()
    docs = read_four(store)
    other_program_sets_note(store, "d2")
    writes = [(doc, finished(doc), FINISH) for doc in docs]
    if in_transaction:
        with store.transaction():
            written = store.put_many(writes)
    else:
        written = store.put_many(writes)
    assert written == [True, False, True, True]
    assert stored(store) == [finished(docs[0]), attrs.evolve(docs[1], note="theirs"),
                             finished(docs[2]), finished(docs[3])]


def test_records_read_in_the_same_transaction_are_written(open_store: Opener) -> None:
    store = open_store()
    read_four(store)
    with store.transaction():
        docs = [doc for key in ("d1", "d2", "d3", "d4") if (doc := store.get(key)) is not None]
        written = store.put_many([(doc, finished(doc), FINISH) for doc in docs])
    assert written == [True] * 4
    assert stored(store) == [finished(doc) for doc in docs]


def test_a_write_after_a_batch_compares_with_what_the_batch_wrote(
    open_store: Opener,
) -> None:
    """The values a batch wrote are what the next write of those records compares with:
    unchanged, it is written; changed by another program since, it is refused."""
    store = open_store()
    docs = read_four(store)
    with store.transaction():
        store.put_many([(doc, finished(doc), FINISH) for doc in docs])
    done = [finished(doc) for doc in docs]
    other_program_sets_note(store, "d3")
    back = [(doc, attrs.evolve(doc, tags={}), FINISH) for doc in done]
    with store.transaction():
        assert store.put_many(back) == [True, True, False, True]
    assert stored(store)[2] == attrs.evolve(done[2], note="theirs")


def test_on_sqlite_a_batch_read_earlier_is_read_again_once_and_written_by_key(
    tmp_path: Path,
) -> None:
    connection = sqlite3.connect(tmp_path / "docs.db")
    store: SQLiteStore[Doc] = SQLiteStore(DOCS, connection)
    docs = read_four(store)
    other_program_sets_note(store, "d4")
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    with store.transaction():
        written = store.put_many([(doc, finished(doc), FINISH) for doc in docs])
    connection.set_trace_callback(None)
    assert written == [True, True, True, False]
    updates = [s for s in statements if s.startswith("UPDATE")]
    rereads = [s for s in statements if s.startswith("SELECT") and " IN (" in s]
    assert len(rereads) == 1
    assert [s.split(" WHERE ")[1] for s in updates[:3]] == [
        "key = 'd1'", "key = 'd2'", "key = 'd3'"]  # unchanged since read: by key alone
    assert updates[3].endswith("WHERE key = 'd4' AND status IS 'open' AND tags IS '{}'"
                               " AND note IS 'n'")  # changed since: compared, refused
    connection.close()
