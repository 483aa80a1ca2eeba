"""pgqueuer (the ``bench`` extra), as ``pgq run`` runs it: a ``QueueManager`` on an
``AsyncpgDriver`` (one asyncpg connection a process) on uvloop, an ``async def``
entrypoint, ``QueueManager.run(batch_size=N, mode=drain)``.

Its worker picks ``batch_size`` jobs a statement and runs them concurrently. A finished
job's completion (deleting it from ``pgqueuer`` and logging it ``successful`` in
``pgqueuer_log``) goes into an in-memory buffer, ``JobStatusLogBuffer``, flushed when
``batch_size`` completions wait or every 0.1 s: a job whose handler has returned is not
durable yet, and is run again (after its heartbeat times out) if its worker dies first.
pgqueuer has no setting that writes completions as they happen (``batch_size=1`` only
flushes sooner, still from a background task). The ``durable`` entry replaces that buffer,
in its worker processes only, with one that commits each completion before the job's
dispatch ends (:class:`CommittedJobStatusLog`): what durability costs pgqueuer.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections import Counter
from collections.abc import Coroutine, Sequence
from typing import Any

from .base import Drainer, Enqueuer, Recorder, System, keys_problems, shown

ENTRYPOINT = "noop"


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run on the event loop ``pgq run`` picks (uvloop where it is installed)."""
    from pgqueuer.adapters.cli.cli import asyncio_run

    return asyncio_run(coroutine)


async def asyncpg_connect(dsn: str) -> Any:
    """An asyncpg connection to ``dsn`` (asyncpg ships no type information)."""
    return await importlib.import_module("asyncpg").connect(dsn)


async def queries_on(dsn: str) -> tuple[Any, Any]:
    """An asyncpg connection to ``dsn`` and pgqueuer's ``Queries`` on it."""
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg_connect(dsn)
    return connection, Queries(AsyncpgDriver(connection))


class PgqueuerSystem(System):
    """``pgqueuer``, ``pgqueuer_log`` and their companions, as ``Queries.install`` creates
    them (the default durability: every table logged)."""

    name = "pgqueuer"
    requires = ("pgqueuer", "asyncpg")

    def __init__(self) -> None:
        self.items_of_jobs: dict[int, str] = {}  # the job ids of the last fill

    def install(self, dsn: str) -> None:
        async def install() -> None:
            connection, queries = await queries_on(dsn)
            try:
                await queries.install()
            finally:
                await connection.close()

        asyncio.run(install())

    def reset(self, dsn: str) -> None:
        async def reset() -> None:
            connection, _ = await queries_on(dsn)
            try:
                await connection.execute(
                    "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY")
            finally:
                await connection.close()

        asyncio.run(reset())
        self.items_of_jobs = {}

    def fill(self, dsn: str, items: Sequence[str]) -> None:
        async def fill() -> dict[int, str]:
            connection, queries = await queries_on(dsn)
            try:
                found: dict[int, str] = {}
                for start in range(0, len(items), 1000):
                    chunk = items[start:start + 1000]
                    ids = await queries.enqueue(
                        [ENTRYPOINT] * len(chunk), [item.encode() for item in chunk],
                        [0] * len(chunk))
                    found.update(zip(ids, chunk, strict=True))
                return found
            finally:
                await connection.close()

        self.items_of_jobs = asyncio.run(fill())

    def _fetch(self, dsn: str, query: str) -> list[tuple[Any, ...]]:
        async def fetch() -> list[tuple[Any, ...]]:
            connection, _ = await queries_on(dsn)
            try:
                return [tuple(row) for row in await connection.fetch(query)]
            finally:
                await connection.close()

        return asyncio.run(fetch())

    def queued_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        jobs = self._fetch(dsn, "SELECT convert_from(payload, 'UTF8'), status::text,"
                                " entrypoint FROM pgqueuer")
        problems = keys_problems([job[0] for job in jobs], items)
        waiting = [job[0] for job in jobs if (job[1], job[2]) != ("queued", ENTRYPOINT)]
        if waiting:
            problems.append(f"{len(waiting)} jobs not queued: {shown(waiting)}")
        return problems

    def final_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        left = self._fetch(dsn, "SELECT id, status::text FROM pgqueuer")
        problems = [f"{len(left)} jobs left in pgqueuer: {left[:5]}"] if left else []
        logged = self._fetch(dsn, "SELECT job_id, status::text FROM pgqueuer_log"
                                  " WHERE status NOT IN ('queued', 'picked')")
        statuses = Counter(status for _, status in logged)
        if set(statuses) - {"successful"}:
            problems.append(f"jobs logged by final status: {dict(statuses)}, not all successful")
        unknown = sorted({job for job, _ in logged} - set(self.items_of_jobs))
        if unknown:
            problems.append(f"{len(unknown)} log rows for jobs not enqueued: {unknown[:5]}")
        done = [self.items_of_jobs[job] for job, _ in logged if job in self.items_of_jobs]
        return problems + keys_problems(done, items)


