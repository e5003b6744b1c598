"""The PostgreSQL writer: group commit on one connection, in the order jobs were queued.

A round trip to the server costs more than a turn of the event loop, and the loop must never
wait for one. A batch of the journal's own writes (a run's steps), which reads no answer, is
written from the loop: its statements are sent and the answers read as they come (the loop
watches the socket). Any other batch — claims, a run's start and end, reads, commands — and
any batch the loop began that went otherwise runs on one worker thread, which may wait. Jobs
queued while a batch is in flight form the next batch: concurrent runs share a commit, and the
order jobs were queued in is the order they commit in. Durability maps onto
``synchronous_commit``: a batch that holds a *barrier* commits with it ``on`` (the server flushed
its WAL before the commit returns), any other with it ``off`` (the server has the commit; a
server crash may lose the last few). Reads queue in the same line, so a read sees every write
queued before it.

A batch of the journal's own writes (a run's steps) goes to the server in one round trip: the
transaction opens inside the pipeline, assuming that the claims it writes under still hold and
that the event-sequence counter is where this writer's last commit left it, and the server
checks both before anything else. When another writer moved the counter meanwhile (a command,
another worker) or a claim was lost, the server refuses the whole transaction and the batch is
written again the checked way (on the thread: the counter is locked and read).

A storage failure, or a failure of a job that has no savepoint of its own, poisons the writer:
the batch is rolled back, and every job in it and every later job fails with the same
:class:`~stead.errors.StorageError`. Other exceptions of a checked job are that job's answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..._ids import jitter
from ...errors import StorageError
from ...journal.records import Claim, Notice
from ..jobs import Job, answer, call_job, run_jobs
from .tx import PostgresTx, Unpipelined

if TYPE_CHECKING:  # psycopg is the postgres extra's: imported once a store connects
    from .wire import Wire

T = TypeVar("T")

#: How the server refuses a pipelined batch whose operation was not in progress (tx.py).
_REFUSED = re.compile(r'"stead: (operation .* was not in progress) \(\d+ rows\)"')
#: How it refuses a batch whose assumptions did not hold (``PostgresTx.begin_pipelined``).
_ASSUMED = re.compile(r'"stead: assumed ')


#: How often a batch the server rolls back to break a deadlock is written before it fails.
COLLISIONS = 8


def _fences(batch: list[Job[Any]]) -> list[Claim]:
    """The claims a batch's jobs write under, each once, in order."""
    return list(dict.fromkeys(job.fence for job in batch if job.fence is not None))


class _Assumed(Exception):
    """A batch written on assumptions the server found false; nothing of it was kept."""


