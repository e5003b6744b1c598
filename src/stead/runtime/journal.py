"""The durable-operation protocol: intent before, result after; replay from committed results.

A run is executed from its start on every resumption. Each durable operation is looked up by its
deterministic key: a completed one returns its stored result without running; an interrupted one
(intent, no result) follows the recovery policy saved with its intent; a new one writes its intent,
runs, and writes its result.

Writes of ``safe`` operations are queued without waiting: the single writer commits them in order,
so by the time anything is acknowledged or a side effect runs, they are committed too. ``manual``
and ``idempotent`` intents are barriers: the effect does not start before its intent is on disk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .._json import JSON, canonical, digest, digest_text, dumps
from ..errors import StorageError
from ..messages import Message, Usage, message_to_json
from ..models.pricing import Price
from ..store.records import Interaction, Operation, Recovery, Run
from ..store.sqlite import SqliteStore
from ..store.sqlite_tx import SqliteTx, history_node
from . import boundaries
from .control import Failed, NeedsAttention

__all__ = ["Conversation", "RunJournal", "write_messages"]


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # a storage failure poisons the runtime; it is reported there


class Conversation:
    """Messages of a run, each linked into the content-addressed history chain.

    A message is stored once (a blob plus one chain node); a model request refers to the whole
    conversation so far by its chain head, so storage grows linearly with the conversation.
    """

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.heads: list[str] = []
        self._pending: list[tuple[str, str, str | None, str]] = []  # body, blob, previous, node

    @property
    def head(self) -> str | None:
        return self.heads[-1] if self.heads else None

    def append(self, message: Message, *, stored: bool = False, body: str | None = None) -> None:
        """Add a message; ``body`` is its canonical JSON when the caller has it already."""
        if body is None:
            body = canonical(message_to_json(message))
        blob = digest_text(body)
        node = history_node(self.head, blob)
        if not stored:
            self._pending.append((body, blob, self.head, node))
        self.messages.append(message)
        self.heads.append(node)

    def take_pending(self) -> list[tuple[str, str, str | None, str]]:
        """Messages appended since the last call, to be written with the next intent."""
        pending, self._pending = self._pending, []
        return pending

    def reference(self) -> JSON:
        return {"head": self.head, "length": len(self.messages)}


def write_messages(tx: SqliteTx, pending: list[tuple[str, str, str | None, str]]) -> None:
    if pending:
        for body, _blob, _previous, _node in pending:
            tx.put_blob(body)
        tx.put_history([(node, previous, blob) for _body, blob, previous, node in pending])


class RunJournal:
    """The durable operations of one execution of one run."""

    def __init__(
        self,
        store: SqliteStore,
        run: Run,
        operations: list[Operation],
        interactions: list[Interaction],
        max_payload_bytes: int,
        max_operations: int | None = None,
    ) -> None:
        self.store = store
        self.run = run
        self.operations = {op.key: op for op in operations}
        self.interactions = {i.key: i for i in interactions}
        self.created = len(operations)
        self.position = max((op.position for op in operations), default=0) + 1
        self.conversation = Conversation()
        self.usage = Usage()
        self.max_payload_bytes = max_payload_bytes
        self.max_operations = max_operations
        self.prices: Mapping[str, Price] | None = None
        #: Operations whose intent is written and whose result is not: if the execution ends
        #: unexpectedly, a non-``safe`` one among them may have had its effect.
        self.in_flight: dict[str, Recovery] = {}
        self._keys: set[str] = set()

    # -- writes ------------------------------------------------------------------------------

    def write(
        self, fn: Callable[[SqliteTx], Any], *, barrier: bool = False, lazy: bool = True
    ) -> asyncio.Future[Any]:
        """Queue a write. Writes nobody waits for are ``lazy``: they share the next commit, and
        the writer keeps their order."""
        future = self.store.submit(fn, barrier=barrier, checked=False, lazy=lazy)
        future.add_done_callback(_consume)
        return future

    def request_interaction(
        self,
        key: str,
        kind: str,
        *,
        tool: str | None = None,
        arguments: JSON = None,
        payload: JSON = None,
        abandon: str | None = None,
    ) -> str:
        """Write a pending interaction (and its event); returns its stable id. ``abandon`` names
        an intent to forget in the same transaction (a tool that asked for approval first)."""
        run_id = self.run.id
        interaction_id = interaction_id_for(run_id, key)
        digest_ = digest(arguments)

        def write(tx: SqliteTx) -> None:
            if abandon is not None:
                tx.delete_operation(run_id, abandon)
            tx.insert_interaction(
                interaction_id=interaction_id,
                run_id=run_id,
                key=key,
                kind=kind,
                tool=tool,
                arguments=arguments,
                digest=digest_,
                payload=payload,
            )
            tx.append_event(
                run_id,
                "interaction_requested",
                {
                    "interaction_id": interaction_id,
                    "key": key,
                    "kind": kind,
                    "tool": tool,
                    "arguments": arguments,
                    "payload": payload,
                },
            )

        self.write(write)
        return interaction_id

    # -- the protocol ------------------------------------------------------------------------

    async def operation(
        self,
        key: str,
        kind: str,
        recovery: Recovery,
        input: JSON,
        execute: Callable[[int], Awaitable[JSON]],
        *,
        started: Callable[[int], JSON],
        completed: Callable[[JSON], JSON],
        prepare: Callable[[SqliteTx], None] | None = None,
        on_result: Callable[[JSON], Callable[[SqliteTx], None]] | None = None,
        describe: str = "",
        max_attempts: int = 3,
    ) -> JSON:
        """Run one durable operation and return its (possibly replayed) JSON result.

        ``execute(attempt)`` does the work. ``started``/``completed`` build the data of the
        ``<kind>_started``/``<kind>_completed`` events. ``on_result(result)``, called when the
        result is new, returns extra writes for the result's transaction (such as the run's
        usage); ``prepare`` adds writes before the intent (such as the messages the input
        refers to). ``max_attempts`` bounds how often an interrupted operation is started
        again: an operation that keeps killing the process is not sent once more.
        """
        run_id = self.run.id
        input_hash = digest({"kind": kind, "input": input})
        if key in self._keys:
            raise NeedsAttention(
                f"operation key {key} was used twice in one execution of run "
                f"{run_id}; give each operation its own key",
                operation=key,
            )
        self._keys.add(key)
        op = self.operations.get(key)
        recovery = op.recovery if op is not None else recovery  # the saved policy wins
        wait_for_intent = recovery != "safe" or kind == "model"
        if op is not None:
            # A fork's copied results stand even if today's code builds a different input:
            # continuing on today's code is what a fork is for.
            if op.copied_from is None and (op.kind != kind or op.input_hash != input_hash):
                raise NeedsAttention(
                    f"definition changed at a saved checkpoint: {key}. The journal holds a "
                    f"different {op.kind} input for this key than today's code builds; restore "
                    "the code the run was recorded with, or fork the run before this operation",
                    operation=key,
                )
            if op.status == "completed":
                return op.result
            if op.recovery == "manual" and not op.rerun:
                raise NeedsAttention(
                    f"operation {key}{describe} was interrupted and its recovery policy is "
                    f"'manual': whether it took effect is unknown (operation id "
                    f"{op.operation_id}). Check the outside world, then resolve({key!r}, "
                    "output=...) with what it did, or retry() to run it again",
                    operation=key,
                )
            started_since_retry = op.attempts - op.attempt_base
            if started_since_retry >= max_attempts:
                reason = (
                    f"operation {key}{describe} was started {started_since_retry} times and "
                    f"never finished (the process stopped during each attempt); its attempt "
                    f"limit is {max_attempts}, so it is not started again"
                )
                if kind == "model":
                    raise Failed(
                        f"{reason}. Find what stops the process, then retry() the run",
                        operation=key,
                        kind="model",
                    )
                raise NeedsAttention(
                    f"{reason}. Find what stops the process, then resolve({key!r}, output=...) "
                    "with what it did, or retry() to start it again",
                    operation=key,
                )
            attempt = op.attempts + 1
            recovery = op.recovery  # the policy saved with the intent wins
            restart_data = started(attempt)

            def restart(tx: SqliteTx) -> None:
                if prepare is not None:
                    prepare(tx)
                tx.restart_operation(run_id, key, attempt)
                tx.append_event(run_id, f"{kind}_started", restart_data)

            intent = self.write(restart, barrier=recovery != "safe", lazy=not wait_for_intent)
        else:
            attempt = 1
            if self.max_operations is not None and self.created >= self.max_operations:
                raise NeedsAttention(
                    f"limit max_operations_per_run hit at {key}: run {run_id} already "
                    f"has {self.created} operations (limit "
                    f"{self.max_operations}); raise the limit, then retry()",
                    operation=key,
                )
            position = self.position
            self.position += 1
            self._check_size(key, "input", input)
            start_data = started(attempt)

            def start(tx: SqliteTx) -> None:
                if prepare is not None:
                    prepare(tx)
                tx.start_operation(
                    run_id=run_id,
                    key=key,
                    position=position,
                    kind=kind,
                    recovery=recovery,
                    input_hash=input_hash,
                    input=input,
                )
                tx.append_event(run_id, f"{kind}_started", start_data)

            intent = self.write(start, barrier=recovery != "safe", lazy=not wait_for_intent)
            self.created += 1
        # Intent before: work that may have an effect starts only once its attempt is committed
        # (for manual and idempotent operations, on disk), so every such attempt — a billed
        # model request too — is in the journal. A safe tool's intent is pipelined instead: if
        # the process dies before it commits, the tool simply runs again, which is what safe
        # means, and a run of safe steps shares commits.
        self.in_flight[key] = recovery
        if wait_for_intent:
            await intent
        if boundaries.hook is not None:
            await intent
            boundaries.hook("intent_committed", key)
        result = await execute(attempt)
        if boundaries.hook is not None:
            boundaries.hook("effect_done", key)
        self._check_size(key, "result", result)
        done_data = completed(result)
        extra = on_result(result) if on_result is not None else None

        def finish(tx: SqliteTx) -> None:
            if not tx.complete_operation(run_id, key, result):
                raise StorageError(
                    f"operation {key} of run {run_id} was not in progress when "
                    "its result was written; the journal was changed under this "
                    "runtime"
                )
            if extra is not None:
                extra(tx)
            tx.append_event(run_id, f"{kind}_completed", done_data)

        written = self.write(finish, barrier=recovery != "safe", lazy=recovery == "safe")
        del self.in_flight[key]
        if recovery != "safe":
            # Result after: the run builds on a side effect's result only once it is on disk,
            # so a crash can never leave an effect the run already acted on uncertain.
            await written
        if boundaries.hook is not None:
            await written
            boundaries.hook("result_committed", key)
        return result

    def _check_size(self, key: str, what: str, value: JSON) -> None:
        size = len(dumps(value).encode())
        if size > self.max_payload_bytes:
            raise NeedsAttention(
                f"limit max_payload_bytes hit at {key}: its {what} is {size} bytes "
                f"(limit {self.max_payload_bytes}); raise the limit or make the "
                "operation return less, then retry()",
                operation=key,
            )


def interaction_id_for(run_id: str, key: str) -> str:
    """Stable across restarts: the same gated call always has the same interaction id."""
    return "int_" + digest_text(f"{run_id}/{key}")[:24]
