"""Durable, idempotent close-evidence outbox: the drop-in for the reference ``close_outbox``.

Same public names, signatures, exceptions and messages, the same default state
directory and the same on-disk layout and record bytes, so a directory written by
the reference is read and continued here and the other way round. Underneath, the
outbox is the :data:`~lifecycles.machines.outbox.OUTBOX` lifecycle on a
:class:`~lifecycles.stores._files.FilesStore`: every change of a record is a row of
its table, and every rule is a named rule of :mod:`lifecycles.invariants.outbox`.

Delivery is at-least-once: the attempt is durably recorded before ``deliver`` is
called, so a crash during delivery causes another attempt, never a lost intent.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from lifecycles._worker_steps import ExclusiveWork
from lifecycles.invariants._core import FieldRule, canonical_json
from lifecycles.invariants.outbox import (
    MAX_ERROR_LENGTH,
    MAX_RECORD_FILE_BYTES,
    OUTBOX_VERSION,
    JsonRuleViolation,
    OutboxRecord,
    OutboxStatus,
    action_known,
    bounded_json,
    complete_carries_no_error_or_reopen,
    describe,
    entry_id_for,
    error_is_text,
    error_length_bound,
    error_text_normalised,
    fail_carries_error,
    intent_digest,
    intent_within_payload_bound,
    normalise_text,
    reopen_is_boolean,
    result_is_object,
    run_id_syntax,
    transaction_id_syntax,
    version_supported,
)
from lifecycles.machines._audit import PublicError, PublicErrors
from lifecycles.machines._declaration import LifecycleError, TransitionRefused
from lifecycles.machines.outbox import (
    CONFLICT,
    CONFLICT_REASON,
    OUTBOX,
    CopyFate,
    OutboxInputs,
    finish_delivery,
    identity_quarantined,
    pending_copy_fate,
    replay_was_interrupted,
)
from lifecycles.stores._base import StoreError
from lifecycles.stores._files import (
    FilesDamaged,
    FilesLayout,
    FilesStore,
    Reentered,
    StoreMissing,
    UnsafePath,
    UntrustedRecord,
)

STATE_DIR_VARIABLE = "REIN_AHARNESS_STATE_DIR"
OUTBOX_DIRECTORY = "close-outbox"

# The reference's layout: pending/ and delivered/ hold <entry_id>.json; the
# quarantine/ directory holds material and reason files; delivered is looked up first.
OUTBOX_LAYOUT = FilesLayout(
    directories={"pending": "pending", "delivered": "delivered", "quarantined": "quarantine"},
    search_order=("delivered", "pending"),
    quarantine_directory="quarantine",
    quarantine_status="quarantined",
    reason_field="last_error",
    lock_name=".lock",
    max_file_bytes=MAX_RECORD_FILE_BYTES,
    noun="outbox record",
)


# --- errors ------------------------------------------------------------------------


class CloseOutboxError(RuntimeError, LifecycleError):
    """Base error for invalid records or durable outbox operations.

    A ``RuntimeError``, as in the reference, and a
    :class:`~lifecycles.machines._declaration.LifecycleError`, so that one ``except
    LifecycleError`` catches every error of lifecycles; ``code`` is stable.
    """

    code = "close_outbox.error"

    def __init__(self, message: str = "", *, rules: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.rules = rules


class InvalidCloseRequestError(CloseOutboxError):
    """A close intent is ambiguous, unbounded, or unsupported."""

    code = "close_outbox.request_invalid"


class OutboxConflictError(CloseOutboxError):
    """One run/transaction identity was reused for a different close intent."""

    code = CONFLICT


class OutboxCorruptError(CloseOutboxError):
    """A durable record cannot be safely decoded or validated."""

    code = "close_outbox.record_invalid"


class OutboxUnsafePathError(CloseOutboxError):
    """A store directory or the lock file is a symbolic link or not what it must be."""

    code = "close_outbox.unsafe_path"


class OutboxStorageError(CloseOutboxError, OSError):
    """The outbox's directory could not be used for this call: an I/O error, a full
    device or quota, a denied permission, a read-only file system, a directory that
    vanished under the open outbox.

    The reference lets the raw ``OSError`` out; this is an ``OSError`` too, carrying the
    original ``errno``, ``strerror`` and ``filename``, so an ``except OSError`` written
    for the reference still catches it (an ``except`` of one subclass, such as
    ``PermissionError``, does not). Nothing unfinished was acknowledged: a record being
    written is whole or absent, and a failed ``enqueue`` may be retried.
    """

    code = "close_outbox.storage_unavailable"

    def __init__(self, message: str, cause: OSError) -> None:
        super().__init__(message)
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, cause.filename

    def __str__(self) -> str:
        return str(self.args[0])  # the message, not OSError's "[Errno N] ..."


class OutboxStorageDamagedError(OutboxStorageError):
    """The file system reports damage to itself under the outbox (``EUCLEAN``,
    ``EBADMSG``): check and repair it before going on."""

    code = "close_outbox.storage_damaged"


class OutboxReentryError(CloseOutboxError):
    """``replay`` was called again from inside its own ``deliver`` callback.

    The outer call holds the outbox's records mid-delivery; a nested replay would deliver
    them a second time and overwrite the outer call's outcomes. (The reference deadlocks
    here: its nested ``flock`` waits for itself.)
    """

    code = "close_outbox.replay_reentered"


_STOPPED = "The call stops there; what a `replay` wrote before it stays written."
_NEVER = "Never raised to a caller: "
_NO_REFERENCE_CODE = " The code is lifecycles' own: the reference has no codes."

# What each public error means (meaning, raised by, what changed), for the auditor page;
# every CloseOutboxError subclass defined here is listed (tests/tools/test_diagrams_audit.py
# holds it so).
_MEANINGS: dict[type[CloseOutboxError], tuple[str, str, str]] = {
    InvalidCloseRequestError: (
        "A close intent breaks a rule (version, `run_id` or `transaction_id` syntax, "
        "action, result bounds, error, reopen, or the payload bound); `rules` names it.",
        "`CloseRequest(...)`; `enqueue`, `detached_copy` (a request that is not a "
        "`CloseRequest`, or changed after it was built: its private copy fails the same "
        "rules, or is not the request as given); `entry_id`, `intent_digest` (a changed "
        "request they cannot encode).",
        "Nothing."),
    OutboxConflictError: (
        "The identity (`run_id`, `transaction_id`) already has a different close "
        "intent, pending or delivered.",
        "`enqueue`.", "Nothing: the stored intent is unchanged."),
    OutboxCorruptError: (
        "The stored record of this identity cannot be trusted (undecodable, breaking "
        "a rule, or in the wrong directory), or the identity has quarantined material.",
        "`enqueue`.",
        "Nothing: the file stays where it is (the next `replay` quarantines an "
        "untrusted pending file)."),
    OutboxUnsafePathError: (
        "A store directory or the lock file is a symbolic link, missing, or not what "
        "it must be.",
        "The constructor, `enqueue`, `replay`, `pending_count`.", _STOPPED),
    OutboxReentryError: (
        "`replay` was called from inside its own `deliver` callback (through any "
        "outbox object on this directory). Not in the reference, which deadlocks.",
        "`replay`.", "Nothing: the outer `replay` carries on."),
    OutboxStorageError: (
        "The outbox's directory cannot be used now: an I/O error, a full device or "
        "quota, a denied permission, a read-only file system, a directory that "
        "vanished under the open outbox. An `OSError` too, with the original `errno` "
        "(the reference lets the raw `OSError` out).",
        "The constructor, `enqueue`, `replay`, `pending_count`.",
        _STOPPED.rstrip(".") + ": a record being written is whole or absent, nothing "
        "unfinished was acknowledged, and the call may be retried."),
    OutboxStorageDamagedError: (
        "The file system reports damage to itself under the outbox (`EUCLEAN`, "
        "`EBADMSG`). An `OutboxStorageError`.",
        "The constructor, `enqueue`, `replay`, `pending_count`.",
        _STOPPED.rstrip(".") + ": check and repair the file system before going on."),
    CloseOutboxError: (
        "A store error that none of the classes above names, for example a record "
        "changed by another writer under the call.",
        "`enqueue`, `replay`, `pending_count`.", _STOPPED),
}
PUBLIC_ERRORS = PublicErrors(
    OUTBOX,
    errors=(
        *(PublicError(kind.__name__, kind.code, *meant) for kind, meant in _MEANINGS.items()),
        PublicError("ValueError", None, "`limit` is not an integer from 1 to 1000, as in "
                    "the reference.", "`replay`.", "Nothing."),
    ),
    guards={
        "same_intent": (
            "Raised by `enqueue` as `OutboxConflictError`, whose `code` is this one: it "
            "names the case." + _NO_REFERENCE_CODE),
        "attempt_recorded": (
            _NEVER + "`replay` writes the attempt before it fires `deliver` or "
            "`fail_delivery`." + _NO_REFERENCE_CODE),
        "error_described": (
            _NEVER + "`delivery_outcome` always gives a non-empty error." + _NO_REFERENCE_CODE),
        "reason_given": (
            _NEVER + "`replay` quarantines with a fixed, non-empty reason." + _NO_REFERENCE_CODE),
    },
    not_allowed=(
        _NEVER + "`enqueue` refuses a quarantined identity before the table is asked "
        "(`OutboxCorruptError`), and `replay` fires only on records it read as "
        "`pending`."
        + _NO_REFERENCE_CODE
    ),
    note=(
        "The exception classes are the reference's contract; their `code` attributes are "
        "lifecycles' addition (the reference has none). Every class below derives from "
        "`CloseOutboxError` (a `RuntimeError` and a `LifecycleError`), except `ValueError`."
    ),
)


# --- requests ----------------------------------------------------------------------


def _refuse(rule: FieldRule, value: object, message: str | None = None) -> None:
    if not rule.check(value):
        raise InvalidCloseRequestError(
            message or describe(rule.name, value=value), rules=(rule.name,)
        )


# A dataclass, not attrs: the reference's CloseRequest is one, and callers may use
# dataclasses.replace / asdict on it. Every check is a named rule of the outbox.
@dataclass(frozen=True)
class CloseRequest:
    """One bounded Activity Core completion or failure intent."""

    run_id: str
    transaction_id: str
    action: str
    result: dict[str, Any]
    error: str = ""
    reopen: bool = False
    version: str = OUTBOX_VERSION

    def __post_init__(self) -> None:
        # The reference's order, so the first broken rule is the one it would report.
        _refuse(version_supported, self.version)
        _refuse(run_id_syntax, self.run_id)
        _refuse(transaction_id_syntax, self.transaction_id)
        _refuse(action_known, self.action)
        _refuse(result_is_object, self.result)
        try:
            result = bounded_json(self.result)
        except JsonRuleViolation as error:
            raise InvalidCloseRequestError(error.message, rules=(error.rule,)) from None
        object.__setattr__(self, "result", result)
        _refuse(error_is_text, self.error)
        object.__setattr__(self, "error", normalise_text(self.error, MAX_ERROR_LENGTH))
        _refuse(reopen_is_boolean, self.reopen)
        as_record = cast(OutboxRecord, self)  # the invariants read only intent fields
        for rule in (
            complete_carries_no_error_or_reopen,
            fail_carries_error,
            intent_within_payload_bound,
        ):
            if not rule.holds(as_record):
                raise InvalidCloseRequestError(describe(rule.name), rules=(rule.name,))

    @property
    def entry_id(self) -> str:
        # Checked again only for a request changed after it was built: no str() of a
        # value that is not text (a list nested thousands deep cannot even be printed).
        if not isinstance(self.run_id, str) or not isinstance(self.transaction_id, str):
            _refuse(run_id_syntax, self.run_id)
            _refuse(transaction_id_syntax, self.transaction_id)
        return entry_id_for(self.run_id, self.transaction_id)

    @property
    def intent_digest(self) -> str:
        try:
            return intent_digest(self.intent())
        except (TypeError, ValueError, RecursionError):  # changed after it was built
            raise InvalidCloseRequestError(
                describe(intent_within_payload_bound.name),
                rules=(intent_within_payload_bound.name,),
            ) from None

    def intent(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "entry_id": self.entry_id,
            "run_id": self.run_id,
            "transaction_id": self.transaction_id,
            "action": self.action,
            "result": self.result,
            "error": self.error,
            "reopen": self.reopen,
        }

    def detached_copy(self) -> CloseRequest:
        """A copy sharing no mutable value with this request (the constructor copies the
        result as it checks it); a request changed after it was built is refused."""
        return private_copy(self)


def private_copy(request: CloseRequest) -> CloseRequest:
    """A copy of ``request`` that passed every rule again, and that is exactly the
    request as given: the constructor normalises ``error`` and copies ``result``, so a
    request changed after it was built (``object.__setattr__``) could otherwise be
    stored as something else than it says. Such a request is refused, naming the rule
    its given value breaks, never normalised."""
    copy = dataclasses.replace(request)  # a frozen dataclass: the constructor runs again
    if _encoded(copy.result) != _encoded(request.result):
        raise InvalidCloseRequestError(
            describe("request_as_given", value="result"), rules=("request_as_given",)
        )
    if not isinstance(request.error, str) or not str.__eq__(copy.error, request.error):
        for rule in (error_length_bound, error_text_normalised):
            _refuse(rule, request.error)
        raise InvalidCloseRequestError(  # a str subclass whose comparisons lie
            describe("request_as_given", value="error"), rules=("request_as_given",)
        )
    return copy


def _encoded(value: object) -> bytes | None:
    """The canonical JSON of ``value``; ``None`` when it has none."""
    try:
        return canonical_json(value)
    except (TypeError, ValueError, RecursionError):
        return None


@dataclass(frozen=True)
class EnqueueReceipt:
    entry_id: str
    created: bool
    state: str


@dataclass(frozen=True)
class ReplayReport:
    attempted: int = 0
    delivered: int = 0
    failed: int = 0
    quarantined: int = 0
    remaining: int = 0


def new_record(request: CloseRequest, now: str) -> OutboxRecord:
    """The record ``enqueue`` creates: pending, nothing attempted."""
    return OutboxRecord(
        version=request.version,
        run_id=request.run_id,
        transaction_id=request.transaction_id,
        action=request.action,
        result=request.result,
        error=request.error,
        reopen=request.reopen,
        entry_id=request.entry_id,
        state=OutboxStatus.PENDING,
        attempts=0,
        created_at=now,
        last_attempt_at=None,
        last_error=None,
    )


def request_of(record: OutboxRecord) -> CloseRequest:
    """A fresh request (its own copy of the result) carrying ``record``'s intent."""
    return CloseRequest(
        run_id=record.run_id,
        transaction_id=record.transaction_id,
        action=record.action,
        result=json.loads(canonical_json(record.result)),
        error=record.error,
        reopen=record.reopen,
        version=record.version,
    )


