"""The refund example (examples/refund), its retry and lease policy built from building
blocks, gets check, mutants, stateful tests, diagrams and the one-statement claim for free."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import attrs
import pytest
from support.postgres import connect_in, temporary_schema
from support.stateful import on_memory_and_sqlite

from lifecycles._checker import run_check
from lifecycles._loading import import_target
from lifecycles.diagrams import generate
from lifecycles.invariants._core import InvariantViolation
from lifecycles.machines import lease
from lifecycles.machines._blocks import WorkInputs
from lifecycles.machines._declaration import TransitionRefused
from lifecycles.stores._sql_claim import ClaimInPlace, claim_in_place
from lifecycles.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refund" / "lifecycle.py"
import_target(str(EXAMPLE))  # the example is not installed: put its root on the path

from examples.refund.lifecycle import (  # noqa: E402
    LEASE,
    REFUND,
    RETRY,
    Refund,
    new_refund,
)
from examples.refund.lifecycle_inputs import EQUIVALENT_MUTANTS  # noqa: E402


def test_lifecycles_check_explores_the_example_completely(tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_check((), (str(EXAMPLE),), snapshot_path=tmp_path / "s.json",
                     trace_dir=tmp_path, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "refund (table v" in text and "(complete)" in text and "statuses reached: 6/6" in text
    assert "never fired" not in text
    assert "interleaved workers: 2 workers x 1 record" in text and "all hold" in text


def test_every_mutant_is_killed_or_declared_equivalent(tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_check((), (str(EXAMPLE),), snapshot_path=tmp_path / "s.json",
                     trace_dir=tmp_path, out=out, as_json=True, mutants="report")
    (found,) = json.loads(out.getvalue())["lifecycles"]
    assert code == 0, found
    mutants = found["mutants"]
    assert (mutants["survived"], mutants["stale"], mutants["unknown"]) == ([], [], [])
    assert mutants["equivalent"] == sorted(declared.name for declared in EQUIVALENT_MUTANTS)
    assert mutants["total"] - len(mutants["equivalent"]) == mutants["killed"] > 80


def test_the_policy_is_the_blocks_named_by_the_table() -> None:
    blocks = {*RETRY.guards, *LEASE.guards, *RETRY.effects, *LEASE.effects}
    used = {*REFUND.guards.values(), *REFUND.effects.values()}
    assert used - blocks == {REFUND.effects["mark_cancelled"]}  # the refund's own effect
    assert REFUND.lease == LEASE.lease and REFUND.leased == "leased"
    assert {rule.name for rule in REFUND.invariants} >= {
        "failures_within_max", "error_iff_failures", "lease_fields_iff_leased"}


def opened(tmp_path: Path) -> tuple[sqlite3.Connection, SQLiteStore[Refund]]:
    connection = sqlite3.connect(tmp_path / "refunds.db")
    return connection, SQLiteStore(REFUND, connection)


def worker(name: str, token: str, now: float) -> WorkInputs:
    return WorkInputs(now=now, worker_id=name, lease_token=token, lease_seconds=60.0)


def test_bad_inputs_are_refused_with_their_code_and_change_nothing(tmp_path: Path) -> None:
    connection, store = opened(tmp_path)
    store.insert(new_refund("rf-1", amount_cents=1250, currency="EUR", now=0.0))
    claimed = store.claim(worker("w1", "t1", 1.0))
    assert claimed is not None and (claimed.status, claimed.lease_expires_at) == ("leased", 61.0)
    cases: list[tuple[str, WorkInputs, str, tuple[str, ...]]] = [
        ("succeed", worker("w2", "t1", 2.0), "refund.lease_lost", ()),
        ("succeed", worker("w1", "t0", 2.0), "refund.lease_lost", ()),
        ("renew", worker("w1", "t1", 61.0), "refund.lease_expired", ()),
        ("rescue", worker("w2", "t2", 60.0), "refund.lease_live", ()),
        ("cancel", WorkInputs(now=2.0), "refund.not_allowed", ()),
        ("fail", worker("w1", "t1", 2.0), "refund.state_invalid", ("error_iff_failures",)),
        ("fail", attrs.evolve(worker("w1", "t1", 2.0), error="Not A Code!", retryable=True),
         "refund.state_invalid", ("error_code_syntax",)),
    ]
    for trigger, inputs, code, rules in cases:
        with pytest.raises((TransitionRefused, InvariantViolation)) as refused, \
                store.transaction():
            current = store.get("rf-1")
            assert current is not None
            store.fire(current, trigger, inputs)
        assert getattr(refused.value, "code", None) == code, trigger
        assert tuple(getattr(refused.value, "rules", ())) == rules, trigger
        assert store.get("rf-1") == claimed, trigger  # nothing changed
    assert store.count_by_status()["leased"] == 1
    connection.close()


def test_a_stalled_workers_late_completion_is_refused_once_rescued(tmp_path: Path) -> None:
    connection, store = opened(tmp_path)
    store.insert(new_refund("rf-1", amount_cents=1250, currency="EUR", now=0.0,
                            max_failures=3))
    stalled = store.claim(worker("w1", "t1", 1.0))
    assert stalled is not None
    assert store.claim(worker("w2", "t2", 61.0)) is None  # rescued, then not yet due
    rescued = store.get("rf-1")
    assert rescued is not None
    assert (rescued.status, rescued.failures, rescued.last_error) == (
        "retry_wait", 1, "lease_expired")
    assert rescued.available_at == 61.0 + RETRY.backoff.delay(1, "rf-1")
    late = worker("w1", "t1", 62.0)
    with pytest.raises(TransitionRefused) as refused:
        lease.complete(store, REFUND, stalled,
                       lambda record, fire: fire("succeed", record, late))
    assert refused.value.code == "refund.not_allowed"
    assert store.get("rf-1") == rescued
    connection.close()


def test_a_claim_on_postgresql_is_one_statement_from_the_blocks() -> None:
    from lifecycles.stores.postgres import PostgresStore

    with temporary_schema() as schema:
        connection = connect_in(schema)
        try:
            store = PostgresStore(REFUND, connection)
            assert isinstance(claim_in_place(store.statements), ClaimInPlace)
            store.insert(new_refund("rf-1", amount_cents=1250, currency="EUR", now=0.0))
            store.insert(new_refund("rf-2", amount_cents=99, currency="EUR", now=5.0))
            granted = store.claim_in_place(worker("w1", "t1", 6.0))
            assert isinstance(granted, Refund)
            assert (granted.refund_id, granted.status, granted.lease_token,
                    granted.lease_expires_at) == ("rf-1", "leased", "t1", 66.0)
            assert store.get("rf-1") == granted
            nothing_due = worker("w1", "t2", 4.0)
            # The protocol decides.
            assert store.claim_in_place(nothing_due) is lease.LEFT_TO_PROTOCOL
            assert store.claim(nothing_due) is None
        finally:
            connection.close()


def test_the_diagrams_show_the_code_of_the_blocks() -> None:
    files = generate({"refund": REFUND}, None).files
    mermaid = files["refund.mmd"].decode()
    for row in REFUND.rows:
        assert row.trigger in mermaid
    page = files["refund.md"].decode()
    assert "## Code of the building blocks" in page
    assert "### `schedule_retry` (effect)" in page and "def backoff(key, n):" in page
    assert "    return r.available_at <= i.now\n" in page
    assert "Another failure is allowed: failures + 1 < max_failures." in page
    import_target(str(ROOT / "examples" / "review" / "lifecycle.py"))
    from examples.review.lifecycle import REVIEW

    assert "Code of the building blocks" not in generate({"review": REVIEW}, None).files[
        "review.md"].decode()  # hand-written guards: their code is in their module


# On SQLite with the generic schema, derived from the record (no hand-written SQL).
TestRefundOnMemory, TestRefundOnSQLite = on_memory_and_sqlite(REFUND, "refund")
