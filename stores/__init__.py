"""Where records live: an in-memory reference store, SQLite, files and PostgreSQL."""

# Not typing.TYPE_CHECKING: importing typing costs milliseconds nothing here needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from lifecycles.stores._base import (
        CommitUncertain,
        SchemaMismatch,
        StaleRecord,
        Store,
        StoreDamaged,
        StoreError,
        StoreUnavailable,
        UniqueViolation,
    )
    from lifecycles.stores._files.codec import UntrustedRecord
    from lifecycles.stores._files.store import FilesStore
    from lifecycles.stores._memory import MemoryStore
    from lifecycles.stores._sql_schema import SQLSchema
    from lifecycles.stores.postgres import PostgresStore
    from lifecycles.stores.sqlite import SQLiteStore

# Each public name and the module that defines it. Nothing is imported until a name is
# used, so importing the package loads no store and no driver (PostgresStore: psycopg).
_DEFINED_IN: dict[str, str] = {
    "CommitUncertain": "lifecycles.stores._base",
    "FilesStore": "lifecycles.stores._files.store",
    "MemoryStore": "lifecycles.stores._memory",
    "PostgresStore": "lifecycles.stores.postgres",
    "SQLSchema": "lifecycles.stores._sql_schema",
    "SQLiteStore": "lifecycles.stores.sqlite",
    "SchemaMismatch": "lifecycles.stores._base",
    "StaleRecord": "lifecycles.stores._base",
    "Store": "lifecycles.stores._base",
    "StoreDamaged": "lifecycles.stores._base",
    "StoreError": "lifecycles.stores._base",
    "StoreUnavailable": "lifecycles.stores._base",
    "UniqueViolation": "lifecycles.stores._base",
    "UntrustedRecord": "lifecycles.stores._files.codec",
}

__all__ = [
    "CommitUncertain",
    "FilesStore",
    "MemoryStore",
    "PostgresStore",
    "SQLSchema",
    "SQLiteStore",
    "SchemaMismatch",
    "StaleRecord",
    "Store",
    "StoreDamaged",
    "StoreError",
    "StoreUnavailable",
    "UniqueViolation",
    "UntrustedRecord",
]

if not TYPE_CHECKING:  # mypy sees the imports above, not a catch-all __getattr__
    from lifecycles._exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, globals(), __all__)
