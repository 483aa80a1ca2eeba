"""lifecycles' monitor against the reference: the same answers to the same calls, and one
database file continued by either implementation.

The reference is imported from $LIFECYCLES_SEEDS (never copied). Answers that trigger the
reference's known defect are left to test_monitor_facade.py, where the fix is asserted.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.legacy_schema import NO_KEYS, build_sqlite, sqlite_state
from support.monitor import (
    CAPABILITIES,
    TABLE,
    ReaderError,
    answer,
    every_table,
    notification,
    plant,
)
from support.reference import require_reference

import lifecycles.monitor as lifecycles_monitor
from lifecycles.invariants.monitor import COLUMNS

reference = require_reference("terminal_processing_monitor")
CODE = "terminal_processing_monitor."
IMPLEMENTATIONS = {"reference": reference, "lifecycles": lifecycles_monitor}

ANSWER_KINDS = ("succeeded", "failed", "pending", "leased", "retry_wait")
READER_FAILURES = {
    "retryable": lambda: ReaderError("cms.timeout", True),
    "final": lambda: ReaderError("cms.denied", False),
    "uncoded": lambda: RuntimeError("boom"),
    "not_cms": lambda: ReaderError("cms.timeout", True, cms=False),
}
INVALID_ANSWERS: dict[str, Callable[[str, str], Any]] = {
    "wrong_schema": lambda e, s: answer(e, s, "pending", schema="other"),
    "wrong_caps": lambda e, s: answer(e, s, "pending", capabilities_sha256="f" * 64),
    "bad_attempts": lambda e, s: answer(e, s, "pending", attempts=5, max_attempts=3),
    "not_mapping": lambda e, s: ["pending"],
}


def reader_for(kind: str) -> Callable[[str, str], Any]:
    if kind in READER_FAILURES:
        failure = READER_FAILURES[kind]

        def failing(event_id: str, site_id: str) -> Any:
            raise failure()

        return failing
    if kind in INVALID_ANSWERS:
        return INVALID_ANSWERS[kind]
    return lambda event_id, site_id: answer(event_id, site_id, kind)


def masked(value: Any) -> Any:
    """A comparable view of a result: rows as dicts without the random lease token."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if hasattr(value, "keys") and not isinstance(value, dict):
        # Rows iterate over values, like sqlite3.Row: keys() is the only way to the names.
        return {k: value[k] for k in value.keys() if k != "lease_token"}  # noqa: SIM118
    return value


def call(monitor: Any, operation: tuple[Any, ...]) -> Any:
    """Apply one operation; an error becomes its code so both sides compare."""
    name, now, *arguments = operation
    try:
        if name == "register":
            index, max_failures = arguments
            return monitor.register(*notification(index), max_failures=max_failures, now=now)
        if name == "claim":
            worker, lease = arguments
            return masked(monitor.claim(worker, now=now, lease_seconds=lease))
        if name == "run_once":
            kind, worker, lease = arguments
            return monitor.run_once(reader_for(kind), worker, now=now, lease_seconds=lease)
        if name == "status":
            return monitor.status(f"e{arguments[0]}", now=now)
        if name == "health":
            return monitor.health(now=now)
    except Exception as error:  # both sides raise their own class: compare the code
        blocked = (
            reference.TerminalProcessingMonitorBlocked,
            lifecycles_monitor.TerminalProcessingMonitorBlocked,
        )
        kind = "blocked" if isinstance(error, blocked) else type(error).__name__
        return ("error", kind, getattr(error, "code", str(error)))
    raise AssertionError(name)


def as_tuple(value: Any) -> Any:
    """Dataclass results of either module compare by their fields, in order."""
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is None:
        return value
    return (type(value).__name__, *(getattr(value, name) for name in fields))


def dump(connection: sqlite3.Connection) -> list[tuple[Any, ...]]:
    rows = connection.execute("SELECT * FROM cms_source_terminal_processing ORDER BY event_id")
    names = [column[0] for column in rows.description]
    token = names.index("lease_token")
    return [tuple(v for i, v in enumerate(row) if i != token) for row in rows]


workers = st.sampled_from(["w1", "w2"])
leases = st.sampled_from([10, 600])
operations = st.one_of(
    st.tuples(st.just("register"), st.integers(0, 4), st.integers(1, 3)),
    st.tuples(st.just("claim"), workers, leases),
    st.tuples(
        st.just("run_once"),
        st.sampled_from([*ANSWER_KINDS, *READER_FAILURES, *INVALID_ANSWERS]),
        workers,
        leases,
    ),
    st.tuples(st.just("status"), st.integers(0, 4)),
    st.tuples(st.just("health")),
)
steps = st.lists(
    st.tuples(st.sampled_from([0, 1, 5, 11, 40, 700]), operations), min_size=1, max_size=40
)


