"""A Hypothesis state machine over the outbox facade, against a model of what it owes.

Rules are verbs: enqueue (new, identical, conflicting, invalid), replay with a deliver
callback that fails for chosen entries, corrupt a pending file (truncated, not JSON,
wrong keys, an entry id that does not match, a state that is not its directory's,
oversized), leave the source of a delivery beside its destination (a crash inside a
move: the next replay removes it), and reopen the outbox. After every step: every
stored record holds every rule, the directory holds exactly what the model says, and
no intent is lost: each is delivered at least once, still pending, or quarantined
with a reason."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from lifecycles.invariants import canonical_json
from lifecycles.invariants.outbox import (
    MAX_RECORD_FILE_BYTES,
    OUTBOX_INVARIANTS,
    OutboxStatus,
    entry_id_for,
)
from lifecycles.machines.outbox import OUTBOX
from lifecycles.outbox.facade import (
    OUTBOX_LAYOUT,
    CloseOutbox,
    CloseRequest,
    InvalidCloseRequestError,
    OutboxConflictError,
    OutboxCorruptError,
)
from lifecycles.stores import FilesStore

RUNS = ("run-a", "run-b", "run-c")
TRANSACTIONS = ("tx-1", "tx-2", "tx-3")
IDENTITIES = [(run, tx) for run in RUNS for tx in TRANSACTIONS]
CORRUPTIONS = (
    "truncated", "not_json", "wrong_keys", "entry_id_mismatch", "wrong_state", "oversized",
)

results = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.one_of(st.integers(-3, 3), st.booleans(), st.none(), st.text("xy ", max_size=3)),
    max_size=2,
)


@st.composite
def requests(draw: st.DrawFn) -> CloseRequest:
    run, tx = draw(st.sampled_from(IDENTITIES))
    if draw(st.booleans()):
        return CloseRequest(run, tx, "complete", draw(results))
    error = draw(st.sampled_from(["boom", "remote  said\nno", "x" * 30]))
    return CloseRequest(run, tx, "fail", draw(results), error=error, reopen=draw(st.booleans()))


INVALID_FIELDS: list[dict[str, Any]] = [
    {"run_id": "../x"},
    {"transaction_id": ""},
    {"action": "close"},
    {"result": [1]},
    {"result": {"a": float("nan")}},
    {"error": "not for complete"},
    {"reopen": "yes"},
    {"version": "2"},
]


class OutboxMachine(RuleBasedStateMachine):
    """The facade, a model of each identity's status, and every delivery seen."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="lifecycles-outbox-stateful-"))
        self.outbox = CloseOutbox(state_dir=self.directory)
        self.store: FilesStore[Any] = FilesStore(OUTBOX, self.outbox.root, OUTBOX_LAYOUT)
        self.intents: dict[str, CloseRequest] = {}
        # status per entry id: pending, delivered, quarantined, or corrupted (an
        # untrusted pending file the next replay that reaches it quarantines)
        self.status: dict[str, str] = {}
        self.attempts: Counter[str] = Counter()
        self.delivered_calls: Counter[str] = Counter()
        self.leftovers: set[str] = set()  # pending copies beside delivered ones

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------

    def pending_file(self, entry_id: str) -> Path:
        return self.outbox.pending_dir / f"{entry_id}.json"

    def tree(self) -> dict[str, bytes]:
        return {
            str(path.relative_to(self.directory)): path.read_bytes()
            for path in sorted(self.directory.rglob("*"))
            if path.is_file() and path.name != ".lock"
        }

    def in_pending_dir(self) -> list[str]:
        ids = [e for e, s in self.status.items() if s in ("pending", "corrupted")]
        return sorted([*ids, *self.leftovers])

    # -- rules: verbs ---------------------------------------------------------------

    @rule(request=requests())
    def enqueue(self, request: CloseRequest) -> None:
        entry_id = request.entry_id
        status = self.status.get(entry_id)
        before = self.tree()
        if status is None:
            receipt = self.outbox.enqueue(request)
            assert (receipt.entry_id, receipt.created, receipt.state) == (entry_id, True, "pending")
            self.intents[entry_id] = request
            self.status[entry_id] = "pending"
            return
        if status in ("quarantined", "corrupted"):
            try:
                self.outbox.enqueue(request)
            except OutboxCorruptError:
                assert self.tree() == before
                return
            raise AssertionError(f"enqueue of a {status} identity was accepted")
        if request.intent_digest == self.intents[entry_id].intent_digest:
            receipt = self.outbox.enqueue(request)
            assert (receipt.created, receipt.state) == (False, status)
        else:
            try:
                self.outbox.enqueue(request)
            except OutboxConflictError:
                pass
            else:
                raise AssertionError("a different intent under a known identity was accepted")
        assert self.tree() == before

    @precondition(lambda self: bool(self.intents))
    @rule(data=st.data())
    def enqueue_identical(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.intents)))
        self.enqueue(self.intents[entry_id].detached_copy())

    @precondition(lambda self: bool(self.intents))
    @rule(data=st.data(), result=results)
    def enqueue_conflicting(self, data: st.DataObject, result: dict[str, Any]) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.intents)))
        known = self.intents[entry_id]
        different = {**result, "different": True}
        self.enqueue(CloseRequest(known.run_id, known.transaction_id, known.action, different,
                                  error=known.error, reopen=known.reopen))

    @rule(changes=st.sampled_from(INVALID_FIELDS), forged=st.booleans())
    def enqueue_invalid(self, changes: dict[str, Any], forged: bool) -> None:
        fields: dict[str, Any] = {
            "run_id": "run-a", "transaction_id": "tx-9", "action": "complete", "result": {}
        }
        before = self.tree()
        if not forged:
            try:
                CloseRequest(**{**fields, **changes})
            except InvalidCloseRequestError as error:
                assert error.rules
            else:
                raise AssertionError(f"an invalid request was built: {changes}")
        else:
            request = CloseRequest(**fields)
            for name, value in changes.items():
                object.__setattr__(request, name, value)  # past the constructor's checks
            try:
                self.outbox.enqueue(request)
            except InvalidCloseRequestError:
                pass
            else:
                raise AssertionError(f"a forged invalid request was enqueued: {changes}")
        assert self.tree() == before

    @rule(limit=st.integers(1, 12),
          failing=st.frozensets(st.sampled_from(IDENTITIES), max_size=3))
    def replay(self, limit: int, failing: frozenset[tuple[str, str]]) -> None:
        failing_ids = {entry_id_for(run, tx) for run, tx in failing}
        order = self.in_pending_dir()[:limit]
        seen: list[str] = []

        def deliver(request: CloseRequest) -> None:
            entry_id = request.entry_id
            seen.append(entry_id)
            stored = json.loads(self.pending_file(entry_id).read_bytes())
            # at-least-once: the attempt is on disk before deliver runs
            assert stored["attempts"] == self.attempts[entry_id] + 1
            assert stored["last_error"] is None
            assert request == self.intents[entry_id]
            request.result["mutated"] = True  # a detached copy: the store must not see it
            if entry_id in failing_ids:
                raise ConnectionError("the receiver is down")

        report = self.outbox.replay(deliver, limit=limit)

        expected = Counter[str]()
        expected_calls: list[str] = []
        for entry_id in order:
            if entry_id in self.leftovers:
                self.leftovers.discard(entry_id)  # the tail of an interrupted move: removed
            elif self.status[entry_id] == "corrupted":
                self.status[entry_id] = "quarantined"
                expected["quarantined"] += 1
            else:
                expected_calls.append(entry_id)
                self.attempts[entry_id] += 1
                expected["attempted"] += 1
                if entry_id in failing_ids:
                    expected["failed"] += 1
                else:
                    self.status[entry_id] = "delivered"
                    self.delivered_calls[entry_id] += 1
                    expected["delivered"] += 1
        assert seen == expected_calls
        event(f"replay delivered {min(expected['delivered'], 2)}+, "
              f"quarantined {min(expected['quarantined'], 1)}+")
        assert (report.attempted, report.delivered, report.failed, report.quarantined) == (
            expected["attempted"], expected["delivered"], expected["failed"],
            expected["quarantined"],
        )
        # the tail of an interrupted move left beyond the limit is not pending either
        assert report.remaining == len(set(self.in_pending_dir()) - self.leftovers)

    @precondition(lambda self: any(s == "pending" for s in self.status.values()))
    @rule(data=st.data(), how=st.sampled_from(CORRUPTIONS))
    def corrupt_pending_file(self, data: st.DataObject, how: str) -> None:
        entry_id = data.draw(
            st.sampled_from(sorted(e for e, s in self.status.items() if s == "pending"))
        )
        path = self.pending_file(entry_id)
        good = path.read_bytes()
        values = json.loads(good)
        if how == "truncated":
            damaged = good[: len(good) // 2]
        elif how == "not_json":
            damaged = b"this is not json\n"
        elif how == "wrong_keys":
            values.pop("attempts")
            values["extra"] = 1
            damaged = canonical_json(values)
        elif how == "entry_id_mismatch":
            values["entry_id"] = entry_id_for("someone", "else")
            damaged = canonical_json(values)
        elif how == "wrong_state":
            values["state"] = "delivered"
            damaged = canonical_json(values)
        else:
            damaged = good[:-2] + b" " * MAX_RECORD_FILE_BYTES + b"}\n"
        path.write_bytes(damaged)
        self.status[entry_id] = "corrupted"
        event(f"corrupted: {how}")

    @precondition(lambda self: any(
        s == "delivered" and e not in self.leftovers for e, s in self.status.items()
    ))
    @rule(data=st.data())
    def leave_a_pending_copy_beside_a_delivered_one(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(sorted(
            e for e, s in self.status.items() if s == "delivered" and e not in self.leftovers
        )))
        values = json.loads((self.outbox.delivered_dir / f"{entry_id}.json").read_bytes())
        values["state"] = "pending"
        self.pending_file(entry_id).write_bytes(canonical_json(values) + b"\n")
        self.leftovers.add(entry_id)

    @rule()
    def reopen(self) -> None:
        self.outbox = CloseOutbox(state_dir=self.directory)
        self.store = FilesStore(OUTBOX, self.outbox.root, OUTBOX_LAYOUT)

    # -- checks: predicates ---------------------------------------------------------

    @invariant()
    def every_stored_record_holds_every_rule(self) -> None:
        for directory, status in (("pending", "pending"), ("delivered", "delivered")):
            for name in os.listdir(self.outbox.root / directory):
                entry_id = name.removesuffix(".json")
                if directory == "pending" and self.status.get(entry_id) == "corrupted":
                    continue
                record = self.store.read_named(status, name)  # raises when untrusted
                assert record is not None
                assert OUTBOX_INVARIANTS.broken(record) == []
                assert record.state == status
        for entry in self.store.quarantine_entries():
            assert entry.reason is not None and entry.reason["reason"], entry.name

    @invariant()
    def no_intent_is_lost(self) -> None:
        quarantined_ids = {e.stem for e in self.store.quarantine_entries()}
        for entry_id, status in self.status.items():
            pending_file = self.pending_file(entry_id)
            delivered_file = self.outbox.delivered_dir / f"{entry_id}.json"
            if status == "delivered":
                assert delivered_file.is_file() and self.delivered_calls[entry_id] >= 1
                assert pending_file.exists() == (entry_id in self.leftovers)
            elif status == "pending":
                record = self.store.read_named("pending", f"{entry_id}.json")
                assert record is not None and record.attempts == self.attempts[entry_id]
                assert record.state is OutboxStatus.PENDING
                assert not delivered_file.exists()
            elif status == "corrupted":
                assert pending_file.is_file()
            else:
                assert status == "quarantined"
                assert entry_id in quarantined_ids and not pending_file.exists()
        for entry_id in self.status:
            if self.status[entry_id] == "delivered":
                assert entry_id not in quarantined_ids, "a delivered intent was quarantined"

    @invariant()
    def counts_agree_with_the_model(self) -> None:
        # A pending copy beside its delivered twin (an interrupted move) is not pending work.
        assert self.outbox.pending_count() == len(set(self.in_pending_dir()) - self.leftovers)
        delivered = sum(1 for s in self.status.values() if s == "delivered")
        assert len(os.listdir(self.outbox.delivered_dir)) == delivered

    @invariant()
    def no_temporary_file_remains(self) -> None:
        for path in self.directory.rglob("*"):
            assert not path.name.endswith(".tmp"), path


TestOutboxStateful = OutboxMachine.TestCase