def default_state_dir() -> Path:
    """REIN_AHARNESS_STATE_DIR, else $XDG_STATE_HOME/rein-aharness, else ~/.local/state/..."""
    explicit = os.environ.get(STATE_DIR_VARIABLE, "").strip()
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_STATE_HOME", "").strip()
    if xdg:
        return (Path(xdg).expanduser() / "rein-aharness").resolve()
    return (Path.home() / ".local" / "state" / "rein-aharness").resolve()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def corrupt_message(error: UntrustedRecord) -> str:
    """The reference's message for a stored file that breaks ``error.rules[0]``."""
    rule = error.rules[0]
    if rule in (
        "record_decodes",
        "record_keys_exact",
        "status_matches_directory",
        "record_shape",
        # no message of the reference's: it follows links and opens any kind of file
        "record_is_regular_file",
        "record_single_link",
    ):
        return error.detail
    return describe(rule, error.field, error.value)


def quarantine_reason(error: UntrustedRecord) -> str:
    """What the reason file says: the reference's message and the rules broken."""
    return f"{corrupt_message(error)} (rules: {', '.join(error.rules)})"


# --- the outbox ----------------------------------------------------------------------


class CloseOutbox:
    """Process-safe durable store for close intents and replay outcomes."""

    def __init__(self, *, state_dir: Path | None = None) -> None:
        self.state_dir = (
            Path(state_dir).expanduser().resolve() if state_dir else default_state_dir()
        )
        self.root = self.state_dir / OUTBOX_DIRECTORY
        self.pending_dir = self.root / "pending"
        self.delivered_dir = self.root / "delivered"
        self.quarantine_dir = self.root / "quarantine"
        self.lock_path = self.root / OUTBOX_LAYOUT.lock_name
        with _translated_store_errors():
            self.store: FilesStore[OutboxRecord] = FilesStore(OUTBOX, self.root, OUTBOX_LAYOUT)
        # A replay is the worker's pass for a lifecycle without a lease: the flock held
        # for the whole replay keeps other replays out; deliver is its handler.
        self._attempts: ExclusiveWork[OutboxRecord, OutboxInputs] = ExclusiveWork(
            OUTBOX, "attempt", finish_delivery)

    def enqueue(self, request: CloseRequest) -> EnqueueReceipt:
        """Persist one intent or return its existing identical durable state."""
        if not isinstance(request, CloseRequest):
            raise InvalidCloseRequestError("request must be a CloseRequest")
        # Validate again on a private copy: a frozen dataclass can still be forged with
        # object.__setattr__, and its result dict mutated after it was checked.
        request = private_copy(request)
        entry_id = request.entry_id
        with _translated_store_errors(), self.store.locked():
            try:
                found = self.store.get(entry_id)
            except UntrustedRecord as error:
                if error.rules[0] == "status_matches_directory":
                    message = f"outbox record directory/state mismatch: expected {error.directory}"
                else:
                    message = corrupt_message(error)
                raise OutboxCorruptError(message, rules=error.rules) from error
            # The quarantine is listed only when no record answers (a rare call).
            material = found is None and self.store.has_quarantined(entry_id)
            if identity_quarantined(found, material):
                raise OutboxCorruptError("run/transaction identity has quarantined outbox material")
            if found is None:
                self.store.insert(OUTBOX.create(new_record(request, _now())))
                return EnqueueReceipt(entry_id, True, OutboxStatus.PENDING.value)
            inputs = OutboxInputs(_now(), intent_digest=request.intent_digest)
            try:
                self.store.fire(found, "enqueue", inputs)  # the same intent: a row, no change
            except TransitionRefused as refused:
                raise OutboxConflictError(
                    "run/transaction identity already has a different close intent",
                    rules=(refused.guard or "same_intent",),
                ) from None
            return EnqueueReceipt(entry_id, False, found.state.value)

    def replay(
        self,
        deliver: Callable[[CloseRequest], Any],
        *,
        limit: int = 100,
    ) -> ReplayReport:
        """Attempt pending deliveries once each without executing workload code.

        Up to ``limit`` pending entries, in entry-id order: untrusted material is
        quarantined with a reason; the attempts of the rest are recorded durably, in one
        batch, before the first ``deliver`` call; then each entry is delivered, or kept
        pending with a bounded error when ``deliver`` raises an ``Exception``, and these
        outcomes are made durable in a second batch before the call returns. Any other
        exception (``KeyboardInterrupt``) propagates after the outcomes so far are
        written, leaving the remaining entries pending with their attempt counted. A
        crash during the deliveries repeats them on the next replay (at-least-once).
        ``replay`` called again from inside ``deliver`` (through any outbox object on
        this directory) raises :class:`OutboxReentryError` and changes nothing.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValueError("limit must be an integer between 1 and 1000")
        with _translated_store_errors(), self.store.exclusive("replay"):
            ready, quarantined, interrupted = self._entries_to_replay(limit)
            self._sweep_after(interrupted=interrupted, quarantined=quarantined)
            # The worker's pass, with deliver as its handler: every attempt durable (one
            # batch, one directory sync) before the first deliver call; the outcomes
            # written as one batch after the last, even when a deliver call interrupts
            # the loop. A crash before it only repeats deliveries (at-least-once), and
            # the call returns only once all is durable.
            outcomes = self._attempts.run(
                self.store, ready, lambda record: deliver(request_of(record)),
                OutboxInputs(_now()))
            delivered = sum(outcome.trigger == "deliver" for outcome in outcomes)
            # What pending/ holds now, less the copies shadowed by delivered/ (the tails
            # of interrupted moves, usually none): not pending, whatever their file.
            return ReplayReport(
                attempted=len(outcomes),
                delivered=delivered,
                failed=len(outcomes) - delivered,
                quarantined=quarantined,
                remaining=self.store.count(OutboxStatus.PENDING.value),
            )

    def _entries_to_replay(self, limit: int) -> tuple[list[OutboxRecord], int, bool]:
        """The first ``limit`` pending entries, in entry-id order, sorted out: those to
        deliver, how many were quarantined instead, and whether an earlier replay was
        interrupted (a move left half done, or an entry's attempt never finished)."""
        pending = OutboxStatus.PENDING.value
        listing = self.store.first_names(pending, limit)
        ready: list[OutboxRecord] = []
        quarantined = 0
        interrupted = bool(listing.shadowed)  # a move left half done
        for name in listing.first:
            record, was_quarantined = self._entry_to_replay(pending, name)
            quarantined += was_quarantined
            if record is not None:
                interrupted = interrupted or replay_was_interrupted(record)
                ready.append(record)
        return ready, quarantined, interrupted

    def _entry_to_replay(self, pending: str, name: str) -> tuple[OutboxRecord | None, bool]:
        """The pending entry ``name`` when it is to be delivered, else ``None``; and whether
        it was quarantined: untrusted material, a conflict with its delivered copy, or a
        copy changed meanwhile. An entry gone since the listing, or already delivered by
        an interrupted replay (its pending copy is discarded), is neither."""
        try:
            record = self.store.read_named(pending, name)
        except UntrustedRecord as error:
            self.store.quarantine_material(pending, name, quarantine_reason(error))
            return None, True
        if record is None:
            return None, False  # gone since the listing (a nested call of this process)
        try:
            found = self.store.get(record.entry_id)  # delivered/ is searched first
        except UntrustedRecord:
            found = None  # material in delivered/ that is no record
        fate = pending_copy_fate(record, found)
        if fate is CopyFate.DISCARD and self.store.discard_shadowed(record, pending):
            return None, False  # delivered by an earlier, interrupted replay
        if fate is not CopyFate.REPLAY:  # a conflict, or a copy changed meanwhile
            self.store.fire(record, "quarantine", OutboxInputs(_now(), reason=CONFLICT_REASON))
            return None, True
        return record, False

    def _sweep_after(self, *, interrupted: bool, quarantined: int) -> None:
        """A replay that died mid-way may have left temporary files in directories no
        routine call lists (each listing of pending/ sweeps that one): sweep them on that
        sign only, as delivered/ grows without bound. A quarantine writes into
        quarantine/, a rare event: it sweeps that directory too."""
        if interrupted:
            self.store.sweep(OutboxStatus.DELIVERED.value)
        if interrupted or quarantined:
            self.store.sweep(OutboxStatus.QUARANTINED.value)

    def pending_count(self) -> int:
        """The ``*.json`` files in ``pending/``, less those ``delivered/`` also holds (the
        source of an interrupted move, which the next replay removes, or a conflict it
        quarantines): an identity delivered is not pending."""
        with _translated_store_errors():
            return self.store.count(OutboxStatus.PENDING.value)


@contextmanager
def _translated_store_errors() -> Iterator[None]:
    """Every store error leaves the outbox as a :class:`CloseOutboxError` subclass, and
    every OS error as an :class:`OutboxStorageError` (an ``OSError`` too)."""
    try:
        yield
    except (UnsafePath, StoreMissing) as error:
        raise OutboxUnsafePathError(str(error)) from error
    except Reentered as error:
        raise OutboxReentryError(
            "replay was called from inside its own deliver callback"
        ) from error
    except OSError as error:  # the store's FilesUnavailable and FilesDamaged among them
        kind = OutboxStorageDamagedError if isinstance(error, FilesDamaged) else (
            OutboxStorageError)
        raise kind(str(error), error) from error
    except StoreError as error:  # e.g. StaleRecord: a record changed under the call
        raise CloseOutboxError(str(error)) from error


__all__ = [
    "OUTBOX_LAYOUT",
    "OUTBOX_VERSION",
    "CloseOutbox",
    "CloseOutboxError",
    "CloseRequest",
    "EnqueueReceipt",
    "InvalidCloseRequestError",
    "OutboxConflictError",
    "OutboxCorruptError",
    "OutboxReentryError",
    "OutboxStorageDamagedError",
    "OutboxStorageError",
    "OutboxUnsafePathError",
    "ReplayReport",
    "default_state_dir",
    "new_record",
]
