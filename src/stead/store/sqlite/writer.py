"""The single writer: group commit on the event loop, fsync on a thread.

Why this shape: SQLite allows one writer at a time, and a commit without an fsync
(``synchronous=NORMAL`` in WAL mode) costs tens of microseconds — less than handing work to
another thread. So every job queued during one turn of the event loop runs in one
``BEGIN IMMEDIATE`` transaction at the end of that turn, on the loop itself: concurrent runs share
one commit (group commit), and the order jobs were queued in is the order they commit in.

What costs milliseconds is the fsync. A batch that holds a *barrier* (or any batch, with
``fsync="always"``) is made durable by an fsync of the write-ahead log on a separate thread, which
flushes that commit and every one before it; batches that arrive meanwhile share the next fsync.
When the owner executes at most one run and nothing else waits for the disk, the loop flushes
itself instead: nobody is kept waiting, and the hand-off to the thread and back is saved. Then,
too, a commit someone waits for (a barrier too) happens at once, in the caller's own step, with
the jobs queued before it, and a barrier's fsync with it: nobody else would join its batch, and
the caller saves two turns of the loop. A side effect's result that the run does not wait for
(a *lazy barrier*) waits in the queue instead, so that the write the run waits for next (its
next model call's intent) shares its commit and its fsync.
A flush that follows a pause in the disk's work is preceded by a read sent to the disk, not
waited for, before the loop builds the commit (``stead.store.sqlite.disk``): disks that are slow
to answer after a pause are at work again by the time the flush starts.
Results are delivered in commit order, each once the disk flush it needs has happened, so nothing
is acknowledged before it is durable, and the loop does not block on the disk while others wait.

A storage failure, or any failure of a job that has no savepoint of its own, poisons the writer:
the batch is rolled back, every job in it and every later job fails with the same
:class:`StorageError`. Other exceptions of a checked job are that job's answer alone.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..._clock import TIMER_EARLY
from ..._threads import Placement
from ...errors import StorageError
from ...journal.records import Notice
from ..jobs import Job, answer, call_job, run_jobs
from .disk import DiskWaker

T = TypeVar("T")
Tx = TypeVar("Tx")


class Batcher(Protocol[Tx]):
    """What a backend provides to the writer: transactions over its one connection."""

    def begin(self) -> Tx: ...
    def commit(self, tx: Tx) -> tuple[list[Notice], bool]: ...
    def rollback(self, tx: Tx) -> None: ...
    def reader(self) -> Tx: ...
    def busy(self, exc: BaseException) -> bool: ...

    #: Seconds a batch may wait for a lock another process holds before the store fails.
    busy_timeout: float

    #: Exceptions that mean the storage itself failed (they poison the writer); anything else
    #: a checked job raises is that job's answer.
    storage_errors: tuple[type[BaseException], ...]


@dataclass(slots=True)
class _Committed:
    """A committed batch waiting to be delivered: once commit number ``needs`` is on disk."""

    jobs: list[Job[Any]]
    events: list[Notice]
    needs: int


class Writer:
    """Group-commits queued jobs at the end of each loop turn; see the module docstring."""

    #: Seconds a lazy write may wait for company before it commits on its own.
    lazy_delay = 0.002
    #: Lazy writes queued before they commit anyway.
    max_lazy = 256
    #: Seconds since the disk last flushed (or was woken) after which a flush to come wakes it
    #: first (see ``stead.store.sqlite.disk``).
    wake_after = 0.0005

    def __init__(
        self,
        backend: Batcher[Any],
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[Notice]], None],
        on_fatal: Callable[[StorageError], None],
        *,
        sync: Callable[[], None] | None,
        always: bool,
        name: str,
        waker: DiskWaker | None = None,
    ) -> None:
        self._backend = backend
        self._loop = loop
        self._on_commit = on_commit
        self._on_fatal = on_fatal
        self._sync = sync
        self._always = always
        #: Sends the disk a read, not waited for, ahead of a flush, when that pays
        #: (``disk.DiskWaker``).
        self._waker = waker
        #: A flush after a pause is coming: whether the disk was woken for it, and the seconds
        #: the wake took on the loop; the waker learns those and the flush's own
        #: (:meth:`_synced_to`). A later decision made before that flush replaces it.
        self._woke: tuple[bool, float] | None = None
        #: When the disk last flushed or was woken (loop time); the store has just flushed it.
        self._last_io = loop.time()
        self._pending: list[Job[Any]] = []
        #: The jobs of ``_pending`` by their future, for :meth:`amend` (many runs queue jobs
        #: between a tool's intent and its result: no scan of the queue each time).
        self._queued: dict[asyncio.Future[Any], Job[Any]] = {}
        self._scheduled = False
        #: The lazy-commit timer. It is not cancelled when a flush takes the lazy jobs early
        #: (every turn of a run, when the next intent commits): a later lazy job reuses it,
        #: and it waits on when it fires early for that job; one that finds no lazy job
        #: waiting ends there.
        self._timer: asyncio.TimerHandle | None = None
        #: When the oldest lazy job queued since the last flush was queued (loop time).
        self._lazy_since: float | None = None
        self._flushing = False  # a flush (and its delivery) is under way
        self._commits = 0  # commits made
        self._synced = 0  # commits known to be on disk
        self._wanted = 0  # the highest commit a job waits to see on disk
        self._syncing = False
        self._deliveries: collections.deque[_Committed] = collections.deque()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)
        #: Where the flush thread wakes: on the loop's CPU (``stead._threads``).
        self._placement = Placement()
        if sync is not None:  # start the flush thread now, not at the first barrier
            self._executor.submit(self._placement.bind).result()
        self._idle = asyncio.Event()
        self._idle.set()
        self._busy_since: float | None = None
        self._busy_delay = 0.0
        self.poisoned: StorageError | None = None
        #: Whether nobody else would wait while the loop flushes the disk itself (the owner
        #: sets it: true while it executes at most one run). Then a barrier whose batch is the
        #: only one waiting is flushed on the loop, without the hand-off to the flush thread
        #: and back — two thread wake-ups, which on a small virtual machine cost a good part
        #: of an fsync — and a commit someone waits for happens in the caller's step.
        self.alone: Callable[[], bool] | None = None

    def submit(
        self,
        fn: Callable[[Any], T],
        *,
        barrier: bool = False,
        read_only: bool = False,
        checked: bool = True,
        lazy: bool = False,
    ) -> asyncio.Future[T]:
        """Queue ``fn(tx)``; the future resolves after its batch commits (and, for a barrier, is
        on disk). A ``checked`` job may raise a :class:`SteadError` as its answer, which undoes
        its writes alone (a savepoint); an unchecked job's failure poisons the store.

        A ``lazy`` job is one nobody waits for: it rides along with the next commit someone
        does wait for, or commits after :attr:`lazy_delay` seconds, so a sequence of pipelined
        writes shares one commit. A lazy ``barrier`` makes that commit wait for the disk."""
        future: asyncio.Future[T] = self._loop.create_future()
        job = Job(fn, future, barrier, read_only, checked)
        if self.poisoned is not None:
            answer(job, self.poisoned)
            return future
        if self._waker is not None and (barrier or (self._always and not read_only)):
            self._wake_disk()
        self._pending.append(job)
        self._queued[future] = job
        self._idle.clear()
        if self._scheduled:
            return future
        if not lazy and self._may_commit_here():
            self._flush()  # the future is settled when this returns
            return future
        if not lazy or len(self._pending) >= self.max_lazy:
            self._scheduled = True
            self._loop.call_soon(self._flush)
        else:
            if self._lazy_since is None:
                self._lazy_since = self._loop.time()
            if self._timer is None:
                self._timer = self._loop.call_at(self._lazy_since + self.lazy_delay, self._due)
        return future

    def _wake_disk(self) -> None:
        """A flush is coming: if the disk has had nothing to do for :attr:`wake_after`
        seconds, send it a read (not waited for) before the loop builds the commit, so that the
        flush does not find it idle, where the waker's judge finds that this pays (see
        ``stead.store.sqlite.disk``). Refused, waking stops."""
        now = self._loop.time()
        if self._syncing or now - self._last_io < self.wake_after:
            return
        self._last_io = now
        assert self._waker is not None
        began = time.perf_counter()
        try:
            woken = self._waker.before_flush()
        except OSError:
            self._waker = None
        else:
            self._woke = (woken, time.perf_counter() - began)

    def _may_commit_here(self) -> bool:
        """Whether a job someone waits for may be committed at once, in the caller's own
        step, instead of at the end of the loop's turn: nobody else would add to the batch
        (the owner says so, :attr:`alone`), no earlier batch waits for delivery, and this is
        not a flush's own delivery calling back (which would deliver out of order). It saves
        the caller two turns of the loop: one to flush, one to wake it. A barrier is flushed to
        disk in that step too (:meth:`_may_flush_here` holds then), so a ``manual`` tool's
        intent is on disk when its submission returns."""
        return (
            not self._flushing and not self._deliveries and self.alone is not None and self.alone()
        )

    def _due(self) -> None:
        """The lazy timer fired: commit the lazy jobs that have waited :attr:`lazy_delay`, or
        wait on for ones queued after an earlier flush took the jobs the timer was set for."""
        self._timer = None
        if self._lazy_since is None or self._scheduled:
            return  # flushed meanwhile, or a flush is on its way
        due = self._lazy_since + self.lazy_delay
        if self._loop.time() + TIMER_EARLY < due:
            self._timer = self._loop.call_at(due, self._due)
        else:
            self._flush()

    def amend(self, future: asyncio.Future[Any], fn: Callable[[Any], Any]) -> bool:
        """Give a job still waiting in the queue another function; False if it is not there
        (committed, or being committed)."""
        job = self._queued.get(future)
        if job is None:
            return False
        job.fn = fn
        return True

    async def aclose(self) -> None:
        """Commit what is queued, wait for every flush and delivery, stop the sync thread."""
        if self._pending:
            self._flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self._idle.wait()
        self._executor.shutdown(wait=True)

    # -- committing --------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flushing = True
        try:
            self._flush_pending()
        finally:
            self._flushing = False

    def _flush_pending(self) -> None:
        self._scheduled = False
        self._lazy_since = None
        batch, self._pending = self._pending, []
        self._queued = {}
        if not batch:
            return
        if self.poisoned is not None:
            for job in batch:
                job.error = self.poisoned
            self._settle(batch, [])
            return
        writes = barrier = False
        for job in batch:  # one look at the batch, not a generator for each question
            if not job.read_only:
                writes = True
            if job.barrier:
                barrier = True
        try:
            if not writes:
                tx = self._backend.reader()
                for job in batch:
                    call_job(tx, job, self._backend.storage_errors)
                events: list[Notice] = []
                durable = False
            else:
                events, durable = self._write(batch)
        except StorageError as exc:
            self._poison(exc, batch)
            return
        except Exception as exc:
            if self._backend.busy(exc) and self._wait_for_lock(batch, exc):
                return
            error = StorageError(
                f"storage failed ({type(exc).__name__}: {exc}); nothing from the failed "
                "transaction was kept. Close and reopen the runtime: it resumes from the "
                "committed journal."
            )
            error.__cause__ = exc
            self._poison(error, batch)
            return
        self._busy_since = None
        needs = 0
        if events or writes:
            self._commits += 1
            if self._sync is not None and (durable or self._always or barrier):
                needs = self._commits
                self._wanted = max(self._wanted, needs)
        if needs == 0 and self._deliveries:
            needs = self._deliveries[-1].needs  # keep delivery in commit order
        self._deliveries.append(_Committed(batch, events, needs))
        self._deliver()
        self._start_sync()

    def _wait_for_lock(self, batch: list[Job[Any]], exc: Exception) -> bool:
        """Another process holds the database locked: put the batch back and try again soon,
        without blocking the loop. False once the lock was held past ``busy_timeout``."""
        now = self._loop.time()
        if self._busy_since is None:
            self._busy_since, self._busy_delay = now, 0.001
        elif now - self._busy_since > self._backend.busy_timeout:
            return False
        else:
            self._busy_delay = min(self._busy_delay * 2, 0.05)
        for job in batch:  # the rolled-back attempt left nothing behind
            job.result, job.error = None, None
        self._pending = batch + self._pending
        self._queued.update((job.future, job) for job in batch)
        self._scheduled = True
        self._loop.call_later(self._busy_delay, self._flush)
        return True

    def _write(self, batch: list[Job[Any]]) -> tuple[list[Notice], bool]:
        tx = self._backend.begin()
        try:
            run_jobs(tx, batch, self._backend.storage_errors)
            return self._backend.commit(tx)
        except BaseException:
            with contextlib.suppress(Exception):  # the original error is what we report
                self._backend.rollback(tx)
            raise

    # -- flushing and delivering -------------------------------------------------------------

    def _start_sync(self) -> None:
        if self._syncing or self._wanted <= self._synced or self._sync is None:
            return
        self._syncing = True
        if self._may_flush_here():
            self._synced_to(self._commits, *_flushed(self._sync))
            return
        self._placement.wake_here()  # idle: one flush at a time
        self._executor.submit(self._placement.run, self._sync_thread, self._sync, self._commits)

    def _may_flush_here(self) -> bool:
        """Whether to flush on the loop: nothing queued, no other batch waiting for the disk,
        and the owner says nothing else would wait meanwhile (:attr:`alone`)."""
        return (
            self.alone is not None
            and not self._pending
            and len(self._deliveries) <= 1
            and self.alone()
        )

    def _sync_thread(self, sync: Callable[[], None], target: int) -> None:
        """On the flush thread: fsync, then hand the outcome back to the loop."""
        error, seconds = _flushed(sync)
        with contextlib.suppress(RuntimeError):  # a closed loop waits for nothing any more
            self._loop.call_soon_threadsafe(self._synced_to, target, error, seconds)

    def _synced_to(self, target: int, exc: BaseException | None, seconds: float) -> None:
        self._syncing = False
        self._last_io = self._loop.time()
        if self._woke is not None:
            woken, waking = self._woke
            self._woke = None
            if self._waker is not None and exc is None:
                self._waker.flushed(woken, waking + seconds)
        if exc is not None:
            if isinstance(exc, StorageError):
                error = exc
            else:
                error = StorageError(
                    f"flushing the journal to disk failed ({exc}); commits since the last flush "
                    "may not be durable. Close and reopen the runtime."
                )
                error.__cause__ = exc
            pending = [job for delivery in self._deliveries for job in delivery.jobs]
            self._deliveries.clear()
            self._poison(error, pending)
            return
        self._synced = max(self._synced, target)
        self._deliver()
        self._start_sync()

    def _deliver(self) -> None:
        while self._deliveries and self._deliveries[0].needs <= self._synced:
            delivery = self._deliveries.popleft()
            self._settle(delivery.jobs, delivery.events)
        if not self._deliveries and not self._pending and not self._syncing:
            self._idle.set()

    def _settle(self, batch: list[Job[Any]], events: list[Notice]) -> None:
        for job in batch:
            answer(job, job.error)
        if events:
            self._on_commit(events)

    def _poison(self, error: StorageError, batch: list[Job[Any]]) -> None:
        first = self.poisoned is None
        self.poisoned = self.poisoned or error
        for job in batch:
            job.error = self.poisoned
        pending = [job for delivery in self._deliveries for job in delivery.jobs]
        self._deliveries.clear()
        for job in pending:
            job.error = self.poisoned
        self._settle(batch + pending, [])
        if not self._syncing:
            self._idle.set()
        if first:
            self._on_fatal(self.poisoned)


def _flushed(sync: Callable[[], None]) -> tuple[BaseException | None, float]:
    """Flush the disk; the failure, if any, which the loop reports (it poisons the store), and
    the seconds the flush took."""
    began = time.perf_counter()
    try:
        sync()
    except BaseException as exc:
        return exc, time.perf_counter() - began
    return None, time.perf_counter() - began
