"""PostgreSQL for the tests: the DSN switch and one throw-away schema per test.

Each test gets its own PostgreSQL schema (``lc_<random>``) and connections whose
``search_path`` points at it, so tests run in parallel without seeing each other's
tables, and the schema is dropped afterwards whatever happened.

Without ``LIFECYCLES_TEST_POSTGRES_DSN`` PostgreSQL tests skip through
:func:`require_postgres`. pytest's short summary (``-ra``) folds skips by (file, line,
reason), so skips raised from that one line are printed as one entry, with the reason
and how to enable the tests, instead of one line per test. That holds for a skip
raised at collection (a module-level call, as in test_postgres_store.py) or in a
test's body (test_conformance.py leaves its PostgreSQL pairs out and skips once). A
skip raised by a mark (:data:`needs_postgres`) or inside a fixture (``pg_schema``,
``pg_connect``) is reported at each test's own line instead: pytest does that so the
skipped test can be found; prefer :func:`require_postgres` or :func:`temporary_schema`
in the test's body.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import POSTGRES_DSN_VARIABLE

DSN = os.environ.get(POSTGRES_DSN_VARIABLE)
SKIP_REASON = (
    f"PostgreSQL tests need a server: set {POSTGRES_DSN_VARIABLE}"
    " (e.g. postgresql://postgres@127.0.0.1:5432/test)"
)
#: Skips a test without a server; reported at the test's own line (see above).
needs_postgres = pytest.mark.skipif(DSN is None, reason=SKIP_REASON)

Connect = Callable[..., Any]


def require_postgres() -> str:
    """The DSN; without one, skip the calling test (or module) with :data:`SKIP_REASON`.

    The one place a PostgreSQL test skips from, so the summary reports the reason once.
    """
    if DSN is None:
        pytest.skip(SKIP_REASON, allow_module_level=True)
    return DSN


def connect_in(schema: str, **options: Any) -> Any:
    """An autocommit connection whose search_path is ``schema`` (the store's expectation)."""
    import psycopg

    return psycopg.connect(
        require_postgres(), autocommit=True, options=f"-c search_path={schema}", **options
    )


def create_schema(dsn: str | None = None) -> str:
    import psycopg

    dsn = dsn or require_postgres()
    name = f"lc_{secrets.token_hex(6)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")  # name is ours: lc_ + hex
    return name


def drop_schema(name: str, dsn: str | None = None) -> None:
    import psycopg

    dsn = dsn or require_postgres()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@contextmanager
def temporary_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, dropped on exit; skips without a server.

    Called in a test's body, its skip is reported once with every other (module docstring).
    """
    name = create_schema(require_postgres())
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, dropped after the test."""
    with temporary_schema() as name:
        yield name


@pytest.fixture
def pg_connect(pg_schema: str) -> Iterator[Connect]:
    """Opens connections into the test's schema; closes them all afterwards."""
    opened: list[Any] = []

    def connect(**options: Any) -> Any:
        connection = connect_in(pg_schema, **options)
        opened.append(connection)
        return connection

    yield connect
    for connection in opened:
        connection.close()