@settings(max_examples=150)
@given(steps)
def test_lifecycles_answers_every_call_exactly_as_the_reference(
    sequence: list[tuple[int, tuple[Any, ...]]],
) -> None:
    monitors = {
        name: module.DurableTerminalProcessingMonitor(sqlite3.connect(":memory:"), CAPABILITIES)
        for name, module in IMPLEMENTATIONS.items()
    }
    now = 100
    for step, (elapsed, operation) in enumerate(sequence):
        now += elapsed
        results = {
            name: as_tuple(call(monitor, (operation[0], now, *operation[1:])))
            for name, monitor in monitors.items()
        }
        assert results["lifecycles"] == results["reference"], (step, operation)
    assert dump(monitors["lifecycles"].connection) == dump(monitors["reference"].connection)


def populate(module: ModuleType, path: Path) -> None:
    """Leave one item in every status, written by ``module``."""
    monitor = module.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(6):
        monitor.register(*notification(index), max_failures=2, now=100)
    kinds = ["succeeded", "failed", "pending", "retryable"]
    for kind in kinds:
        monitor.run_once(reader_for(kind), "w1", now=110, lease_seconds=600)
    monitor.claim("w2", now=112, lease_seconds=300)  # e3 waits until 115: e4 is leased
    monitor.connection.close()


def continue_with(module: ModuleType, path: Path) -> list[Any]:
    """Open ``path`` with ``module`` and drive it through every kind of step."""
    monitor = module.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    seen: list[Any] = [as_tuple(monitor.status(f"e{i}", now=130)) for i in range(6)]
    seen.append(as_tuple(monitor.health(now=130)))
    for now, kind in [(200, "succeeded"), (500, "final"), (900, "leased"), (2000, "failed")]:
        seen.append(as_tuple(call(monitor, ("run_once", now, kind, "w3", 600))))
    seen.append(as_tuple(monitor.health(now=5000)))
    seen.extend(as_tuple(monitor.status(f"e{i}", now=5000)) for i in range(6))
    seen.append(dump(monitor.connection))
    return seen


@pytest.mark.parametrize("writer", ["reference", "lifecycles"])
def test_a_database_written_by_either_is_continued_identically_by_both(
    tmp_path: Path, writer: str
) -> None:
    original = tmp_path / "written.db"
    populate(IMPLEMENTATIONS[writer], original)
    continued = {}
    for name, module in IMPLEMENTATIONS.items():
        copy = tmp_path / f"{name}.db"
        shutil.copy(original, copy)
        continued[name] = continue_with(module, copy)
    assert continued["lifecycles"] == continued["reference"]
    statuses = {status[5] for status in continued["lifecycles"][:6]}
    assert statuses == {"succeeded", "failed", "watching", "retry_wait", "leased", "pending"}


