"""Client: act on the runs of a store from any process.

A :class:`Client` needs no :class:`~stead.App` and never executes anything. It reads the journal
(reads never block the owner: WAL) and changes runs with commands — respond, resolve, retry,
cancel, fork. On a SQLite file owned by a live runtime, a command is posted to the file's inbox
and the owner applies it with the same transition it uses in-process; the call returns once it is
applied, with the same result or error it would give in-process. With no live owner, the client
applies the command itself, holding the owner's lock meanwhile so no runtime starts under it.
On PostgreSQL, where many workers share a schema, a command is one transaction applied here,
and a notification wakes the workers; a wait for a run's end listens to those notifications
(on a connection of its own, from the first wait on) and reads when one says a run was let go.

:class:`~stead.Runtime` is a Client too: the same methods, applied directly by the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from ._ids import new_id
from ._json import NotJSONError, dumps, loads, to_json
from ._threads import run_store_call
from .agent.checkpoint import build_checkpoint, with_counted_usage, with_usage
from .agent.history import assistant_body, conversation
from .agent.interactions import Answer, Approve, Deny, Response
from .errors import (
    LimitError,
    NotFoundError,
    RunCancelled,
    RunFailed,
    RuntimeClosedError,
    ValidationError,
    shown,
)
from .handle import RunHandle, RunOutcome, RunPage, Snapshot
from .journal.commands import (
    Cancel,
    Command,
    Fork,
    Resolve,
    Respond,
    Retry,
    Signal,
    Submit,
    SubmitGraph,
    SubmitTask,
)
from .journal.protocol import ClientStore, Tx
from .journal.records import Event, Interaction, Run, RunStatus
from .messages import AssistantMessage, Usage, message_from_json
from .models.pricing import Price, cost_usd
from .runtime.limits import Limits, require_id, require_text
from .tasks.graph import GraphNode, graph_input

__all__ = ["Client"]

T = TypeVar("T")

#: What a run can execute.
RUN_KINDS = ("agent", "task", "graph")
#: Events read per page when a subscriber catches up.
EVENT_PAGE = 500
#: How often a client looks for changes written by another process (at most, where the
#: store's notifications say when to look).
POLL_INTERVAL = 0.05
#: Where the store has notifications: how long a wait for a run's end goes without one (or
#: the listener's own fallback) before it looks anyway.
NOTICE_FALLBACK = 5.0


class Client:
    """Acts on the runs of ``store`` from any process (see the module docstring).

    ``command_timeout`` bounds how long a command waits for a live owner to apply it; past it
    the call raises :class:`TimeoutError` naming the command, which stays in the inbox and is
    applied when the owner (or the next one) gets to it.
    """

    def __init__(
        self,
        store: ClientStore,
        *,
        command_timeout: float = 10.0,
        prices: Mapping[str, Price] | None = None,
        limits: Limits | None = None,
    ) -> None:
        if not callable(getattr(store, "client_command", None)):
            raise ValidationError(
                f"a stead client needs a stead store such as stead.SqliteStore(path), got "
                f"{shown(store)}"
            )
        if (
            isinstance(command_timeout, bool)
            or not isinstance(command_timeout, int | float)
            or not 0 < command_timeout < float("inf")
        ):
            raise ValidationError(
                f"command_timeout must be a positive number of seconds, got "
                f"{shown(command_timeout)}"
            )
        self.store = store
        self.command_timeout = float(command_timeout)
        self.prices = prices
        self.limits = limits or Limits()
        self._closed = False
        self._opened = False
        #: The store's notifications, listened to from the first wait for a run's end on.
        self._notices: asyncio.Task[_Notices | None] | None = None

    def __repr__(self) -> str:
        return f"<stead Client on {self.store!r}>"

    async def __aenter__(self) -> Self:
        await self._connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _connect(self) -> None:
        """Check that the store holds a stead journal this stead can read."""
        if not self._opened:
            await asyncio.to_thread(self.store.client_open)
            self._opened = True

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            listening, self._notices = self._notices, None
            if listening is not None:
                notices = await listening
                if notices is not None:
                    await asyncio.to_thread(notices.stop)
            await asyncio.to_thread(self.store.client_close)

    # -- the hooks a Runtime replaces --------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise RuntimeClosedError(f"this client of {self.store!r} is closed; open a new one")

    async def _read(self, fn: Callable[[Tx], T]) -> T:
        self._check()
        await self._connect()
        return await run_store_call(self.store.client_read, fn)

    async def _apply(self, command: Command) -> Any:
        """Apply ``command``: through the owner's inbox, or here when no runtime owns the store
        (on PostgreSQL, always here)."""
        self._check()
        await self._connect()
        return await self.store.client_command(command, timeout=self.command_timeout)

    def _subscribe(self, run_id: str) -> _Poll:
        """Something that wakes when the run may have new events (here: polling the file)."""
        return _Poll()

    async def _listen(self) -> _Notices | None:
        """The store's notifications (PostgreSQL's), listened to from the first call on; None
        where it has none, or the listener could not connect (then reads say what is wrong,
        and the waits poll)."""
        if self._notices is None:
            self._notices = asyncio.ensure_future(_listen(self.store))
        elif self._notices.get_loop() is not asyncio.get_running_loop():
            return None  # listened to for another event loop: poll on this one
        return await asyncio.shield(self._notices)

    def _prices(self) -> Mapping[str, Price] | None:
        return self.prices

    # -- runs --------------------------------------------------------------------------------

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
        ``run_id`` chooses the new run's id (default: a generated ``run_...`` id). The run is
        pinned to ``version``, by default the latest the owning runtime registered (a client
        of a store nobody owns must name it)."""
        self._check()
        if run_id is not None:
            require_id("run_id", run_id)
        require_id("agent_id", agent_id)
        require_id("session_id", session_id)
        require_id("request_id", request_id)
        require_text("prompt", prompt)
        if version is not None:
            require_id("version", version)
        self._fits(f"the prompt of request {request_id!r}", {"prompt": prompt})
        answer = await self._apply(
            Submit(
                run_id=run_id or new_id("run"),
                agent_id=agent_id,
                session_id=session_id,
                request_id=request_id,
                prompt=prompt,
                version=version,
                enqueue=enqueue,
            )
        )
        return RunHandle(self, answer["run_id"])

    async def submit_task(
        self,
        task: str,
        input: Any = None,
        *,
        session_id: str,
        request_id: str,
        enqueue: bool = False,
        version: str | int | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Submit a run of a task with ``input`` (JSON, or a pydantic model). The idempotency
        key, session order and ``enqueue`` work as for :meth:`submit`. A runtime checks the
        input against the task's input type before anything is written; a client checks that
        it is JSON."""
        self._check()
        if run_id is not None:
            require_id("run_id", run_id)
        require_id("task", task)
        require_id("session_id", session_id)
        require_id("request_id", request_id)
        pinned = None if version is None else _task_version(version)
        value = self._task_input(task, input)
        self._fits(f"the input of request {request_id!r} (task {task!r})", {"input": value})
        answer = await self._apply(
            SubmitTask(
                run_id=run_id or new_id("run"),
                task=task,
                session_id=session_id,
                request_id=request_id,
                input=value,
                version=pinned,
                enqueue=enqueue,
            )
        )
        return RunHandle(self, answer["run_id"])

    async def submit_graph(
        self,
        nodes: Sequence[GraphNode],
        *,
        session_id: str,
        request_id: str,
        enqueue: bool = False,
        run_id: str | None = None,
    ) -> RunHandle:
        """Submit a graph of agent and task nodes as one run (see :class:`stead.GraphNode`).
        Everything is checked before anything is written — ids, unknown dependencies, cycles
        (and, on a runtime, that every node's agent or task is registered); the graph run
        then starts each node once its prerequisites completed. Its outcome's ``output`` maps
        node ids to outputs."""
        self._check()
        if run_id is not None:
            require_id("run_id", run_id)
        require_id("session_id", session_id)
        require_id("request_id", request_id)
        found = graph_input(nodes)
        self._check_graph(list(nodes))
        self._fits(f"the graph of request {request_id!r}", {"nodes": found})
        answer = await self._apply(
            SubmitGraph(
                run_id=run_id or new_id("run"),
                session_id=session_id,
                request_id=request_id,
                nodes=found,
                enqueue=enqueue,
            )
        )
        return RunHandle(self, answer["run_id"])

    def _check_graph(self, nodes: list[GraphNode]) -> None:
        """What a runtime checks of a graph's nodes against its registry (a client has none)."""

    def _task_input(self, task: str, value: Any) -> Any:
        """A task submission's input as JSON (a runtime validates it against the task)."""
        try:
            return to_json(value)
        except NotJSONError as exc:
            raise ValidationError(
                f"the input of task {task!r} must be JSON or a pydantic model ({exc}); nothing "
                "was submitted"
            ) from None

    async def signal(self, run_id: str, name: str, value: Any = None, *, request_id: str) -> bool:
        """Deliver signal ``name`` with ``value`` to a task run. It is journaled at once (the
        task may wait for it later) and consumed by the run's waits for ``name`` in the order
        signals arrive. ``request_id`` makes it idempotent: the same signal again is a no-op
        (returns False), a different one under the same id raises :class:`ConflictError`, and
        so does a signal to a run that already ended."""
        self._check()
        require_id("run_id", run_id)
        require_id("signal name", name)
        require_id("request_id", request_id)
        try:
            payload = to_json(value)
        except NotJSONError as exc:
            raise ValidationError(
                f"signal {name!r} to run {run_id}: its value must be JSON ({exc})"
            ) from None
        self._fits(f"signal {name!r} to run {run_id}", payload)
        answer = await self._apply(
            Signal(run_id=run_id, signal=name, value=payload, request_id=request_id)
        )
        return not (isinstance(answer, dict) and answer.get("duplicate"))

    def _fits(self, what: str, payload: Any) -> None:
        """A payload within ``max_payload_bytes``, else :class:`LimitError` naming ``what``."""
        size = len(dumps(payload).encode())
        if size > self.limits.max_payload_bytes:
            raise LimitError(
                f"{what} is {size} bytes, over max_payload_bytes "
                f"({self.limits.max_payload_bytes}); send less or raise the limit with "
                "stead.Limits(max_payload_bytes=...)"
            )

    def get_run(self, run_id: str) -> RunHandle:
        """A handle on a run by id (its methods raise :class:`NotFoundError` if there is none)."""
        self._check()
        return RunHandle(self, require_id("run_id", run_id))

    async def run_record(self, run_id: str) -> Run:
        """The record of run ``run_id``."""
        require_id("run_id", run_id)

        def read(tx: Tx) -> Run | None:
            run = tx.get_run(run_id)
            return None if run is None else with_counted_usage(tx, run)

        run = await self._read(read)
        if run is None:
            raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
        return run

    async def list_runs(
        self,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        status: str | RunStatus | list[str] | None = None,
        after: str | None = None,
        limit: int = 50,
        kind: str | None = None,
        parent_id: str | None = None,
    ) -> RunPage:
        """Runs, newest first, filtered (``kind``: ``agent``, ``task`` or ``graph``;
        ``parent_id``: the runs that run owns); pass ``page.next_cursor`` as ``after`` for
        more."""
        self._check()
        if kind is not None and kind not in RUN_KINDS:
            raise ValidationError(f"kind must be one of {', '.join(RUN_KINDS)}, got {shown(kind)}")
        if parent_id is not None:
            require_id("parent_id", parent_id)
        if session_id is not None:
            require_id("session_id", session_id)
        if agent_id is not None:
            require_id("agent_id", agent_id)
        _require_limit(limit)
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
                raise ValidationError(
                    f"after must be a cursor from a previous page, got {shown(after)}"
                )
            before = int(after)

        def read(tx: Tx) -> list[Run]:
            found = tx.list_runs(
                session_id=session_id,
                agent_id=agent_id,
                statuses=statuses,
                before_number=before,
                limit=limit + 1,
                kind=kind,
                parent_id=parent_id,
            )
            return [with_counted_usage(tx, run) for run in found[:limit]] + found[limit:]

        runs = await self._read(read)
        more = len(runs) > limit
        runs = runs[:limit]
        return RunPage(runs=runs, next_cursor=str(runs[-1].number) if more else None)

    async def snapshot(self, run_id: str) -> Snapshot:
        """A consistent view of a run: record, operations, event cursor, checkpoint view."""
        require_id("run_id", run_id)
        prices = self._prices()

        def read(tx: Tx) -> Snapshot | None:
            run = tx.get_run(run_id)
            if run is None:
                return None
            operations = tx.operations(run_id)
            checkpoint = build_checkpoint(tx, run, operations, prices)
            return Snapshot(
                run=with_usage(run, checkpoint.usage),  # counted once, for both
                operations=operations,
                cursor=tx.last_sequence(run_id),
                checkpoint=checkpoint,
            )

        snapshot = await self._read(read)
        if snapshot is None:
            raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
        return snapshot

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after sequence ``after``: persisted ones, then live ones as they
        commit, ending after the run's terminal status event."""
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63:
            raise ValidationError(f"after must be an event sequence >= 0, got {shown(after)}")
        await self.run_record(run_id)
        cursor = after
        subscription = self._subscribe(run_id)
        try:
            while True:
                page = await self._read(_events_after(run_id, cursor, EVENT_PAGE))
                for event in page:  # a terminal status need not be the last: a retry follows
                    cursor = event.sequence
                    yield event
                if len(page) == EVENT_PAGE:
                    continue
                if (await self.run_record(run_id)).status.terminal:
                    # Its terminal status event committed with the status: read up to it.
                    tail = await self._read(_events_after(run_id, cursor, 2**31))
                    for event in tail:
                        yield event
                    return
                await subscription.wait()
        finally:
            subscription.close()

    async def result(self, run_id: str, timeout: float | None = None) -> RunOutcome:
        """Wait until the run is terminal (see :meth:`RunHandle.result`)."""
        require_id("run_id", run_id)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 <= timeout < float("inf")
        ):
            raise ValidationError(
                f"timeout must be a number of seconds >= 0 or None, got {shown(timeout)}"
            )
        if timeout is None:
            return await self._await_outcome(run_id)
        try:
            async with asyncio.timeout(timeout) as scope:
                return await self._await_outcome(run_id)
        except TimeoutError:
            if not scope.expired():  # the store's own (a pool with no free connection, say)
                raise
            raise TimeoutError(
                f"run {run_id} did not end within {timeout:g}s; it goes on — call result() "
                "again to keep waiting"
            ) from None

    async def _await_outcome(self, run_id: str) -> RunOutcome:
        notices = await self._listen()
        loop = asyncio.get_running_loop()
        while True:
            seen = notices.count if notices is not None else 0
            looked = loop.time()
            found = await self._read(lambda tx: _read_outcome(tx, run_id))
            if found is None:
                raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
            run, bodies = found
            if run.status.terminal:
                return _outcome(run, bodies)
            if notices is not None:  # a run let go since the read, or the fallback
                await notices.after(seen, NOTICE_FALLBACK)
            await asyncio.sleep(max(0.0, looked + POLL_INTERVAL - loop.time()))

    # -- interactions ------------------------------------------------------------------------

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
        _require_limit(limit)
        if session_id is not None:
            require_id("session_id", session_id)
        if run_id is not None:
            require_id("run_id", run_id)
        return await self._read(
            lambda tx: tx.list_interactions(
                status=status, session_id=session_id, run_id=run_id, limit=limit
            )
        )

    async def respond(
        self, interaction_id: str, response: Response, *, run_id: str | None = None
    ) -> None:
        """Answer an interaction, exactly once: the same response again is a no-op, a different
        one raises :class:`ConflictError`. The run continues once all its interactions are
        answered. ``run_id`` checks that the interaction belongs to that run."""
        self._check()
        require_id("interaction_id", interaction_id)
        if not isinstance(response, Approve | Deny | Answer):
            raise ValidationError(
                f"respond() takes stead.Approve, stead.Deny or stead.Answer, got {shown(response)}"
            )
        if run_id is not None:
            found = await self._read(lambda tx: tx.get_interaction(interaction_id))
            if found is None or found.run_id != run_id:
                raise NotFoundError(f"run {run_id} has no interaction {interaction_id!r}")
        await self._apply(Respond(interaction_id=interaction_id, response=response.to_json()))

    # -- operator commands -------------------------------------------------------------------

    async def resolve(self, run_id: str, key: str, output: Any) -> None:
        """Supply the result of the operation a needs_attention run names."""
        self._check()
        require_id("run_id", run_id)
        require_id("operation_key", key)
        try:
            value = to_json(output)
        except NotJSONError as exc:
            raise ValidationError(
                f"resolve({key!r}) of run {run_id}: output must be JSON ({exc})"
            ) from None
        size = len(dumps({"output": value, "failed": False, "error": None}).encode())
        if size > self.limits.max_payload_bytes:
            raise LimitError(
                f"resolve({key!r}) of run {run_id}: output is {size} bytes, over "
                f"max_payload_bytes ({self.limits.max_payload_bytes})"
            )
        await self._apply(Resolve(run_id=run_id, key=key, output=value))

    async def retry(self, run_id: str) -> None:
        """Continue a failed or needs_attention run, keeping every committed result."""
        self._check()
        await self._apply(Retry(run_id=require_id("run_id", run_id)))

    async def cancel(self, run_id: str, reason: str | None = None) -> None:
        """Cancel the run (terminal; never restarted)."""
        self._check()
        require_id("run_id", run_id)
        if reason is not None:
            require_text("reason", reason, blank=True)
        await self._apply(Cancel(run_id=run_id, reason=reason))

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
        the operation ``before`` and continues from there on the registered code (the latest
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
        if version is not None:
            require_id("version", version)
        answer = await self._apply(
            Fork(
                run_id=run_id,
                before=before,
                new_run_id=new_id("run"),
                session_id=fork_session,
                request_id=fork_request,
                version=version,
            )
        )
        return RunHandle(self, answer["run_id"])

    # -- more reads ----------------------------------------------------------------------------

    async def interaction(self, interaction_id: str) -> Interaction:
        """The interaction ``interaction_id``, whatever its status."""
        require_id("interaction_id", interaction_id)
        found = await self._read(lambda tx: tx.get_interaction(interaction_id))
        if found is None:
            raise NotFoundError(
                f"no interaction {interaction_id!r} in {self.store!r}; list_interactions() "
                "or `stead interactions list` shows the pending ones"
            )
        return found

    async def model_responses(self, run_id: str) -> dict[str, AssistantMessage]:
        """The response each completed model operation of run ``run_id`` committed (its text
        and tool calls), by operation key, in the order of the operations. A model operation's
        result holds its message (older journals: a reference to a stored one)."""
        require_id("run_id", run_id)

        def read(tx: Tx) -> dict[str, AssistantMessage] | None:
            if tx.get_run(run_id) is None:
                return None
            found: dict[str, AssistantMessage] = {}
            for op in tx.operations(run_id):
                if op.kind != "model" or op.status != "completed":
                    continue
                if not isinstance(op.result, dict) or "message" not in op.result:
                    continue
                message = message_from_json(loads(assistant_body(tx, op.result)))
                if isinstance(message, AssistantMessage):
                    found[op.key] = message
            return found

        responses = await self._read(read)
        if responses is None:
            raise NotFoundError(f"no run {run_id!r} in {self.store!r}")
        return responses

    async def costs(self, run_ids: Sequence[str]) -> dict[str, float | None]:
        """The USD cost of the committed model responses of each run in ``run_ids``, at this
        client's ``prices`` (else the default table): ``None`` for a run that used a model with
        no known price. The same figure as ``snapshot().checkpoint.cost_usd``, without reading
        the messages. Unknown run ids are left out."""
        ids = [require_id("run_id", run_id) for run_id in run_ids]
        prices = self._prices()

        def read(tx: Tx) -> dict[str, float | None]:
            found: dict[str, float | None] = {}
            for run_id in ids:
                if tx.get_run(run_id) is None:
                    continue
                total: float | None = 0.0
                for op in tx.operations(run_id):
                    if op.kind != "model" or op.status != "completed":
                        continue
                    if not isinstance(op.result, dict) or not isinstance(op.input, dict):
                        continue
                    price = cost_usd(
                        str(op.input.get("model")), Usage.from_json(op.result.get("usage")), prices
                    )
                    total = None if total is None or price is None else total + price
                found[run_id] = None if total is None else round(total, 8)
            return found

        return await self._read(read)


class _Notices:
    """A store's notifications as waiters see them: how many came, and a wake-up at each."""

    def __init__(self) -> None:
        self.count = 0
        self._event = asyncio.Event()
        self.stop: Callable[[], None] = lambda: None

    def notice(self, payload: str) -> None:
        self.count += 1
        self._event.set()  # wakes every waiter now; the next wait waits for the next one
        self._event.clear()

    async def after(self, count: int, timeout: float) -> None:
        """Until a notification after the first ``count`` came, or ``timeout`` seconds."""
        if self.count != count:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()


async def _listen(store: ClientStore) -> _Notices | None:
    listen = getattr(store, "client_listen", None)
    if listen is None:
        return None
    notices = _Notices()
    try:
        notices.stop = await asyncio.to_thread(listen, asyncio.get_running_loop(), notices.notice)
    except Exception:  # the store's reads say what is wrong
        return None
    return notices


class _Poll:
    async def wait(self) -> None:
        await asyncio.sleep(POLL_INTERVAL)

    def close(self) -> None:
        pass


def _events_after(run_id: str, after: int, limit: int) -> Callable[[Tx], list[Event]]:
    return lambda tx: tx.events_after(run_id, after, limit)


def _task_version(version: object) -> str:
    if isinstance(version, int) and not isinstance(version, bool):
        if version < 1:
            raise ValidationError(f"version must be >= 1, got {version}")
        return str(version)
    return require_id("version", version)


def _require_limit(limit: object) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationError(f"limit must be an integer from 1 to 1000, got {shown(limit)}")


def _read_outcome(tx: Tx, run_id: str) -> tuple[Run, list[str]] | None:
    run = tx.get_run(run_id)
    if run is None:
        return None
    if run.status != RunStatus.COMPLETED or run.outcome is None or run.kind != "agent":
        return run, []
    return run, conversation(tx, run)


def _outcome(run: Run, bodies: list[str]) -> RunOutcome:
    if run.status == RunStatus.FAILED:
        raise RunFailed(
            run.id, (run.error or {}).get("reason", "unknown reason"), run.error_kind or "error"
        )
    if run.status == RunStatus.CANCELLED:
        raise RunCancelled(run.id, (run.error or {}).get("reason"))
    outcome = run.outcome or {}
    if run.kind != "agent":
        return RunOutcome(
            run_id=run.id,
            output=outcome.get("output"),
            messages=(),
            usage=Usage.from_json(outcome.get("usage")),
        )
    messages = [message_from_json(loads(b)) for b in bodies[outcome["history_length"] :]]
    return RunOutcome(
        run_id=run.id,
        output=outcome["output"],
        messages=messages,
        usage=Usage.from_json(outcome.get("usage")),
    )
