"""RunContext: the only door through which a definition's code (an agent loop, later a task)
touches the journal.

A run is executed from its start on every resumption. Each durable operation is looked up by its
deterministic key: a completed one returns its stored result without running; an interrupted one
(intent, no result) follows the recovery policy saved with its intent; a new one writes its
intent, runs, and writes its result.

Writes of ``safe`` operations are queued without waiting: the store commits them in order, so by
the time anything is acknowledged or a side effect runs, they are committed too; a new ``safe``
operation's intent is held back a little to be written with its result as one row
(:meth:`RunContext._hold`). ``manual`` and ``idempotent`` intents are barriers: the effect does
not start before its intent is on disk.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from .._clock import TIMER_EARLY
from .._json import JSON, canonical, digest, digest_text, dumps
from ..journal import transitions
from ..journal.events import Payload
from ..journal.keys import MAX_POSITION, interaction_id, operation_id
from ..journal.protocol import Durability, Store, Tx
from ..journal.records import Interaction, Operation, Recovery, Run, Writes
from . import boundaries
from .control import Failed, Handoff, NeedsAttention

__all__ = ["RunContext"]

T = TypeVar("T")

#: Seconds a new ``safe`` operation's intent waits for the operation's result before it is
#: written alone (:meth:`RunContext._hold`): long enough for the tools of many runs handed to a
#: thread together to come back (100 runs at once took up to 20 ms on a small machine), short
#: enough that work in progress shows at once to a person.
INTENT_HOLD = 0.05


@functools.cache
def _kind_text(kind: str) -> str:
    """The JSON text of an operation kind (a few words, fixed by stead's code), encoded once."""
    return canonical(kind)


class RunContext:
    """One execution of one run: its record, its journal so far, and the durable-operation
    protocol (:meth:`operation`), events (:meth:`emit`), interactions, blobs and the clock."""

    def __init__(
        self,
        store: Store,
        run: Run,
        operations: list[Operation],
        interactions: list[Interaction],
        *,
        max_payload_bytes: int,
        max_operations: int | None = None,
    ) -> None:
        self._store = store
        self.run = run
        self.operations = {op.key: op for op in operations}
        self.interactions = {i.key: i for i in interactions}
        self.max_payload_bytes = max_payload_bytes
        self.max_operations = max_operations
        #: Operations whose intent is written and whose result is not: if the execution ends
        #: unexpectedly, a non-``safe`` one among them may have had its effect.
        self.in_flight: dict[str, Recovery] = {}
        #: Whether the runtime is draining: no new operation starts, the run is handed back.
        self.draining: Callable[[], bool] = lambda: False
        self._created = len(operations)
        self._position = max((op.position for op in operations), default=0) + 1
        self._keys: set[str] = set()
        #: The positions of the waits this execution opened (:meth:`open_wait`), by key.
        self._opened: dict[str, int] = {}
        #: The commit of a side effect's result that the run did not wait for (``settle=False``):
        #: the next effect waits for it before it starts.
        self._unsettled: asyncio.Future[Any] | None = None
        #: The intents of new ``safe`` operations held back while they work (:meth:`_hold`), by
        #: key: when each is due to be written, and its write.
        self._held: dict[str, tuple[float, Callable[[Any], Any]]] = {}
        #: Their writes, once due and queued (until the operation's result takes them).
        self._released: dict[str, asyncio.Future[Any]] = {}
        #: The timer that writes held intents when they come due. Not cancelled when a result
        #: takes its intent first (most operations): it fires, finds nothing due and is armed
        #: again only for a later hold, one timer a hold's while instead of one an operation.
        self._hold_timer: asyncio.TimerHandle | None = None

    # -- small doors -------------------------------------------------------------------------

    def now(self) -> datetime:
        return self._store.clock.now()

    def operation_id(self, key: str) -> str:
        return operation_id(self.run.id, key)

    def _write(self, fn: Callable[[Any], Any], durability: Durability) -> asyncio.Future[Any]:
        # Not isolated: its failure poisons the store and is reported there (the writer marks
        # it retrieved, so a write nobody awaits is not logged as a failure never retrieved).
        queued = self._store.transact(fn, durability=durability, isolated=False)
        # The stores' writers hand back a future already (ensure_future costs three calls).
        return queued if isinstance(queued, asyncio.Future) else asyncio.ensure_future(queued)

    def emit(self, payload: Payload) -> None:
        """Write a progress event with the next commit (nobody waits for it)."""
        self._write(
            functools.partial(transitions.emit, run_id=self.run.id, payload=payload), "lazy"
        )

    def read(self, fn: Callable[[Tx], T]) -> Awaitable[T]:
        """Read the journal (after every write queued before)."""
        return self._store.read(fn)

    async def load_blob(self, digest_: str) -> str:
        """The body of a stored blob (a replayed model message, say)."""
        return str(await self._store.read(lambda tx: tx.get_blob(digest_)))

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
        found = interaction_id(self.run.id, key)
        self._write(
            functools.partial(
                transitions.request_interaction,
                run_id=self.run.id,
                interaction_id=found,
                key=key,
                kind=kind,
                tool=tool,
                arguments=arguments,
                digest=digest(arguments),
                payload=payload,
                abandon=abandon,
            ),
            "lazy",
        )
        return found

    # -- the protocol ------------------------------------------------------------------------

    async def operation(
        self,
        key: str,
        kind: str,
        recovery: Recovery,
        input: JSON,
        execute: Callable[[int], Awaitable[JSON]],
        *,
        before: Writes | None = None,
        after: Callable[[JSON], Writes | None] | None = None,
        describe: str = "",
        max_attempts: int = 3,
        input_text: str | None = None,
        stored: JSON | None = None,
        stored_text: str | None = None,
        settle: bool = True,
        encode: Callable[[JSON], str] | None = None,
    ) -> JSON:
        """Run one durable operation and return its (possibly replayed) JSON result.

        ``execute(attempt)`` does the work; the events that report the intent and the result
        are built from what the journal keeps (``journal.events``). ``before`` is written with
        the intent (such as the messages the input refers to); ``after(result)``, called when
        the result is new, is written with the result (``None``: nothing more to write).
        ``max_attempts`` bounds how often an interrupted operation is started again: an
        operation that keeps killing the process is not sent once more. ``stored`` is what the
        journal keeps of the input when part of it is journaled elsewhere already (default: all
        of it), and ``stored_text`` its canonical JSON when the caller has it (``input_text``
        likewise for the input); the input hash that replay compares always covers the whole
        input.

        A non-``safe`` operation's result is on disk before this returns, unless ``settle`` is
        False: then it returns once the result is queued, and the run's next effect, and every
        write the run waits for after it (commits are delivered in order), waits for that disk
        flush. For a caller whose next step outside memory is another operation (the agent
        loop: its next model call), so the result and the next intent share one commit.

        ``encode(result)`` gives the result's JSON for storage where the caller writes it
        faster than encoding the whole result (default :func:`dumps`): a model response whose
        message the loop has encoded already.
        """
        run_id = self.run.id
        input_text, input_hash = self._use_key(key, kind, input, input_text)
        op = self.operations.get(key)
        if op is not None:
            replayed = self._replay(op, kind, input_hash, describe, max_attempts)
            if replayed is not None:
                return replayed
        if self.draining():
            raise Handoff(f"this worker is stopping; run {run_id} continues at {key} elsewhere")
        recovery = op.recovery if op is not None else recovery  # the saved policy wins
        wait_for_intent = recovery != "safe" or kind == "model"
        durability: Durability = (
            "barrier" if recovery != "safe" else "commit" if wait_for_intent else "lazy"
        )
        fresh: functools.partial[None] | None = None  # the intent of a new operation
        held = False  # a new safe operation's intent, held back (_hold)
        intent: asyncio.Future[Any] | None = None
        if op is not None:
            attempt = op.attempts + 1
            position = op.position
            kept = op.input  # what the journal keeps of the input
            intent = self._write(
                functools.partial(
                    transitions.restart_operation,
                    run_id=run_id,
                    run_number=self.run.number,
                    key=key,
                    position=position,
                    kind=kind,
                    input=kept,
                    attempt=attempt,
                    writes=before,
                ),
                durability,
            )
        else:
            attempt = 1
            # The limits, looked at where they may be hit (a text of a quarter of the payload
            # limit in characters fits whatever its encoding): most operations call nothing.
            if (
                self.max_operations is not None and self._created >= self.max_operations
            ) or self._position > MAX_POSITION:
                self._check_room(key)
            if len(input_text) * 4 > self.max_payload_bytes:
                self._check_size(key, "input", input_text)
            position = self._position
            kept = input
            if stored is not None:
                kept = stored
                input_text = canonical(stored) if stored_text is None else stored_text
            fresh = functools.partial(
                transitions.start_operation,
                run_id=run_id,
                run_number=self.run.number,
                key=key,
                position=position,
                kind=kind,
                recovery=recovery,
                input_hash=input_hash,
                input=kept,
                writes=before,
                input_text=input_text,
            )
            if durability == "lazy" and boundaries.hook is None:
                held = True
                self._hold(key, fresh)
            else:
                intent = self._write(fresh, durability)
            self._position += 1
            self._created += 1
        # Intent before: work that may have an effect starts only once its attempt is committed
        # (for manual and idempotent operations, on disk), so every such attempt — a billed
        # model request too — is in the journal. A safe operation's intent is held back
        # instead (_hold): if the process dies before it commits, the work simply runs again,
        # which is what safe means, and a run of safe steps shares commits.
        self.in_flight[key] = recovery
        if wait_for_intent or boundaries.hook is not None:
            assert intent is not None  # only a lazy intent is held, and not under a hook
            await intent
            if boundaries.hook is not None:
                boundaries.hook("intent_committed", key)
        try:
            if recovery != "safe":
                # Where workers share the store, this one may have been frozen past its lease
                # since the intent committed, and another may have taken the run over: the
                # effect starts only while the claim is still this execution's.
                await self._store.hold()
            if self._unsettled is not None:  # a side effect's result the run builds on
                await self._unsettled
                self._unsettled = None
            result = await execute(attempt)
            if boundaries.hook is not None:
                boundaries.hook("effect_done", key)
            result_text = dumps(result) if encode is None else encode(result)
            if len(result_text) * 4 > self.max_payload_bytes:
                self._check_size(key, "result", result_text)
            later = after(result) if after is not None else None
        except BaseException:
            # Ended without a result to write (it raised, or its execution was cancelled): an
            # intent not written yet is not written, as if the operation had not started.
            if held and self._held.pop(key, None) is None:
                self._released.pop(key, None)
            raise
        # A safe operation that finished within its intent's hold, or while its intent still
        # waited in the queue, is written as one row holding both.
        if held:
            assert fresh is not None
            combined = (
                # the intent with its result: start_operation writes the row completed
                functools.partial(fresh, result=result, result_text=result_text)
                if later is None
                else functools.partial(
                    transitions.record_operation,
                    **fresh.keywords,
                    result=result,
                    result_text=result_text,
                    after=later,
                )
            )
            if self._held.pop(key, None) is not None:  # within the hold: never queued
                self._write(combined, "lazy")
                del self.in_flight[key]
                return result
            intent = self._released.pop(key)
            if self._store.amend(intent, combined):
                del self.in_flight[key]
                return result
        written = self._write(
            functools.partial(
                transitions.finish_operation,
                run_id=run_id,
                run_number=self.run.number,
                key=key,
                position=position,
                kind=kind,
                input=kept,
                result=result,
                writes=later,
                result_text=result_text,
            ),
            ("barrier" if settle else "lazy_barrier") if recovery != "safe" else "lazy",
        )
        del self.in_flight[key]
        if recovery != "safe" and not settle:
            self._unsettled = written
        elif recovery != "safe":
            # Result after: the run builds on a side effect's result only once it is on disk,
            # so a crash can never leave an effect the run already acted on uncertain.
            await written
        if boundaries.hook is not None:
            await written
            boundaries.hook("result_committed", key)
        return result

    def _hold(self, key: str, intent: Callable[[Any], Any]) -> None:
        """Hold back the intent of a new ``safe`` operation while it works: written when the
        hold (:data:`INTENT_HOLD`) runs out, so that work that goes on longer is seen in
        progress, or else with its result as one row (:meth:`operation`). Queued at once, the
        intent committed with whatever commit another run made meanwhile (a tool on a worker
        thread while other runs go on), and the result then updated the row: two writes where
        one will do. An operation that kills the process within the hold leaves no intent to
        count its attempts by; the run's own count of executions interrupted with nothing new
        committed stops it instead (``Limits.max_interruptions``)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + INTENT_HOLD
        self._held[key] = (due, intent)
        if self._hold_timer is None:
            self._hold_timer = loop.call_at(due, self._write_due)

    def _write_due(self) -> None:
        """The hold timer fired: queue the held intents that are due (in the order they were
        held), and wait on for the next one, if any."""
        self._hold_timer = None
        if not self._held:
            return
        loop = asyncio.get_running_loop()
        now = loop.time() + TIMER_EARLY
        later: float | None = None
        for key, (due, intent) in list(self._held.items()):
            if due <= now:
                del self._held[key]
                # Not lazy: it has waited its while already.
                self._released[key] = self._write(intent, "commit")
            elif later is None:
                later = due  # held in order, so the first one left is the next due
        if later is not None:
            self._hold_timer = loop.call_at(later, self._write_due)

    def _use_key(
        self, key: str, kind: str, input: JSON, input_text: str | None = None
    ) -> tuple[str, str]:
        """Take ``key`` for this execution; returns the input's canonical text (``input_text``
        when the caller has it) and the hash replay compares. One encoding serves the hash,
        the size check and storage: the hash is the digest of {"input": ..., "kind": ...} in
        canonical form, written out around the input's text."""
        if key in self._keys:
            raise NeedsAttention(
                f"operation key {key} was used twice in one execution of run {self.run.id}; "
                "give each operation its own key",
                operation=key,
            )
        self._keys.add(key)
        if input_text is None:
            input_text = canonical(input)
        return input_text, digest_text(f'{{"input":{input_text},"kind":{_kind_text(kind)}}}')

    def _check_room(self, key: str) -> None:
        if self._position > MAX_POSITION:
            raise NeedsAttention(
                f"run {self.run.id} has used every operation position ({MAX_POSITION:,}) and "
                f"cannot record {key}; fork it before an earlier operation to go on in a new run",
                operation=key,
            )
        if self.max_operations is not None and self._created >= self.max_operations:
            raise NeedsAttention(
                f"limit max_operations_per_run hit at {key}: run {self.run.id} already has "
                f"{self._created} operations (limit {self.max_operations}); raise the "
                "limit, then retry()",
                operation=key,
            )

    def _check_match(self, op: Operation, kind: str, input_hash: str) -> None:
        # A fork's copied results stand even if today's code builds a different input:
        # continuing on today's code is what a fork is for.
        if op.copied_from is None and (op.kind != kind or op.input_hash != input_hash):
            if op.kind != kind:
                found = f"a {op.kind} operation at this key, where today's code runs a {kind}"
            else:
                found = f"a different {op.kind} input for this key than today's code builds"
            raise NeedsAttention(
                f"definition changed at operation {op.key}: the journal holds {found}; restore "
                "the code the run was recorded with, or fork the run before this operation",
                operation=op.key,
            )

    def _fields(self, key: str, kind: str, input_hash: str, stored: JSON) -> dict[str, Any]:
        """The intent of a new operation, as :func:`transitions.start_operation` takes it."""
        fields = {
            "run_id": self.run.id,
            "run_number": self.run.number,
            "key": key,
            "position": self._position,
            "kind": kind,
            "recovery": "safe",
            "input_hash": input_hash,
            "input": stored,
            "writes": None,
            "input_text": canonical(stored),
        }
        self._position += 1
        self._created += 1
        return fields

    # -- operations that wait, and values --------------------------------------------------

    async def open_wait(
        self,
        key: str,
        kind: str,
        input: JSON,
        *,
        stored: JSON | None = None,
        start: Callable[..., None] | None = None,
    ) -> Operation | None:
        """An operation that may wait across executions (a timer, a signal wait, a child run):
        the journaled one (done, or still waiting), or ``None`` once its intent is committed —
        written by ``start(tx, operation=<intent fields>)`` when the intent creates more (a
        child run). ``stored`` is what the journal keeps of the input when it
        carries more than the hashed ``input`` (a deadline fixed when the wait began)."""
        input_text, input_hash = self._use_key(key, kind, input)
        op = self.operations.get(key)
        if op is not None:
            self._check_match(op, kind, input_hash)
            return op
        if self.draining():
            raise Handoff(
                f"this worker is stopping; run {self.run.id} continues at {key} elsewhere"
            )
        self._check_room(key)
        self._check_size(key, "input", input_text)
        fields = self._fields(key, kind, input_hash, input if stored is None else stored)
        write = (
            functools.partial(transitions.start_operation, **fields)
            if start is None
            else functools.partial(start, operation=fields)
        )
        await self._write(write, "commit")
        self._opened[key] = fields["position"]
        return None

    async def close_wait(self, key: str, kind: str, stored: JSON, result: JSON) -> None:
        """The result of a waiting operation that :meth:`open_wait` opened or found in
        progress (``stored``: what the journal keeps of its input)."""
        self._check_size(key, "result", dumps(result))
        op = self.operations.get(key)
        await self._write(
            functools.partial(
                transitions.finish_operation,
                run_id=self.run.id,
                run_number=self.run.number,
                key=key,
                position=op.position if op is not None else self._opened[key],
                kind=kind,
                input=stored,
                result=result,
                writes=None,
            ),
            "commit",
        )

    def record(self, key: str, kind: str, input: JSON, result: Callable[[], JSON]) -> JSON:
        """A value the run must see the same on every replay (a time, a random number, a
        custom event): the journaled one, or ``result()`` written now, with the next commit."""
        _, input_hash = self._use_key(key, kind, input)
        op = self.operations.get(key)
        if op is not None:
            self._check_match(op, kind, input_hash)
            return op.result
        self._check_room(key)
        value = result()
        fields = self._fields(key, kind, input_hash, input)
        self._write(
            functools.partial(
                transitions.start_operation, **fields, result=value, result_text=dumps(value)
            ),
            "lazy",
        )
        return value

    def _replay(
        self, op: Operation, kind: str, input_hash: str, describe: str, max_attempts: int
    ) -> JSON | None:
        """A journaled operation's result, or ``None`` when it is to be started again; stops
        the execution when it may not be."""
        key = op.key
        self._check_match(op, kind, input_hash)
        if op.status == "completed":
            return op.result if op.result is not None else {}
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
                f"operation {key}{describe} was started {started_since_retry} times and never "
                "finished (the process stopped during each attempt); its attempt limit is "
                f"{max_attempts}, so it is not started again"
            )
            if kind == "model":
                raise Failed(
                    f"{reason}. Find what stops the process, then retry() the run",
                    operation=key,
                    kind="model",
                )
            raise NeedsAttention(
                f"{reason}. Find what stops the process, then resolve({key!r}, output=...) with "
                "what it did, or retry() to start it again",
                operation=key,
            )
        return None

    def _check_size(self, key: str, what: str, text: str) -> None:
        size = len(text) if text.isascii() else len(text.encode())
        if size > self.max_payload_bytes:
            raise NeedsAttention(
                f"limit max_payload_bytes hit at {key}: its {what} is {size} bytes (limit "
                f"{self.max_payload_bytes}); raise the limit or make the operation return "
                "less, then retry()",
                operation=key,
            )
