"""The monitor against a database changed under it and against hostile input.

* A schema or meta change made by another connection after a monitor opened is met on
  the monitor's next call: refused with a stable code, nothing written, and never a
  raw ``sqlite3`` or ``psycopg`` exception (on SQLite and on PostgreSQL).
* Hostile input (values of the wrong type, ``str`` subclasses that lie about equality,
  objects whose own methods raise) is refused with its usual code and never stored;
  a hostile answer or reader error fails the item as the retry table says, and never
  leaves it leased.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.monitor import (
    CAPABILITIES,
    AlwaysEqual,
    ReaderError,
    answer,
    canonical,
    every_table,
    notification,
    plant,
    table_dump,
)
from support.postgres import DSN, connect_in, require_postgres, temporary_schema

from lifecycles.monitor.facade import (
    DurableTerminalProcessingMonitor,
    TerminalProcessingMonitorBlocked,
)

CODE = "terminal_processing_monitor."
TABLE = "cms_source_terminal_processing"
META = "cms_source_terminal_processing_meta"
METHODS = ("register", "claim", "run_once", "status", "health")


def outcome(action: Callable[[], Any]) -> Any:
    """What a call answered: ``("error", code)``, or the kind of its result."""
    try:
        result = action()
    except TerminalProcessingMonitorBlocked as error:
        return ("error", error.code)
    return None if result is None else type(result).__name__


def call(monitor: DurableTerminalProcessingMonitor, method: str) -> Any:
    """The next call of ``method``, with valid arguments, as :func:`outcome` reports it."""
    value, sha = notification(5)
    actions: dict[str, Callable[[], Any]] = {
        "register": lambda: monitor.register(value, sha, now=200),
        "claim": lambda: monitor.claim("w1", now=200),
        "run_once": lambda: monitor.run_once(
            lambda e, s: answer(e, s, "pending"), "w1", now=200
        ),
        "status": lambda: monitor.status("e0", now=200),
        "health": lambda: monitor.health(now=200),
    }
    return outcome(actions[method])


# --- schema and meta changes made by another connection ------------------------------

ALTERED = ("error", CODE + "schema_altered")
# After an identical table is recreated the monitor carries on, on the (empty) new table.
CARRIES_ON = {
    "register": "TerminalProcessingStatus", "claim": None, "run_once": None,
    "status": ("error", CODE + "missing"), "health": "TerminalProcessingHealth",
}

SQLITE_CHANGES: dict[str, list[str]] = {
    "add_column": [f"ALTER TABLE {TABLE} ADD COLUMN extra TEXT"],
    "rename_column": [f"ALTER TABLE {TABLE} RENAME COLUMN site_id TO site"],
    "drop_table": [f"DROP TABLE {TABLE}"],
    "rename_table": [f"ALTER TABLE {TABLE} RENAME TO {TABLE}_old"],
    "recreate_table": [],  # none: plant recreates the table from its own CREATE statement
    "delete_meta_row": [f"DELETE FROM {META}"],
    # The meta table's CHECK forbids another version: a hand edit that switched it off.
    "rewrite_meta_version": ["PRAGMA ignore_check_constraints = ON",
                             f"UPDATE {META} SET schema_version = 3"],
    "rewrite_capabilities": [f"UPDATE {META} SET expected_capabilities_sha256 = '{'e' * 64}'"],
    "drop_meta_table": [f"DROP TABLE {META}"],
    "legacy_meta_table": [
        f"DROP TABLE {META}",
        f"CREATE TABLE {META} (singleton INTEGER PRIMARY KEY, schema_version INTEGER NOT NULL)",
        f"INSERT INTO {META} VALUES (1, 1)",
    ],
}


def expected(change: str, method: str) -> Any:
    return CARRIES_ON[method] if change == "recreate_table" else ALTERED


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("change", SQLITE_CHANGES)
def test_a_sqlite_schema_or_meta_change_is_refused_on_the_next_call(
    tmp_path: Path, change: str, method: str
) -> None:
    path = tmp_path / "monitor.db"
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(2):
        monitor.register(*notification(index), now=100)
    plant(path, SQLITE_CHANGES[change])
    before = every_table(path)
    assert call(monitor, method) == expected(change, method)
    if expected(change, method) == ALTERED:
        assert every_table(path) == before  # refused: nothing written


def test_a_schema_change_during_the_read_writes_nothing(tmp_path: Path) -> None:
    """The answer is written in its own transaction, which checks the schema first."""
    path = tmp_path / "monitor.db"
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    monitor.register(*notification(0), now=100)
    before: list[Any] = []

    def reader(event_id: str, site_id: str) -> Any:
        plant(path, SQLITE_CHANGES["rewrite_capabilities"])
        before.extend(every_table(path))
        return answer(event_id, site_id, "succeeded")

    assert outcome(lambda: monitor.run_once(reader, "w1", now=200)) == ALTERED
    assert every_table(path) == before


def test_an_identical_schema_change_is_checked_once_and_carries_on(tmp_path: Path) -> None:
    path = tmp_path / "monitor.db"
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    monitor.register(*notification(0), now=100)
    other = sqlite3.connect(path)
    other.execute(f"CREATE INDEX extra_index ON {TABLE} (site_id)")  # bumps schema_version
    other.commit()
    assert monitor.status("e0", now=100).status == "pending"
    assert monitor.claim("w1", now=100) is not None


@pytest.mark.parametrize("method", METHODS)
def test_a_locked_or_closed_sqlite_database_has_a_stable_code(
    tmp_path: Path, method: str
) -> None:
    path = tmp_path / "monitor.db"
    connection = sqlite3.connect(path, timeout=0.05)
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    monitor.register(*notification(0), now=100)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert call(monitor, method) == ("error", CODE + "database_unreachable")
    finally:
        holder.execute("ROLLBACK")
    connection.close()
    assert call(monitor, method) == ("error", CODE + "database_unreachable")


# PostgreSQL: the same changes, made by a second connection into the same schema.
POSTGRES_CHANGES: dict[str, list[str]] = {
    "add_column": [f"ALTER TABLE {TABLE} ADD COLUMN extra text"],
    "rename_column": [f"ALTER TABLE {TABLE} RENAME COLUMN site_id TO site"],
    "drop_table": [f"DROP TABLE {TABLE}"],
    "rename_table": [f"ALTER TABLE {TABLE} RENAME TO {TABLE}_old"],
    "recreate_table": [f"DROP TABLE {TABLE}"],  # then the store's own CREATE statements
    "retype_column": [f"ALTER TABLE {TABLE} ALTER COLUMN failures TYPE bigint"],
    "delete_meta_row": [f"DELETE FROM {META}"],
    "rewrite_meta_version": [
        f"ALTER TABLE {META} DROP CONSTRAINT {META}_schema_version_check",
        f"UPDATE {META} SET schema_version = 3",
    ],
    "rewrite_capabilities": [f"UPDATE {META} SET expected_capabilities_sha256 = '{'e' * 64}'"],
    "drop_meta_table": [f"DROP TABLE {META}"],
    "add_meta_column": [f"ALTER TABLE {META} ADD COLUMN extra text"],
    "legacy_meta_table": [
        f"DROP TABLE {META}",
        f"CREATE TABLE {META} (singleton integer PRIMARY KEY, schema_version integer NOT NULL)",
        f"INSERT INTO {META} VALUES (1, 1)",
    ],
}


def plant_postgres(other: Any, change: str) -> None:
    from lifecycles.monitor.schema import MonitorSchema, render
    from lifecycles.stores.postgres import PostgresDialect

    statements = list(POSTGRES_CHANGES[change])
    if change == "recreate_table":
        dialect = PostgresDialect()
        statements += [render("create_table", dialect),
                       *dialect.create_indexes(MonitorSchema(CAPABILITIES))]
    with other.transaction():
        for statement in statements:
            other.execute(statement)


def postgres_dump(other: Any) -> list[Any]:
    rows: list[Any] = []
    for (table,) in other.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        " ORDER BY table_name"
    ).fetchall():
        rows.append((table, *other.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()))
    return rows


@pytest.fixture(scope="module")
def postgres_schema() -> Iterator[str]:
    """One schema for the module; without a server the test body skips (from the one
    shared line, so the reason is reported once), never this fixture."""
    if DSN is None:
        yield ""
        return
    with temporary_schema() as name:
        yield name


@pytest.mark.postgres
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("change", POSTGRES_CHANGES)
def test_a_postgres_schema_or_meta_change_is_refused_on_the_next_call(
    postgres_schema: str, change: str, method: str
) -> None:
    require_postgres()
    admin = connect_in(postgres_schema)
    try:
        admin.execute(f"DROP TABLE IF EXISTS {TABLE}, {TABLE}_old, {META}")
        connection = connect_in(postgres_schema)
        monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        for index in range(2):
            monitor.register(*notification(index), now=100)
        plant_postgres(admin, change)
        before = postgres_dump(admin)
        assert call(monitor, method) == expected(change, method)
        if expected(change, method) == ALTERED:
            assert postgres_dump(admin) == before
        connection.close()
    finally:
        admin.close()


# --- hostile input --------------------------------------------------------------------


class Exploding:
    """Any comparison or hash of it raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("compared")

    def __hash__(self) -> int:
        raise RuntimeError("hashed")


