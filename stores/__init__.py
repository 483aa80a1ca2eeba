"""Where records live: an in-memory reference store, SQLite, files and PostgreSQL."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
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
    from lifecycles._exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, globals(), __all__)
