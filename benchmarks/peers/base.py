"""What an entry of bench_peers.py is, and what each worker process reports.

A *system* (lifecycles' monitor, procrastinate, pgqueuer) owns one throw-away database:
it installs its tables there, empties them, fills them, and judges their final state.
An *enqueuer* is one way to put items into a system (timed); a *drainer* is one way to
drain it (a system with its worker settings), run in each worker process. The harness
(bench_peers.py) does the rest: processes, rounds, timing, CPU, and the checks that no
item was lost and none ran twice.

Adding an entry (the generic Worker's two modes, for example) is a subclass of
:class:`Drainer` with a ``name``, its ``system`` and a ``work`` method, added to
``DRAINERS`` in bench_peers.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import resource
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: How long a worker waits for the start, and the parent for a worker's report.
START_TIMEOUT = 120.0


def item_ids(count: int) -> list[str]:
    """The items of a run: ``e0`` .. ``e<count-1>`` in every system."""
    return [f"e{index}" for index in range(count)]


class System(ABC):
    """One queue system in a database of its own (``dsn``), driven from the parent process."""

    #: The label in the tables, and the suffix of its database's name.
    name: str
    #: The modules it needs (the peers come from the ``bench`` extra); one missing, and
    #: every entry of this system is left out of the run.
    requires: tuple[str, ...] = ()

    @abstractmethod
    def install(self, dsn: str) -> None:
        """Create the system's tables in its (empty) database."""

    @abstractmethod
    def reset(self, dsn: str) -> None:
        """Empty the system's tables, as installed."""

    @abstractmethod
    def fill(self, dsn: str, items: Sequence[str]) -> None:
        """Enqueue ``items``, each due at once, by the system's fastest way (not timed)."""

    @abstractmethod
    def queued_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        """What is wrong with the tables after ``items`` were enqueued: each queued once."""

    @abstractmethod
    def final_problems(self, dsn: str, items: Sequence[str]) -> list[str]:
        """What is wrong with the tables after a drain: each item finished exactly once,
        as the system's own table records it, and nothing else there."""


class Enqueuer(ABC):
    """One way to enqueue into a system, timed in the parent process."""

    name: str
    system: System

    @abstractmethod
    def enqueue(self, dsn: str, items: Sequence[str], batch: int) -> float:
        """Enqueue ``items`` (``batch`` a call where the method takes many), each due at
        once; returns the seconds spent in the system's calls (connecting excluded)."""


class Drainer(ABC):
    """One way to drain a system, as its users would run a worker process.

    ``work`` runs in each worker process, with a :class:`Recorder`. It opens its
    connections, calls ``recorder.ready()`` (the start of every process at once), then
    drains until nothing is left to claim, calling ``recorder.claiming()`` before each
    claim, ``recorder.handled(item)`` in the no-op handler and ``recorder.completed(items)``
    once those items' completions are committed; then ``recorder.finished()`` while its
    connections are still open (the parent reads their server processes' CPU), and
    closes them.
    """

    name: str
    system: System
    #: Whether every completion is committed when the system reports the item done.
    durable: bool = True
    #: The settings it runs with, for the table's notes.
    settings: str = ""

    @abstractmethod
    def work(self, dsn: str, items: Sequence[str], index: int, recorder: Recorder) -> None:
        """Drain as worker process ``index``; ``items`` are the run's, those its handler
        may be called for (see the class docstring)."""


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here."""
    return [name for name in modules if not importable(name)]


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses it, or a dotted name's missing parent
        return False


def cpu_seconds() -> float:
    """User and system CPU of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class WorkerReport:
    """What one worker process saw (``time.monotonic`` is one clock for every process)."""

    index: int
    calls: list[str]  # the item of each handler call, in order
    completions: list[str]  # the item of each completion reported committed
    first_claim: float | None
    last_completion: float | None
    cpu: float  # seconds, from the start to the end of its loop
    lags: list[float]  # per completion: seconds from its handler call to its commit


