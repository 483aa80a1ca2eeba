"""How record values cross into storage: one canonical JSON, one reading of type hints.

Shared by every store so that a record is rendered the same way wherever it lives.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from operator import attrgetter
from typing import Any

import attrs

from lifecycles.invariants._core import canonical_json

STRUCTURED = frozenset({dict, list, tuple, Mapping, Sequence})


def json_or_none(value: Any) -> str | None:
    """Canonical JSON text of ``value``; ``None`` stays ``None`` (a NULL column)."""
    return None if value is None else canonical_json(value).decode("utf-8")


def from_json_or_none(value: Any) -> Any:
    """The value of canonical JSON text; ``None`` stays ``None``."""
    return None if value is None else json.loads(value)


def as_is(value: Any) -> Any:
    return value


def union_members(hint: Any) -> tuple[Any, ...]:
    """The members of ``X | Y`` / ``Optional[X]``; any other hint (``dict[str, Any]``) is one."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def field_origins(record_type: type) -> dict[str, set[Any]]:
    """For each field of an attrs record, the base types its hint allows (``None`` left out)."""
    hints = typing.get_type_hints(record_type)
    return {
        field.name: {
            typing.get_origin(member) or member
            for member in union_members(hints.get(field.name, Any))
            if member is not type(None)
        }
        for field in attrs.fields(record_type)
    }


def plain(value: Any) -> Any:
    """Enum members (statuses) cross as their values, never as their names."""
    return value.value if isinstance(value, Enum) else value


def fields_encoder(
    fields: tuple[str, ...], encoders: Sequence[Callable[[Any], Any]],
) -> Callable[[Any], list[Any]]:
    """The column values of ``fields`` of a record, each through its encoder: one
    ``attrgetter`` per field list, so a statement's parameters cost no dict per write."""
    read = attrgetter(*fields)
    if len(fields) == 1:
        (encode,) = encoders
        return lambda record: [encode(read(record))]
    if all(encode is plain for encode in encoders):  # plain's test, without a call each
        return lambda record: [
            value.value if isinstance(value, Enum) else value for value in read(record)
        ]
    return lambda record: [
        encode(value) for encode, value in zip(encoders, read(record), strict=True)
    ]
