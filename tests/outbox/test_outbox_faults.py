"""Fault injection: every filesystem call of a write fails in turn, with EIO and ENOSPC.

For each operation (enqueue of a new intent, a replay that delivers, a replay whose
deliveries are refused, a replay that quarantines a corrupt record) a clean run first
counts the calls of each kind the implementation makes: `open`, `write`, file `fsync`,
`rename` (rename, replace or link) and directory `fsync`, plus `read` and `unlink` when
the implementation makes them through `os`. Then, for each kind and each N, a fresh store is built,
the Nth call of that kind fails, and the test checks that:

- the call reports the failure: it raises `OSError` carrying the injected errno, as the
  reference does (drop-in callers may match on it), and nothing swallows it; lifecycles'
  `OSError` is its `OutboxStorageError`, with the stable code of a storage failure;
- it acknowledges nothing that was not made durable (no receipt, no report);
- no file descriptor is leaked (/proc/self/fd before and after);
- no temporary file is left behind, and every file under a record name is complete;
- what was stored before is intact, the intent in flight is either untouched or fully
  written (never half), nothing healthy is quarantined because of a storage error, and
  quarantined material always has its reason file;
- the store reopens cleanly, the operation then succeeds, and the store drains.

Calls are intercepted on the `os` module (and on file objects returned by `os.fdopen`),
so the injector sees whatever the implementation calls through `os`; a clean run must
show every write kind, or the injector would be testing nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.outbox import (
    LOCK_NAME,
    RECORD_STATUSES,
    STATUS_DIRS,
    StoreView,
    entry_id_of,
    expected_intent,
    load_outbox,
    make_request,
    store_root,
    tree_snapshot,
)

WRITE_KINDS = ("open", "write", "fsync", "rename", "dir-fsync")
# Failed in turn too when the implementation makes them: reads of stored records, and
# unlinks (a move written as "write the destination, unlink the source").
OBSERVED_KINDS = ("read", "unlink")
INJECTED_ERRORS = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}
RUN = "run-faults"
STORED_PENDING = "tx-pending"
STORED_DELIVERED = "tx-delivered"
IN_FLIGHT = "tx-in-flight"
CORRUPT = "tx-corrupt"


@dataclass
class FaultPlan:
    """Counts the calls of each kind, and fails the `nth` call of `kind` with `error`."""

    kind: str | None = None
    nth: int = 0
    error: int = errno.EIO
    counts: Counter[str] = field(default_factory=Counter)
    fired: bool = False

    def call(self, kind: str) -> None:
        self.counts[kind] += 1
        if kind == self.kind and self.counts[kind] == self.nth:
            self.fired = True
            raise OSError(self.error, f"injected {os.strerror(self.error)}")


class FaultingFile:
    """A file object from `os.fdopen` whose writes and reads pass through the plan."""

    def __init__(self, handle: Any, plan: FaultPlan) -> None:
        self._handle = handle
        self._plan = plan

    def write(self, data: Any) -> Any:
        self._plan.call("write")
        return self._handle.write(data)

    def read(self, *args: Any) -> Any:
        self._plan.call("read")
        return self._handle.read(*args)

    def __enter__(self) -> FaultingFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._handle.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def descriptor_of(target: Any) -> int:
    return target if isinstance(target, int) else int(target.fileno())


@contextlib.contextmanager
def injected(plan: FaultPlan) -> Iterator[None]:
    """Route the `os` calls of a write through `plan` while the block runs."""
    real_fstat = os.fstat

    def counted(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            plan.call(kind)
            return real(*args, **kwargs)

        return call

    def synced(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(target: Any) -> Any:
            is_directory = stat.S_ISDIR(real_fstat(descriptor_of(target)).st_mode)
            plan.call("dir-fsync" if is_directory else "fsync")
            return real(target)

        return call

    real_fdopen = os.fdopen

    def fdopen(*args: Any, **kwargs: Any) -> Any:
        return FaultingFile(real_fdopen(*args, **kwargs), plan)

    replacements: dict[str, Callable[..., Any]] = {
        "open": counted("open", os.open),
        "write": counted("write", os.write),
        "pwrite": counted("write", os.pwrite),
        "writev": counted("write", os.writev),
        "read": counted("read", os.read),
        "pread": counted("read", os.pread),
        "fsync": synced(os.fsync),
        "fdatasync": synced(os.fdatasync),
        "replace": counted("rename", os.replace),
        "rename": counted("rename", os.rename),
        "link": counted("rename", os.link),
        "unlink": counted("unlink", os.unlink),
        "remove": counted("unlink", os.remove),
        "fdopen": fdopen,
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, replacement in replacements.items():
            patch.setattr(os, name, replacement)
        yield


def open_descriptors() -> dict[str, str]:
    descriptors = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            descriptors[name] = os.readlink(f"/proc/self/fd/{name}")
    return descriptors


@dataclass
class Scenario:
    """One write operation, run on a store prepared through the public API."""

    name: str
    act: Callable[[ModuleType, Any, set[str]], Any]
    in_flight: tuple[str, ...]
    prepare_extra: Callable[[ModuleType, Any, Path], None] = lambda outbox, store, state: None
    planted: tuple[str, ...] = ()


def accept_all(accepted: set[str]) -> Callable[[Any], None]:
    def deliver(request: Any) -> None:
        accepted.add(request.entry_id)

    return deliver


def refuse_all(request: Any) -> None:
    raise ConnectionError(f"receiver unavailable for {request.entry_id}")


def enqueue_in_flight(outbox: ModuleType, store: Any, accepted: set[str]) -> Any:
    return store.enqueue(make_request(outbox, RUN, IN_FLIGHT))


def replay_accepting(outbox: ModuleType, store: Any, accepted: set[str]) -> Any:
    return store.replay(accept_all(accepted), limit=100)


def replay_refusing(outbox: ModuleType, store: Any, accepted: set[str]) -> Any:
    return store.replay(refuse_all, limit=100)


def enqueue_extra(outbox: ModuleType, store: Any, state_dir: Path) -> None:
    store.enqueue(make_request(outbox, RUN, IN_FLIGHT))


def plant_corrupt_record(outbox: ModuleType, store: Any, state_dir: Path) -> None:
    path = store_root(state_dir) / "pending" / f"{entry_id_of(RUN, CORRUPT)}.json"
    path.write_bytes(b'{"version": "1", "entry_id": ')
    path.chmod(0o600)


SCENARIOS = {
    "enqueue": Scenario("enqueue", enqueue_in_flight, in_flight=(IN_FLIGHT,)),
    "replay-delivers": Scenario(
        "replay-delivers",
        replay_accepting,
        in_flight=(STORED_PENDING, IN_FLIGHT),
        prepare_extra=enqueue_extra,
    ),
    "replay-refused": Scenario(
        "replay-refused",
        replay_refusing,
        in_flight=(STORED_PENDING, IN_FLIGHT),
        prepare_extra=enqueue_extra,
    ),
    "replay-quarantines": Scenario(
        "replay-quarantines",
        replay_accepting,
        in_flight=(STORED_PENDING,),
        prepare_extra=plant_corrupt_record,
        planted=(CORRUPT,),
    ),
}


def prepare(outbox: ModuleType, state_dir: Path, scenario: Scenario) -> None:
    """One delivered and one pending record, plus what the scenario adds."""
    store = outbox.CloseOutbox(state_dir=state_dir)
    delivered_id = entry_id_of(RUN, STORED_DELIVERED)
    store.enqueue(make_request(outbox, RUN, STORED_DELIVERED))
    store.replay(accept_all(set()), limit=100)
    store.enqueue(make_request(outbox, RUN, STORED_PENDING))
    scenario.prepare_extra(outbox, store, state_dir)
    view = StoreView(outbox, state_dir, frozenset(entry_id_of(RUN, t) for t in scenario.planted))
    assert delivered_id in view.records["delivered"]
    assert entry_id_of(RUN, STORED_PENDING) in view.records["pending"]


def copy_of(template: Path, destination: Path) -> Path:
    """A copy of a prepared store (modes kept): cheaper than preparing it again with fsyncs."""
    shutil.copytree(template, destination, symlinks=True)
    return destination


def count_calls(outbox: ModuleType, state_dir: Path, scenario: Scenario) -> Counter[str]:
    """The calls of each kind that the scenario's operation makes on a prepared store."""
    store = outbox.CloseOutbox(state_dir=state_dir)
    plan = FaultPlan()
    with injected(plan):
        scenario.act(outbox, store, set())
    return plan.counts


