"""How a record becomes a file's bytes and back, and what makes stored bytes untrusted.

A record file is the canonical JSON of the record's values and a newline. Reading is
strict: the bytes must be UTF-8 JSON with no duplicate key and no ``NaN``, an object
with exactly the record's fields, each passing its field rule, every invariant true,
the status that of the directory the file sits in, and the file named after the key.
Anything else is :class:`UntrustedRecord`, naming the rule it breaks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import attrs

from lifecycles.invariants._core import FieldRuleViolation, InvariantViolation, canonical_json
from lifecycles.machines._core import Lifecycle
from lifecycles.stores._files.fs import UnfitEntry
from lifecycles.stores._files.layout import (
    SUFFIX,
    FilesLayout,
    is_quarantined_material_of,
    printable_name,
    stem_for,
)

R = TypeVar("R")

MAX_REASON_LENGTH = 1000


class UntrustedRecord(InvariantViolation):
    """A stored file is not a record this store can trust; ``rules`` name why.

    ``detail`` is a readable reason (it goes into the quarantine reason file);
    ``field`` and ``value`` are set when a single field broke its rule.
    """

    def __init__(
        self,
        code: str,
        rules: Sequence[str],
        detail: str,
        *,
        name: str,
        field: str | None = None,
        value: object = None,
        directory: str | None = None,
    ) -> None:
        super().__init__(code, rules)
        self.detail = detail
        self.name = name
        self.directory = directory
        self.field = field
        self.value = value
        self.args = (f"{code}: {', '.join(rules)}: {detail}",)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return value


def utc_now() -> str:
    """The time written into quarantine reason files (the store's own clock, not a machine's)."""
    return datetime.now(UTC).isoformat()


class RecordCodec(Generic[R]):
    """Bytes of one lifecycle's records, as the files store writes and reads them."""

    def __init__(
        self,
        lifecycle: Lifecycle[R, Any],
        layout: FilesLayout,
        values_of: Callable[[R], dict[str, Any]],
    ) -> None:
        self.lifecycle = lifecycle
        self.layout = layout
        self.values_of = values_of
        self.fields = frozenset(field.name for field in attrs.fields(lifecycle.record_type))  # type: ignore[arg-type]

    def encode(self, record: R) -> bytes:
        """The file's bytes: canonical JSON of the record's values, and a newline."""
        return canonical_json(self.values_of(record)) + b"\n"

    def untrusted(
        self, name: str, rule: str, detail: str, field: str | None = None, value: object = None
    ) -> UntrustedRecord:
        return UntrustedRecord(
            self.lifecycle.invariants.code, [rule], detail, name=name, field=field, value=value
        )

    def unfit(self, name: str, finding: UnfitEntry) -> UntrustedRecord:
        """The entry at ``name`` cannot hold a record at all (see :func:`fs.read_entry`)."""
        return self.untrusted(name, finding.rule, finding.detail)

    def decode(self, data: bytes, name: str, directory_status: str | None) -> R:
        """Turn a file's bytes into a trusted record, or raise :class:`UntrustedRecord`.

        ``directory_status`` is the status of the directory the file sits in; the
        record's status must equal it. ``name`` must be the record key's file name.
        """
        noun = self.layout.noun
        try:
            value = json.loads(
                data.decode("utf-8"), parse_constant=_reject_constant,
                object_pairs_hook=_unique_keys,
            )
        except (UnicodeError, ValueError, RecursionError) as error:
            raise self.untrusted(
                name, "record_decodes",
                f"cannot decode {noun} {printable_name(name)}: {type(error).__name__}",
            ) from None
        if not isinstance(value, dict):
            raise self.untrusted(name, "record_is_object", f"{noun} must be an object")
        if set(value) != self.fields:
            missing = sorted(self.fields - set(value))
            unknown = sorted(set(value) - self.fields)
            raise self.untrusted(
                name, "record_keys_exact",
                f"{noun} fields invalid: missing={missing} unknown={unknown}",
            )
        try:
            record = self.lifecycle.record_type(**value)
        except FieldRuleViolation as error:
            raise self.untrusted(
                name, error.rule, f"{noun} field {error.field} breaks {error.rule}",
                field=error.field, value=value.get(error.field),
            ) from None
        except (TypeError, ValueError) as error:
            raise self.untrusted(name, "record_shape", f"{noun} cannot be built: {error}") from None
        code = self.lifecycle.invariants.code
        broken = self.lifecycle.invariants.broken(record)
        if broken:
            raise UntrustedRecord(code, broken, f"{noun} breaks {', '.join(broken)}", name=name)
        status = str(self.lifecycle.status_of(record))
        if directory_status is not None and status != directory_status:
            raise UntrustedRecord(
                code, ["status_matches_directory"],
                f"{directory_status} directory contains state {status!r}",
                name=name, field=self.lifecycle.status_field, value=status,
                directory=directory_status,
            )
        expected = stem_for(self.lifecycle.key_of(record))
        if not (name == expected + SUFFIX or is_quarantined_material_of(name, expected)):
            raise self.untrusted(
                name, "file_name_matches_key",
                f"{noun} file name {printable_name(name)} does not match its key",
            )
        return record

    def reason_of(self, record: R) -> str:
        """Why a record in the quarantine status was set aside (its reason field)."""
        field = self.layout.reason_field
        reason = getattr(record, field) if field else None
        return str(reason) if reason else f"{self.layout.noun} quarantined"

    @staticmethod
    def reason_bytes(stem: str, reason: str, original_name: str | None = None) -> bytes:
        """The reason file: the reference's three keys, and ``original_name`` (escaped
        text) when the material's own name could not be kept as its stem."""
        reason_text = printable_name(" ".join(reason.split())[:MAX_REASON_LENGTH])
        document = {"entry_id": stem, "quarantined_at": utc_now(), "reason": reason_text}
        if original_name is not None:
            document["original_name"] = original_name
        return canonical_json(document) + b"\n"


__all__ = ["RecordCodec", "UntrustedRecord", "utc_now"]
