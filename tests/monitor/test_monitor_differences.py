"""Every behaviour in which lifecycles' monitor deliberately differs from the reference.

One test per difference; each runs both implementations and asserts what each does,
exactly, so that a difference can neither appear nor vanish unnoticed. Each docstring
says what differs and why. Everything else is held equal by test_monitor_compat.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.legacy_schema import KEYS, NO_KEYS, build_sqlite, sqlite_state
from support.monitor import (
    CAPABILITIES,
    AlwaysEqual,
    answer,
    canonical,
    notification,
    table_dump,
)
from support.reference import require_reference

import lifecycles.monitor as lifecycles_monitor

reference = require_reference("terminal_processing_monitor")
CODE = "terminal_processing_monitor."
TABLE = "cms_source_terminal_processing"
META = "cms_source_terminal_processing_meta"


def opened(module: Any, path: Path, count: int = 2, **options: Any) -> Any:
    """A monitor of ``module`` on ``path`` with items e0.. registered at t=100."""
    monitor = module.DurableTerminalProcessingMonitor(
        sqlite3.connect(path, **options), CAPABILITIES
    )
    for index in range(count):
        monitor.register(*notification(index), now=100)
    return monitor


def both(tmp_path: Path, **options: Any) -> tuple[Any, Any]:
    return (opened(reference, tmp_path / "reference.db", **options),
            opened(lifecycles_monitor, tmp_path / "lifecycles.db", **options))


def answered(action: Callable[[], Any]) -> Any:
    """The code a call was refused with, the exception type that escaped, or the result."""
    try:
        return action()
    except (reference.TerminalProcessingMonitorBlocked,
            lifecycles_monitor.TerminalProcessingMonitorBlocked) as error:
        return error.code
    except Exception as error:
        return type(error)


def row(monitor: Any, event_id: str) -> dict[str, Any]:
    cursor = monitor.connection.execute(f"SELECT * FROM {TABLE} WHERE event_id = ?", (event_id,))
    names = [column[0] for column in cursor.description]
    return dict(zip(names, cursor.fetchone(), strict=True))


def plant(monitor: Any, *statements: str) -> None:
    """Change the monitor's database through a connection of its own."""
    (path,) = [name for _, db, name in monitor.connection.execute("PRAGMA database_list")
               if db == "main"]
    other = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        other.execute(statement)
    other.close()


# --- the receiver's answer --------------------------------------------------------


@pytest.mark.parametrize("remote", ["failed", "retry_wait"])
def test_a_poison_answer_fails_its_item_instead_of_blocking_the_queue(
    tmp_path: Path, remote: str
) -> None:
    """An answer with ``processing_status`` failed or retry_wait and no error code.

    The reference stores it, although the stored row then breaks its own row rule, so
    the call itself and every later read of that item (and health, and claim once the
    item is due) raise ``state_invalid``: one bad answer blocks the queue. Lifecycles
    refuses any answer whose record would break an invariant: the item fails with
    ``response_invalid`` (final), nothing invalid is written, the queue goes on.
    """
    ref, ours = both(tmp_path)
    poison = lambda e, s: answer(e, s, remote, last_error_code=None)  # noqa: E731
    assert answered(lambda: ref.run_once(poison, "w1", now=200)) == CODE + "state_invalid"
    assert row(ref, "e0")["receiver_status"] == remote
    assert row(ref, "e0")["receiver_error_code"] is None
    assert answered(lambda: ref.status("e0", now=200)) == CODE + "state_invalid"
    assert answered(lambda: ref.health(now=200)) == CODE + "state_invalid"

    outcome = ours.run_once(poison, "w1", now=200)
    assert (outcome.status, outcome.error_code) == ("failed", CODE + "response_invalid")
    assert row(ours, "e0")["receiver_status"] is None
    assert ours.health(now=200).counts["failed"] == 1
    assert ours.claim("w1", now=200)["event_id"] == "e1"


def test_a_huge_integer_time_in_an_answer_is_response_invalid_not_a_reader_failure(
    tmp_path: Path,
) -> None:
    """A JSON answer carrying a 400-digit integer as a time.

    The reference crashes on it (``float()`` overflows inside its answer check) and
    records the crash as the reader's failure; lifecycles reads it as what it is, an
    invalid answer: ``response_invalid``. Both fail the item, with different codes.
    """
    ref, ours = both(tmp_path)
    huge = lambda e, s: answer(e, s, "pending", next_attempt_at=10**400)  # noqa: E731
    assert ref.run_once(huge, "w1", now=200).error_code == CODE + "reader_failure"
    assert ours.run_once(huge, "w1", now=200).error_code == CODE + "response_invalid"


