"""One payload type per event kind: the only place event data is built.

An event commits in the same transaction as the state change it reports (DESIGN §6). Its data is
stored as JSON; a payload's :meth:`~Payload.data` drops optional fields that are unset, so the
stored shape of an event is exactly the fields that say something.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .._json import JSON

__all__ = [
    "EVENT_KINDS",
    "EventKind",
    "InteractionRequested",
    "InteractionResponded",
    "ModelAttemptFailed",
    "ModelAttemptStarted",
    "ModelCompleted",
    "ModelDelta",
    "ModelStarted",
    "Payload",
    "StatusChanged",
    "Submitted",
    "ToolCompleted",
    "ToolStarted",
]

EventKind = Literal[
    "submitted",
    "status",
    "model_started",
    "model_attempt_started",
    "model_delta",
    "model_attempt_failed",
    "model_completed",
    "tool_started",
    "tool_completed",
    "interaction_requested",
    "interaction_responded",
]
EVENT_KINDS: tuple[EventKind, ...] = EventKind.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Payload:
    """Base of every event payload; ``event_kind`` names the event."""

    event_kind: ClassVar[EventKind]

    def data(self) -> dict[str, JSON]:
        """The event's stored data: every required field, and optional ones that are set."""
        out: dict[str, JSON] = {}
        for name, optional in _shape(type(self)):
            value: Any = getattr(self, name)
            if value is None and optional:
                continue
            out[name] = value
        return out


_SHAPES: dict[type[Payload], tuple[tuple[str, bool], ...]] = {}


def _shape(cls: type[Payload]) -> tuple[tuple[str, bool], ...]:
    """(field name, optional) of a payload class, computed once."""
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = tuple((f.name, f.default is None) for f in dataclasses.fields(cls))
    return shape


@dataclass(frozen=True, slots=True)
class Submitted(Payload):
    """A run was accepted (``status`` pending or queued); a fork says where it came from."""

    event_kind: ClassVar[EventKind] = "submitted"
    agent_id: str
    version: str
    session_id: str
    request_id: str
    status: str
    forked_from: str | None = None
    before: str | None = None
    copied_operations: int | None = None


@dataclass(frozen=True, slots=True)
class StatusChanged(Payload):
    """The run's status changed; ``reason`` and ``kind`` say why it stopped short of an
    outcome, ``operation`` names the operation a needs_attention run waits on."""

    event_kind: ClassVar[EventKind] = "status"
    status: str
    reason: str | None = None
    kind: str | None = None
    operation: str | None = None
    next_attempt_at: str | None = None
    resumed: bool | None = None
    resolved: str | None = None
    retried: bool | None = None


@dataclass(frozen=True, slots=True)
class ModelStarted(Payload):
    event_kind: ClassVar[EventKind] = "model_started"
    key: str
    turn: int
    attempt: int


@dataclass(frozen=True, slots=True)
class ModelAttemptStarted(Payload):
    """A streamed attempt began: clients drop partial text of earlier attempts of ``key``."""

    event_kind: ClassVar[EventKind] = "model_attempt_started"
    key: str
    attempt: int
    attempt_id: str


@dataclass(frozen=True, slots=True)
class ModelDelta(Payload):
    """Coalesced streamed text and tool-call fragments of one attempt (never replayed)."""

    event_kind: ClassVar[EventKind] = "model_delta"
    key: str
    attempt_id: str
    text: str | None = None
    tool_calls: list[dict[str, JSON]] | None = None


@dataclass(frozen=True, slots=True)
class ModelAttemptFailed(Payload):
    event_kind: ClassVar[EventKind] = "model_attempt_failed"
    key: str
    attempt: int
    attempt_id: str
    error: str


@dataclass(frozen=True, slots=True)
class ModelCompleted(Payload):
    """A model response was committed, with its usage and cost."""

    event_kind: ClassVar[EventKind] = "model_completed"
    key: str
    turn: int
    model: str
    text: str
    tool_calls: list[dict[str, JSON]]
    usage: dict[str, JSON]
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class ToolStarted(Payload):
    event_kind: ClassVar[EventKind] = "tool_started"
    key: str
    tool: str
    call_id: str
    attempt: int
    operation_id: str


@dataclass(frozen=True, slots=True)
class ToolCompleted(Payload):
    """A tool's result was committed (``resolved``: supplied by hand with ``resolve``)."""

    event_kind: ClassVar[EventKind] = "tool_completed"
    key: str
    tool: str | None
    call_id: str | None
    failed: bool
    output: JSON
    resolved: bool | None = None


@dataclass(frozen=True, slots=True)
class InteractionRequested(Payload):
    """A person must answer: an approval, a question or a budget breach."""

    event_kind: ClassVar[EventKind] = "interaction_requested"
    interaction_id: str
    key: str
    kind: str
    tool: str | None
    arguments: JSON
    payload: JSON


@dataclass(frozen=True, slots=True)
class InteractionResponded(Payload):
    """A person's response was recorded (once)."""

    event_kind: ClassVar[EventKind] = "interaction_responded"
    interaction_id: str
    key: str
    response: JSON