@dataclass
class Recorder:
    """The side of the harness a worker process talks to (see :class:`Drainer`).

    ``messages`` carries ("ready", index), ("report", WorkerReport) and ("error", index,
    text) to the parent; ``go`` starts every worker at once; ``release`` lets them close
    their connections once the parent has read the server's CPU.
    """

    index: int
    messages: Any
    go: Any
    release: Any
    calls: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    called_at: dict[str, float] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)
    first_claim: float | None = None
    last_completion: float | None = None
    cpu_at_start: float = 0.0

    def ready(self) -> None:
        """Connected: tell the parent, and wait until every worker may start."""
        self.messages.put(("ready", self.index))
        if not self.go.wait(timeout=START_TIMEOUT):
            raise RuntimeError("the start signal never came")
        self.cpu_at_start = cpu_seconds()

    async def ready_async(self) -> None:
        """:meth:`ready` for a worker on an event loop (which keeps running meanwhile)."""
        await asyncio.to_thread(self.ready)

    def claiming(self) -> None:
        """A claim is about to be sent: the first starts the clock."""
        if self.first_claim is None:
            self.first_claim = time.monotonic()

    def handled(self, item: str) -> None:
        """The handler ran for ``item``."""
        self.calls.append(item)
        self.called_at.setdefault(item, time.monotonic())

    def completed(self, items: Iterable[str]) -> None:
        """The completions of ``items`` are committed."""
        now = time.monotonic()
        for item in items:
            self.completions.append(item)
            called = self.called_at.get(item)  # None: not handled here (a verify failure)
            if called is not None:
                self.lags.append(now - called)
        self.last_completion = now

    def finished(self) -> None:
        """The loop is over, connections still open: report, and wait for the release."""
        self.messages.put(("report", WorkerReport(
            self.index, self.calls, self.completions, self.first_claim,
            self.last_completion, cpu_seconds() - self.cpu_at_start, self.lags,
        )))
        if not self.release.wait(timeout=START_TIMEOUT):
            raise RuntimeError("the release never came")

    async def finished_async(self) -> None:
        """:meth:`finished` for a worker on an event loop."""
        await asyncio.to_thread(self.finished)


def run_worker(drainer: Drainer, dsn: str, items: Sequence[str], index: int, messages: Any,
               go: Any, release: Any) -> None:
    """The target of a worker process: ``drainer.work``, any failure sent to the parent."""
    try:
        drainer.work(dsn, items, index, Recorder(index, messages, go, release))
    except BaseException as error:  # reported by the parent, which must not hang
        messages.put(("error", index, f"{type(error).__name__}: {error}"))


def handling_problems(items: Sequence[str], reports: Sequence[WorkerReport]) -> list[str]:
    """What the workers' own records show went wrong: an item never handled (lost), one
    handled more than once (ran twice), one that is not an item of the run, or a handler
    call whose completion was not reported exactly once."""
    expected = set(items)
    calls = Counter(item for report in reports for item in report.calls)
    completions = Counter(item for report in reports for item in report.completions)
    problems: list[str] = []
    lost = [item for item in items if item not in calls]
    if lost:
        problems.append(f"{len(lost)} items never handled (lost): {shown(lost)}")
    twice = sorted(item for item, count in calls.items() if count > 1 and item in expected)
    if twice:
        problems.append(f"{len(twice)} items handled more than once: {shown(twice)}")
    unknown = sorted(set(calls) - expected)
    if unknown:
        problems.append(f"{len(unknown)} handler calls for no item of the run: {shown(unknown)}")
    unmatched = sorted(item for item in set(calls) | set(completions)
                       if completions[item] != calls[item])
    if unmatched:
        problems.append(f"{len(unmatched)} items whose completions reported differ from their"
                        f" handler calls: {shown(unmatched)}")
    return problems


def keys_problems(found: Sequence[str], items: Sequence[str]) -> list[str]:
    """Rows missing for some items, rows twice for one, rows for no item of the run."""
    problems: list[str] = []
    present = set(found)
    missing = [item for item in items if item not in present]
    if missing:
        problems.append(f"{len(missing)} items have no row (lost): {shown(missing)}")
    if len(present) != len(found):
        problems.append(f"{len(found) - len(present)} rows repeat an item")
    extra = sorted(present - set(items))
    if extra:
        problems.append(f"{len(extra)} rows for no item of the run: {shown(extra)}")
    return problems


def shown(items: Sequence[str], most: int = 5) -> str:
    """The first ``most`` of ``items``, and how many more."""
    head = ", ".join(items[:most])
    return head + (f" (+{len(items) - most} more)" if len(items) > most else "")