def leftovers(state_dir: Path) -> list[str]:
    """Names in the store that are neither the layout, records nor quarantined items."""
    root = store_root(state_dir)
    found = [name for name in os.listdir(root) if name not in {LOCK_NAME, *STATUS_DIRS}]
    for status in STATUS_DIRS:
        found += [f"{status}/{name}" for name in os.listdir(root / status) if name.startswith(".")]
    return found


def check_after_fault(
    outbox: ModuleType,
    state_dir: Path,
    scenario: Scenario,
    before: dict[str, tuple[str, int, bytes]],
    accepted: set[str],
) -> list[str]:
    planted_ids = frozenset(entry_id_of(RUN, t) for t in scenario.planted)
    view = StoreView(outbox, state_dir, planted_ids)
    problems = list(view.problems)
    problems += [f"left behind: {name}" for name in leftovers(state_dir)]
    in_flight_ids = {entry_id_of(RUN, t): t for t in scenario.in_flight}
    after = tree_snapshot(store_root(state_dir))
    for relative, content in before.items():
        parts = Path(relative).parts
        if len(parts) == 2 and parts[0] in RECORD_STATUSES:
            entry_id = parts[1].removesuffix(".json")
            if entry_id in in_flight_ids:
                continue
            if entry_id in planted_ids and relative not in after:
                continue  # the corrupt material went to quarantine (checked below)
            if after.get(relative) != content:
                problems.append(f"stored record {relative} changed or vanished")
    for entry_id, transaction_id in in_flight_ids.items():
        statuses = view.status_of(entry_id)
        if transaction_id == IN_FLIGHT and scenario.name == "enqueue" and not statuses:
            continue  # the failed enqueue left nothing: its caller retries
        # A move interrupted between writing the destination and removing the source
        # leaves both copies; that is only possible once the delivery was accepted.
        if not statuses or (statuses == ["pending", "delivered"] and entry_id not in accepted):
            problems.append(f"in-flight {transaction_id} is in {statuses}")
            continue
        for status in statuses:
            record = view.records[status][entry_id]
            if {k: record[k] for k in expected_intent(outbox, RUN, transaction_id)} != (
                expected_intent(outbox, RUN, transaction_id)
            ):
                problems.append(f"in-flight {transaction_id} holds another intent in {status}")
        if "delivered" in statuses and entry_id not in accepted:
            problems.append(f"in-flight {transaction_id} delivered without an accepted delivery")
    for name in view.quarantined:
        if name.split(".", 1)[0] not in planted_ids:
            problems.append(f"healthy material quarantined after a storage error: {name}")
    for entry_id in planted_ids:
        if not view.planted_present["pending"] and not view.is_quarantined(entry_id):
            problems.append(f"corrupt material {entry_id} neither pending nor quarantined")
    return problems