class ExplodingKey(str):
    """A key that hashes like ``event_id`` and raises when compared."""

    def __hash__(self) -> int:
        return hash("event_id")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")


def exploding_mapping(base: dict[str, Any], method: str) -> dict[str, Any]:
    """A dict subclass holding ``base`` whose ``method`` raises."""

    def explode(self: Any, *args: Any) -> Any:
        raise RuntimeError(method)

    return type("Exploding" + method.strip("_").title(), (dict,), {method: explode})(base)


class LyingInt(int):
    """Holds one integer but compares as 1."""

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False


@pytest.fixture
def connection(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "monitor.db")


@pytest.fixture
def monitor(connection: sqlite3.Connection) -> DurableTerminalProcessingMonitor:
    monitor = DurableTerminalProcessingMonitor(connection, CAPABILITIES)
    monitor.register(*notification(0), max_failures=3, now=10)
    return monitor


def with_sha(value: Any) -> tuple[Any, str]:
    try:
        return value, canonical(value)
    except Exception:  # not JSON at all: any well-formed digest will do
        return value, "a" * 64


def replaced(index: int, **fields: Any) -> dict[str, Any]:
    """Notification ``index`` with ``fields`` replaced (its digest is not computed)."""
    return {**notification(index)[0], **fields}


def hostile_notifications() -> dict[str, tuple[Any, str]]:
    value, sha = notification(7)
    cases: dict[str, tuple[Any, str]] = {
        "terminal_status_list": with_sha(replaced(7, terminal_status=["published"])),
        "terminal_status_object": with_sha(
            replaced(7, terminal_status={"published": True})
        ),
        "terminal_status_lying": with_sha(
            replaced(7, terminal_status=AlwaysEqual("bogus", "published"))
        ),
        "schema_lying": with_sha(replaced(7, schema=AlwaysEqual("other", ""))),
        "event_id_lying": with_sha(replaced(7, event_id=AlwaysEqual("e 7", "e7"))),
        "sha_lying": (value, AlwaysEqual("f" * 64, sha)),
        "value_exploding": (replaced(7, plan_id=Exploding()), sha),
        "terminal_status_exploding": (replaced(7, terminal_status=Exploding()), sha),
        # Looking "event_id" up compares the key that hashes like it.
        "key_exploding": (
            {**{k: v for k, v in value.items() if k != "event_id"}, ExplodingKey("e"): "e7"}, sha
        ),
        "nested_list_exploding": (replaced(7, plan_id=[Exploding()]), sha),
    }
    # What the reference reads of a notification: iteration and item access.
    for method in ("__getitem__", "__iter__"):
        cases[f"mapping{method}"] = (exploding_mapping(value, method), sha)
    return cases


