"""Logs and metrics of a running worker (lifecycles.observe), on a SQLite file and on
PostgreSQL: one scenario with a success, a retry, a permanent failure, a rescue of an
expired lease by another worker, the lost race it causes and a refusal; the log records
(caplog: levels and extra fields), the metrics (the OpenTelemetry SDK's in-memory reader:
names, attributes, counts) and every formatted log line, in which no lease token may appear.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from support.metrics import points, recording
from support.tasks import TASKS, Task, new_task

from lifecycles import observe
from lifecycles._worker import Idle, Worker
from lifecycles._worker_lease import HeldLease
from lifecycles.machines._work import Outcome, Permanent
from lifecycles.stores._base import Store, StoreUnavailable
from lifecycles.stores.sqlite import SQLiteStore

StoreFactory = Callable[[], Store[Task]]
LOGGER = "lifecycles.tasks"


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens the same store again, a new connection each time."""
    opened: list[Any] = []
    if request.param == "sqlite":
        path = tmp_path / "tasks.db"

        def sqlite_store() -> Store[Task]:
            opened.append(sqlite3.connect(path, check_same_thread=False))
            return SQLiteStore(TASKS, opened[-1])

        yield sqlite_store
    else:
        from support.postgres import connect_in, temporary_schema

        with temporary_schema() as schema:
            from lifecycles.stores.postgres import PostgresStore

            def postgres_store() -> Store[Task]:
                opened.append(connect_in(schema))
                return PostgresStore(TASKS, opened[-1])

            yield postgres_store
    for connection in opened:
        connection.close()


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """The SDK's in-memory reader, on a provider lifecycles records through."""
    with recording() as found:
        yield found


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counts(reader_points: list[tuple[dict[str, Any], Any]]) -> dict[tuple[Any, ...], int]:
    return {tuple(sorted(attributes.items())): point.value
            for attributes, point in reader_points}


class Scenario:
    """Five tasks through two workers, A and B, each outcome the brief asks for once.

    a-ok succeeds; b-retry raises (retried: back to queued); c-perm raises Permanent
    (failed); while d-race's handler runs on A, the clock passes its lease's expiry and B
    claims: B rescues d-race and leases e-refuse, whose handler answers an error code the
    record refuses (a refusal, on B); then A's handler returns and its step is refused on
    the rescued record (a lost race)."""

    def __init__(self, open_store: StoreFactory) -> None:
        self.clock = Clock()
        self.tokens: list[str] = []
        store = open_store()
        for name in ("a-ok", "b-retry", "c-perm", "d-race", "e-refuse"):
            store.insert(new_task(name, now=100.0))
        self.store = store
        self.b = Worker(TASKS, open_store, self.handler, worker_id="worker-b",
                        lease_seconds=30, clock=self.clock)
        self.a = Worker(TASKS, open_store, self.handler, worker_id="worker-a",
                        lease_seconds=30, clock=self.clock)

    def handler(self, task: Task, lease: HeldLease) -> Any:
        self.tokens.append(lease.token)
        if task.task_id == "b-retry":
            raise RuntimeError("try again")
        if task.task_id == "c-perm":
            raise Permanent("never")
        if task.task_id == "d-race":
            self.clock.now = 131.0  # past the lease's expiry (100 + 30)
            outcome = self.b.run_once()
            assert outcome is not None and outcome.key == "e-refuse"
        if task.task_id == "e-refuse":
            return Outcome("fail", {"error": "Not A Code!"})  # error_code_syntax refuses it
        return None

    def run(self) -> None:
        for expected in ("a-ok", "b-retry", "c-perm", "d-race"):
            outcome = self.a.run_once()
            assert outcome is not None and outcome.key == expected


