"""The monitor's rules in SQL agree with the same rules in Python, row by row (issue 12
item 2), on its reference schema's column types.

The rendering itself is tested on a lifecycle made for it, whose record carries every
kind of rule (tests/stores/test_rules_in_sql.py, tests/support/rules_lifecycle.py); here
it is held on the rules the monitor declares and the tables the reference writes.

Every field rule and invariant of the monitor is declared once, as an expression
(:mod:`lifecycles.invariants._expressions`); its Python predicate is compiled from it and
:mod:`lifecycles.stores._sql_rules` renders its SQL form. Hypothesis writes rows raw into
a real database: valid records in every status with a few columns replaced by other
records' values or by hostile ones (NULL, text in numeric columns, booleans, huge and
negative numbers, integral floats, infinities, NaN, NUL characters, non-ASCII, blobs).
Then, for every row and every rule, the SQL form (evaluated by the database) and the
Python predicate (on the values as the store reads them, through the field's converter)
agree, and the SQL form is never NULL. Invariants are compared where Python reaches
them: on rows whose fields all hold.

The health statements themselves are then run on the same table: the broken rows, the
rows breaking each rule, and the first broken rows with the rules a read of each names,
all as Python finds them.

SQLite twice (the reference schema's column types, whose affinities convert some values
on the way in, and untyped columns, which keep every value as written), and PostgreSQL
(typed columns) when ``LIFECYCLES_TEST_POSTGRES_DSN`` is set.
"""

from __future__ import annotations

import math
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.monitor import CAPABILITIES, plain_row, records_in_every_status
from support.postgres import connect_in, temporary_schema

from lifecycles.invariants import InvariantViolation, build_record, field_rules
from lifecycles.invariants.monitor import (
    COLUMNS,
    MONITOR_INVARIANTS,
    STATE_INVALID,
    MonitorRecord,
)
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.schema import TABLE, MonitorSchema
from lifecycles.stores._postgres_dialect import PostgresDialect
from lifecycles.stores._sql_dialect import Dialect
from lifecycles.stores._sql_health import HealthQueries
from lifecycles.stores._sql_rules import BROKEN_ROWS_SHOWN
from lifecycles.stores.sqlite import SQLiteDialect

SCHEMA = MonitorSchema(CAPABILITIES)
KINDS = {column.name: column.kind for column in SCHEMA.columns}
FIELD_RULES = field_rules(MonitorRecord)
CONVERTERS = {field.name: field.converter for field in attrs.fields(MonitorRecord)}
INVARIANTS = list(MONITOR_INVARIANTS)
TEMPLATES = [plain_row(record) for record in records_in_every_status()]


def queries(dialect: Dialect) -> HealthQueries:
    return HealthQueries(MONITOR, SCHEMA, dialect, frozenset(SCHEMA.column_names))


def test_every_monitor_rule_has_an_sql_form_in_both_dialects() -> None:
    for dialect in (SQLiteDialect(), PostgresDialect()):
        found = queries(dialect)
        assert found.python_only == (), found.reasons
        assert len(found.field_checks) == len(FIELD_RULES)
        assert [c.invariant.name for c in found.invariant_checks] == [
            rule.name for rule in INVARIANTS
        ]


# --- values -------------------------------------------------------------------------

ODD_TEXT = [
    "", "5", "5.0", " 5", "1e3", "inf", "NaN", "-1", "99999999999999999999", "0x10",
    "a\x00b", "\x00", "é", "ab\n", "a b", "A" * 256, "A" * 257, "a" * 64, "f" * 64, "F" * 64,
    "0" * 63, "0" * 65, "a" * 128, "a" * 129, "pending", "Pending", "pending\x00", "pending ",
    "leased", "failed", "retry_wait", "succeeded", "watching", "published", "a.b", "_a", "A",
    "x:y-z.w_1", "[", "*", "?", "^", "]", "%", "'", "-", "1a", "a%b", "a*b", "a?b", "a[b",
    "a]b", "a^b", "ß", "\uff21", "a\x7f", "a/b", "a\\b",
]
ODD_NUMBERS: list[Any] = [
    0, 1, 2, 3, 20, 21, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 0.0, -0.0, 0.5, 1.0,
    5.0, 20.0, 1e300, 1.7976931348623157e308, -1e-300, math.inf, -math.inf, math.nan,
    True, False,
]
TEMPLATE_VALUES = sorted(
    {repr(value): value for row in TEMPLATES for value in row.values()}.values(), key=repr
)