HOSTILE_NOTIFICATIONS = hostile_notifications()


@pytest.mark.parametrize("case", HOSTILE_NOTIFICATIONS)
def test_a_hostile_notification_is_refused_and_never_stored(
    monitor: DurableTerminalProcessingMonitor, connection: sqlite3.Connection, case: str
) -> None:
    value, sha = HOSTILE_NOTIFICATIONS[case]
    before = table_dump(connection)
    assert outcome(lambda: monitor.register(value, sha, now=20)) == (
        "error", CODE + "notification_invalid"
    )
    assert table_dump(connection) == before
    assert monitor.health(now=20).counts["pending"] == 1  # nothing stored blocks the queue


@pytest.mark.parametrize(
    ("method", "code"),
    [("claim", "worker_invalid"), ("run_once", "worker_invalid"), ("status", "event_invalid")],
)
def test_a_str_subclass_as_worker_or_event_id_is_refused(
    monitor: DurableTerminalProcessingMonitor, connection: sqlite3.Connection, method: str,
    code: str,
) -> None:
    lying = AlwaysEqual("w 1", "w1")  # not a token, whatever it says about itself
    before = table_dump(connection)
    actions = {
        "claim": lambda: monitor.claim(lying, now=20),
        "run_once": lambda: monitor.run_once(lambda e, s: answer(e, s, "pending"), lying, now=20),
        "status": lambda: monitor.status(AlwaysEqual("e 0", "e0"), now=20),
    }
    assert outcome(actions[method]) == ("error", CODE + code)
    assert table_dump(connection) == before