def drain(outbox: ModuleType, state_dir: Path, scenario: Scenario, where: str) -> None:
    """After the fault: the store reopens, the operation succeeds, everything delivers."""
    store = outbox.CloseOutbox(state_dir=state_dir)
    delivered_files = set(os.listdir(store_root(state_dir) / "delivered"))
    pending_files = [  # a copy beside its delivered twin is an interrupted move's tail
        name for name in os.listdir(store_root(state_dir) / "pending")
        if not name.startswith(".") and name not in delivered_files
    ]
    assert store.pending_count() == len(pending_files), where
    if scenario.name == "enqueue":
        receipt = store.enqueue(make_request(outbox, RUN, IN_FLIGHT))
        assert receipt.state == "pending", where
    accepted: set[str] = set()
    for _ in range(5):
        store.replay(accept_all(accepted), limit=100)
        if store.pending_count() == 0:
            break
    assert store.pending_count() == 0, where
    planted_ids = frozenset(entry_id_of(RUN, t) for t in scenario.planted)
    view = StoreView(outbox, state_dir, planted_ids)
    assert not view.problems, where
    assert not leftovers(state_dir), where
    expected_delivered = {
        entry_id_of(RUN, t) for t in (STORED_DELIVERED, STORED_PENDING, *scenario.in_flight)
    }
    assert set(view.records["delivered"]) == expected_delivered, where
    assert all(view.is_quarantined(entry_id) for entry_id in planted_ids), where
    healthy_quarantined = [n for n in view.quarantined if n.split(".", 1)[0] not in planted_ids]
    assert not healthy_quarantined, (
        f"{where}, then a clean replay quarantined {healthy_quarantined}"
    )


