"""Runtime: a Client that also executes runs — the one owner of a SQLite file, or one of the
workers of a PostgreSQL schema.

``open`` takes ownership (or joins the workers) and resumes unfinished runs; the scheduler claims
runnable runs; each executes as an asyncio task that replays its journal and continues. On a
store with one owner, commands other processes post to its inbox are applied here with the same
transitions; on a shared store every process applies its own commands, and a notification wakes
the workers. ``drain`` hands every run back at its next journal boundary; ``close`` aborts active
executions and keeps their journals, so the next execution continues them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .._json import JSON
from .._threads import wait_here_when
from ..client import Client, _outcome, _read_outcome
from ..errors import (
    NotFoundError,
    RuntimeClosedError,
    StorageError,
    ValidationError,
    shown,
)
from ..handle import RunOutcome
from ..journal import transitions
from ..journal.commands import Cancel, Command, Fork, Submit, SubmitGraph, SubmitTask
from ..journal.protocol import ClientStore, OwnedStore, SharedStore, Tx
from ..journal.records import Claim
from ..tasks.graph import GraphNode
from ..tasks.schedule import Schedule
from .cron import Cron
from .definition import Completion
from .events import EventHub, Subscription
from .executor import Executor
from .inbox import Inbox
from .limits import Limits
from .scheduler import Scheduler

if TYPE_CHECKING:
    from ..app import App

__all__ = ["Limits", "Runtime"]

#: Outcomes kept for waiting ``result()`` calls, at most (see :meth:`Runtime._completed`).
_OUTCOME_CACHE = 1024


class Runtime(Client):
    """One opened owner of a store. Create it with :meth:`App.open`."""

    def __init__(
        self,
        app: App,
        store: OwnedStore,
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
                f"max_concurrent_runs must be a positive integer, got {shown(max_concurrent_runs)}"
            )
        if not callable(getattr(store, "acquire", None)) or not callable(
            getattr(store, "client_command", None)
        ):
            raise ValidationError(
                f"App.open needs a stead store such as stead.SqliteStore(path), got {shown(store)}"
            )
        super().__init__(cast(ClientStore, store), prices=app.prices, limits=limits)
        self.store: OwnedStore = store  # type: ignore[assignment]
        self.app = app
        self._on_fatal_error = on_fatal_error
        self._fatal: StorageError | None = None
        self._resumed = False
        #: Other runtimes execute this store's runs too (PostgreSQL workers).
        self.shared = bool(getattr(store, "shared", False))
        #: How long a claim here outlives its last heartbeat (a shared store's), else None.
        self._lease_seconds: float | None = (
            getattr(store, "lease_seconds", None) if self.shared else None
        )
        self._hub = EventHub(shared=self.shared, lease_seconds=self._lease_seconds)
        self._outcomes: dict[str, RunOutcome] = {}
        self._executor = Executor(
            store,
            app,
            self.limits,
            on_completed=self._completed,
            on_parked=self._wake,
            draining=lambda: self._scheduler.draining,
            on_ending=lambda run_id: self._scheduler.ending(run_id),
        )
        self._scheduler = Scheduler(
            store,
            self._execute,
            max_concurrent_runs=max_concurrent_runs,
            lease_seconds=self._lease_seconds,
            shared=self.shared,
        )
        self._inbox = Inbox(
            store,
            version_of=app.version_of,
            max_pending=self.limits.max_pending_runs,
            applied=self._applied,
        )
        self._cron = Cron(
            app.schedules,
            store.clock,
            self.store.read,
            lambda fn: self.store.transact(fn, durability="commit"),
            self._submit_slot,
        )
        #: Withdraws this runtime's say in whether the loop may wait for a tool's thread itself.
        self._withdraw_here: Callable[[], None] | None = None
        listen = getattr(store.clock, "add_listener", None)
        if callable(listen):  # a test clock wakes the scheduler when time is moved
            listen(self._clock_moved)

    @property
    def max_concurrent_runs(self) -> int:
        return self._scheduler.max_concurrent_runs

    @classmethod
    async def open(
        cls,
        app: App,
        store: OwnedStore,
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
        await asyncio.to_thread(store.acquire, loop, runtime._hub.committed, runtime._failed)
        runtime._opened = True
        flush_here_when = getattr(store, "flush_here_when", None)
        if callable(flush_here_when):  # one run or none executing: the loop may wait itself
            flush_here_when(runtime._scheduler.alone)
        # The same for a synchronous tool's outcome (``stead._threads``).
        runtime._withdraw_here = wait_here_when(loop, runtime._scheduler.alone)
        if runtime.shared:
            shared = cast(SharedStore, store)
            shared.watch(runtime._notice)
            try:
                await shared.declare_agents(app.latest_versions())
            except BaseException:
                await runtime.close()
                raise
        if resume:
            try:
                await runtime.resume()
            except BaseException:
                await runtime.close()
                raise
        return runtime

    def __repr__(self) -> str:
        return f"<stead Runtime on {self.store!r}>"

    # -- lifecycle ---------------------------------------------------------------------------

    async def resume(self) -> None:
        """Start executing: unfinished runs (including those a crash left ``running``) continue
        from their journals, and commands other processes posted are applied. The runnable
        runs there is room for have started when this returns."""
        self._check()
        if not self._resumed:
            self._resumed = True
            await self._inbox.drain()  # a shared store: what an older stead left posted
            await self._scheduler.start_loop()  # what is runnable now has started
            if not self.shared:
                self._inbox.watch()
            self._cron.start()
        else:
            self._wake()

    async def drain(self, timeout: float = 30.0) -> None:
        """Stop taking runs and hand every executing one back at its next journal boundary
        (an operation in progress finishes and is committed first), waiting up to ``timeout``
        seconds; then :meth:`close`. On PostgreSQL another worker continues them at once."""
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 <= timeout < float("inf")
        ):
            raise ValidationError(f"timeout must be a number of seconds >= 0, got {shown(timeout)}")
        if not self._closed and self._fatal is None:
            await self._scheduler.drain(timeout)
        await self.close()

    async def close(self) -> None:
        """Abort active executions (their journal is kept), flush, and release the store."""
        if self._closed:
            return
        self._closed = True
        if self._withdraw_here is not None:
            self._withdraw_here()
        await self._cron.stop()
        await self._inbox.stop()
        await self._scheduler.stop()
        await self.store.aclose()
        self._hub.close(
            RuntimeClosedError(
                "the runtime was closed while waiting for the run; reopen it to continue waiting"
            )
        )

    def health(self) -> dict[str, Any]:
        """Liveness without touching the database."""
        return {
            "ok": self._fatal is None and not self._closed,
            "closed": self._closed,
            "storage_error": str(self._fatal) if self._fatal else None,
            "active_runs": len(self._scheduler.active),
            # On a store shared by workers: this one's name, as its claims show it.
            "worker": getattr(self.store, "worker", None) if self.shared else None,
        }

    def _check(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise RuntimeClosedError(
                f"this runtime on {self.store!r} is closed; open the store again with App.open(...)"
            )

    def _wake(self) -> None:
        self._scheduler.wake()

    def _clock_moved(self) -> None:
        self._scheduler.wake()
        self._cron.wake()

    async def _submit_slot(self, schedule: Schedule, request_id: str) -> None:
        await self.submit_task(
            schedule.task,
            schedule.input,
            session_id=schedule.session_id,
            request_id=request_id,
            enqueue=True,
        )

    def _notice(self, payload: str) -> None:
        """A notification from the shared store: look for work; stop a run cancelled
        elsewhere."""
        if payload.startswith("cancel:"):
            self._scheduler.cancel(payload.removeprefix("cancel:"))
        self._scheduler.wake()
        self._hub.noticed()

    def _failed(self, error: StorageError) -> None:
        if self._fatal is not None:
            return
        self._fatal = error
        self._inbox.halt()
        self._scheduler.halt()
        self._hub.close(error)
        if self._on_fatal_error is not None:
            self._on_fatal_error(error)

    # -- submission: Client.submit, started here at once ------------------------------------

    def _check_graph(self, nodes: list[GraphNode]) -> None:
        self.app.check_graph(nodes)

    def _task_input(self, task: str, value: Any) -> Any:
        """Validated against the registered task (its latest version) before anything is
        written: an unknown task is a :class:`NotFoundError` listing the registered ones."""
        return self.app.task_input(task, value)

    def _accepted(
        self,
        run_id: str,
        ready: bool,
        claim: Claim | None = None,
        begun: transitions.Begun | None = None,
    ) -> None:
        """A new run at its session's head starts at once, without asking the scheduler (on a
        shared store, with the claim its submission took — and the execution it began, if it
        did — else the scheduler claims it)."""
        if claim is not None:
            self._scheduler.adopt(claim, begun)
            if begun is not None and run_id in self._scheduler.active:
                self._hub.started(run_id)  # its running status committed with the submission
        elif ready and self._resumed and not self.shared and self._scheduler.has_room():
            self._scheduler.start(Claim(run_id))
        else:
            self._wake()

    async def _execute(self, claim: Claim, begun: transitions.Begun | None) -> bool:
        """The scheduler's execution of a claimed run; see :meth:`Executor.execute`."""
        try:
            return await self._executor.execute(claim, begun)
        finally:
            self._hub.stopped(claim.run_id)

    # -- the Client hooks, applied by the owner ----------------------------------------------

    async def _read(self, fn: Callable[[Tx], Any]) -> Any:
        self._check()
        return await self.store.read(fn)

    async def _apply(self, command: Command) -> Any:
        self._check()
        # A submission with room begins its run in its own transaction, in a slot held for it
        # until it answers (Scheduler.reserve).
        starts = (
            isinstance(command, Submit | SubmitTask | Fork)
            and self._resumed
            and self._scheduler.reserve()
        )
        try:
            if self.shared:
                answer, claim, begun = await cast(SharedStore, self.store).apply_command(
                    command,
                    self.app.version_of,
                    self.limits.max_pending_runs,
                    claim=starts,
                    begin=self._executor.begin,
                )
            else:
                answer, begun = await self.store.transact(
                    functools.partial(
                        transitions.apply_and_begin,
                        command=command,
                        version_of=self.app.version_of,
                        max_pending=self.limits.max_pending_runs,
                        begin=self._executor.begin if starts else None,
                    ),
                    durability="barrier",
                )
                claim = Claim(begun.run.id) if begun is not None else None
        finally:
            if starts:
                self._scheduler.unreserve()
        if claim is not None:
            self._accepted(claim.run_id, True, claim, begun)
        else:
            self._applied(command, answer)
        return answer

    def _applied(self, command: Command, answer: JSON) -> None:
        if isinstance(command, Cancel) and answer:
            for run_id in answer if isinstance(answer, list) else [command.run_id]:
                self._scheduler.cancel(run_id)
        if isinstance(command, Fork | Submit | SubmitTask | SubmitGraph) and isinstance(
            answer, dict
        ):
            self._accepted(answer["run_id"], bool(answer["ready"]))
        else:
            self._wake()

    def _subscribe(self, run_id: str) -> Subscription:  # type: ignore[override]
        self._hub.check()
        return self._hub.subscribe(run_id)

    async def _await_outcome(self, run_id: str) -> RunOutcome:
        def remembered() -> RunOutcome | None:
            self._check()
            return self._outcomes.pop(run_id, None)

        async def read() -> RunOutcome | None:
            found = await self.store.read(lambda tx: _read_outcome(tx, run_id))
            if found is None:
                raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
            run, bodies = found
            return _outcome(run, bodies) if run.status.terminal else None

        return await self._hub.outcome(run_id, remembered, read)

    def _completed(self, run_id: str, completion: Completion) -> None:
        """Completed and on disk: the first ``result()`` waiting now takes the outcome from
        memory, others read the journal. None is kept for a run nobody waits for: an outcome
        holds the run's conversation, by the thousand on a runtime serving long runs."""
        if not self._hub.awaited(run_id):
            return
        output, messages, usage = completion.output, completion.messages, completion.usage
        self._outcomes[run_id] = RunOutcome(run_id, output, messages, usage)
        while len(self._outcomes) > _OUTCOME_CACHE:  # their waiters were cancelled meanwhile
            self._outcomes.pop(next(iter(self._outcomes)))