def answer_with(**overrides: Any) -> Callable[[str, str], Any]:
    """A reader answering "succeeded" with ``overrides`` (any field, event_id included)."""
    return lambda event_id, site_id: {**answer(event_id, site_id, "succeeded"), **overrides}


class ExplodingAnswer(Mapping[str, Any]):
    """A mapping (not a dict) holding a valid answer; ``method`` raises."""

    def __init__(self, held: dict[str, Any], method: str) -> None:
        self.held, self.method = held, method

    def _maybe_explode(self, method: str) -> None:
        if method == self.method:
            raise RuntimeError(method)

    def __getitem__(self, key: str) -> Any:
        self._maybe_explode("__getitem__")
        return self.held[key]

    def __iter__(self) -> Iterator[str]:
        self._maybe_explode("__iter__")
        return iter(self.held)

    def __len__(self) -> int:
        self._maybe_explode("__len__")
        return len(self.held)


def answer_mapping_exploding(method: str) -> Callable[[str, str], Any]:
    return lambda event_id, site_id: ExplodingAnswer(
        answer(event_id, site_id, "succeeded"), method
    )


class CodeRaises(Exception):
    @property
    def code(self) -> str:
        raise RuntimeError("no code")


class RetryableRaises(ReaderError):
    @property  # type: ignore[override]
    def retryable(self) -> bool:
        raise RuntimeError("no flag")

    @retryable.setter
    def retryable(self, value: bool) -> None:
        pass


class CmsFlagRaises(ReaderError):
    @property  # type: ignore[override]
    def cms_notification_failure(self) -> bool:
        raise RuntimeError("no flag")

    @cms_notification_failure.setter
    def cms_notification_failure(self, value: bool) -> None:
        pass


def raising(error: BaseException) -> Callable[[str, str], Any]:
    def reader(event_id: str, site_id: str) -> Any:
        raise error

    return reader


RESPONSE_INVALID = CODE + "response_invalid"
READER_FAILURE = CODE + "reader_failure"
HOSTILE_READS: dict[str, tuple[Callable[[str, str], Any], str]] = {
    "event_id_lying": (answer_with(event_id=AlwaysEqual("e9", "e0")), RESPONSE_INVALID),
    "notification_id_lying": (answer_with(notification_id=AlwaysEqual("n9", "n0")),
                              RESPONSE_INVALID),
    "capabilities_lying": (answer_with(capabilities_sha256=AlwaysEqual("e" * 64, CAPABILITIES)),
                           RESPONSE_INVALID),
    "schema_lying": (answer_with(schema=AlwaysEqual("other", "")), RESPONSE_INVALID),
    "status_lying": (answer_with(processing_status=AlwaysEqual("bogus", "succeeded")),
                     RESPONSE_INVALID),
    "error_code_subclass": (
        lambda e, s: answer(e, s, "failed", last_error_code=AlwaysEqual("Bad Code", "x")),
        RESPONSE_INVALID,
    ),
    "attempts_lying": (answer_with(attempts=LyingInt(50)), RESPONSE_INVALID),
    "schema_exploding": (answer_with(schema=Exploding()), RESPONSE_INVALID),
    "event_id_exploding": (answer_with(event_id=Exploding()), RESPONSE_INVALID),
    "status_exploding": (answer_with(processing_status=Exploding()), RESPONSE_INVALID),
    "attempts_exploding": (answer_with(attempts=Exploding()), RESPONSE_INVALID),
    "terminal_status_list": (answer_with(terminal_status=["published"]), RESPONSE_INVALID),
    "mapping__getitem__": (answer_mapping_exploding("__getitem__"), READER_FAILURE),
    "mapping__iter__": (answer_mapping_exploding("__iter__"), READER_FAILURE),
    "code_raises": (raising(CodeRaises()), READER_FAILURE),
    "retryable_raises": (raising(RetryableRaises("cms.timeout", True)), READER_FAILURE),
    "cms_flag_raises": (raising(CmsFlagRaises("cms.timeout", True)), READER_FAILURE),
    # Judged by the code it holds, not the one it claims to equal.
    "code_lying": (raising(ReaderError(AlwaysEqual("Not A Code", "cms.timeout"), True)),
                   READER_FAILURE),
}


