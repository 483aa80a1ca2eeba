"""A stored record's values as they are, read without admitting them, for ``explain``.

A store's own reads admit a record only when it keeps every rule, so a broken record
is refused, never returned. ``explain`` must show exactly such records, so these
readers return the stored values themselves: a SQL row through the store's own column
decoders, a record file through the files store's reader when it trusts the file and
as plain JSON (with the store's finding) when it does not. Both only read.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

from lifecycles.stores._files import FilesStore, UntrustedRecord, printable_name
from lifecycles.stores._files.fs import UnfitEntry, read_entry
from lifecycles.stores._files.layout import file_name, stem_for
from lifecycles.stores._files.quarantine import material_of
from lifecycles.stores._sql import SQLStore


def sql_values(store: SQLStore[Any], key: str) -> dict[str, Any] | None:
    """The row under ``key`` as field values (decoded as the store decodes them, no
    rule checked), or ``None`` when there is none. Raises what the driver raises."""
    quote, schema = store.dialect.quote, store.schema
    statement = (
        f"SELECT {', '.join(map(quote, schema.column_names))} FROM {quote(schema.table)}"
        f" WHERE {quote(store.lifecycle.key_field)} = {store.dialect.param}"
    )
    store.check_schema()  # the statement is written from the schema verified at opening
    rows = store.run(statement, (key,))
    if not rows:
        return None
    values = dict(zip(schema.column_names, rows[0], strict=True))
    for column in schema.columns:
        _, decode = store.dialect.codec(column)
        values[column.name] = decode(values[column.name])
    return values


@attrs.frozen
class StoredEntry:
    """Where a files store holds a key, its values (``None``: not a JSON object at all),
    what the store finds wrong with it, and notes for the reader."""

    where: str
    status: str
    values: dict[str, Any] | None
    findings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def files_entry(store: FilesStore[Any], key: str) -> StoredEntry | None:
    """The entry under ``key``, where the store's own lookup finds it first (the status
    directories in search order, then quarantined material), or ``None``."""
    layout = store.layout
    name = file_name(key)
    with store.locked():
        places = [(status, name) for status in layout.search_order
                  if name in store.names(status)]
        quarantined = layout.quarantine_status
        if quarantined is not None:
            places += [(quarantined, material)
                       for material in material_of(store.names(quarantined), stem_for(key))]
        if not places:
            return None
        status, found = places[0]
        notes = [f"also stored: {layout.directory(other)}/{printable_name(n)}"
                 for other, n in places[1:]]
        if status == quarantined:
            notes += [f"quarantine reason: {entry.reason.get('reason')}"
                      for entry in store.quarantine_entries()
                      if entry.name == found and entry.reason is not None]
        where = f"{store.root / layout.directory(status)}/{printable_name(found)}"
        try:
            record = store.read_named(status, found)
        except UntrustedRecord as error:
            finding = f"{', '.join(error.rules)}: {error.detail}"
            return StoredEntry(where, status, _json_object(store, status, found),
                               (finding,), tuple(notes))
        values = None if record is None else store.values_of(record)
        return StoredEntry(where, status, values, (), tuple(notes))


def _json_object(store: FilesStore[Any], status: str, name: str) -> dict[str, Any] | None:
    """The file's JSON object, read as plain JSON (duplicate keys: the last wins), or
    ``None``; the store's lock is held, and no link is followed."""
    layout = store.layout
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    directory = os.open(store.root / layout.directory(status), flags)
    try:
        data = read_entry(directory, name, layout.max_file_bytes, layout.noun)
        value = json.loads(data.decode("utf-8")) if data is not None else None
    except (UnfitEntry, UnicodeError, ValueError, RecursionError):
        return None
    finally:
        os.close(directory)
    return value if isinstance(value, dict) else None


__all__ = ["StoredEntry", "files_entry", "sql_values"]