class PostgresWriter:
    """Runs queued jobs in batches on one thread and connection; see the module docstring."""

    #: Seconds a lazy write may wait for company before its batch starts on its own.
    lazy_delay = 0.002
    #: Lazy writes queued before a batch starts regardless.
    max_lazy = 256
    #: Seconds batches are written the checked way after two in a row were refused.
    assume_pause = 1.0
    #: Seconds the loop looks for the server's answer to a batch someone waits for before it
    #: sleeps, while :attr:`alone` says nothing else runs here meanwhile (see ``_write_on_loop``).
    spin = 0.0003

    def __init__(
        self,
        connect: Callable[[], Any],
        make_tx: Callable[[Any, bool], PostgresTx],
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[Notice]], None],
        on_fatal: Callable[[StorageError], None],
        *,
        storage_errors: tuple[type[BaseException], ...],
        name: str,
    ) -> None:
        self._make_tx = make_tx
        self._loop = loop
        self._on_commit = on_commit
        self._on_fatal = on_fatal
        self._storage_errors = storage_errors
        self._pending: list[Job[Any]] = []
        self._in_flight = False
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)
        try:
            self._conn: Any = self._executor.submit(connect).result()
        except BaseException:
            self._executor.shutdown(wait=True)
            raise
        from .wire import Wire

        self._wire: Wire = Wire(self._conn)
        self.poisoned: StorageError | None = None
        #: The sequence counter as this writer's last commit left it (None: unknown).
        self._sequence: int | None = None
        self._assume_after = 0.0
        self._missed = 0  # batches in a row whose assumptions the server refused
        #: Whether nothing else would run on the loop while it waits for the server (the owner
        #: sets it: true while it executes at most one run).
        self.alone: Callable[[], bool] | None = None

    def submit(
        self,
        fn: Callable[[Any], T],
        *,
        barrier: bool = False,
        read_only: bool = False,
        checked: bool = True,
        fence: Claim | None = None,
        lazy: bool = False,
    ) -> asyncio.Future[T]:
        """Queue ``fn(tx)``; the future resolves once its batch committed (a barrier's with
        ``synchronous_commit = on``). A ``checked`` job may raise a
        :class:`~stead.errors.SteadError` as its answer, which undoes its writes alone. A
        ``fence``d job runs only while the claim holds (``jobs.run_jobs``). A ``lazy`` job,
        which nobody waits for, waits up to :attr:`lazy_delay` for company before its batch
        starts, so a run's pipelined writes share a transaction with the one it waits for."""
        future: asyncio.Future[T] = self._loop.create_future()
        job = Job(fn, future, barrier, read_only, checked, fence, lazy=lazy)
        if self.poisoned is not None:
            answer(job, self.poisoned)
            return future
        self._pending.append(job)
        self._idle.clear()
        if self._scheduled or self._in_flight:
            return future
        if lazy and not barrier and len(self._pending) < self.max_lazy:
            if self._timer is None:
                self._timer = self._loop.call_later(self.lazy_delay, self._dispatch)
            return future
        self._scheduled = True
        self._loop.call_soon(self._dispatch)
        return future

    def run_alone(self, fn: Callable[[Any, Wire], T]) -> asyncio.Future[T] | None:
        """``fn(connection, wire)`` on the writer's thread and connection, as a batch of its own
        (it runs its own transaction), if the writer is idle: nothing in flight, queued or
        poisoned; else ``None``, and nothing was done. Jobs queued meanwhile wait for it, as
        they would for a batch. For a runtime's own command while it writes nothing: the
        writer's connection is open and warm, where a connection of the pool may be new."""
        if self._in_flight or self._pending or self._scheduled or self.poisoned is not None:
            return None
        future: asyncio.Future[T] = self._loop.create_future()
        self._in_flight = True
        self._idle.clear()

        def run() -> None:
            try:
                result = fn(self._conn, self._wire)
            except BaseException as exc:
                self._loop.call_soon_threadsafe(self._run_alone_done, future, None, exc)
                return
            self._loop.call_soon_threadsafe(self._run_alone_done, future, result, None)

        self._executor.submit(run)
        return future

    def _run_alone_done(
        self, future: asyncio.Future[Any], result: Any, error: BaseException | None
    ) -> None:
        self._in_flight = False
        if not future.done():
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
        self._dispatch()

    def observe_sequence(self, sequence: int) -> None:
        """Another transaction of this process (a command on the pool) committed, leaving the
        sequence counter at ``sequence``. The counter only grows, so the larger of what this
        writer knows is the better guess for its next batch to assume: without it, the first
        batch after every submission would be refused and written again the checked way."""
        self._sequence = max(self._sequence or 0, sequence)

    def amend(self, future: asyncio.Future[Any], fn: Callable[[Any], Any]) -> bool:
        """Give a job still waiting in the queue another function; False once its batch
        started."""
        for job in reversed(self._pending):
            if job.future is future:
                job.fn = fn
                return True
        return False

    async def aclose(self) -> None:
        """Commit what is queued, then close the connection and stop the thread."""
        if self._timer is not None:
            self._dispatch()
        await self._idle.wait()
        with contextlib.suppress(Exception):
            self._executor.submit(self._conn.close).result()
        self._executor.shutdown(wait=True)

    def close_now(self) -> None:
        """Close at once, with nothing queued (an open that failed half way; blocking)."""
        with contextlib.suppress(Exception):
            self._executor.submit(self._conn.close).result()
        self._executor.shutdown(wait=True)

    # -- batches -----------------------------------------------------------------------------

    def _dispatch(self) -> None:
        self._scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._in_flight or not self._pending:
            self._check_idle()
            return
        batch, self._pending = self._pending, []
        if self.poisoned is not None:
            self._settle(batch, [], self.poisoned)
            return
        self._in_flight = True
        first_read = next((n for n, job in enumerate(batch) if job.read_only), len(batch))
        if first_read and self._may_assume(batch[:first_read]):
            # A read waits for an answer, so it goes to the thread; the steps queued before it
            # go on the loop without it, and it follows in the next batch (it still sees them).
            batch, self._pending = batch[:first_read], batch[first_read:]
            self._write_on_loop(batch)
        else:
            self._executor.submit(self._run, batch)

    def _may_assume(self, batch: list[Job[Any]]) -> bool:
        """Whether ``batch`` may be written on assumptions (:meth:`_write_assuming`)."""
        return (
            self._sequence is not None
            and not any(job.checked and not job.read_only for job in batch)
            and time.monotonic() >= self._assume_after
        )

    def _write_on_loop(self, batch: list[Job[Any]]) -> None:
        """:meth:`_write_assuming` on the event loop, which waits for nobody: the statements
        are sent and the answers read as they come, with no hand-off to the thread and back
        (two thread wake-ups a step). Whatever goes otherwise — a job that would read an
        answer, the server refusing the assumptions, a lost statement, a deadlock — goes to
        the thread, which ends the transaction and writes the batch the usual way.

        A batch someone waits for (a model call's intent, say), written while at most one run
        executes here, has its answer looked for on the loop for up to :attr:`spin` before the
        loop sleeps: the run can do nothing until the commit, and the loop has nothing else to
        do, while a loop asleep in its selector is woken tens of microseconds late on a machine
        that halts idle CPUs — per step, a good part of the round trip."""
        assert self._sequence is not None
        tx = self._make_tx(self._conn, False)
        wire = self._wire

        def done(failure: BaseException | None) -> None:
            if failure is None:
                self._done(batch, self._assumed(tx), None)
                return
            if _ASSUMED.search(str(failure)) is not None:
                self._refused(failure)
            self._again_on_thread(batch)

        try:
            wire.open(wait=False)
            tx.pipeline = wire
            tx.begin_pipelined(
                durable=any(job.barrier for job in batch),
                fences=_fences(batch),
                next_sequence=self._sequence,
            )
            self._finish(tx, batch)
            tx.pipeline = None
            waited = self.alone is not None and any(not job.lazy for job in batch) and self.alone()
            wire.finish_soon(self._loop, done, spin=self.spin if waited else 0.0)
        except BaseException as exc:  # WouldWait, a job's failure, the connection's: the thread
            tx.pipeline = None  # sees to it (and fails the store if the connection is gone)
            self._again_on_thread(batch)
            if not isinstance(exc, Exception):
                raise

    def _again_on_thread(self, batch: list[Job[Any]]) -> None:
        """A batch the loop began: on the thread, end what the connection holds of it
        (nothing of it was kept) and write it again from the start."""
        for job in batch:
            job.result, job.error = None, None
        self._executor.submit(self._run, batch, True)

    def _refused(self, failure: BaseException) -> None:
        """The server refused a batch's assumptions (``failure`` says which): another writer
        moved the counter (a command, another worker), or a claim was lost. After two such
        misses in a row assume nothing for a while (workers that share the schema move the
        counter all the time)."""
        self._sequence = None
        self._missed += 1
        if self._missed >= 2:
            self._missed = 0
            self._assume_after = time.monotonic() + self.assume_pause

    def _run(self, batch: list[Job[Any]], begun: bool = False) -> None:
        """On the writer's thread: one transaction for the batch, then back to the loop
        (``begun``: the loop began it, and the connection is to be cleared first)."""
        events: list[Notice] = []
        failure: StorageError | None = None
        try:
            if begun:
                with contextlib.suppress(Exception):  # what went wrong is known already
                    self._wire.close()
                self._rollback()
            if all(job.read_only for job in batch):
                self._read(batch)
            else:
                events = self._write_again_if_collided(batch)
        except StorageError as exc:
            failure = exc
        except BaseException as exc:
            refused = _REFUSED.search(str(exc))
            if refused is not None:  # a check the server made for the batch (tx.py)
                failure = StorageError(
                    f"{refused.group(1)} when its result was written; the journal was changed "
                    "under this runtime, so nothing of the batch was kept. Close and reopen the "
                    "runtime: it resumes from the committed journal."
                )
            else:
                failure = StorageError(
                    f"storage failed ({type(exc).__name__}: {exc}); nothing from the failed "
                    "transaction was kept. Close and reopen the runtime: it resumes from the "
                    "committed journal."
                )
            failure.__cause__ = exc
        with contextlib.suppress(RuntimeError):  # a closed loop waits for nothing any more
            self._loop.call_soon_threadsafe(self._done, batch, events, failure)

    def _read(self, batch: list[Job[Any]]) -> None:
        """Reads alone: one snapshot for the batch."""
        conn = self._conn
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            tx = self._make_tx(conn, True)
            for job in batch:
                call_job(tx, job, self._storage_errors)
        except BaseException:
            self._rollback()
            raise
        # COMMIT ends a read-only transaction as ROLLBACK would; psycopg, seeing a ROLLBACK,
        # forgets every statement it prepared on the connection (DEALLOCATE ALL), and the
        # writes after each read would be parsed and planned afresh.
        conn.execute("COMMIT")

    def _write_again_if_collided(self, batch: list[Job[Any]]) -> list[Notice]:
        """:meth:`_write`, run again when the server rolled the batch back to break a deadlock:
        the writer holds the sequence counter while it writes to runs, a command holds a run
        it decides on while it waits for the counter, and one of the two is chosen to give
        way. Nothing of a rolled-back attempt was kept, and jobs are written again from the
        start (as a command that collides is, ``client.py``)."""
        import psycopg.errors as pg

        from .wire import Forgotten

        attempt = 1
        while True:
            try:
                return self._write(batch)
            except Forgotten:  # psycopg had the server drop the wire's statements
                if attempt == COLLISIONS:
                    raise
                for job in batch:
                    job.result, job.error = None, None
                attempt += 1
                continue
            except (pg.DeadlockDetected, pg.SerializationFailure):
                if attempt == COLLISIONS:
                    raise
                for job in batch:
                    job.result, job.error = None, None
                time.sleep(jitter(0, 0.002 * 2**attempt))
                attempt += 1

    def _write(self, batch: list[Job[Any]]) -> list[Notice]:
        fences = _fences(batch)
        durable = any(job.barrier for job in batch)
        if self._may_assume(batch):
            assert self._sequence is not None
            try:
                return self._write_assuming(batch, fences, durable, self._sequence)
            except _Assumed as refused:
                # Nothing was kept: run the batch the checked way, which learns the counter.
                self._refused(refused.__cause__ or refused)
                for job in batch:
                    job.result, job.error = None, None
        try:
            return self._write_checked(batch, fences, durable, pipelined=True)
        except Unpipelined:
            for job in batch:
                job.result, job.error = None, None
            return self._write_checked(batch, fences, durable, pipelined=False)

    def _write_assuming(
        self, batch: list[Job[Any]], fences: list[Claim], durable: bool, sequence: int
    ) -> list[Notice]:
        """The batch in one round trip: the transaction opens inside the pipeline, on the
        assumption that the fences hold and the sequence counter is where this writer's last
        commit left it, which the server checks (``PostgresTx.begin_pipelined``)."""
        tx = self._make_tx(self._conn, False)

        def body() -> None:
            tx.begin_pipelined(durable=durable, fences=fences, next_sequence=sequence)
            self._finish(tx, batch)

        try:
            self._pipelined(tx, body)
        except BaseException as failure:
            self._rollback()
            if _ASSUMED.search(str(failure)) is not None:
                raise _Assumed from failure
            raise
        return self._assumed(tx)

    def _assumed(self, tx: PostgresTx) -> list[Notice]:
        """A batch written on assumptions committed: what it assumed held, and the counter is
        where it left it. Returns its events."""
        tx.committed()
        self._sequence = max(tx.sequence_written or 0, self._sequence or 0) or None
        self._missed = 0
        return tx.events

    def _write_checked(
        self, batch: list[Job[Any]], fences: list[Claim], durable: bool, *, pipelined: bool
    ) -> list[Notice]:
        """A batch whose jobs read what they decide on (claims, a run's start and end,
        commands). Pipelined: the transaction opens as :meth:`_write_assuming`'s does, but
        locks the counter instead of assuming it (read when the first event needs it), and
        the batch waits for the server where a job reads a result and at its end. Else
        (a checked job's answer was an error, ``PostgresTx.savepoint``, or a claim was lost)
        one statement after another: the first round trip checks the fences and locks the
        counter, and a savepoint around each checked job undoes its writes alone."""
        tx = self._make_tx(self._conn, False)

        def body() -> None:
            tx.begin_pipelined(durable=durable, fences=fences, next_sequence=None)
            self._finish(tx, batch)

        try:
            if pipelined:
                self._pipelined(tx, body)
            else:
                tx.begin(durable=durable, fences=fences)
                self._finish(tx, batch)
        except BaseException as failure:
            self._rollback()
            if pipelined and _ASSUMED.search(str(failure)) is not None:
                # A claim was lost: written again statement by statement, the job writing
                # under it gets LeaseLostError as its answer, and the others go on.
                raise Unpipelined from failure
            raise
        finally:
            if not pipelined:  # its savepoints went through psycopg, which may drop them all
                self._wire.forget()
        tx.committed()
        if tx.sequence_written is not None:
            self._sequence = max(tx.sequence_written, self._sequence or 0)
        return tx.events

    def _finish(self, tx: PostgresTx, batch: list[Job[Any]]) -> None:
        """The jobs of an open transaction, its events and counter, and the commit."""
        run_jobs(tx, batch, self._storage_errors)
        tx.write_events()
        tx.write_sequence()
        tx.execute("COMMIT")

    def _pipelined(self, tx: PostgresTx, body: Callable[[], None]) -> None:
        """``body()`` with ``tx``'s statements pipelined (:class:`Wire`). The first failure,
        of ``body`` or of a statement the server ran, is raised once the pipeline closed with
        nothing in flight."""
        failure: BaseException | None = None
        self._wire.open()
        tx.pipeline = self._wire
        try:
            body()
        except BaseException as exc:
            failure = exc
        finally:
            tx.pipeline = None
            try:
                self._wire.close()
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _rollback(self) -> None:
        """End a failed transaction. psycopg, seeing the ROLLBACK, has the server forget the
        connection's prepared statements: the wire's too."""
        with contextlib.suppress(Exception):
            self._conn.execute("ROLLBACK")
        self._wire.forget()

    # -- back on the loop --------------------------------------------------------------------

    def _done(
        self, batch: list[Job[Any]], events: list[Notice], failure: StorageError | None
    ) -> None:
        self._in_flight = False
        if failure is not None:
            self._poison(failure, batch)
            return
        self._settle(batch, events, None)
        self._dispatch()

    def _settle(
        self, batch: list[Job[Any]], events: list[Notice], failure: StorageError | None
    ) -> None:
        for job in batch:
            answer(job, failure or job.error)
        if events:
            self._on_commit(events)
        self._check_idle()

    def _poison(self, error: StorageError, batch: list[Job[Any]]) -> None:
        first = self.poisoned is None
        self.poisoned = self.poisoned or error
        later, self._pending = self._pending, []
        self._settle(batch + later, [], self.poisoned)
        if first:
            self._on_fatal(self.poisoned)

    def _check_idle(self) -> None:
        if not self._pending and not self._in_flight:
            self._idle.set()