@pytest.mark.parametrize("case", HOSTILE_READS)
def test_a_hostile_answer_or_reader_error_fails_the_item_and_never_leaves_it_leased(
    monitor: DurableTerminalProcessingMonitor, case: str
) -> None:
    reader, code = HOSTILE_READS[case]
    outcome_ = monitor.run_once(reader, "w1", now=20)
    assert outcome_ is not None
    # Not retryable: the item is failed at once, its lease released, its code recorded.
    assert (outcome_.status, outcome_.error_code) == ("failed", code)
    status = monitor.status("e0", now=20)
    assert (status.status, status.lease_expires_at, status.last_error_code) == (
        "failed", None, code
    )
    assert status.receiver_status is None  # nothing of the answer was stored
    health = monitor.health(now=20)  # every stored row still holds every rule
    assert health.counts["failed"] == 1 and health.counts["leased"] == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=3),
    max_leaves=6,
)
FIELDS = ("schema", "event_id", "notification_id", "site_id", "terminal_status")


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=json_values | st.builds(Exploding))
def test_any_value_in_a_notification_field_is_stored_only_when_valid(
    monitor: DurableTerminalProcessingMonitor, field: str, value: Any
) -> None:
    given_value, sha = with_sha(replaced(8, **{field: value}))
    result = outcome(lambda: monitor.register(given_value, sha, now=20))
    assert result in ("TerminalProcessingStatus", ("error", CODE + "notification_invalid"),
                      ("error", CODE + "idempotency_collision"))
    monitor.health(now=20)  # never state_invalid: nothing invalid was stored


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(sorted(answer("e0", "site-1", "succeeded"))),
    value=json_values | st.builds(Exploding),
)
def test_any_value_in_an_answer_field_never_leaves_the_item_leased(
    tmp_path_factory: pytest.TempPathFactory, field: str, value: Any
) -> None:
    path = tmp_path_factory.mktemp("answers") / "monitor.db"
    monitor = DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    monitor.register(*notification(0), now=10)
    result = monitor.run_once(answer_with(**{field: value}), "w1", now=20)
    assert result is not None and result.status != "leased"
    health = monitor.health(now=20)  # never state_invalid: nothing invalid was stored
    assert health.counts["leased"] == 0


class Honest(StrEnum):
    """A caller's own enum of strings: each member is a str subclass holding its value."""

    PUBLISHED = "published"
    WORKER = "w1"
    EVENT = "e7"
    TIMEOUT = "cms.timeout"


def test_an_honest_str_subclass_is_read_as_the_str_it_holds(
    monitor: DurableTerminalProcessingMonitor, connection: sqlite3.Connection
) -> None:
    """As in the reference: a StrEnum member works, and plain strings are stored."""
    value = replaced(7, event_id=Honest.EVENT, terminal_status=Honest.PUBLISHED)
    monitor.register(value, canonical(value), now=10)
    assert monitor.status(Honest.EVENT, now=10).status == "pending"
    claimed = monitor.run_once(raising(ReaderError(Honest.TIMEOUT, True)), Honest.WORKER, now=20)
    assert claimed is not None and claimed.error_code == "cms.timeout"  # retried, code kept
    stored = connection.execute(
        "SELECT event_id, terminal_status, last_error_code FROM cms_source_terminal_processing"
        " WHERE event_id = 'e0'"
    ).fetchone()
    assert [type(item) for item in stored] == [str, str, str]
    kinds = {type(v) for row in table_dump(connection) for v in row if isinstance(v, str)}
    assert kinds == {str}