def test_a_worker_run_emits_the_listed_metrics(open_store: StoreFactory,
                                              reader: InMemoryMetricReader) -> None:
    scenario = Scenario(open_store)
    scenario.run()
    found = points(reader)

    assert counts(found["lifecycles.transitions"]) == {
        tuple(sorted({"lifecycle": "tasks", "trigger": trigger, "source": source,
                      "destination": dest}.items())): 1
        for trigger, source, dest in [("succeed", "running", "succeeded"),
                                      ("fail", "running", "queued"),
                                      ("fail", "running", "failed"),
                                      ("expire", "running", "queued")]
    }
    assert counts(found["lifecycles.refusals"]) == {
        (("code", "tasks.state_invalid"), ("lifecycle", "tasks")): 1}
    assert counts(found["lifecycles.rescues"]) == {(("lifecycle", "tasks"),): 1}
    assert counts(found["lifecycles.lost_races"]) == {(("lifecycle", "tasks"),): 1}
    messaging = {"messaging.system": "lifecycles", "messaging.destination.name": "tasks"}
    assert counts(found["messaging.client.consumed.messages"]) == {
        tuple(sorted({**messaging, "messaging.operation.name": "claim",
                      "messaging.operation.type": "receive"}.items())): 5}
    # One claim call per run_once (A four, B one), each timed.
    (claims,) = found["lifecycles.claim.duration"]
    assert claims[0] == {"lifecycle": "tasks"} and claims[1].count == 5
    process = {tuple(sorted(attributes.items())): point.count
               for attributes, point in found["messaging.process.duration"]}
    processing = {**messaging, "messaging.operation.name": "process"}
    assert process == {
        tuple(sorted(processing.items())): 3,  # a-ok, d-race, e-refuse returned
        tuple(sorted({**processing, "error.type": "RuntimeError"}.items())): 1,
        tuple(sorted({**processing, "error.type": "Permanent"}.items())): 1,
    }


def test_a_worker_run_logs_each_event_with_its_fields_at_its_level(
        open_store: StoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="lifecycles")
    scenario = Scenario(open_store)
    scenario.run()
    ours = [record for record in caplog.records if record.name == LOGGER]
    events = [(record.levelname, record.lifecycle_event, record.lifecycle_key)  # type: ignore[attr-defined]
              for record in ours]
    assert events == [
        ("DEBUG", "claim", "a-ok"), ("DEBUG", "transition", "a-ok"),
        ("DEBUG", "claim", "b-retry"), ("DEBUG", "transition", "b-retry"),
        ("DEBUG", "claim", "c-perm"), ("DEBUG", "transition", "c-perm"),
        ("DEBUG", "claim", "d-race"),
        ("WARNING", "rescue", "d-race"),  # B's claim, committed, then its lease:
        ("DEBUG", "claim", "e-refuse"),
        ("WARNING", "refusal", "e-refuse"),
        ("WARNING", "lost_race", "d-race"),
    ]
    by_event = {(record.lifecycle_event, record.lifecycle_key): record.__dict__  # type: ignore[attr-defined]
                for record in ours}
    for fields in by_event.values():
        assert set(observe.FIELDS) <= set(fields)  # every field present, None when n/a
        assert fields["lifecycle"] == "tasks"
    retry = by_event[("transition", "b-retry")]
    assert (retry["lifecycle_trigger"], retry["lifecycle_source"],
            retry["lifecycle_destination"], retry["lifecycle_worker"],
            retry["lifecycle_attempt"], retry["lifecycle_error"]) == (
        "fail", "running", "queued", "worker-a", 1, "RuntimeError")
    rescue = by_event[("rescue", "d-race")]
    assert (rescue["lifecycle_trigger"], rescue["lifecycle_source"],
            rescue["lifecycle_destination"]) == ("expire", "running", "queued")
    assert rescue["lifecycle_lease"] == observe.lease_digest(scenario.tokens[3])
    refusal = by_event[("refusal", "e-refuse")]
    assert (refusal["lifecycle_code"], refusal["lifecycle_rules"], refusal["lifecycle_worker"],
            refusal["lifecycle_trigger"]) == (
        "tasks.state_invalid", ("error_code_syntax",), "worker-b", "fail")
    lost = by_event[("lost_race", "d-race")]
    assert (lost["lifecycle_code"], lost["lifecycle_worker"], lost["lifecycle_trigger"],
            lost["lifecycle_lease"]) == (
        "tasks.not_allowed", "worker-a", "succeed", observe.lease_digest(scenario.tokens[3]))


