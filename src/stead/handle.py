"""RunHandle and the records it returns: the caller's view of one run, from any process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .agent.checkpoint import Checkpoint
from .agent.interactions import Response
from .journal.records import Event, Interaction, Operation, Run, RunStatus
from .messages import Message, Usage

if TYPE_CHECKING:
    from .client import Client

__all__ = ["RunHandle", "RunOutcome", "RunPage", "Snapshot"]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What a completed run produced: its ``output`` (an agent's final text; a task's return
    value as JSON), an agent run's own ``messages`` (prompt through final answer, without the
    session history before it; empty for a task) and its ``usage``."""

    run_id: str
    output: Any
    messages: Sequence[Message]
    usage: Usage


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent view of a run: its record, its operations in order, the sequence of its
    last event (``cursor``: pass it to ``events(after=...)`` to continue from here), and the
    simple ``checkpoint`` view (messages, turns, usage, cost, tool results, pending
    interactions, final text)."""

    run: Run
    operations: Sequence[Operation]
    cursor: int
    checkpoint: Checkpoint


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of ``list_runs``, newest first; ``next_cursor`` fetches the next."""

    runs: Sequence[Run]
    next_cursor: str | None


class RunHandle:
    """A reference to one run, from a :class:`~stead.Runtime` or a :class:`~stead.Client`.
    Cheap to create (no I/O until used); every method reads or changes the journal."""

    __slots__ = ("_client", "id")

    def __init__(self, client: Client, run_id: str) -> None:
        self._client = client
        self.id = run_id

    def __repr__(self) -> str:
        return f"<stead RunHandle {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def run(self) -> Run:
        """The run record."""
        return await self._client.run_record(self.id)

    async def status(self) -> RunStatus:
        return (await self.run()).status

    async def result(self, timeout: float | None = None) -> RunOutcome:
        """Wait until the run is terminal. Returns its outcome; raises :class:`RunFailed` or
        :class:`RunCancelled`, or :class:`TimeoutError` after ``timeout`` seconds (``None``
        waits for ever; the run goes on either way). A run that waits for a person keeps this
        waiting; nothing here approves, resolves or retries anything."""
        return await self._client.result(self.id, timeout)

    def events(self, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after sequence ``after``: persisted ones, then live ones as they
        commit (in this process or another), ending after the run's terminal status event."""
        return self._client.events(self.id, after)

    async def snapshot(self) -> Snapshot:
        return await self._client.snapshot(self.id)

    async def respond(self, interaction_id: str, response: Response) -> None:
        """Answer one of this run's interactions (see ``respond`` on the client)."""
        await self._client.respond(interaction_id, response, run_id=self.id)

    async def interactions(self, status: str | None = None) -> list[Interaction]:
        """This run's interactions (all, or those with ``status``)."""
        return await self._client.list_interactions(status=status, run_id=self.id)

    async def resolve(self, operation_key: str, output: Any) -> None:
        """Supply the result of the interrupted operation the run needs attention at (after
        checking what it did in the outside world); the run continues from there."""
        await self._client.resolve(self.id, operation_key, output)

    async def retry(self) -> None:
        """Continue a ``failed`` or ``needs_attention`` run, keeping every committed result. An
        interrupted ``manual`` operation it needs attention at runs again."""
        await self._client.retry(self.id)

    async def signal(self, name: str, value: Any = None, *, request_id: str) -> bool:
        """Deliver signal ``name`` to this task run (see ``signal`` on the client); False if
        the same signal was delivered before under ``request_id``."""
        return await self._client.signal(self.id, name, value, request_id=request_id)

    async def cancel(self, reason: str | None = None) -> None:
        """Cancel the run (terminal; never restarted). Effects already done are not undone."""
        await self._client.cancel(self.id, reason)