def mutated(base: dict[str, Any], changes: dict[str, Any], index: int) -> dict[str, Any]:
    row = {**base, "event_id": f"e{index:03d}", "notification_id": f"n{index:03d}"}
    row.update(changes)
    return row


def rows_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Up to eight rows: valid records with up to three columns replaced."""
    changes = st.lists(
        st.tuples(st.sampled_from(TEMPLATES), st.dictionaries(
            st.sampled_from(COLUMNS), values, max_size=3
        )),
        min_size=1, max_size=8,
    )
    return changes.map(lambda drawn: [
        mutated(base, change, index) for index, (base, change) in enumerate(drawn)
    ])


SQLITE_VALUES = st.one_of(
    st.sampled_from(TEMPLATE_VALUES),
    st.sampled_from(ODD_TEXT),
    st.sampled_from(ODD_NUMBERS),
    st.none(),
    st.text(max_size=10),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.binary(max_size=6),
)


def postgres_values(kind: str) -> st.SearchStrategy[Any]:
    """What a typed PostgreSQL column can hold: no NUL in text, 32-bit integers."""
    if kind == "text":
        text = [value for value in TEMPLATE_VALUES if isinstance(value, str)]
        return st.one_of(
            st.sampled_from(text), st.sampled_from([t for t in ODD_TEXT if "\x00" not in t]),
            st.none(), st.text(st.characters(blacklist_characters="\x00"), max_size=10),
        )
    if kind == "integer":
        return st.one_of(
            st.sampled_from([0, 1, 3, 20, 21, -1, 2**31 - 1, -(2**31)]), st.none(),
            st.integers(-(2**31), 2**31 - 1),
        )
    return st.one_of(
        st.sampled_from([0.0, -0.0, 1.0, 999.0, 1000.0, 1e300, math.inf, -math.inf, math.nan]),
        st.none(), st.floats(),
    )


POSTGRES_ROWS = st.lists(
    st.tuples(
        st.sampled_from(TEMPLATES),
        st.sampled_from(COLUMNS).flatmap(
            lambda name: st.dictionaries(st.just(name), postgres_values(KINDS[name]), max_size=1)
        ),
        st.sampled_from(COLUMNS).flatmap(
            lambda name: st.dictionaries(st.just(name), postgres_values(KINDS[name]), max_size=1)
        ),
    ),
    min_size=1, max_size=8,
).map(lambda drawn: [
    mutated(base, {**first, **second}, index)
    for index, (base, first, second) in enumerate(drawn)
])


# --- what Python says -----------------------------------------------------------------


def python_field_verdicts(values: dict[str, Any]) -> list[bool]:
    """Each (field, rule) pair's verdict, as the record's validator decides it: on the value
    after the field's converter, ``None`` passing an optional rule."""
    verdicts = []
    for field, rule in FIELD_RULES:
        value = values[field]
        converter = CONVERTERS[field]
        if converter is not None:
            value = converter(value)  # type: ignore[operator]
        verdicts.append((value is None and rule.optional) or bool(rule.check(value)))
    return verdicts


def python_read(values: dict[str, Any]) -> tuple[str, ...]:
    """The rules a store's read of the row names (none: it reads)."""
    try:
        MONITOR.check(build_record(MonitorRecord, values, STATE_INVALID))
    except InvariantViolation as error:
        return error.rules
    return ()


# --- the comparison ---------------------------------------------------------------------

Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