def test_both_create_the_same_schema(tmp_path: Path) -> None:
    schemas = {}
    for name, module in IMPLEMENTATIONS.items():
        connection = sqlite3.connect(tmp_path / f"{name}.db")
        opened = module.DurableTerminalProcessingMonitor(connection, CAPABILITIES)
        if name == "lifecycles":
            rules_indexes = list(opened.store.rule_queries().rules_indexes)
        schemas[name] = {
            table: [tuple(c) for c in connection.execute(f"PRAGMA table_info({table})")]
            for (table,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        }
        schemas[name]["indexes"] = [
            tuple(row) for row in connection.execute(
                "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' ORDER BY name"
            )
        ]
    # lifecycles adds indexes of its own (issue 12): the partial claim-order and
    # lease-expiry indexes, and the rules indexes (the rows breaking some rule).
    for own in ("cms_source_terminal_processing_claim_order",
                "cms_source_terminal_processing_lease_expiry", *rules_indexes):
        schemas["lifecycles"]["indexes"].remove((own, "cms_source_terminal_processing"))
    assert schemas["lifecycles"] == schemas["reference"]


def rules_index_names() -> set[str]:
    names = set(rules_queries().rules_indexes)
    assert names
    return names


def rules_queries() -> Any:
    """The monitor's rule statements on SQLite, as its store builds them."""
    connection = sqlite3.connect(":memory:")
    try:
        store = lifecycles_monitor.DurableTerminalProcessingMonitor(connection, CAPABILITIES).store
        return store.rule_queries()
    finally:
        connection.close()


def drive(monitor: Any, first: int, now: float) -> list[Any]:
    """Register two items, claim one, run one: what either monitor answers, comparable."""
    for index in (first, first + 1):
        monitor.register(*notification(index), max_failures=3, now=now)
    claimed = masked(monitor.claim("w1", now=now + 1, lease_seconds=60))
    outcome = monitor.run_once(reader_for("succeeded"), "w2", now=now + 2, lease_seconds=60)
    return [claimed, as_tuple(outcome), as_tuple(monitor.health(now=now + 3))]


def test_the_lifecycles_indexes_do_not_keep_either_from_the_database(tmp_path: Path) -> None:
    """lifecycles' partial claim-order and rules indexes are ignored by the reference,
    which opens and uses (register, claim, run_once, health) a database holding them, its
    writes keeping them current; lifecycles adds them to a database the reference
    created. Either order of openers answers the same."""
    own = {"cms_source_terminal_processing_claim_order", *rules_index_names()}
    answers = {}
    ours, theirs = "lifecycles", "reference"
    for order in ([ours, theirs, ours], [theirs, ours, theirs]):
        path = tmp_path / f"{order[0]}.db"
        answers[order[0]] = []
        for step, name in enumerate(order):
            connection = sqlite3.connect(path)
            monitor = IMPLEMENTATIONS[name].DurableTerminalProcessingMonitor(
                connection, CAPABILITIES
            )
            answers[order[0]].append(drive(monitor, 10 * step, 100.0 * (step + 1)))
            indexes = {n for (n,) in connection.execute("SELECT name FROM sqlite_master")}
            # Once lifecycles has opened the file they are there, whoever opens it next.
            held = own <= indexes if "lifecycles" in order[: step + 1] else not own & indexes
            assert held, (order, step, indexes)
            # The reference's rows are in the rules index exactly when they break a rule:
            # none do.
            assert tuple(connection.execute(
                f"SELECT count(*) FROM ({rules_queries().each_broken_row})"
            ).fetchone()) == (0,)
            connection.close()
    assert answers["lifecycles"] == answers["reference"]
    assert all(claimed is not None for claimed, _, _ in answers["lifecycles"])


def test_public_names_match_the_reference() -> None:
    for name in (
        "SCHEMA_VERSION", "STATUS_SCHEMA", "NOTIFICATION_SCHEMA", "NOTIFICATION_FIELDS",
        "STATUSES", "REMOTE_STATUSES", "TERMINAL_STATUSES",
    ):
        assert getattr(lifecycles_monitor, name) == getattr(reference, name), name
    for name in (
        "TerminalProcessingStatus", "TerminalProcessingOutcome", "TerminalProcessingHealth"
    ):
        ours = list(getattr(lifecycles_monitor, name).__dataclass_fields__)
        theirs = list(getattr(reference, name).__dataclass_fields__)
        assert ours == theirs, name
    import inspect

    for method in ("__init__", "register", "claim", "run_once", "status", "health"):
        ours_sig = inspect.signature(getattr(lifecycles_monitor.DurableTerminalProcessingMonitor,
                                             method))
        theirs_sig = inspect.signature(getattr(reference.DurableTerminalProcessingMonitor, method))
        assert list(ours_sig.parameters) == list(theirs_sig.parameters), method
        assert [p.default for p in ours_sig.parameters.values()] == [
            p.default for p in theirs_sig.parameters.values()
        ], method


@settings(max_examples=60)
@given(steps, st.lists(st.booleans(), min_size=40, max_size=40))
def test_one_database_shared_by_both_implementations_behaves_like_the_reference_alone(
    sequence: list[tuple[int, tuple[Any, ...]]], use_lifecycles: list[bool]
) -> None:
    """Each step is served by either implementation on one shared file; the answers and
    the final rows equal those of the reference serving every step on its own file."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        shared_path, alone_path = Path(directory, "shared.db"), Path(directory, "alone.db")
        shared = {
            name: module.DurableTerminalProcessingMonitor(
                sqlite3.connect(shared_path), CAPABILITIES
            )
            for name, module in IMPLEMENTATIONS.items()
        }
        alone = reference.DurableTerminalProcessingMonitor(
            sqlite3.connect(alone_path), CAPABILITIES
        )
        now = 100
        for step, ((elapsed, operation), ours) in enumerate(
            zip(sequence, use_lifecycles, strict=False)
        ):
            now += elapsed
            concrete = (operation[0], now, *operation[1:])
            served = shared["lifecycles" if ours else "reference"]
            got, expected = as_tuple(call(served, concrete)), as_tuple(call(alone, concrete))
            assert got == expected, (step, operation, "lifecycles" if ours else "reference")
        assert dump(shared["reference"].connection) == dump(alone.connection)


# --- the database changed under an open monitor --------------------------------------
# Another connection changes the schema or the meta row after both monitors opened; each
# implementation gets the same change on its own file and must answer the next call of
# every public method as the reference does, and leave the same rows. Dropping the meta
# table (or replacing it with a version-1 one) crashes the reference with a raw
# sqlite3.OperationalError: that difference is pinned in test_monitor_differences.py.

META = "cms_source_terminal_processing_meta"
SCHEMA_CHANGES: dict[str, list[str]] = {
    "add_column": [f"ALTER TABLE {TABLE} ADD COLUMN extra TEXT"],
    "rename_column": [f"ALTER TABLE {TABLE} RENAME COLUMN site_id TO site"],
    "drop_table": [f"DROP TABLE {TABLE}"],
    "rename_table": [f"ALTER TABLE {TABLE} RENAME TO {TABLE}_old"],
    "recreate_table_identical": [],  # the table's own CREATE statements, read from the file
    "delete_meta_row": [f"DELETE FROM {META}"],
    "rewrite_meta_version": ["PRAGMA ignore_check_constraints = ON",
                             f"UPDATE {META} SET schema_version = 3"],
    "rewrite_capabilities": [f"UPDATE {META} SET expected_capabilities_sha256 = '{'e' * 64}'"],
}
NEXT_CALLS: dict[str, tuple[Any, ...]] = {
    "register": ("register", 200, 5, 3),
    "claim": ("claim", 200, "w1", 600),
    "run_once": ("run_once", 200, "succeeded", "w1", 600),
    "status": ("status", 200, 0),
    "health": ("health", 200),
}


def opened_then_changed(module: ModuleType, path: Path, change: str) -> Any:
    monitor = module.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
    for index in range(2):
        monitor.register(*notification(index), now=100)
    plant(path, SCHEMA_CHANGES[change])
    return monitor


@pytest.mark.parametrize("method", NEXT_CALLS)
@pytest.mark.parametrize("change", SCHEMA_CHANGES)
def test_a_schema_or_meta_change_after_opening_is_answered_as_the_reference_does(
    tmp_path: Path, change: str, method: str
) -> None:
    answers, tables = {}, {}
    for name, module in IMPLEMENTATIONS.items():
        path = tmp_path / f"{name}.db"
        monitor = opened_then_changed(module, path, change)
        answers[name] = as_tuple(call(monitor, NEXT_CALLS[method]))
        tables[name] = every_table(path)
    assert answers["lifecycles"] == answers["reference"]
    assert tables["lifecycles"] == tables["reference"]
    if change != "recreate_table_identical":
        assert answers["reference"] == ("error", "blocked", CODE + "schema_altered")


# Invalid arguments on an altered database: the reference checks the schema first in
# register, claim and status (and so does lifecycles), the arguments first in health
# and in run_once's own reader and time checks.
BAD_CALLS: dict[str, Callable[[Any], Any]] = {
    "register_bad_time": lambda m: m.register(*notification(5), now=-1),
    "register_bad_notification": lambda m: m.register({}, "a" * 64, now=200),
    "claim_bad_worker": lambda m: m.claim("no spaces", now=200),
    "claim_bad_lease": lambda m: m.claim("w1", now=200, lease_seconds=0),
    "run_once_bad_reader": lambda m: m.run_once(None, "w1", now=200),
    "run_once_bad_time": lambda m: m.run_once(reader_for("pending"), "w1", now=-1),
    "run_once_bad_worker": lambda m: m.run_once(reader_for("pending"), "no spaces", now=200),
    "status_bad_event": lambda m: m.status("no spaces", now=200),
    "status_bad_time": lambda m: m.status("e0", now=-1),
    "health_bad_time": lambda m: m.health(now=-1),
}


@pytest.mark.parametrize("bad_call", BAD_CALLS)
def test_invalid_arguments_on_an_altered_database_get_the_references_code(
    tmp_path: Path, bad_call: str
) -> None:
    codes = {}
    for name, module in IMPLEMENTATIONS.items():
        monitor = opened_then_changed(module, tmp_path / f"{name}.db", "add_column")
        try:
            BAD_CALLS[bad_call](monitor)
        except Exception as error:  # both sides raise their own class: compare the code
            codes[name] = getattr(error, "code", type(error).__name__)
    assert codes["lifecycles"] == codes["reference"]


# --- a database made by hand or by an older tool ---------------------------------------
# Tables with the reference's columns and keys but none of its NOT NULL or CHECK
# constraints are accepted by both: every rule those constraints state is checked on every
# row read (and, by lifecycles, before every write). A table without its keys is refused
# by lifecycles alone: that difference is pinned in test_monitor_differences.py.

TABLE_COLUMNS = [name for name in COLUMNS if name != "lease_token"]  # as dump() reads them
KEYED_ONLY: dict[str, dict[str, Any]] = {
    "v1, untyped": {"version": 1, "typed": False},
    "v1, plain types": {"version": 1},
    "v2 with a row, untyped": {"version": 2, "typed": False, "rows": True},
    "v2 with a row, plain types, meta without CHECKs": {"version": 2, "rows": True},
}
KEYED_ONLY_STEPS: list[tuple[Any, ...]] = [
    *(("register", 100, index, 2) for index in range(4)),
    ("register", 101, 0, 2),  # again: idempotent
    ("run_once", 110, "succeeded", "w1", 600),
    ("run_once", 110, "retryable", "w1", 600),
    ("run_once", 110, "leased", "w1", 600),
    ("claim", 112, "w2", 300),
    *(("status", 130, index) for index in range(4)),
    ("health", 130),
    ("run_once", 500, "final", "w3", 600),
    ("run_once", 2000, "failed", "w3", 600),
    ("health", 5000),
]


@pytest.mark.parametrize("case", KEYED_ONLY)
def test_a_table_with_its_keys_but_no_other_constraints_is_continued_identically(
    tmp_path: Path, case: str
) -> None:
    original = tmp_path / "hand-made.db"
    build_sqlite(original, **KEYED_ONLY[case])
    seen: dict[str, list[Any]] = {}
    for name, module in IMPLEMENTATIONS.items():
        path = tmp_path / f"{name}.db"
        shutil.copy(original, path)
        monitor = module.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
        seen[name] = [as_tuple(call(monitor, step)) for step in KEYED_ONLY_STEPS]
        seen[name] += [dump(monitor.connection), every_table(path)[1]]  # rows, then the meta
    assert seen["lifecycles"] == seen["reference"]
    assert seen["reference"][-1] == (META, (1, 2, CAPABILITIES))
    # The steps took items through every status (status() answers, then the rows left).
    statuses = {result[5] for result in seen["reference"]
                if isinstance(result, tuple) and result[:1] == ("TerminalProcessingStatus",)}
    statuses |= {row[TABLE_COLUMNS.index("status")] for row in seen["reference"][-2]}
    assert statuses == {"pending", "leased", "watching", "retry_wait", "succeeded", "failed"}


# Refused by both, and changed by neither: the reference's answer comes first in its
# opening, before it writes anything.
REFUSED_BY_BOTH: dict[str, tuple[dict[str, Any], str]] = {
    "v1 with a row, no keys": ({"version": 1, "keys": NO_KEYS, "rows": True},
                               "legacy_unbound"),
    "v1 with a row, untyped, keys": ({"version": 1, "typed": False, "rows": True},
                                     "legacy_unbound"),
    "v1, an extra column": ({"version": 1, "extra_column": True}, "schema_altered"),
    "v1, an extra column, no keys": ({"version": 1, "extra_column": True, "keys": NO_KEYS},
                                     "schema_altered"),
    "v2, an extra column": ({"version": 2, "extra_column": True, "rows": True},
                            "schema_altered"),
}


@pytest.mark.parametrize("case", REFUSED_BY_BOTH)
def test_a_hand_made_database_both_refuse_is_refused_with_one_code_and_left_unchanged(
    tmp_path: Path, case: str
) -> None:
    shape, code = REFUSED_BY_BOTH[case]
    path = tmp_path / "hand-made.db"
    build_sqlite(path, **shape)
    before = sqlite_state(path)
    for module in IMPLEMENTATIONS.values():
        with pytest.raises(module.TerminalProcessingMonitorBlocked) as refused:
            module.DurableTerminalProcessingMonitor(sqlite3.connect(path), CAPABILITIES)
        assert refused.value.code == CODE + code
        assert sqlite_state(path) == before
