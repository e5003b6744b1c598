"""Records the store reads and writes: runs, operations, events. Frozen; JSON fields are plain."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from .._json import JSON

__all__ = [
    "Claim",
    "Event",
    "HistoryNode",
    "Interaction",
    "Notice",
    "Operation",
    "Recovery",
    "Run",
    "RunStatus",
    "Signal",
    "SubmissionState",
    "Writes",
    "outcome_history",
    "outcome_record",
]

Recovery = Literal["safe", "idempotent", "manual"]
RECOVERY_POLICIES: tuple[Recovery, ...] = ("safe", "idempotent", "manual")


@dataclass(frozen=True, slots=True)
class Claim:
    """The right to execute one run: its id and the epoch of the claim (always 0 on a store
    that one runtime owns; on a store shared by workers, every claim moves it on)."""

    run_id: str
    epoch: int = 0


class RunStatus(StrEnum):
    """The status of a run (DESIGN §2). The last three are terminal and immutable."""

    QUEUED = "queued"
    PENDING = "pending"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    WAITING = "waiting"
    NEEDS_ATTENTION = "needs_attention"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
#: Statuses the scheduler may start or continue: on a store with one owner, ``running`` is a
#: claim its previous owner lost when it stopped.
RUNNABLE_STATUSES: tuple[str, ...] = ("queued", "pending", "running")

#: A node of the history chain: (node hash, previous node hash, message blob hash).
HistoryNode = tuple[str, str | None, str]


@dataclass(frozen=True, slots=True)
class Writes:
    """Rows a transition writes beside its own: content blobs (stored once by hash), history
    nodes, and the run's usage total."""

    blobs: tuple[str, ...] = ()
    history: tuple[HistoryNode, ...] = ()
    usage: JSON | None = None


def outcome_record(
    *, output: JSON, head: str | None, length: int, history_length: int, usage: JSON
) -> dict[str, JSON]:
    """A completed run's outcome: its output, its messages as a history reference (the
    session's history for the next run), where this run's own messages start, its usage."""
    return {
        "output": output,
        "messages": {"head": head, "length": length},
        "history_length": history_length,
        "usage": usage,
    }


def outcome_history(outcome: JSON) -> tuple[str | None, int]:
    """The history reference of an outcome written by :func:`outcome_record`."""
    messages = outcome["messages"]
    return messages["head"], int(messages["length"])


@dataclass(frozen=True, slots=True)
class Run:
    id: str
    number: int
    session_id: str
    request_id: str
    kind: str
    agent_id: str
    version: str
    status: RunStatus
    input: JSON
    history_head: str | None
    history_length: int | None
    outcome: JSON | None
    error: JSON | None
    attention_key: str | None
    #: Token counts of the committed model responses. The runtime writes the total when the
    #: run completes; until then a client's reads count it from the journal.
    usage: JSON
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    next_attempt_at: datetime | None = None
    error_kind: str | None = None
    #: The completed run whose conversation is this run's session history (``None``: no
    #: history, or a run started before histories were kept by run, whose ``history_head``
    #: names a chain of stored messages).
    history_run: str | None = None
    #: The run that owns this one (a task's child run, a graph's node), if any.
    parent_id: str | None = None
    #: Executions in a row cut off by a crash (the process died, or its worker lost the run)
    #: with nothing new committed in between, the one that resumed the run last included; at
    #: ``Limits.max_interruptions`` the run goes to needs_attention. 0 once a retry or an
    #: orderly close resets it.
    interruptions: int = 0

    @property
    def definition(self) -> str:
        """What the run executes: the agent id, the task name, or ``graph``."""
        return self.agent_id


@dataclass(frozen=True, slots=True)
class SubmissionState:
    """What a submission decides on (``Tx.submission_state``), read as narrowly as it is
    used: each part ``None`` where there is none."""

    #: The run an earlier submission of the same request created, and that submission's digest.
    earlier: tuple[str, str] | None
    #: The session and request of the run that has the new run's id already.
    taken: tuple[str, str] | None
    #: The session's newest unfinished run, and its status.
    busy: tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal journaled on arrival: the ``number``-th of its ``name`` for its run."""

    run_id: str
    request_id: str
    name: str
    number: int
    value: JSON
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Operation:
    """One journaled step of a run. ``status`` is ``started`` (intent) or ``completed``."""

    run_id: str
    key: str
    position: int
    kind: str
    status: Literal["started", "completed"]
    recovery: Recovery
    input_hash: str
    input: JSON
    result: JSON | None
    attempts: int
    rerun: bool
    created_at: datetime
    updated_at: datetime
    copied_from: str | None = None
    attempt_base: int = 0

    @property
    def operation_id(self) -> str:
        """The id handed to external services: ``"<run_id>/<key>"``."""
        return f"{self.run_id}/{self.key}"


@dataclass(frozen=True, slots=True)
class Event:
    """A progress record. ``sequence`` is global, increasing and gap-free (see the store)."""

    sequence: int
    run_id: str
    kind: str
    data: JSON
    created_at: datetime


#: What a commit hands its store's owner for each event it made, in sequence order: the
#: :class:`Event`, or, for an event an operation's row announces (its data is built from the
#: row when it is read), the id of its run alone: that is all the owner needs of it (who waits
#: for that run), and it saves building a record twice a step.
Notice = Event | str


@dataclass(frozen=True, slots=True)
class Interaction:
    """Something a person must answer before a run continues.

    ``kind`` is ``approval`` (a gated tool call: ``tool`` and its canonical ``arguments``, whose
    sha256 is ``digest``), ``question`` (the model asked the user) or ``budget`` (a budget was
    reached and the agent asks whether to go on). ``status`` is ``pending``, ``responded`` or
    ``cancelled`` (its run was cancelled).
    """

    interaction_id: str
    run_id: str
    session_id: str
    key: str
    kind: str
    status: str
    tool: str | None
    arguments: JSON
    digest: str
    payload: JSON
    response: JSON | None
    requested_at: datetime
    responded_at: datetime | None