def agree(found: HealthQueries, run: Run, written: int) -> None:
    """Compare, on the rows of the table ``run`` reads, every rule's two forms; then the
    health statements with what Python finds."""
    listed = ", ".join(found.dialect.quote(name) for name in COLUMNS)
    stored = run(f"SELECT {listed} FROM {TABLE} ORDER BY id", ())
    assert len(stored) == written
    checks = [c.sql for c in found.field_checks] + [c.sql for c in found.invariant_checks]
    verdicts = run(
        f"SELECT {', '.join(f'({sql})' for sql in checks)} FROM {TABLE} ORDER BY id", ()
    )
    breaking: dict[str, int] = {}  # rows breaking each rule, as Python counts them
    reads = []
    for values_row, sql_row in zip(stored, verdicts, strict=True):
        values = dict(zip(COLUMNS, values_row, strict=True))
        # A field rule's form is never NULL, an invariant's never on a row whose fields
        # hold (elsewhere Python does not reach it, and health does not count it).
        assert None not in sql_row[: len(FIELD_RULES)], (values, sql_row)
        sql_fields = [bool(v) for v in sql_row[: len(FIELD_RULES)]]
        sql_invariants = sql_row[len(FIELD_RULES):]
        fields = python_field_verdicts(values)
        for (field, rule), in_python, in_sql in zip(FIELD_RULES, fields, sql_fields, strict=True):
            assert in_python == in_sql, (field, rule.name, values[field])
        for name in {rule.name for (_, rule), ok in zip(FIELD_RULES, fields, strict=True)
                     if not ok}:
            breaking[name] = breaking.get(name, 0) + 1
        if all(fields):
            record = build_record(MonitorRecord, values, STATE_INVALID)
            for rule, in_sql in zip(INVARIANTS, sql_invariants, strict=True):
                assert in_sql is not None, (rule.name, values)
                assert bool(rule.holds(record)) == bool(in_sql), (rule.name, values)
                if not in_sql:
                    breaking[rule.name] = breaking.get(rule.name, 0) + 1
        reads.append((values["event_id"], python_read(values)))

    # The health statements, on this table.
    (aggregate,) = run(found.aggregate, (1000.0, 1000.0))
    assert aggregate[0] == written
    broken = sum(1 for _, rules in reads if rules)
    assert (aggregate[1] or 0) == broken
    # Where the table carries the rules indexes, they hold exactly those rows.
    held: set[Any] = set()
    for name, condition in found.rules_indexes.items():
        held |= {key for (key,) in run(
            f"SELECT id FROM {TABLE} INDEXED BY {found.dialect.quote(name)} WHERE {condition}",
            ())}
    if found.rules_indexes:
        assert len(held) == broken
    (per_rule,) = run(found.per_rule, ())
    names = [*found.field_rule_names, *found.invariant_names]
    assert {n: int(c) for n, c in zip(names, per_rule, strict=True) if c} == breaking
    keys = [key for key, _ in reads]
    if all(type(key) is str for key in keys) and len(set(keys)) == len(keys):
        named_by = dict(reads)
        ordered = [key for (key,) in run(f"SELECT event_id FROM {TABLE} ORDER BY event_id", ())]
        first = [key for key in ordered if named_by[key]][:BROKEN_ROWS_SHOWN]
        rules = dict.fromkeys(rule for key in first for rule in named_by[key])
        assert found._first_broken(run) == (tuple(first), tuple(rules))


# --- SQLite ---------------------------------------------------------------------------

SQLITE_CORNERS = [
    {"event_id": "a\x00b"}, {"site_id": b"site-1"}, {"poll_attempts": 5.0},
    {"poll_attempts": "5"}, {"max_failures": True}, {"created_at": math.inf},
    {"next_poll_at": "9e999"}, {"updated_at": math.nan}, {"failures": "99999999999999999999"},
    {"notification_sha256": "A" * 64}, {"last_error_code": "a" * 129},
    {"receiver_lease_expired": 1.0}, {"status": "pending\x00"}, {"lease_owner": "é"},
]


def sqlite_table(path: Path, typed: bool) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    types = SQLiteDialect.type_names
    columns = ", ".join(
        f"{column.name} {types[column.kind]}" if typed else column.name
        for column in SCHEMA.columns
    )
    connection.execute(f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, {columns})")
    for create_index in queries(SQLiteDialect()).create_rules_indexes:
        connection.execute(create_index)  # as the store does: the indexes must agree too
    return connection


