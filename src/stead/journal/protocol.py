"""The store seam: what a backend implements so the runtime and the client can use it.

Two halves. :class:`Store` owns the transaction lifecycle and durability — group commit, the
disk barriers, ownership — and hands out transactions. :class:`Tx` is typed row operations
only, with no business rules: every rule lives once, in :mod:`stead.journal.transitions`,
written against this protocol, so a second backend implements rows, not rules.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from .._clock import Clock
from .._json import JSON
from ..errors import StorageError
from .commands import Command
from .events import Payload
from .records import (
    Claim,
    Event,
    HistoryNode,
    Interaction,
    Notice,
    Operation,
    Recovery,
    Run,
    RunStatus,
    Signal,
    SubmissionState,
)

if TYPE_CHECKING:
    from .transitions import Begun

__all__ = [
    "ClientStore",
    "Durability",
    "HistoryNode",
    "InboxRow",
    "OwnedStore",
    "SharedStore",
    "Store",
    "Tx",
]

T = TypeVar("T")

#: How durable a transaction must be before its caller hears back:
#: ``lazy`` — nobody waits; it shares the next commit (order is kept); a failure poisons.
#: ``commit`` — committed (a process crash cannot lose it); the caller gets its answer.
#: ``barrier`` — on disk (an OS crash cannot lose it): before a side effect or an acknowledgement.
#: ``lazy_barrier`` — a barrier nobody waits for yet: it shares the next commit, as ``lazy``
#: does, and that commit goes to disk before anything in it is answered. For a side effect's
#: result that the run builds on only with its next write (the next model call's intent).
Durability = Literal["lazy", "commit", "barrier", "lazy_barrier"]

#: An inbox row: (id, command JSON, status, answer JSON).
InboxRow = tuple[int, JSON, str, JSON]


class Tx(Protocol):
    """One transaction (or read) on a store: row operations, no rules."""

    def now(self) -> datetime: ...

    # -- runs
    def get_run(self, run_id: str) -> Run | None: ...
    def run_standing(self, run_id: str) -> tuple[str, str | None] | None: ...
    def find_request(self, session_id: str, request_id: str) -> tuple[Run, str] | None: ...
    def unfinished_in_session(self, session_id: str) -> Run | None: ...
    def later_started(self, run: Run) -> Run | None: ...
    def submission_state(
        self, session_id: str, request_id: str, run_id: str
    ) -> SubmissionState: ...
    def run_to_begin(
        self, run_id: str, fresh: bool = False
    ) -> tuple[Run | None, tuple[str, JSON] | None]: ...
    def insert_run(
        self,
        *,
        run_id: str,
        session_id: str,
        request_id: str,
        kind: str,
        agent_id: str,
        version: str,
        status: RunStatus,
        input: JSON,
        submission_digest: str,
        parent_id: str | None = None,
    ) -> None: ...
    def update_run(self, run_id: str, **fields: Any) -> None: ...
    def interruptions(self, run_id: str) -> tuple[int, int | None]: ...
    def given_back(self, run_ids: Sequence[str]) -> None: ...
    def runnable(self, limit: int, exclude: Iterable[str]) -> list[str]: ...
    def next_wakeup(self) -> datetime | None: ...
    def child_runs(self, parent_id: str) -> list[Run]: ...
    def run_status(self, run_id: str) -> str | None: ...
    def list_runs(
        self,
        *,
        session_id: str | None,
        agent_id: str | None,
        statuses: Sequence[str] | None,
        before_number: int | None,
        limit: int,
        kind: str | None = None,
        parent_id: str | None = None,
    ) -> list[Run]: ...
    def count_runs(self, statuses: Sequence[str]) -> int: ...

    # -- operations
    def operations(self, run_id: str) -> list[Operation]: ...
    def model_results(self, run_id: str) -> list[JSON]: ...
    def run_journal(self, run_id: str) -> tuple[list[Operation], list[Interaction]]: ...
    def get_operation(self, run_id: str, key: str) -> Operation | None: ...
    def start_operation(
        self,
        *,
        run_id: str,
        run_number: int,
        key: str,
        position: int,
        kind: str,
        recovery: Recovery,
        input_hash: str,
        input: JSON,
        input_text: str | None = None,
        result_text: str | None = None,
        started_seq: int | None = None,
        completed_seq: int | None = None,
    ) -> None: ...
    def restart_operation(
        self, run_id: str, key: str, attempts: int, *, run_number: int, position: int
    ) -> None: ...
    def complete_operation(
        self,
        run_id: str,
        key: str,
        result: JSON,
        result_text: str | None = None,
        completed_seq: int | None = None,
        *,
        run_number: int,
        position: int,
    ) -> bool: ...
    def order_rerun(self, run_id: str, key: str) -> None: ...
    def copy_operations(self, source_run_id: str, target_run_id: str, before: int) -> int: ...
    def delete_operation(self, run_id: str, key: str) -> None: ...
    def reset_attempts(self, run_id: str) -> None: ...

    # -- interactions
    def insert_interaction(
        self,
        *,
        interaction_id: str,
        run_id: str,
        key: str,
        kind: str,
        tool: str | None,
        arguments: JSON,
        digest: str,
        payload: JSON,
    ) -> None: ...
    def get_interaction(self, interaction_id: str) -> Interaction | None: ...
    def run_interactions(self, run_id: str) -> list[Interaction]: ...
    def list_interactions(
        self, *, status: str | None, session_id: str | None, run_id: str | None, limit: int
    ) -> list[Interaction]: ...
    def respond_interaction(self, interaction_id: str, response: JSON) -> None: ...
    def cancel_interactions(self, run_id: str) -> None: ...
    def pending_interactions(self, run_id: str) -> int: ...

    # -- signals
    def get_signal(self, run_id: str, request_id: str) -> Signal | None: ...
    def insert_signal(self, run_id: str, request_id: str, name: str, value: JSON) -> Signal: ...
    def signal_number(self, run_id: str, name: str, number: int) -> Signal | None: ...
    def run_signals(self, run_id: str) -> list[Signal]: ...

    # -- schedules
    def schedule_since(self, name: str, now: datetime) -> datetime: ...

    # -- events
    def append_event(self, run_id: str, payload: Payload) -> Event: ...
    def announce(self, run_id: str, kind: str) -> int:
        """The sequence of an event of ``kind`` that an operation row holds (no event row)."""
        ...

    def events_after(self, run_id: str | None, after: int, limit: int) -> list[Event]: ...
    def last_sequence(self, run_id: str) -> int: ...

    # -- blobs and histories
    def put_blob(self, body: str) -> str: ...
    def get_blob(self, digest: str) -> str: ...
    def put_history(self, nodes: Sequence[HistoryNode]) -> None: ...
    def history(self, head: str | None, length: int) -> list[str]: ...

    # -- the inbox of a store with one owner
    def post_command(self, command: JSON) -> int: ...
    def posted_commands(self, limit: int) -> list[InboxRow]: ...
    def hold_command(self, command_id: int) -> bool: ...
    def answer_command(self, command_id: int, status: str, answer: JSON) -> None: ...
    def get_command(self, command_id: int) -> InboxRow | None: ...
    def forget_answered(self, before: datetime) -> int: ...


class Store(Protocol):
    """Where a journal is kept: transactions and their durability."""

    clock: Clock

    def transact(
        self, fn: Callable[[Any], T], *, durability: Durability = "commit", isolated: bool = True
    ) -> Awaitable[T]:
        """Run ``fn(tx)`` in a transaction. An ``isolated`` one may raise a
        :class:`~stead.errors.SteadError` as its answer and keeps nothing of its own writes;
        the journal's own writes, which never refuse, skip that cost (a failure poisons, and
        is marked retrieved: it is reported where the store is poisoned, and a write nobody
        awaits is not logged as a failure never retrieved)."""
        ...

    def read(self, fn: Callable[[Any], T]) -> Awaitable[T]: ...

    def amend(self, queued: Awaitable[Any], fn: Callable[[Any], Any]) -> bool:
        """Replace the function of a ``lazy`` transaction that is still queued (``queued`` is
        what :meth:`transact` returned) by ``fn``, which does its work and more in one go;
        False once it was committed or has started (the caller then writes the rest itself)."""
        ...

    async def hold(self) -> None:
        """Before a side effect: return once it is sure that this execution still holds its
        run's claim, else raise :class:`~stead.errors.LeaseLostError` (a store with one owner
        holds every run: it returns at once)."""
        ...


class OwnedStore(Store, Protocol):
    """A store as its owner (a :class:`~stead.Runtime`) uses it."""

    def acquire(
        self,
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[Notice]], None],
        on_fatal: Callable[[StorageError], None],
    ) -> object:
        """Open, migrate and take ownership (blocking; called on a thread). ``on_commit``
        receives every commit's events, in order: each an :class:`Event`, or, for an event
        that an operation's row announces, its run's id (a :data:`Notice`): its data is built
        from the row when the event is read."""
        ...

    async def aclose(self) -> None: ...

    def changed_elsewhere(self) -> bool:
        """Whether another process committed since the last call (commands posted to it);
        cheap enough to ask a few times a second."""
        ...

    #: Whether many runtimes execute this store's runs at once (each run claimed with a
    #: lease), or one runtime owns the store and every run in it.
    shared: bool

    def claim_runs(
        self, limit: int, exclude: Iterable[str]
    ) -> Awaitable[tuple[list[Claim], datetime | None]]:
        """Claim up to ``limit`` runnable runs at the head of their sessions (not those in
        ``exclude``, which execute here already); with them, when to look again."""
        ...

    async def extend_leases(self, claims: Sequence[Claim]) -> set[str]:
        """Heartbeat: extend the claims still held; returns the ids of the runs lost."""
        ...

    async def release_claims(self, claims: Sequence[Claim]) -> None:
        """Give runs up, for any runtime to claim at once."""
        ...

    def fenced(self, claim: Claim) -> Store:
        """This store as one execution writes to it: every write fenced by ``claim``."""
        ...


class SharedStore(OwnedStore, Protocol):
    """A store many runtimes (workers) share: commands are applied where they are given and
    a notification wakes the workers."""

    def watch(self, on_notice: Callable[[str], None]) -> None:
        """Call ``on_notice(payload)`` on the loop when a worker should look again
        (``cancel:RUN_ID`` when that run was cancelled)."""
        ...

    async def declare_agents(self, latest: dict[str, str]) -> None: ...

    async def apply_command(
        self,
        command: Command,
        version_of: Any,
        max_pending: int | None,
        *,
        claim: bool = False,
        begin: Callable[[Any, str, bool], Begun | None] | None = None,
    ) -> tuple[JSON, Claim | None, Begun | None]:
        """Apply ``command`` in place; with ``claim``, a run it submits at its session's head
        is claimed for this runtime at once (its claim returned), and with ``begin`` too,
        ``begin(tx, run_id, fresh)`` starts its execution in the same transaction (what it
        returns is returned; ``fresh``: the command inserted the run and wrote nothing else
        of it, as a submission does and a fork, which copies operations, does not)."""
        ...


class ClientStore(Protocol):
    """A store as a :class:`~stead.Client` in any process uses it: reads, and commands that
    reach the owner (or are applied in place when nobody owns the store)."""

    def client_open(self) -> None: ...
    def client_close(self) -> None: ...
    def client_read(self, fn: Callable[[Any], T]) -> T: ...
    async def client_command(self, command: Command, *, timeout: float) -> object: ...