PGQUEUER = PgqueuerSystem()


class ListEnqueue(Enqueuer):
    """``Queries.enqueue`` with lists: one statement for ``batch`` jobs."""

    name = "pgqueuer list enqueue"
    system = PGQUEUER

    def enqueue(self, dsn: str, items: Sequence[str], batch: int) -> float:
        batches = [[item.encode() for item in items[start:start + batch]]
                   for start in range(0, len(items), batch)]

        async def enqueue() -> float:
            connection, queries = await queries_on(dsn)
            try:
                started = time.perf_counter()
                for payloads in batches:
                    await queries.enqueue(
                        [ENTRYPOINT] * len(payloads), payloads, [0] * len(payloads))
                return time.perf_counter() - started
            finally:
                await connection.close()

        return asyncio.run(enqueue())


def recorded_queries(driver: Any, recorder: Recorder) -> Any:
    """pgqueuer's ``Queries`` on ``driver``, telling ``recorder`` of each claim (dequeue)
    and of each completion once its statement returned (committed: asyncpg autocommits)."""
    from pgqueuer import Queries

    class RecordedQueries(Queries):
        async def dequeue(self, *args: Any, **kwargs: Any) -> Any:
            recorder.claiming()
            return await super().dequeue(*args, **kwargs)

        async def log_jobs(self, job_status: Any) -> None:
            await super().log_jobs(job_status)
            recorder.completed(job.payload.decode() for job, status, _ in job_status
                               if status == "successful")

    return RecordedQueries(driver)


def commit_each_completion() -> None:
    """Make this process's pgqueuer commit each completion before the job's dispatch
    ends, instead of buffering it (QueueManager.run builds ``buffers.JobStatusLogBuffer``
    when it starts, so the replacement is what it builds)."""
    from pgqueuer.core import buffers

    class CommittedJobStatusLog(buffers.JobStatusLogBuffer):
        """A completion is logged (and committed) before ``add`` returns."""

        async def add(self, item: Any) -> None:
            await self.flush_items([item])

    buffers.JobStatusLogBuffer = CommittedJobStatusLog  # type: ignore[misc]


class PgqueuerWorker(Drainer):
    """``QueueManager.run(batch_size=N, mode=drain)`` in each process."""

    system = PGQUEUER

    def __init__(self, batch: int, durable: bool = False) -> None:
        self.batch = batch
        self.durable = durable
        self.name = f"pgqueuer batch={batch}" + (" durable" if durable else "")
        self.settings = (f"batch_size={batch}" + (" (the default)" if batch == 10 else "")
                         + (", each completion committed before its dispatch ends"
                            if durable else ", completions buffered up to 0.1 s"))

    def work(self, dsn: str, items: Sequence[str], index: int, recorder: Recorder) -> None:
        if self.durable:
            commit_each_completion()
        run(self._work(dsn, recorder))

    async def _work(self, dsn: str, recorder: Recorder) -> None:
        from pgqueuer import AsyncpgDriver, QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        connection = await asyncpg_connect(dsn)
        try:
            manager = QueueManager(recorded_queries(AsyncpgDriver(connection), recorder))

            @manager.entrypoint(ENTRYPOINT)
            async def noop(job: Any) -> None:
                recorder.handled(job.payload.decode())

            await recorder.ready_async()
            await manager.run(batch_size=self.batch, mode=QueueExecutionMode.drain)
            await recorder.finished_async()
        finally:
            await connection.close()
