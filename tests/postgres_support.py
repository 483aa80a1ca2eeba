"""PostgreSQL for the tests: the DSN switch and one throw-away schema per test.

Each test gets its own PostgreSQL schema (``lc_<random>``) and connections whose
``search_path`` points at it, so tests run in parallel without seeing each other's
tables, and the schema is dropped afterwards whatever happened.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import POSTGRES_DSN_VARIABLE

DSN = os.environ.get(POSTGRES_DSN_VARIABLE)
SKIP_REASON = (
    f"PostgreSQL tests need a server: set {POSTGRES_DSN_VARIABLE}"
    " (e.g. postgresql://postgres@127.0.0.1:5432/test)"
)
needs_postgres = pytest.mark.skipif(DSN is None, reason=SKIP_REASON)

Connect = Callable[..., Any]


def connect_in(schema: str, **options: Any) -> Any:
    """An autocommit connection whose search_path is ``schema`` (the store's expectation)."""
    import psycopg

    assert DSN is not None
    return psycopg.connect(
        DSN, autocommit=True, options=f"-c search_path={schema}", **options
    )


def create_schema(dsn: str | None = None) -> str:
    import psycopg

    dsn = dsn or DSN
    assert dsn is not None
    name = f"lc_{secrets.token_hex(6)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")  # name is ours: lc_ + hex
    return name


def drop_schema(name: str, dsn: str | None = None) -> None:
    import psycopg

    dsn = dsn or DSN
    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, dropped after the test."""
    if DSN is None:
        pytest.skip(SKIP_REASON)
    name = create_schema()
    try:
        yield name
    finally:
        drop_schema(name)


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