@pytest.fixture
def outbox() -> ModuleType:
    return load_outbox()


@pytest.mark.parametrize("scenario_name", sorted(SCENARIOS))
def test_a_clean_run_shows_every_kind_of_write_call(
    outbox: ModuleType, tmp_path: Path, scenario_name: str
) -> None:
    prepare(outbox, tmp_path / "state", SCENARIOS[scenario_name])
    counts = count_calls(outbox, tmp_path / "state", SCENARIOS[scenario_name])
    missing = [kind for kind in WRITE_KINDS if counts[kind] == 0]
    assert not missing, f"the injector saw no {missing} call through os: {dict(counts)}"


@pytest.mark.parametrize("error_name", sorted(INJECTED_ERRORS))
@pytest.mark.parametrize("kind", [*WRITE_KINDS, *OBSERVED_KINDS])
@pytest.mark.parametrize("scenario_name", sorted(SCENARIOS))
def test_each_failing_call_is_reported_and_loses_nothing(
    outbox: ModuleType, tmp_path: Path, scenario_name: str, kind: str, error_name: str
) -> None:
    scenario = SCENARIOS[scenario_name]
    error = INJECTED_ERRORS[error_name]
    template = tmp_path / "template"
    prepare(outbox, template, scenario)
    calls = count_calls(outbox, copy_of(template, tmp_path / "count"), scenario)[kind]
    if kind in WRITE_KINDS:
        assert calls > 0, f"no {kind} call to fail (see the clean-run test)"
    for nth in range(1, calls + 1):
        state_dir = copy_of(template, tmp_path / f"fail-{nth}")
        before = tree_snapshot(store_root(state_dir))
        store = outbox.CloseOutbox(state_dir=state_dir)
        plan = FaultPlan(kind=kind, nth=nth, error=error)
        accepted: set[str] = set()
        descriptors_before = open_descriptors()
        outcome: Any = None
        raised: BaseException | None = None
        with injected(plan):
            try:
                outcome = scenario.act(outbox, store, accepted)
            except BaseException as exc:
                raised = exc
        where = f"{scenario.name}: {kind} call {nth} of {calls} failing with {error_name}"
        assert plan.fired, f"{where}: the call was never reached"
        assert raised is not None, f"{where}: the failure was swallowed, returned {outcome!r}"
        assert isinstance(raised, OSError) and raised.errno == error, (
            f"{where}: raised {type(raised).__name__}: {raised!r}"
        )
        if outbox.__name__ == "lifecycles.outbox":  # not the reference's raw OSError
            assert type(raised) is outbox.OutboxStorageError, where
            assert raised.code == "close_outbox.storage_unavailable", where
        del raised
        # Only what the call opened counts: the garbage collector may close another test's
        # descriptor meanwhile, which is no leak.
        descriptors_after = open_descriptors()
        opened = {fd: target for fd, target in descriptors_after.items()
                  if descriptors_before.get(fd) != target}
        assert not opened, f"{where}: leaked descriptors {opened}"
        problems = check_after_fault(outbox, state_dir, scenario, before, accepted)
        assert not problems, f"{where}:\n" + "\n".join(problems)
        drain(outbox, state_dir, scenario, where)
