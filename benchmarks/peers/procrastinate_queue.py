"""procrastinate (the ``bench`` extra), as its documentation runs it: an ``App`` on a
``PsycopgConnector``, an ``async def`` task, ``App.run_worker_async`` in each process.

Its worker fetches one job a statement and finishes it with another, each committed;
``concurrency`` jobs at once share the process's connection pool. The drain runs with
``wait=False`` (the worker stops when a fetch finds nothing) and without signal handlers;
every other option is the default (``delete_jobs="never"``: finished jobs stay in
``procrastinate_jobs`` as ``succeeded``, which the final check reads).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .base import Drainer, Enqueuer, Recorder, System, keys_problems, shown

TASK = "noop"


def make_app(dsn: str, handler: Callable[[str], Any] | None = None,
             **pool: Any) -> Any:
    """An App on ``dsn`` with the no-op task (``handler`` called with each item)."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, **pool))

    async def noop(item: str) -> None:
        if handler is not None:
            handler(item)

    app.task(name=TASK)(noop)
    return app


def connection(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


class ProcrastinateSystem(System):
    """``procrastinate_jobs`` and its companions, as ``apply_schema`` creates them."""

    name = "procrastinate"
    requires = ("procrastinate",)

    def install(self, dsn: str) -> None:
        async def install() -> None:
            app = make_app(dsn)
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(install())

    def reset(self, dsn: str) -> None:
        with connection(dsn) as admin:
            admin.execute("TRUNCATE procrastinate_jobs, procrastinate_events,"
                          " procrastinate_workers, procrastinate_periodic_defers"
                          " RESTART IDENTITY CASCADE")

    def fill(self, dsn: str, items: Sequence[str]) -> None:
        BatchDefer().enqueue(dsn, items, 1000)

    def _jobs(self, dsn: str) -> list[tuple[Any, ...]]:
        with connection(dsn) as admin:
            return list(admin.execute(
                "SELECT args->>'item', status::text, attempts, task_name FROM procrastinate_jobs"
            ).fetchall())

    def queued_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        jobs = self._jobs(dsn)
        problems = keys_problems([job[0] for job in jobs], items)
        waiting = [job[0] for job in jobs if (job[1], job[3]) != ("todo", TASK)]
        if waiting:
            problems.append(f"{len(waiting)} jobs not todo: {shown(waiting)}")
        return problems

    def final_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        jobs = self._jobs(dsn)
        problems = keys_problems([job[0] for job in jobs], items)
        statuses = Counter(job[1] for job in jobs)
        if set(statuses) != {"succeeded"}:
            problems.append(f"jobs by status: {dict(statuses)}, not all succeeded")
        # A finished job counts its runs: 1, or it was fetched again after a retry.
        again = [job[0] for job in jobs if job[2] != 1]
        if again:
            problems.append(f"{len(again)} jobs not run exactly once: {shown(again)}")
        return problems


PROCRASTINATE = ProcrastinateSystem()


class BatchDefer(Enqueuer):
    """``Task.batch_defer_async``: one statement for ``batch`` jobs."""

    name = "procrastinate batch_defer"
    system = PROCRASTINATE

    def enqueue(self, dsn: str, items: Sequence[str], batch: int) -> float:
        batches = [[{"item": item} for item in items[start:start + batch]]
                   for start in range(0, len(items), batch)]

        async def enqueue() -> float:
            app = make_app(dsn)
            async with app.open_async():
                task = app.tasks[TASK]
                started = time.perf_counter()
                for arguments in batches:
                    await task.batch_defer_async(*arguments)
                return time.perf_counter() - started

        return asyncio.run(enqueue())


class ProcrastinateWorker(Drainer):
    """``App.run_worker_async(concurrency=N, wait=False)`` in each process."""

    system = PROCRASTINATE

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.name = f"procrastinate concurrency={concurrency}"
        # Its default pool (4 connections) serves concurrency 1; for more, a pool a user
        # would size for it: one connection per job at once, the listener's, one spare.
        self.pool = {} if concurrency == 1 else {
            "min_size": concurrency + 2, "max_size": concurrency + 2}
        self.settings = ("the defaults: concurrency=1, a pool of 4" if concurrency == 1 else
                         f"concurrency={concurrency}, a pool of {concurrency + 2}")

    def work(self, dsn: str, items: Sequence[str], index: int, recorder: Recorder) -> None:
        asyncio.run(self._work(dsn, recorder))

    async def _work(self, dsn: str, recorder: Recorder) -> None:
        app = make_app(dsn, recorder.handled, **self.pool)
        async with app.open_async():
            manager = app.job_manager
            fetch, finish = manager.fetch_job, manager.finish_job

            async def fetch_job(*args: Any, **kwargs: Any) -> Any:
                recorder.claiming()
                return await fetch(*args, **kwargs)

            async def finish_job(*args: Any, **kwargs: Any) -> Any:
                done = await finish(*args, **kwargs)
                job = kwargs["job"] if "job" in kwargs else args[0]
                recorder.completed([job.task_kwargs["item"]])
                return done

            # The worker calls these through the manager: timed where they are awaited.
            manager.fetch_job, manager.finish_job = fetch_job, finish_job
            await recorder.ready_async()
            await app.run_worker_async(
                concurrency=self.concurrency, wait=False, install_signal_handlers=False)
            await recorder.finished_async()
