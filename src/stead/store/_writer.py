"""The single writer: one thread that group-commits queued transaction jobs in order.

Why a thread: SQLite allows one writer at a time, and an fsync takes milliseconds. The event loop
queues jobs and keeps running; the writer takes everything queued so far, runs it in one
``BEGIN IMMEDIATE`` transaction and commits once — so concurrent runs share one commit and one
fsync (group commit), and the order in which jobs were queued is the order they commit in.

A batch is flushed to disk (``synchronous=FULL``) when any job in it is a *barrier* or the store
was opened with ``fsync="always"``; other commits reach the database without waiting for the disk,
which a process crash never loses.

Any failure that is not a deliberate :class:`SteadError` from a job poisons the writer: the batch
is rolled back, every job in it and every later job fails with the same :class:`StorageError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ..errors import SteadError, StorageError
from .records import Event

T = TypeVar("T")
Tx = TypeVar("Tx")


class Batcher(Protocol[Tx]):
    """What a backend provides to the writer: transactions over its one connection."""

    def begin(self, *, durable: bool) -> Tx: ...
    def savepoint(self, tx: Tx) -> None: ...
    def rollback_savepoint(self, tx: Tx) -> None: ...
    def release_savepoint(self, tx: Tx) -> None: ...
    def commit(self, tx: Tx) -> list[Event]: ...
    def rollback(self, tx: Tx) -> None: ...
    def read(self) -> Tx: ...
    def end_read(self, tx: Tx) -> None: ...


@dataclass(slots=True)
class Job(Generic[T]):
    fn: Callable[[Any], T]
    future: asyncio.Future[T]
    barrier: bool
    read_only: bool
    checked: bool
    result: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class _Stop:
    done: threading.Event = field(default_factory=threading.Event)


class Writer:
    """Runs queued jobs on a dedicated thread; see the module docstring."""

    max_batch = 512

    def __init__(
        self,
        backend: Batcher[Any],
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[Event]], None],
        on_fatal: Callable[[StorageError], None],
        *,
        name: str,
    ) -> None:
        self._backend = backend
        self._loop = loop
        self._on_commit = on_commit
        self._on_fatal = on_fatal
        self._queue: queue.SimpleQueue[Job[Any] | _Stop] = queue.SimpleQueue()
        self.poisoned: StorageError | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def submit(
        self,
        fn: Callable[[Any], T],
        *,
        barrier: bool = False,
        read_only: bool = False,
        checked: bool = True,
    ) -> asyncio.Future[T]:
        """Queue ``fn(tx)``; the future resolves after its batch commits (and, for a barrier, is
        on disk). A ``checked`` job may raise a :class:`SteadError` as its answer, which undoes
        its writes alone (a savepoint); an unchecked job's failure poisons the store."""
        future: asyncio.Future[T] = self._loop.create_future()
        if self.poisoned is not None:
            future.set_exception(self.poisoned)
            return future
        self._queue.put(Job(fn, future, barrier, read_only, checked))
        return future

    def stop(self) -> None:
        """Finish every queued job, then end the thread (blocking)."""
        stop = _Stop()
        self._queue.put(stop)
        stop.done.wait()
        self._thread.join()

    # -- the writer thread -------------------------------------------------------------------

    def _main(self) -> None:
        while True:
            first = self._queue.get()
            batch: list[Job[Any]] = []
            stop: _Stop | None = None
            item: Job[Any] | _Stop = first
            while True:
                if isinstance(item, _Stop):
                    stop = item
                    break
                batch.append(item)
                if len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._run(batch)
            if stop is not None:
                stop.done.set()
                return

    def _run(self, batch: list[Job[Any]]) -> None:
        if self.poisoned is not None:
            for job in batch:
                job.error = self.poisoned
            self._deliver(batch, [])
            return
        events: list[Event] = []
        try:
            if all(job.read_only for job in batch):
                tx = self._backend.read()
                try:
                    for job in batch:
                        self._call(tx, job)
                finally:
                    self._backend.end_read(tx)
            else:
                durable = any(job.barrier for job in batch)
                tx = self._backend.begin(durable=durable)
                try:
                    for job in batch:
                        if job.read_only or not job.checked:
                            if not self._call(tx, job) and not job.read_only:
                                raise StorageError(f"an internal write failed: {job.error}")
                            continue
                        self._backend.savepoint(tx)
                        if self._call(tx, job):
                            self._backend.release_savepoint(tx)
                        else:
                            self._backend.rollback_savepoint(tx)
                            self._backend.release_savepoint(tx)
                    events = self._backend.commit(tx)
                except BaseException:
                    with contextlib.suppress(Exception):
                        self._backend.rollback(tx)
                    raise
        except StorageError as exc:
            self._poison(exc, batch)
            return
        except Exception as exc:
            self._poison(
                StorageError(
                    f"storage failed ({type(exc).__name__}: {exc}); nothing from the "
                    "failed transaction was kept. Close and reopen the runtime: it "
                    "resumes from the committed journal."
                ),
                batch,
                cause=exc,
            )
            return
        self._deliver(batch, events)

    def _call(self, tx: Any, job: Job[Any]) -> bool:
        """Run one job; a SteadError it raises is its answer (its writes are rolled back)."""
        try:
            job.result = job.fn(tx)
            return True
        except SteadError as exc:
            if isinstance(exc, StorageError):
                raise
            job.error = exc
            return False

    def _poison(
        self, error: StorageError, batch: list[Job[Any]], cause: BaseException | None = None
    ) -> None:
        if cause is not None:
            error.__cause__ = cause
        self.poisoned = error
        for job in batch:
            job.error = error
        self._deliver(batch, [])
        self._loop.call_soon_threadsafe(self._on_fatal, error)

    def _deliver(self, batch: list[Job[Any]], events: list[Event]) -> None:
        # A closed loop (RuntimeError) means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._settle, batch, events)

    def _settle(self, batch: list[Job[Any]], events: list[Event]) -> None:
        for job in batch:
            if job.future.done():
                continue
            if job.error is not None:
                job.future.set_exception(job.error)
            else:
                job.future.set_result(job.result)
        if events:
            self._on_commit(events)
