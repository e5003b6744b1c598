"""Runtime: the one owner of a store in this process.

``open`` takes ownership and resumes unfinished runs; a scheduler starts runnable runs (at the head
of their session, up to ``max_concurrent_runs``); each run executes as an asyncio task that replays
its journal and continues. ``close`` aborts active attempts and keeps their journal, so the next
process continues them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import traceback
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._ids import new_id
from .._json import NotJSONError, digest, dumps, loads, to_json
from ..agent.agent import Agent
from ..agent.interactions import Answer, Approve, Deny, Response
from ..agent.loop import run_agent_loop
from ..errors import (
    ConflictError,
    LimitError,
    NotFoundError,
    RunCancelled,
    RunFailed,
    RuntimeClosedError,
    StorageError,
    ValidationError,
)
from ..messages import Usage, message_from_json
from ..store.records import (
    RUNNABLE_STATUSES,
    Event,
    Interaction,
    Operation,
    Recovery,
    Run,
    RunStatus,
)
from ..store.sqlite import SqliteStore
from ..store.sqlite_tx import SqliteTx
from . import jobs
from .checkpoint import build_checkpoint
from .control import Failed, NeedsAttention, RetryLater, Waiting
from .handle import RunHandle, RunOutcome, RunPage, Snapshot
from .journal import RunJournal, write_messages
from .limits import Limits, require_id, require_text

if TYPE_CHECKING:
    from ..app import App

__all__ = ["Limits", "Runtime"]

_OUTCOME_CACHE = 1024

logger = logging.getLogger("stead")


class Runtime:
    """One opened owner of a store. Create it with :meth:`App.open`."""

    def __init__(
        self,
        app: App,
        store: SqliteStore,
        *,
        max_concurrent_runs: int,
        limits: Limits | None,
        on_fatal_error: Callable[[StorageError], None] | None = None,
    ) -> None:
        if (
            isinstance(max_concurrent_runs, bool)
            or not isinstance(max_concurrent_runs, int)
            or max_concurrent_runs < 1
        ):
            raise ValidationError(
                f"max_concurrent_runs must be a positive integer, got {max_concurrent_runs!r}"
            )
        if not isinstance(store, SqliteStore):
            raise ValidationError(
                f"App.open needs a stead store such as stead.SqliteStore(path), got {store!r}"
            )
        self.app = app
        self.store = store
        self.max_concurrent_runs = max_concurrent_runs
        self.limits = limits or Limits()
        self._on_fatal_error = on_fatal_error
        self._fatal: StorageError | None = None
        self._closed = False
        self._resumed = False
        self._active: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._subscribers: dict[str, set[asyncio.Queue[Event]]] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._outcomes: dict[str, RunOutcome] = {}
        listen = getattr(store.clock, "add_listener", None)
        if callable(listen):  # a test clock wakes the scheduler when time is moved
            listen(self._wake.set)

    @classmethod
    async def open(
        cls,
        app: App,
        store: SqliteStore,
        *,
        max_concurrent_runs: int = 4,
        resume: bool = True,
        limits: Limits | None = None,
        on_fatal_error: Callable[[StorageError], None] | None = None,
    ) -> Runtime:
        runtime = cls(
            app,
            store,
            max_concurrent_runs=max_concurrent_runs,
            limits=limits,
            on_fatal_error=on_fatal_error,
        )
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(store.acquire, loop, runtime._on_commit, runtime._on_storage_failed)
        if resume:
            await runtime.resume()
        return runtime

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<stead Runtime on {self.store!r}>"

    # -- lifecycle ---------------------------------------------------------------------------

    async def resume(self) -> None:
        """Start the scheduler: unfinished runs (including those a crash left ``running``)
        continue from their journals."""
        self._check()
        if not self._resumed:
            self._resumed = True
            self._scheduler = asyncio.create_task(self._schedule(), name="stead-scheduler")
        self._wake.set()

    async def close(self) -> None:
        """Abort active attempts (their journal is kept), flush, and release the store."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = list(self._active.values())
        if self._scheduler is not None:
            tasks.append(self._scheduler)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.store.aclose()
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(
                        RuntimeClosedError(
                            "the runtime was closed while waiting for "
                            "the run; reopen it to continue waiting"
                        )
                    )
        for queues in self._subscribers.values():
            for queue in queues:
                queue.put_nowait(_CLOSED)

    def health(self) -> dict[str, Any]:
        """Liveness without touching the database."""
        return {
            "ok": self._fatal is None and not self._closed,
            "closed": self._closed,
            "storage_error": str(self._fatal) if self._fatal else None,
            "active_runs": len(self._active),
        }

    def _check(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise RuntimeClosedError(
                f"this runtime on {self.store!r} is closed; open the store again with App.open(...)"
            )

    # -- submission --------------------------------------------------------------------------

    async def submit(
        self,
        agent_id: str,
        *,
        session_id: str,
        request_id: str,
        prompt: str,
        enqueue: bool = False,
        version: str | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Submit a run of an agent. ``(session_id, request_id)`` is the idempotency key: the
        identical submission returns the original run, a different one raises
        :class:`ConflictError`. A session runs one run at a time: a busy session raises
        :class:`ConflictError` unless ``enqueue=True``, which queues the run behind it.
        ``run_id`` chooses the new run's id (default: a generated ``run_...`` id)."""
        self._check()
        if run_id is not None:
            require_id("run_id", run_id)
        require_id("agent_id", agent_id)
        require_id("session_id", session_id)
        require_id("request_id", request_id)
        require_text("prompt", prompt)
        agent = self.app.agent(agent_id, version)
        payload = {"prompt": prompt}
        size = len(dumps(payload).encode())
        if size > self.limits.max_payload_bytes:
            raise LimitError(
                f"the prompt of request {request_id!r} is {size} bytes, over "
                f"max_payload_bytes ({self.limits.max_payload_bytes}); send less or "
                "raise the limit with stead.Limits(max_payload_bytes=...)"
            )
        submission = digest({"kind": "agent", "agent_id": agent_id, "input": payload})
        new_run_id = run_id or new_id("run")

        result_id, ready = await self.store.submit(
            functools.partial(
                jobs.submit_job,
                run_id=new_run_id,
                session_id=session_id,
                request_id=request_id,
                agent_id=agent_id,
                version=agent.version,
                payload=payload,
                submission=submission,
                enqueue=enqueue,
                max_pending=self.limits.max_pending_runs,
            ),
            barrier=True,
        )
        return self._accepted(result_id, ready)

    async def fork(
        self,
        run_id: str,
        *,
        before: str,
        session_id: str | None = None,
        request_id: str | None = None,
        version: str | None = None,
    ) -> RunHandle:
        """Start a new run that reuses every committed operation of ``run_id`` positioned before
        the operation ``before`` and continues from there on today's registered code (the latest
        version of the agent unless ``version`` is given) — to debug an agent, or to try a new
        prompt or model from the middle of a real conversation.

        The fork runs in a new session unless ``session_id`` is given; forking the same point
        again with the default ids returns the same fork.
        """
        self._check()
        require_id("run_id", run_id)
        require_id("before", before)
        fork_session = session_id or f"fork:{run_id}:{before}"
        fork_request = request_id or f"fork:{run_id}:{before}"
        require_id("session_id", fork_session)
        require_id("request_id", fork_request)
        new_run_id = new_id("run")
        submission = digest({"kind": "fork", "source": run_id, "before": before})
        app = self.app

        def job(tx: SqliteTx) -> tuple[str, bool]:
            source = tx.get_run(run_id)
            if source is None:
                raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
            existing = jobs.existing_submission(tx, fork_session, fork_request, submission)
            if existing is not None:
                return existing, False
            op = tx.get_operation(run_id, before)
            if op is None:
                keys = ", ".join(o.key for o in tx.operations(run_id)) or "none"
                raise NotFoundError(
                    f"run {run_id} has no operation {before!r}; its operations: {keys}"
                )
            agent = app.agent(source.agent_id, version)
            busy = tx.unfinished_in_session(fork_session)
            if busy is not None:
                raise ConflictError(
                    f"session {fork_session!r} has unfinished run {busy.id}; fork into another "
                    "session"
                )
            tx.insert_run(
                run_id=new_run_id,
                session_id=fork_session,
                request_id=fork_request,
                kind=source.kind,
                agent_id=source.agent_id,
                version=agent.version,
                status=RunStatus.PENDING,
                input=source.input,
                submission_digest=submission,
            )
            tx.update_run(
                new_run_id,
                history_head=source.history_head,
                history_length=source.history_length or 0,
            )
            copied = tx.copy_operations(run_id, new_run_id, op.position)
            tx.append_event(
                new_run_id,
                "submitted",
                {
                    "agent_id": source.agent_id,
                    "version": agent.version,
                    "session_id": fork_session,
                    "request_id": fork_request,
                    "status": "pending",
                    "forked_from": run_id,
                    "before": before,
                    "copied_operations": copied,
                },
            )
            return new_run_id, True

        result_id, ready = await self.store.submit(job, barrier=True)
        return self._accepted(result_id, ready)

    def _accepted(self, run_id: str, ready: bool) -> RunHandle:
        """A new run at its session's head starts at once, without asking the scheduler."""
        if ready and self._resumed and len(self._active) < self.max_concurrent_runs:
            self._start(run_id)
        else:
            self._wake.set()
        return RunHandle(self, run_id)

    def get_run(self, run_id: str) -> RunHandle:
        """A handle on a run by id (its methods raise :class:`NotFoundError` if there is none)."""
        self._check()
        return RunHandle(self, require_id("run_id", run_id))

    async def list_runs(
        self,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        status: str | RunStatus | list[str] | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> RunPage:
        """Runs, newest first, filtered; pass ``page.next_cursor`` as ``after`` for more."""
        self._check()
        if session_id is not None:
            require_id("session_id", session_id)
        if agent_id is not None:
            require_id("agent_id", agent_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValidationError(f"limit must be an integer from 1 to 1000, got {limit!r}")
        statuses: list[str] | None = None
        if status is not None:
            raw = [status] if isinstance(status, str) else list(status)
            try:
                statuses = [RunStatus(s).value for s in raw]
            except ValueError:
                raise ValidationError(
                    f"unknown status in {raw!r}; statuses are "
                    f"{', '.join(s.value for s in RunStatus)}"
                ) from None
        before: int | None = None
        if after is not None:
            if (
                not isinstance(after, str)
                or not after.isascii()
                or not after.isdigit()
                or len(after) > 18
            ):
                raise ValidationError(f"after must be a cursor from a previous page, got {after!r}")
            before = int(after)
        runs = await self.store.submit(
            lambda tx: tx.list_runs(
                session_id=session_id,
                agent_id=agent_id,
                statuses=statuses,
                before_number=before,
                limit=limit + 1,
            ),
            read_only=True,
        )
        more = len(runs) > limit
        runs = runs[:limit]
        return RunPage(runs=runs, next_cursor=str(runs[-1].number) if more else None)

    async def respond(self, interaction_id: str, response: Response) -> None:
        """Answer an interaction, exactly once: the same response again is a no-op, a different
        one raises :class:`ConflictError`. The run continues once all its interactions are
        answered."""
        self._check()
        require_id("interaction_id", interaction_id)
        if not isinstance(response, Approve | Deny | Answer):
            raise ValidationError(
                f"respond() takes stead.Approve, stead.Deny or stead.Answer, got {response!r}"
            )
        answer = response.to_json()

        await self.store.submit(
            functools.partial(
                jobs.respond_job,
                interaction_id=interaction_id,
                answer=answer,
                response_type=type(response).__name__,
            ),
            barrier=True,
        )
        self._wake.set()

    async def list_interactions(
        self,
        *,
        status: str | None = "pending",
        session_id: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[Interaction]:
        """Interactions, oldest first: by default the pending ones (the approval queue)."""
        self._check()
        if status not in (None, "pending", "responded", "cancelled"):
            raise ValidationError(
                f"status must be 'pending', 'responded', 'cancelled' or None, not {status!r}"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValidationError(f"limit must be an integer from 1 to 1000, got {limit!r}")
        if session_id is not None:
            require_id("session_id", session_id)
        if run_id is not None:
            require_id("run_id", run_id)
        return await self.store.submit(
            functools.partial(
                SqliteTx.list_interactions,
                status=status,
                session_id=session_id,
                run_id=run_id,
                limit=limit,
            ),
            read_only=True,
        )

    async def _respond_for(self, run_id: str, interaction_id: str, response: Response) -> None:
        found = await self.list_interactions(status=None, run_id=run_id, limit=1000)
        if not any(i.interaction_id == interaction_id for i in found):
            raise NotFoundError(f"run {run_id} has no interaction {interaction_id!r}")
        await self.respond(interaction_id, response)

    # -- scheduling and execution ------------------------------------------------------------

    async def _schedule(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._fatal is not None:
                return
            free = self.max_concurrent_runs - len(self._active)
            if free <= 0:
                continue
            active = set(self._active)
            try:
                runs, wakeup = await self.store.submit(
                    functools.partial(jobs.schedulable, limit=free, exclude=active), read_only=True
                )
            except StorageError:
                return
            for run in runs:
                self._start(run.id)
            self._arm_timer(wakeup)

    def _arm_timer(self, wakeup: datetime | None) -> None:
        """Wake the scheduler when the earliest retry_wait run becomes due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if wakeup is not None:
            delay = max(0.0, (wakeup - self.store.clock.now()).total_seconds())
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(delay, self._wake.set)

    def _start(self, run_id: str) -> None:
        if run_id not in self._active and self._fatal is None and not self._closed:
            task = asyncio.create_task(self._execute(run_id), name=f"stead-run:{run_id}")
            self._active[run_id] = task

    async def _execute(self, run_id: str) -> None:
        in_flight: dict[str, Recovery] = {}
        try:
            await self._execute_run(run_id, in_flight)
        except asyncio.CancelledError:
            pass  # closing: the journal is kept and the next owner continues
        except StorageError:
            pass  # the runtime is poisoned; reopening recovers from the saved intents
        except Exception as exc:  # a defect or odd data: end this execution, never loop
            with contextlib.suppress(StorageError, asyncio.CancelledError):
                await self._record_unexpected(run_id, exc, in_flight)
        finally:
            self._active.pop(run_id, None)
            if not self._closed:
                self._wake.set()

    async def _record_unexpected(
        self, run_id: str, exc: Exception, in_flight: dict[str, Recovery]
    ) -> None:
        """Stop a run whose execution raised something unexpected, with the traceback kept:
        ``needs_attention`` naming the operation when a side effect may have happened (a
        non-``safe`` operation was in flight), else ``failed``. Restarting it at once would
        only raise the same exception again."""
        trace = "".join(traceback.format_exception(exc))
        uncertain = next((key for key, policy in in_flight.items() if policy != "safe"), None)
        detail = f"{type(exc).__name__}: {exc}"
        if uncertain is not None:
            status = RunStatus.NEEDS_ATTENTION
            reason = (
                f"an unexpected error stopped the run while operation {uncertain} was in "
                f"progress, so its effect may have happened: {detail}. Check the outside world, "
                f"then resolve({uncertain!r}, output=...) or retry(); the traceback is in the "
                "run's error"
            )
        else:
            status = RunStatus.FAILED
            reason = (
                f"an unexpected error stopped the run: {detail}. The traceback is in the run's "
                "error and the 'stead' log; fix the cause, then retry() the run"
            )
        logger.error("run %s stopped (%s): %s", run_id, status.value, detail, exc_info=exc)
        await self.store.submit(
            functools.partial(
                jobs.record_stop,
                run_id=run_id,
                status=status,
                reason=reason,
                operation=uncertain,
                kind="internal",
                traceback=trace,
            ),
            barrier=True,
        )

    async def _execute_run(self, run_id: str, in_flight: dict[str, Recovery]) -> None:
        find = self.app.find

        def begin(
            tx: SqliteTx,
        ) -> tuple[Agent, Run, list[Operation], list[Interaction], list[str]] | None:
            current = tx.get_run(run_id)
            if current is None:
                return None
            due = (
                current.status == RunStatus.RETRY_WAIT
                and current.next_attempt_at is not None
                and current.next_attempt_at <= tx.now()
            )
            if current.status.value not in RUNNABLE_STATUSES and not due:
                return None
            agent = find(current.agent_id, current.version)
            if agent is None:
                reason = (
                    f"agent {current.agent_id!r} version {current.version!r} is not registered "
                    "in this runtime; register that version (App.register) and retry() the run"
                )
                jobs.record_stop(tx, run_id, RunStatus.NEEDS_ATTENTION, reason, None)
                return None
            fields: dict[str, Any] = {"status": RunStatus.RUNNING, "next_attempt_at": None}
            head, length = current.history_head, current.history_length
            if current.started_at is None:
                fields["started_at"] = tx.now()
            if current.history_length is None:  # taken when the run first starts
                previous = tx.latest_completed(current.session_id, current.number)
                if previous is not None and previous.outcome is not None:
                    head = previous.outcome["messages"]["head"]
                    length = previous.outcome["messages"]["length"]
                else:
                    head, length = None, 0
                fields["history_head"], fields["history_length"] = head, length
            tx.update_run(run_id, **fields)
            tx.append_event(
                run_id,
                "status",
                {"status": "running", "resumed": current.status == RunStatus.RUNNING},
            )
            refreshed = tx.get_run(run_id)
            assert refreshed is not None
            operations = [jobs.attach_message(tx, op) for op in tx.operations(run_id)]
            interactions = tx.run_interactions(run_id)
            return agent, refreshed, operations, interactions, tx.history(head, length or 0)

        begun = await self.store.submit(begin)
        if begun is None:
            return
        agent, run, operations, interactions, history = begun
        journal = RunJournal(
            self.store,
            run,
            operations,
            interactions,
            self.limits.max_payload_bytes,
            self.limits.max_operations_per_run,
        )
        journal.prices = self.app.prices
        journal.in_flight = in_flight
        for body in history:
            journal.conversation.append(message_from_json(loads(body)), stored=True)
        history_length = len(history)
        try:
            outcome = await run_agent_loop(agent, journal, run.input["prompt"])
        except NeedsAttention as stop:
            await self._stop(
                run_id,
                RunStatus.NEEDS_ATTENTION,
                stop.reason,
                stop.operation,
                kind="needs_attention",
            )
            return
        except Failed as stop:
            await self._stop(run_id, RunStatus.FAILED, stop.reason, stop.operation, kind=stop.kind)
            return
        except Waiting as stop:
            await self.store.submit(
                functools.partial(jobs.record_wait, run_id=run_id, reason=stop.reason), barrier=True
            )
            self._wake.set()
            return
        except RetryLater as stop:
            due = self.store.clock.now() + timedelta(seconds=stop.delay)
            await self._stop(
                run_id,
                RunStatus.RETRY_WAIT,
                stop.reason,
                stop.operation,
                kind="model_retry",
                next_attempt_at=due,
            )
            self._wake.set()
            return
        conversation = journal.conversation
        pending = conversation.take_pending()
        result = {
            "output": outcome.output,
            "messages": conversation.reference(),
            "history_length": history_length,
            "usage": outcome.usage.to_json(),
        }

        def complete(tx: SqliteTx) -> bool:
            current = tx.get_run(run_id)
            if current is None or current.status != RunStatus.RUNNING:
                return False  # cancelled meanwhile
            write_messages(tx, pending)
            tx.update_run(
                run_id,
                status=RunStatus.COMPLETED,
                outcome=result,
                finished_at=tx.now(),
                usage=outcome.usage.to_json(),
            )
            tx.append_event(run_id, "status", {"status": "completed"})
            return True

        if await self.store.submit(complete, barrier=True):
            # Completed and on disk: answer result() from memory (bounded; the journal is truth).
            self._outcomes[run_id] = RunOutcome(
                run_id=run_id,
                output=outcome.output,
                messages=conversation.messages[history_length:],
                usage=outcome.usage,
            )
            while len(self._outcomes) > _OUTCOME_CACHE:
                self._outcomes.pop(next(iter(self._outcomes)))

    async def _stop(
        self,
        run_id: str,
        status: RunStatus,
        reason: str,
        operation: str | None,
        *,
        kind: str = "error",
        next_attempt_at: datetime | None = None,
    ) -> None:
        await self.store.submit(
            functools.partial(
                jobs.record_stop,
                run_id=run_id,
                status=status,
                reason=reason,
                operation=operation,
                kind=kind,
                next_attempt_at=next_attempt_at,
            ),
            barrier=True,
        )

    # -- commits, subscribers, failures ------------------------------------------------------

    def _on_commit(self, events: list[Event]) -> None:
        for event in events:
            queues = self._subscribers.get(event.run_id)
            if queues:
                for queue in queues:
                    queue.put_nowait(event)
            if event.kind == "status" and RunStatus(event.data["status"]).terminal:
                for waiter in self._waiters.pop(event.run_id, ()):
                    if not waiter.done():
                        waiter.set_result(None)

    def _on_storage_failed(self, error: StorageError) -> None:
        if self._fatal is not None:
            return
        self._fatal = error
        for task in list(self._active.values()):
            task.cancel()
        if self._scheduler is not None:
            self._scheduler.cancel()
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error)
        for queues in self._subscribers.values():
            for queue in queues:
                queue.put_nowait(_CLOSED)
        if self._on_fatal_error is not None:
            self._on_fatal_error(error)

    # -- RunHandle's implementation ----------------------------------------------------------

    async def _read_run(self, run_id: str) -> Run:
        self._check()
        run = await self.store.submit(lambda tx: tx.get_run(run_id), read_only=True)
        if run is None:
            raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
        return run

    async def _result(self, run_id: str, timeout: float | None) -> RunOutcome:
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 <= timeout < float("inf")
        ):
            raise ValidationError(
                f"timeout must be a number of seconds >= 0 or None, got {timeout!r}"
            )
        try:
            async with asyncio.timeout(timeout):
                return await self._await_result(run_id)
        except TimeoutError:
            raise TimeoutError(
                f"run {run_id} did not end within {timeout:g}s; it goes on — call result() "
                "again to keep waiting"
            ) from None

    async def _await_result(self, run_id: str) -> RunOutcome:
        while True:
            self._check()
            cached = self._outcomes.get(run_id)
            if cached is not None:
                return cached
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(run_id, []).append(waiter)
            try:
                found = await self.store.submit(
                    functools.partial(jobs.read_outcome, run_id=run_id), read_only=True
                )
                if found is None:
                    raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
                run, bodies = found
                if run.status.terminal:
                    return self._outcome(run, bodies)
                await waiter
            finally:  # a waiter abandoned by a timeout or a cancellation is forgotten
                waiters = self._waiters.get(run_id)
                if waiters is not None and waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._waiters[run_id]
                if waiter.done() and not waiter.cancelled():
                    waiter.exception()  # retrieved: never logged as unhandled

    def _outcome(self, run: Run, bodies: list[str]) -> RunOutcome:
        if run.status == RunStatus.FAILED:
            raise RunFailed(
                run.id, (run.error or {}).get("reason", "unknown reason"), run.error_kind or "error"
            )
        if run.status == RunStatus.CANCELLED:
            raise RunCancelled(run.id, (run.error or {}).get("reason"))
        outcome = run.outcome or {}
        messages = [message_from_json(loads(b)) for b in bodies[outcome["history_length"] :]]
        return RunOutcome(
            run_id=run.id,
            output=outcome["output"],
            messages=messages,
            usage=Usage.from_json(outcome.get("usage")),
        )

    async def _events(self, run_id: str, after: int) -> AsyncIterator[Event]:
        self._check()
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63:
            raise ValidationError(f"after must be an event sequence >= 0, got {after!r}")
        await self._read_run(run_id)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._subscribers.setdefault(run_id, set()).add(queue)
        try:
            cursor = after
            while True:
                page = await self.store.submit(
                    functools.partial(jobs.events_page, run_id=run_id, after=cursor), read_only=True
                )
                for event in page:
                    cursor = event.sequence
                    yield event
                    if _is_terminal(event):
                        return
                if len(page) < jobs.EVENT_PAGE:
                    break
            run = await self._read_run(run_id)
            if run.status.terminal:
                return
            while True:
                event = await queue.get()
                if event is _CLOSED:
                    self._check()
                    return
                if event.sequence <= cursor:
                    continue
                cursor = event.sequence
                yield event
                if _is_terminal(event):
                    return
        finally:
            queues = self._subscribers.get(run_id)
            if queues is not None:
                queues.discard(queue)
                if not queues:
                    self._subscribers.pop(run_id, None)

    async def _snapshot(self, run_id: str) -> Snapshot:
        self._check()
        prices = self.app.prices

        def read(tx: SqliteTx) -> Snapshot | None:
            run = tx.get_run(run_id)
            if run is None:
                return None
            operations = tx.operations(run_id)
            return Snapshot(
                run=run,
                operations=operations,
                cursor=tx.last_sequence(run_id),
                checkpoint=build_checkpoint(tx, run, operations, prices),
            )

        snapshot = await self.store.submit(read, read_only=True)
        if snapshot is None:
            raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
        return snapshot

    async def _resolve(self, run_id: str, key: str, output: Any) -> None:
        self._check()
        require_id("operation_key", key)
        try:
            value = to_json(output)
        except NotJSONError as exc:
            raise ValidationError(
                f"resolve({key!r}) of run {run_id}: output must be JSON ({exc})"
            ) from None
        result = {"output": value, "failed": False, "error": None, "resolved": True}
        size = len(dumps(result).encode())
        if size > self.limits.max_payload_bytes:
            raise LimitError(
                f"resolve({key!r}) of run {run_id}: output is {size} bytes, over "
                f"max_payload_bytes ({self.limits.max_payload_bytes})"
            )

        await self.store.submit(
            functools.partial(
                jobs.resolve_job, run_id=run_id, key=key, result=result, where=repr(self.store)
            ),
            barrier=True,
        )
        self._wake.set()

    async def _retry(self, run_id: str) -> None:
        self._check()

        await self.store.submit(
            functools.partial(jobs.retry_job, run_id=run_id, where=repr(self.store)), barrier=True
        )
        self._wake.set()

    async def _cancel(self, run_id: str, reason: str | None) -> None:
        self._check()
        if reason is not None:
            require_text("reason", reason, blank=True)

        if await self.store.submit(
            functools.partial(
                jobs.cancel_job, run_id=run_id, reason=reason, where=repr(self.store)
            ),
            barrier=True,
        ):
            task = self._active.get(run_id)
            if task is not None:
                task.cancel()
            self._wake.set()


class _Closed:
    sequence = -1


_CLOSED: Any = _Closed()


def _is_terminal(event: Event) -> bool:
    return event.kind == "status" and RunStatus(event.data["status"]).terminal
