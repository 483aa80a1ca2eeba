"""Helpers shared by the outbox crash, fault-injection and security tests.

The tests drive the outbox only through its public API (the reference's names and
signatures) and then read the directory it leaves behind, whose layout and record
format are part of the drop-in contract. So the same tests can run against
`lifecycles.outbox` (the default) or, by hand, against any module with that API:

    LIFECYCLES_OUTBOX_IMPL=../shared/seeds/close_outbox.py pytest tests/outbox/

Where the reference fails such a run it is weaker than what the tests require (it follows
symbolic links, for one); the tests are written for that difference.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import re
import signal
import stat
import sys
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

IMPL_VARIABLE = "LIFECYCLES_OUTBOX_IMPL"
LIFECYCLES_IMPL = "lifecycles"

ROOT_NAME = "close-outbox"
LOCK_NAME = ".lock"
STATUS_DIRS = ("pending", "delivered", "quarantine")
RECORD_STATUSES = ("pending", "delivered")
RECORD_KEYS = frozenset(
    {
        "version",
        "entry_id",
        "run_id",
        "transaction_id",
        "action",
        "result",
        "error",
        "reopen",
        "state",
        "created_at",
        "attempts",
        "last_attempt_at",
        "last_error",
    }
)
RECORD_NAME = re.compile(r"[0-9a-f]{32}\.json")
REASON_SUFFIX = ".error.json"


def implementation_spec() -> str:
    """Which implementation the tests run against: `lifecycles` or a module path."""
    return os.environ.get(IMPL_VARIABLE, "").strip() or LIFECYCLES_IMPL


def load_outbox(spec: str | None = None) -> ModuleType:
    """Import the outbox under test: `lifecycles.outbox`, or a module file by path."""
    spec = spec or implementation_spec()
    if spec == LIFECYCLES_IMPL:
        return importlib.import_module("lifecycles.outbox")
    path = Path(spec).resolve()
    name = f"outbox_under_test_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load an outbox module from {path}")
    module = importlib.util.module_from_spec(module_spec)
    # dataclasses resolve their annotations through sys.modules while the class is built.
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def entry_id_of(run_id: str, transaction_id: str) -> str:
    """The record's identity as the contract defines it, computed independently."""
    return hashlib.sha256(f"{run_id}\0{transaction_id}".encode()).hexdigest()[:32]


def make_request(outbox: ModuleType, run_id: str, transaction_id: str) -> Any:
    """A request whose whole content is a function of its identity, so that any record
    found on disk can be checked byte for byte against what was enqueued."""
    selector = zlib.crc32(f"{run_id}/{transaction_id}".encode())
    if selector % 3 == 0:
        return outbox.CloseRequest(
            run_id=run_id,
            transaction_id=transaction_id,
            action="fail",
            result={"run": run_id, "selector": selector},
            error=f"receiver refused {transaction_id}",
            reopen=selector % 2 == 0,
        )
    return outbox.CloseRequest(
        run_id=run_id,
        transaction_id=transaction_id,
        action="complete",
        result={
            "run": run_id,
            "transaction": transaction_id,
            "selector": selector,
            "nested": {"items": [selector % 7, "x" * (selector % 50), 1.5, None, True]},
        },
    )


def conflicting_request(outbox: ModuleType, run_id: str, transaction_id: str) -> Any:
    """A different intent under the same identity as `make_request(...)`."""
    return outbox.CloseRequest(
        run_id=run_id,
        transaction_id=transaction_id,
        action="complete",
        result={"conflicting": True, "run": run_id},
    )


def expected_intent(outbox: ModuleType, run_id: str, transaction_id: str) -> dict[str, Any]:
    request = make_request(outbox, run_id, transaction_id)
    return {
        "version": request.version,
        "entry_id": entry_id_of(run_id, transaction_id),
        "run_id": run_id,
        "transaction_id": transaction_id,
        "action": request.action,
        "result": request.result,
        "error": request.error,
        "reopen": request.reopen,
    }


def store_root(state_dir: Path) -> Path:
    return state_dir / ROOT_NAME