class Exploding:
    """Any comparison of it raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("compared")

    __hash__ = object.__hash__


class LyingInt(int):
    """Holds one integer but claims to be within every bound."""

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True


def test_a_value_of_the_wrong_kind_in_an_answer_is_response_invalid(tmp_path: Path) -> None:
    """Answer values that are not the plain type the field holds.

    The reference compares them with their own methods: a value whose comparison
    raises is recorded as the reader's failure (with the raised error's code, if it
    has one); a ``str`` or ``int`` subclass that lies about equality or order is
    believed, so an answer about another event is accepted, and a lying number is
    stored and then blocks the item with ``state_invalid``. Lifecycles reads each
    value as the plain value it holds and never runs its methods: all three are
    ``response_invalid``, and nothing of them is stored.
    """
    cases = {
        "raising": ({"schema": Exploding()}, CODE + "reader_failure"),
        "other_event": ({"event_id": AlwaysEqual("e9", "e0")}, None),
        "lying_number": ({"attempts": LyingInt(50)}, CODE + "state_invalid"),
    }
    for name, (fields, reference_answer) in cases.items():
        (tmp_path / name).mkdir()
        ref, ours = both(tmp_path / name)
        reader = lambda e, s, f=fields: {**answer(e, s, "succeeded"), **f}  # noqa: E731
        got = answered(lambda ref=ref, reader=reader: ref.run_once(reader, "w1", now=200))
        if reference_answer is None:  # accepted: the item succeeded on a foreign answer
            assert got.status == "succeeded", name
        elif reference_answer == CODE + "state_invalid":
            assert got == reference_answer, name
            assert row(ref, "e0")["receiver_attempts"] == 50
        else:
            assert got.error_code == reference_answer, name
        outcome = ours.run_once(reader, "w1", now=200)
        assert (outcome.status, outcome.error_code) == ("failed", CODE + "response_invalid"), name
        assert row(ours, "e0")["receiver_status"] is None, name


class CodeRaises(Exception):
    @property
    def code(self) -> str:
        raise RuntimeError("no code")


def test_a_reader_error_whose_attributes_raise_is_a_reader_failure(tmp_path: Path) -> None:
    """A reader exception whose ``code`` property itself raises.

    The reference lets that second exception escape ``run_once`` and leaves the item
    leased until its lease expires; lifecycles records a final ``reader_failure``:
    the error says nothing that can be trusted, and the item is never left leased.
    """
    ref, ours = both(tmp_path)

    def reader(event_id: str, site_id: str) -> Any:
        raise CodeRaises("read failed")

    assert answered(lambda: ref.run_once(reader, "w1", now=200)) is RuntimeError
    assert row(ref, "e0")["status"] == "leased"
    outcome = ours.run_once(reader, "w1", now=200)
    assert (outcome.status, outcome.error_code) == ("failed", CODE + "reader_failure")
    assert row(ours, "e0")["lease_owner"] is None


# --- the caller's input --------------------------------------------------------------


def test_a_terminal_status_that_is_a_list_or_object_is_notification_invalid(
    tmp_path: Path,
) -> None:
    """A notification whose ``terminal_status`` is a JSON list or object.

    The reference tests it for membership in a set and crashes with ``TypeError:
    unhashable type``; lifecycles refuses it as ``notification_invalid``.
    """
    ref, ours = both(tmp_path)
    for status in (["published"], {"published": True}):
        value, sha = notification(7, terminal_status=status)
        assert answered(lambda v=value, s=sha: ref.register(v, s, now=200)) is TypeError
        assert answered(lambda v=value, s=sha: ours.register(v, s, now=200)) == (
            CODE + "notification_invalid"
        )


def test_a_lying_str_subclass_is_judged_by_what_it_holds(tmp_path: Path) -> None:
    """A ``terminal_status`` that claims to equal ``published`` but holds ``bogus``.

    The reference believes its ``__eq__`` and ``__hash__``, stores ``bogus``, and from
    then on claim and health raise ``state_invalid``: the queue is blocked. Lifecycles
    reads the string it holds (``bogus``), refuses it as ``notification_invalid`` and
    stores nothing. (An honest ``StrEnum`` member is accepted by both.)
    """
    ref, ours = both(tmp_path)
    value = {**notification(7)[0], "terminal_status": AlwaysEqual("bogus", "published")}
    sha = canonical(value)
    assert answered(lambda: ref.register(value, sha, now=200)) == CODE + "state_invalid"
    assert row(ref, "e7")["terminal_status"] == "bogus"
    assert answered(lambda: ref.health(now=200)) == CODE + "state_invalid"

    before = table_dump(ours.connection)
    assert answered(lambda: ours.register(value, sha, now=200)) == CODE + "notification_invalid"
    assert table_dump(ours.connection) == before
    assert ours.health(now=200).status == "ok"


def test_a_notification_whose_own_methods_raise_is_notification_invalid(
    tmp_path: Path,
) -> None:
    """A notification (a dict subclass) whose ``__getitem__`` or ``__iter__`` raises.

    The reference lets the exception escape ``register``; lifecycles reads the
    notification once, and any failure while reading it is ``notification_invalid``.
    """
    ref, ours = both(tmp_path)
    value, sha = notification(7)
    for method in ("__getitem__", "__iter__"):
        def explode(self: Any, *args: Any, _method: str = method) -> Any:
            raise RuntimeError(_method)

        hostile = type("Hostile", (dict,), {method: explode})(value)
        assert answered(lambda h=hostile: ref.register(h, sha, now=200)) is RuntimeError
        assert answered(lambda h=hostile: ours.register(h, sha, now=200)) == (
            CODE + "notification_invalid"
        )


def test_a_time_no_float_can_hold_is_time_invalid(tmp_path: Path) -> None:
    """``now`` given as a 400-digit integer.

    The reference crashes with ``OverflowError`` (its ``float()`` overflows);
    lifecycles refuses it as ``time_invalid``, as any other time that is not a finite
    number of seconds a float can hold.
    """
    ref, ours = both(tmp_path)
    for call in (lambda m: m.status("e0", now=10**400), lambda m: m.health(now=10**400),
                 lambda m: m.claim("w1", now=10**400)):
        assert answered(lambda c=call: c(ref)) is OverflowError
        assert answered(lambda c=call: c(ours)) == CODE + "time_invalid"


# --- what is read from the database ---------------------------------------------------


def test_a_broken_stored_row_is_state_invalid_before_a_register_collision(
    tmp_path: Path,
) -> None:
    """Registering a different notification under the event id of a broken stored row.

    The reference compares only the identity columns and answers
    ``idempotency_collision``; lifecycles reads the stored record through every rule
    first and answers ``state_invalid``, naming the broken rule and the event id, so
    the damage is reported where it is met. A repeat of the same notification is
    ``state_invalid`` in both.
    """
    ref, ours = both(tmp_path)
    for monitor in (ref, ours):
        monitor.connection.execute(f"UPDATE {TABLE} SET updated_at = 1 WHERE event_id = 'e1'")
        monitor.connection.commit()
    other, other_sha = notification(1, site_id="site-2")
    assert answered(lambda: ref.register(other, other_sha, now=200)) == (
        CODE + "idempotency_collision"
    )
    refused = answered(lambda: ours.register(other, other_sha, now=200))
    assert refused == CODE + "state_invalid"
    with pytest.raises(lifecycles_monitor.StateInvalid) as caught:
        ours.register(other, other_sha, now=200)
    assert caught.value.rules == ("updated_not_before_created",)
    assert caught.value.event_ids == ("e1",)
    for monitor in (ref, ours):
        assert answered(lambda m=monitor: m.register(*notification(1), now=200)) == (
            CODE + "state_invalid"
        )


@pytest.mark.parametrize(
    ("column", "value", "rule"),
    [
        ("lease_owner", "no spaces allowed", "token_syntax"),
        ("lease_expires_at", -5.0, "time_finite_non_negative"),
        ("receiver_attempts", "three", "integer_type"),  # beside no receiver status
    ],
)
def test_stored_fields_the_reference_ignores_are_still_read_strictly(
    tmp_path: Path, column: str, value: Any, rule: str
) -> None:
    """A stored value the reference never looks at in its context.

    While an item is leased the reference checks only that lease owner, token and
    expiry are present; while it has no receiver status it ignores the receiver
    fields. Lifecycles builds every stored record through its field rules (token
    syntax, finite non-negative times, integer types), so a malformed value is
    ``state_invalid`` naming its rule wherever it is read.
    """
    ref, ours = both(tmp_path)
    for monitor in (ref, ours):
        if column.startswith("lease"):
            monitor.claim("w1", now=200)
        monitor.connection.execute(
            f"UPDATE {TABLE} SET {column} = ? WHERE event_id = 'e0'", (value,)
        )
        monitor.connection.commit()
    assert ref.status("e0", now=200).event_id == "e0"
    with pytest.raises(lifecycles_monitor.StateInvalid) as caught:
        ours.status("e0", now=200)
    assert caught.value.rules == (rule,)


# --- the database under an open monitor ------------------------------------------------


@pytest.mark.parametrize("change", ["drop_meta_table", "legacy_meta_table"])
def test_a_meta_table_dropped_or_replaced_after_opening_is_schema_altered(
    tmp_path: Path, change: str
) -> None:
    """Another connection drops the meta table, or replaces it with a version-1 one.

    The reference's per-call schema check selects from the meta table and crashes
    with a raw ``sqlite3.OperationalError`` (no such table / column); lifecycles
    answers ``schema_altered``, as for every other change to the schema or meta row,
    and lets no ``sqlite3`` exception out of a public method.
    """
    statements = {
        "drop_meta_table": [f"DROP TABLE {META}"],
        "legacy_meta_table": [
            f"DROP TABLE {META}",
            f"CREATE TABLE {META} (singleton INTEGER PRIMARY KEY, schema_version INTEGER)",
            f"INSERT INTO {META} VALUES (1, 1)",
        ],
    }[change]
    ref, ours = both(tmp_path)
    for monitor in (ref, ours):
        plant(monitor, *statements)
    calls: list[Callable[[Any], Any]] = [
        lambda m: m.register(*notification(5), now=200), lambda m: m.claim("w1", now=200),
        lambda m: m.status("e0", now=200), lambda m: m.health(now=200),
    ]
    for call in calls:
        assert answered(lambda c=call: c(ref)) is sqlite3.OperationalError
        assert answered(lambda c=call: c(ours)) == CODE + "schema_altered"


def test_a_schema_change_while_the_reader_runs_writes_nothing(tmp_path: Path) -> None:
    """Another connection rebinds the database's capabilities while the reader runs.

    The reference writes the answer into the altered database and only then refuses
    (``schema_altered`` from the status read that ends ``run_once``). Lifecycles checks
    the schema inside the transaction that would write the answer, refuses with the
    same code before writing, and leaves the item leased (its lease expires as usual).
    """
    ref, ours = both(tmp_path)
    for monitor in (ref, ours):
        def reader(event_id: str, site_id: str, m: Any = monitor) -> Any:
            plant(m, f"UPDATE {META} SET expected_capabilities_sha256 = '{'e' * 64}'")
            return answer(event_id, site_id, "succeeded")

        assert answered(lambda r=reader, m=monitor: m.run_once(r, "w1", now=200)) == (
            CODE + "schema_altered"
        )
    assert row(ref, "e0")["status"] == "succeeded"
    assert row(ours, "e0")["status"] == "leased"


def test_a_locked_or_closed_database_is_database_unreachable(tmp_path: Path) -> None:
    """The database is locked by another connection past the timeout, or the
    monitor's connection was closed.

    The reference lets ``sqlite3.OperationalError`` (database is locked) and
    ``sqlite3.ProgrammingError`` (closed database) escape; lifecycles maps every
    ``sqlite3`` error to a code: these two are ``database_unreachable``.
    """
    ref, ours = both(tmp_path, timeout=0.05)
    for monitor, path in ((ref, tmp_path / "reference.db"), (ours, tmp_path / "lifecycles.db")):
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            got = answered(lambda m=monitor: m.claim("w1", now=200))
        finally:
            holder.execute("ROLLBACK")
        if monitor is ref:
            assert got is sqlite3.OperationalError
        else:
            assert got == CODE + "database_unreachable"
        monitor.connection.close()
        got = answered(lambda m=monitor: m.status("e0", now=200))
        assert got == (sqlite3.ProgrammingError if monitor is ref
                       else CODE + "database_unreachable")


def test_a_database_locked_past_the_timeout_at_construction_is_database_unreachable(
    tmp_path: Path,
) -> None:
    """Another connection holds the write lock while a monitor opens the file.

    The reference's constructor lets ``sqlite3.OperationalError`` (database is locked)
    escape. Lifecycles raises ``database_unreachable`` (``outcome_unknown`` false), and
    nothing is created in the file: the constructor is an entry point like any other.
    """
    for module in (reference, lifecycles_monitor):
        path = tmp_path / f"{module.__name__}.db"
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            got = answered(lambda m=module, p=path: m.DurableTerminalProcessingMonitor(
                sqlite3.connect(p, timeout=0.05), CAPABILITIES))
        finally:
            holder.execute("ROLLBACK")
        assert got == (sqlite3.OperationalError if module is reference
                       else CODE + "database_unreachable")
        assert holder.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_a_lease_left_by_a_failed_write_is_taken_up_by_the_workers_next_call(
    tmp_path: Path,
) -> None:
    """``run_once``'s completion fails: the database is locked past the timeout.

    The item stays leased to the worker in both. The reference's next ``run_once`` by
    that worker claims the next item and leaves this one leased, stranded until its
    lease expires (and counted as a failure then). Lifecycles keeps the lease as a doubt
    of that worker (so it does for a claim whose commit's answer was lost:
    tests/monitor/test_monitor_uncertain_commit.py), and the worker's next call polls
    that very lease again, same token, at least once as after a crash.
    """
    ref, ours = both(tmp_path, timeout=0.05)
    for monitor, path in ((ref, tmp_path / "reference.db"), (ours, tmp_path / "lifecycles.db")):
        holder = sqlite3.connect(path, isolation_level=None)

        def locking(event_id: str, site_id: str, holder: Any = holder) -> Any:
            holder.execute("BEGIN IMMEDIATE")  # held while the answer is written
            return answer(event_id, site_id, "succeeded")

        try:
            failed = answered(lambda m=monitor, r=locking: m.run_once(r, "w1", now=200))
        finally:
            holder.execute("ROLLBACK")
        assert failed == (sqlite3.OperationalError if monitor is ref
                          else CODE + "database_unreachable")
        token = row(monitor, "e0")["lease_token"]
        assert row(monitor, "e0")["status"] == "leased" and token is not None
        asked: list[str] = []

        def reader(event_id: str, site_id: str, asked: list[str] = asked) -> Any:
            asked.append(event_id)
            return answer(event_id, site_id, "succeeded")

        outcome = monitor.run_once(reader, "w1", now=201)
        if monitor is ref:
            assert asked == ["e1"] and outcome.event_id == "e1"
            assert (row(ref, "e0")["status"], row(ref, "e0")["lease_token"]) == ("leased", token)
        else:
            assert asked == ["e0"] and outcome.event_id == "e0"
            assert (row(ours, "e0")["status"], row(ours, "e1")["status"]) == (
                "succeeded", "pending")


# --- a database made by hand or by an older tool ---------------------------------------

KEYLESS: dict[str, dict[str, Any]] = {
    "v1, untyped, no keys": {"version": 1, "typed": False, "keys": NO_KEYS},
    "v1, plain types, no keys": {"version": 1, "keys": NO_KEYS},
    "v1, no UNIQUE notification_id": {"version": 1, "keys": {"event_id"}},
    "v1, no PRIMARY KEY event_id": {"version": 1, "keys": {"notification_id"}},
    "v2 with a row, plain types, no keys": {"version": 2, "keys": NO_KEYS, "rows": True},
}


@pytest.mark.parametrize("case", KEYLESS)
def test_a_table_without_its_keys_is_refused_unchanged_where_the_reference_goes_on(
    tmp_path: Path, case: str
) -> None:
    """The processing table has the reference's columns but lacks its keys (event_id
    PRIMARY KEY, notification_id UNIQUE), as a hand-made table or an older tool's would.

    The reference checks column names only: it migrates a version-1 database (meta table
    replaced and bound, its index created) and goes on, but its guarantees are gone with
    the keys: without the UNIQUE it registers a second event under one notification id,
    the collision its own schema refuses; without the key nothing keeps one row per
    event. Lifecycles decides when it opens, before changing anything: ``schema_altered``,
    the file left byte for byte as it was, and a cause that names the missing keys and
    the statement that adds them (the CLI prints it). It used to migrate the file, then
    refuse every register (its insert needs the key).
    """
    shape = KEYLESS[case]
    path = tmp_path / "hand-made.db"
    build_sqlite(path, **shape)
    before = sqlite_state(path)
    with pytest.raises(lifecycles_monitor.StorageBlocked) as refused:
        lifecycles_monitor.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    assert refused.value.code == CODE + "schema_altered"
    missing = sorted(KEYS - set(shape["keys"]))
    assert f"{TABLE} does not keep {' or '.join(missing)} unique" in str(refused.value.__cause__)
    assert sqlite_state(path) == before

    # The reference, on the same file.
    (table_sql,) = [sql for _, name, _, sql in before[2] if name == TABLE]
    ref = reference.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    connection = ref.connection
    assert [tuple(r) for r in connection.execute(f"SELECT * FROM {META}")] == [
        (1, 2, CAPABILITIES)
    ]
    assert connection.execute(
        f"SELECT sql FROM sqlite_master WHERE name = '{TABLE}'"
    ).fetchone()[0] == table_sql  # the table stays without its keys
    assert connection.execute(
        f"SELECT 1 FROM sqlite_master WHERE name = '{TABLE}_due'"
    ).fetchone() is not None
    ref.register(*notification(0), now=100)
    collision = answered(
        lambda: ref.register(*notification(1, notification_id="n0"), now=100).status
    )
    stored = connection.execute(
        f"SELECT event_id FROM {TABLE} WHERE notification_id = 'n0' ORDER BY 1"
    ).fetchall()
    if "notification_id" in missing:
        assert (collision, [tuple(r) for r in stored]) == ("pending", [("e0",), ("e1",)])
    else:
        assert (collision, [tuple(r) for r in stored]) == (sqlite3.IntegrityError, [("e0",)])
    outcome = ref.run_once(lambda e, s: answer(e, s, "succeeded"), "w1", now=200)
    assert outcome is not None and outcome.status == "succeeded"


def test_a_meta_table_without_its_key_is_refused_unchanged_where_the_reference_breaks_it(
    tmp_path: Path,
) -> None:
    """A version-2 meta table bound to the right capabilities, but with no key on
    ``singleton``.

    Both refuse it with ``schema_altered``. The reference first commits a second binding
    row (its ``INSERT OR IGNORE`` has no key to ignore on), so from then on it refuses the
    file on every opening; lifecycles refuses before writing, and the file is as it was.
    """
    path = tmp_path / "hand-made.db"
    build_sqlite(path, version=2, meta_keyed=False)
    before = sqlite_state(path)
    opening = {
        module: (lambda m=module: m.DurableTerminalProcessingMonitor(
            sqlite3.connect(path), CAPABILITIES))
        for module in (lifecycles_monitor, reference)
    }
    assert answered(opening[lifecycles_monitor]) == CODE + "schema_altered"
    assert sqlite_state(path) == before
    assert answered(opening[reference]) == CODE + "schema_altered"
    connection = sqlite3.connect(path)
    assert connection.execute(f"SELECT * FROM {META}").fetchall() == [
        (1, 2, CAPABILITIES), (1, 2, CAPABILITIES)
    ]
    connection.close()
    assert answered(opening[reference]) == CODE + "schema_altered"


def test_a_table_rebuilt_without_its_keys_under_an_open_monitor_is_schema_altered(
    tmp_path: Path,
) -> None:
    """Another connection rebuilds the processing table without its keys, rows copied
    (what a tool that "cleans up" a table by hand may do), while both monitors are open.

    The reference checks column names only and goes on: it then registers a second event
    under one notification id. Lifecycles sees the catalogue change on its next call,
    checks the keys again and refuses with ``schema_altered``, writing nothing.
    """
    rebuild = [
        f"CREATE TABLE copy AS SELECT * FROM {TABLE}", f"DROP TABLE {TABLE}",
        f"ALTER TABLE copy RENAME TO {TABLE}",
    ]
    ref, ours = both(tmp_path)
    for monitor in (ref, ours):
        plant(monitor, *rebuild)
    collide = notification(5, notification_id="n0")
    assert answered(lambda: ref.register(*collide, now=200).status) == "pending"
    before = table_dump(ours.connection)
    for call in (lambda: ours.register(*collide, now=200), lambda: ours.claim("w1", now=200),
                 lambda: ours.status("e0", now=200), lambda: ours.health(now=200)):
        assert answered(call) == CODE + "schema_altered"
    assert table_dump(ours.connection) == before