def test_at_the_default_warning_level_only_rescues_refusals_and_lost_races_are_logged(
        open_store: StoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lifecycles")
    Scenario(open_store).run()
    assert [(record.levelno, record.lifecycle_event)  # type: ignore[attr-defined]
            for record in caplog.records if record.name == LOGGER] == [
        (logging.WARNING, "rescue"), (logging.WARNING, "refusal"),
        (logging.WARNING, "lost_race")]


def test_no_lease_token_appears_in_any_log_output(
        open_store: StoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="lifecycles")
    scenario = Scenario(open_store)
    scenario.run()
    every_field = " ".join(f"{name}=%({name})s" for name in observe.FIELDS)
    formatter = logging.Formatter(f"%(levelname)s %(name)s %(message)s {every_field}")
    ours = [record for record in caplog.records if record.name.startswith("lifecycles")]
    assert len(ours) == 11
    output = "\n".join([formatter.format(record) for record in ours]
                       + [repr(record.__dict__) for record in ours] + [caplog.text])
    assert len(scenario.tokens) == 5
    for token in scenario.tokens:
        assert token not in output
    # What is shown instead: each lease's digest.
    assert observe.lease_digest(scenario.tokens[0]) in output


def test_with_no_provider_and_the_logger_off_the_worker_records_nothing(
        open_store: StoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="lifecycles")
    observe.use_meter_provider(None)  # the global provider: the API's proxy, no SDK
    scenario = Scenario(open_store)
    assert not scenario.a.work.observer.collecting()
    scenario.run()
    assert [record for record in caplog.records if record.name == LOGGER] == []


def test_the_loop_logs_an_unavailable_store_as_a_warning_with_its_code(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tasks.db"
    seeded = SQLiteStore(TASKS, sqlite3.connect(path))
    seeded.insert(new_task("task-000"))
    opened: list[sqlite3.Connection] = []

    def open_store() -> Store[Task]:
        opened.append(sqlite3.connect(path, check_same_thread=False))
        return SQLiteStore(TASKS, opened[-1])

    def handler(task: Task, lease: HeldLease) -> None:
        if len(opened) == 1:
            opened[0].close()  # the connection breaks while the handler runs

    caplog.set_level(logging.WARNING, logger="lifecycles")
    errors: list[BaseException] = []
    worker = Worker(TASKS, open_store, handler, worker_id="worker-a", on_error=errors.append,
                    idle=Idle(poll_interval=0.01, first=0.01))
    worker.run(until_idle=True, install_signal_handlers=False)
    assert [type(error) for error in errors] == [StoreUnavailable]
    (logged,) = [record for record in caplog.records if record.name == LOGGER]
    assert (logged.levelno, logged.lifecycle_event, logged.lifecycle_code,  # type: ignore[attr-defined]
            logged.lifecycle_worker) == (  # type: ignore[attr-defined]
        logging.WARNING, "store_error", "lifecycles.database_unreachable", "worker-a")
    for connection in opened:
        connection.close()


def test_watch_health_reports_records_by_status_due_and_expired(
        tmp_path: Path, reader: InMemoryMetricReader) -> None:
    store = SQLiteStore(TASKS, sqlite3.connect(tmp_path / "tasks.db"))
    for n in range(3):
        store.insert(new_task(f"task-{n}", now=100.0))
    store.insert(new_task("later", now=500.0))
    clock = Clock(100.0)
    worker = Worker(TASKS, store, lambda task, lease: None, lease_seconds=30, clock=clock,
                    worker_id="worker-a")
    worker.work.claim(store, "worker-a", 100.0, 30.0)  # task-0 leased until 130
    clock.now = 200.0  # its lease has expired; task-1, task-2 are due, later is not
    gauges = observe.watch_health(store, TASKS, clock=clock)
    assert gauges is not None
    found = points(reader)
    assert counts(found["lifecycles.records"]) == {
        (("lifecycle", "tasks"), ("status", status)): count
        for status, count in {"queued": 3, "running": 1, "succeeded": 0, "failed": 0}.items()}
    assert counts(found["lifecycles.records.due"]) == {(("lifecycle", "tasks"),): 2}
    assert counts(found["lifecycles.leases.expired"]) == {(("lifecycle", "tasks"),): 1}


def test_without_a_provider_watch_health_registers_nothing(tmp_path: Path) -> None:
    observe.use_meter_provider(None)
    store = SQLiteStore(TASKS, sqlite3.connect(tmp_path / "tasks.db"))
    assert observe.watch_health(store, TASKS) is None


def test_a_lease_digest_is_eight_hex_digits_of_sha256() -> None:
    assert observe.lease_digest("abc") == "ba7816bf"
    assert observe.lease_digest(None) is None


def test_an_exclusive_pass_logs_and_counts_its_steps(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, reader: InMemoryMetricReader) -> None:
    """ExclusiveWork (the pass of a lifecycle without a lease: the outbox's replay), on the
    tests' deliveries in a files store."""
    from support.deliveries import (
        DELIVERIES,
        Message,
        MessageInputs,
        MessageStatus,
        finish_delivery,
    )

    from lifecycles._worker_steps import ExclusiveWork
    from lifecycles.stores._files import FilesStore

    store = FilesStore(DELIVERIES, tmp_path / "messages")
    for key in ("m0", "m1"):
        store.insert(Message(key, MessageStatus.PENDING))
    caplog.set_level(logging.DEBUG, logger="lifecycles")
    failing, delivered = "m0", "m1"
    records = sorted(store.scan(), key=lambda m: m.message_id)
    ExclusiveWork(DELIVERIES, "attempt", finish_delivery).run(
        store, records, lambda m: 1 / 0 if m.message_id == failing else None, MessageInputs())
    logged = [(record.lifecycle_key, record.lifecycle_trigger,  # type: ignore[attr-defined]
               record.lifecycle_source, record.lifecycle_destination,  # type: ignore[attr-defined]
               record.lifecycle_error)  # type: ignore[attr-defined]
              for record in caplog.records if record.name == "lifecycles.deliveries"]
    # Both intakes in one transaction, then both finishing steps in another.
    assert sorted(logged[:2]) == sorted([(failing, "attempt", "pending", "pending", None),
                                         (delivered, "attempt", "pending", "pending", None)])
    assert sorted(logged[2:]) == sorted([
        (failing, "fail", "pending", "pending", "ZeroDivisionError"),
        (delivered, "deliver", "pending", "delivered", None)])
    found = points(reader)
    assert sum(point.value for _, point in found["lifecycles.transitions"]) == 4
    errors = sorted(attributes.get("error.type", "-")
                    for attributes, _ in found["messaging.process.duration"])
    assert errors == ["-", "ZeroDivisionError"]


def test_the_lease_protocol_alone_reports_nothing_a_store_claim_reports_its_rescue(
        caplog: pytest.LogCaptureFixture) -> None:
    """The checker drives the protocol over its own model: its explored rescues must not
    reach an operator's log (they did, once, as WARNINGs during ``lifecycles check``)."""
    from support.tasks import TaskInputs

    from lifecycles.machines import lease as lease_protocol
    from lifecycles.stores._memory import MemoryStore

    caplog.set_level(logging.DEBUG, logger="lifecycles")

    def expired_store() -> MemoryStore[Task]:
        store = MemoryStore(TASKS, [new_task("t-1", now=0.0)])
        assert store.claim(TaskInputs(now=0.0, worker_id="w-1", lease_token="tok-1",
                                      lease_seconds=5)) is not None
        return store

    later = TaskInputs(now=10.0, worker_id="w-2", lease_token="tok-2", lease_seconds=5)
    model = expired_store()
    caplog.clear()
    lease_protocol.claim(model.leasing(), TASKS, later)
    assert model.get("t-1") is not None and str(model.get("t-1").status) == "queued"  # type: ignore[union-attr]
    assert [record for record in caplog.records if record.name == LOGGER] == []
    store = expired_store()
    caplog.clear()
    store.claim(later)
    assert [(record.levelno, record.lifecycle_event)  # type: ignore[attr-defined]
            for record in caplog.records if record.name == LOGGER] == [
        (logging.WARNING, "rescue")]


def test_the_loop_logs_a_damaged_record_as_an_error_with_its_code_and_rules(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tasks.db"
    connection = sqlite3.connect(path, check_same_thread=False)
    store = SQLiteStore(TASKS, connection)
    store.insert(new_task("task-000"))
    with connection:  # a row no read accepts: attempts beyond max_attempts
        connection.execute("UPDATE lifecycle_tasks SET attempts = 9")
    caplog.set_level(logging.WARNING, logger="lifecycles")
    worker: Worker[Task, Any]

    def stop(error: BaseException) -> None:
        worker.stop(now=True)

    worker = Worker(TASKS, store, lambda task, lease: None, worker_id="worker-a",
                    on_error=stop, idle=Idle(poll_interval=0.01, first=0.01))
    worker.run(until_idle=True, install_signal_handlers=False)
    (logged,) = [record for record in caplog.records if record.name == LOGGER]
    assert (logged.levelno, logged.lifecycle_event, logged.lifecycle_code,  # type: ignore[attr-defined]
            logged.lifecycle_rules, logged.lifecycle_worker) == (  # type: ignore[attr-defined]
        logging.ERROR, "store_error", "tasks.state_invalid", ("attempts_within_max",),
        "worker-a")
    connection.close()


def test_renewals_are_logged_and_a_refused_one_is_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SQLiteStore(TASKS, sqlite3.connect(tmp_path / "tasks.db"))
    store.insert(new_task("renewed", now=100.0))
    store.insert(new_task("stalled", now=100.0))
    clock = Clock(100.0)
    answers: list[bool] = []

    def handler(task: Task, lease: HeldLease) -> None:
        if task.task_id == "stalled":
            clock.now += 31  # past the lease: its renewal is refused
        answers.append(lease.renew())

    caplog.set_level(logging.DEBUG, logger="lifecycles")
    worker = Worker(TASKS, store, handler, worker_id="worker-a", lease_seconds=30, clock=clock)
    assert worker.run_once() is not None and worker.run_once() is not None
    assert answers == [True, False]
    logged = [(record.levelno, record.lifecycle_event, record.lifecycle_key,  # type: ignore[attr-defined]
               record.lifecycle_code)  # type: ignore[attr-defined]
              for record in caplog.records if record.name == LOGGER]
    assert logged == [
        (logging.DEBUG, "claim", "renewed", None), (logging.DEBUG, "renewal", "renewed", None),
        (logging.DEBUG, "transition", "renewed", None),
        (logging.DEBUG, "claim", "stalled", None),
        (logging.WARNING, "renewal_refused", "stalled", "tasks.lease_expired"),
        # Its lease still holds its token: the refusal is the table's, no lost race.
        (logging.WARNING, "refusal", "stalled", "tasks.lease_expired"),
    ]


def test_the_loop_with_concurrent_handlers_counts_each_outcome_once(
        open_store: StoreFactory, reader: InMemoryMetricReader) -> None:
    store = open_store()
    for n in range(12):
        store.insert(new_task(f"task-{n:03d}", now=0.0))

    def handler(task: Task, lease: HeldLease) -> None:
        if task.task_id.endswith(("3", "7")):
            raise Permanent("no")

    worker = Worker(TASKS, open_store, handler, concurrency=3, batch_size=4,
                    idle=Idle(poll_interval=0.01, first=0.01))
    worker.run(until_idle=True, install_signal_handlers=False)
    found = points(reader)
    transitions = {(attributes["trigger"], attributes["destination"]): point.value
                   for attributes, point in found["lifecycles.transitions"]}
    assert transitions == {("succeed", "succeeded"): 10, ("fail", "failed"): 2}
    assert sum(point.value for _, point in found["messaging.client.consumed.messages"]) == 12
    assert sum(point.count for _, point in found["messaging.process.duration"]) == 12
    assert "lifecycles.refusals" not in found and "lifecycles.rescues" not in found


def test_without_opentelemetry_a_worker_runs_and_logs_and_nothing_is_imported(
        tmp_path: Path) -> None:
    """Run in a fresh interpreter where ``import opentelemetry`` fails, as when the
    package is not installed: the worker's cycle runs, logs, and records no metrics."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import logging, sqlite3, sys
        sys.modules["opentelemetry"] = None  # what an absent package looks like to import
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        import lifecycles._worker
        assert not any(name.startswith("opentelemetry") for name in sys.modules
                       if sys.modules[name] is not None), "imported at import time"
        from support.tasks import TASKS, new_task
        from lifecycles import observe
        from lifecycles.stores.sqlite import SQLiteStore
        logging.basicConfig(level=logging.DEBUG, stream=sys.stdout,
                            format="%(lifecycle_event)s %(lifecycle_key)s")
        store = SQLiteStore(TASKS, sqlite3.connect({str(tmp_path / "tasks.db")!r}))
        store.insert(new_task("t-1"))
        worker = lifecycles._worker.Worker(TASKS, store, lambda task, lease: None)
        assert worker.run_once() is not None
        assert not worker.work.observer.collecting()
        assert observe.watch_health(store, TASKS) is None
        print("done")
    """)
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=False, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[:3] == ["claim t-1", "transition t-1", "done"]


def test_a_store_error_is_logged_by_class_and_code_never_by_its_text(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="lifecycles")
    secret = "tok-3f9a8c1d0e"
    error = StoreUnavailable(f"new row violates check: Failing row contains (t-1, {secret})",
                             code="lifecycles.database_unreachable")
    observe.observer(TASKS).store_error(error, "worker-a", transient=True)
    (logged,) = caplog.records
    assert logged.getMessage() == (
        "tasks: worker worker-a: StoreUnavailable (lifecycles.database_unreachable)")
    assert secret not in caplog.text and secret not in repr(logged.__dict__)