@pytest.mark.parametrize("typed", [True, False], ids=["reference-types", "untyped"])
def test_sqlite_rules_agree_with_python_row_by_row(typed: bool) -> None:
    found = queries(SQLiteDialect())
    with tempfile.TemporaryDirectory() as folder:
        connection = sqlite_table(Path(folder) / "rules.db", typed)

        def run(statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(statement, params).fetchall()

        @given(rows_of(SQLITE_VALUES))
        @example([mutated(TEMPLATES[index % 6], change, index)
                  for index, change in enumerate(SQLITE_CORNERS)])
        def check(rows: list[dict[str, Any]]) -> None:
            connection.execute(f"DELETE FROM {TABLE}")
            connection.executemany(
                f"INSERT INTO {TABLE} ({', '.join(COLUMNS)})"
                f" VALUES ({', '.join('?' for _ in COLUMNS)})",
                [[row[name] for name in COLUMNS] for row in rows],
            )
            agree(found, run, len(rows))

        try:
            check()
        finally:
            connection.close()


def test_sqlite_corner_values_are_judged_as_python_reads_them() -> None:
    """A few values whose storage changes their verdict, spelled out."""
    with tempfile.TemporaryDirectory() as folder:
        typed = sqlite_table(Path(folder) / "typed.db", typed=True)
        untyped = sqlite_table(Path(folder) / "untyped.db", typed=False)
        found = queries(SQLiteDialect())
        sql = {f"{c.field}:{c.rule.name}": c.sql for c in found.field_checks}

        def verdict(connection: sqlite3.Connection, field: str, value: Any) -> bool:
            connection.execute(f"DELETE FROM {TABLE}")
            connection.execute(f"INSERT INTO {TABLE} ({field}) VALUES (?)", (value,))
            rule = next(rule for name, rule in FIELD_RULES if name == field)
            (result,) = connection.execute(
                f"SELECT {sql[f'{field}:{rule.name}']} FROM {TABLE}"
            ).fetchone()
            return bool(result)

        # An integral float is an integer in an INTEGER column (affinity), not in an untyped one.
        assert verdict(typed, "poll_attempts", 5.0) and not verdict(untyped, "poll_attempts", 5.0)
        # Numeric text becomes a number in a typed column; stays text in an untyped one.
        assert verdict(typed, "poll_attempts", "5") and not verdict(untyped, "poll_attempts", "5")
        assert verdict(typed, "next_poll_at", 1) and verdict(untyped, "next_poll_at", 1)
        for connection in (typed, untyped):
            assert not verdict(connection, "event_id", "a\x00b")  # SQLite's length stops at NUL
            assert not verdict(connection, "event_id", b"evt-1")  # a blob is no str
            assert not verdict(connection, "created_at", math.inf)
            assert verdict(connection, "failures", True)  # stored as 1, read back as 1
            assert not verdict(connection, "notification_sha256", "A" * 64)
        typed.close()
        untyped.close()


# --- PostgreSQL -------------------------------------------------------------------------


def test_postgres_rules_agree_with_python_row_by_row() -> None:
    found = queries(PostgresDialect())
    dialect = PostgresDialect()
    with temporary_schema() as schema:
        connection = connect_in(schema)
        columns = ", ".join(dialect.column_definition(column, False) for column in SCHEMA.columns)
        connection.execute(f"CREATE TABLE {TABLE} (id serial PRIMARY KEY, {columns})")

        def run(statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(statement, params or None).fetchall()  # type: ignore[no-any-return]

        @given(POSTGRES_ROWS)
        def check(rows: list[dict[str, Any]]) -> None:
            connection.execute(f"DELETE FROM {TABLE}")
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {TABLE} ({', '.join(dialect.quote(n) for n in COLUMNS)})"
                    f" VALUES ({', '.join('%s' for _ in COLUMNS)})",
                    [[row[name] for name in COLUMNS] for row in rows],
                )
            agree(found, run, len(rows))

        try:
            check()
        finally:
            connection.close()