def is_timestamp_with_zone(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def record_problems(
    outbox: ModuleType, status: str, name: str, raw: bytes
) -> tuple[list[str], dict[str, Any] | None]:
    """Every way a file under a final record name fails to be a complete valid record."""
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeError, ValueError) as exc:
        return [f"{status}/{name} is not complete JSON: {exc}"], None
    if not isinstance(payload, dict):
        return [f"{status}/{name} is not an object"], None
    problems: list[str] = []
    if set(payload) != RECORD_KEYS:
        problems.append(f"{status}/{name} has keys {sorted(payload)}")
        return problems, None
    if payload["state"] != status:
        problems.append(f"{status}/{name} has state {payload['state']!r}")
    if payload["entry_id"] != name.removesuffix(".json"):
        problems.append(f"{status}/{name} holds entry {payload['entry_id']!r}")
    try:
        outbox.CloseRequest(
            run_id=payload["run_id"],
            transaction_id=payload["transaction_id"],
            action=payload["action"],
            result=payload["result"],
            error=payload["error"],
            reopen=payload["reopen"],
            version=payload["version"],
        )
    except outbox.CloseOutboxError as exc:
        problems.append(f"{status}/{name} holds an invalid request: {exc}")
    if payload["entry_id"] != entry_id_of(str(payload["run_id"]), str(payload["transaction_id"])):
        problems.append(f"{status}/{name} entry_id is not the hash of its identity")
    attempts = payload["attempts"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        problems.append(f"{status}/{name} has attempts {attempts!r}")
    if not is_timestamp_with_zone(payload["created_at"]):
        problems.append(f"{status}/{name} has created_at {payload['created_at']!r}")
    if payload["last_attempt_at"] is not None and not is_timestamp_with_zone(
        payload["last_attempt_at"]
    ):
        problems.append(f"{status}/{name} has last_attempt_at {payload['last_attempt_at']!r}")
    if payload["last_error"] is not None and not isinstance(payload["last_error"], str):
        problems.append(f"{status}/{name} has last_error {payload['last_error']!r}")
    return problems, payload


class StoreView:
    """What a reader finds in the store directory, read without following any link."""

    def __init__(
        self, outbox: ModuleType, state_dir: Path, planted: frozenset[str] = frozenset()
    ) -> None:
        """`planted` names entries whose files a test corrupted on purpose: they are
        listed in `planted_present`, not validated."""
        self.root = store_root(state_dir)
        self.planted_present: dict[str, list[str]] = {s: [] for s in RECORD_STATUSES}
        self.records: dict[str, dict[str, dict[str, Any]]] = {s: {} for s in RECORD_STATUSES}
        self.other_names: dict[str, list[str]] = {s: [] for s in RECORD_STATUSES}
        self.problems: list[str] = []
        for status in RECORD_STATUSES:
            directory = self.root / status
            for name in sorted(os.listdir(directory)):
                path = directory / name
                if not RECORD_NAME.fullmatch(name):
                    self.other_names[status].append(name)
                    continue
                if name.removesuffix(".json") in planted:
                    self.planted_present[status].append(name.removesuffix(".json"))
                    continue
                mode = os.lstat(path).st_mode
                if not stat.S_ISREG(mode):
                    self.problems.append(f"{status}/{name} is not a regular file")
                    continue
                problems, payload = record_problems(outbox, status, name, path.read_bytes())
                self.problems.extend(problems)
                if payload is not None:
                    self.records[status][name.removesuffix(".json")] = payload
        self.quarantined, quarantine_problems = quarantine_contents(self.root / "quarantine")
        self.problems.extend(quarantine_problems)

    def status_of(self, entry_id: str) -> list[str]:
        return [s for s in RECORD_STATUSES if entry_id in self.records[s]]

    def is_quarantined(self, entry_id: str) -> bool:
        return any(name.startswith(f"{entry_id}.") for name in self.quarantined)


def quarantine_contents(directory: Path) -> tuple[dict[str, str], list[str]]:
    """Quarantined material (file name -> reason) and every item lacking a readable reason."""
    names = set(os.listdir(directory))
    reasons: dict[str, str] = {}
    problems: list[str] = []
    for name in sorted(names):
        if name.endswith(REASON_SUFFIX) or name.startswith("."):
            continue
        reason_name = name.removesuffix(".json") + REASON_SUFFIX
        if reason_name not in names:
            problems.append(f"quarantine/{name} has no reason file")
            continue
        try:
            reason = json.loads((directory / reason_name).read_text(encoding="utf-8"))["reason"]
        except (OSError, UnicodeError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"quarantine/{reason_name} is not a readable reason: {exc!r}")
            continue
        if not isinstance(reason, str) or not reason.strip():
            problems.append(f"quarantine/{reason_name} gives no reason")
            continue
        reasons[name] = reason
    return reasons, problems


def tree_snapshot(path: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under `path` (type, permission bits, content or link target), taken with
    lstat so that a link is recorded as a link and never followed."""
    snapshot: dict[str, tuple[str, int, bytes]] = {}
    for current, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            full = os.path.join(current, name)
            relative = os.path.relpath(full, path)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                snapshot[relative] = ("link", 0, os.readlink(full).encode())
            elif stat.S_ISDIR(info.st_mode):
                snapshot[relative] = ("dir", stat.S_IMODE(info.st_mode), b"")
            else:
                with open(full, "rb") as handle:
                    snapshot[relative] = ("file", stat.S_IMODE(info.st_mode), handle.read())
    return snapshot


@contextlib.contextmanager
def alarm(seconds: float, error: type[BaseException]) -> Iterator[None]:
    """Raise ``error`` instead of hanging when a call blocks for ``seconds`` (an ``open()``
    blocked on a FIFO is interrupted by the signal)."""

    def ring(signum: int, frame: FrameType | None) -> None:
        raise error(f"a call blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
