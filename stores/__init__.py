"""Where records live: an in-memory reference store, SQLite, files and PostgreSQL."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from lifecycles.stores.base import (
        CommitUncertain,
        SchemaMismatch,
        StaleRecord,
        Store,
        StoreDamaged,
        StoreError,
        StoreUnavailable,
        UniqueViolation,
    )
    from lifecycles.stores.files.store import FilesStore
    from lifecycles.stores.memory import MemoryStore
    from lifecycles.stores.postgres import PostgresStore
    from lifecycles.stores.sqlite import SQLiteStore

# Each public name and the module that defines it. Nothing is imported until a name is
# used, so importing the package loads no store and no driver (PostgresStore: psycopg).
_DEFINED_IN: dict[str, str] = {
    "CommitUncertain": "lifecycles.stores.base",
    "FilesStore": "lifecycles.stores.files.store",
    "MemoryStore": "lifecycles.stores.memory",
    "PostgresStore": "lifecycles.stores.postgres",
    "SQLiteStore": "lifecycles.stores.sqlite",
    "SchemaMismatch": "lifecycles.stores.base",
    "StaleRecord": "lifecycles.stores.base",
    "Store": "lifecycles.stores.base",
    "StoreDamaged": "lifecycles.stores.base",
    "StoreError": "lifecycles.stores.base",
    "StoreUnavailable": "lifecycles.stores.base",
    "UniqueViolation": "lifecycles.stores.base",
}

__all__ = [
    "CommitUncertain",
    "FilesStore",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "SchemaMismatch",
    "StaleRecord",
    "Store",
    "StoreDamaged",
    "StoreError",
    "StoreUnavailable",
    "UniqueViolation",
]

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__

    def __getattr__(name: str) -> "Any":
        """A public name, imported from the module that defines it on first use (PEP 562)."""
        module = _DEFINED_IN.get(name)
        if module is None:
            # Not public here; `from PACKAGE import submodule` then imports the submodule.
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
