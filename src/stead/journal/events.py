"""One payload type per event kind: the only place event data is built.

An event commits in the same transaction as the state change it reports (DESIGN §6). Its data is
stored as JSON; a payload's :meth:`~Payload.data` drops optional fields that are unset, so the
stored shape of an event is exactly the fields that say something.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .._json import JSON, dumps

__all__ = [
    "EVENT_KINDS",
    "OPERATION_EVENT_KINDS",
    "PREVIEW_CHARS",
    "RESULT_EVENT_KINDS",
    "ChildCompleted",
    "ChildStarted",
    "Custom",
    "EffectCompleted",
    "EffectStarted",
    "EventKind",
    "InteractionRequested",
    "InteractionResponded",
    "ModelAttemptFailed",
    "ModelAttemptStarted",
    "ModelCompleted",
    "ModelDelta",
    "ModelStarted",
    "Payload",
    "SignalReceived",
    "StatusChanged",
    "Submitted",
    "TimerFired",
    "TimerSet",
    "ToolCompleted",
    "ToolStarted",
    "completed_event_kind",
    "operation_completed",
    "operation_started",
    "preview",
    "started_event_kind",
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
    "effect_started",
    "effect_completed",
    "timer_set",
    "timer_fired",
    "signal_received",
    "child_started",
    "child_completed",
    "custom",
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
    #: ``task`` or ``graph`` (``None``: an agent run).
    kind: str | None = None
    #: The run that owns this one.
    parent_id: str | None = None


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
    #: What made a waiting run go on: ``signal:NAME``, ``child:RUN_ID``.
    woken_by: str | None = None
    #: On ``running``: the version a task run was recorded under, when a newer version's
    #: ``migrate`` took it over in this transition.
    migrated_from: str | None = None


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


@dataclass(frozen=True, slots=True)
class EffectStarted(Payload):
    """An attempt of a task's step (``recovery`` ``safe``) or effect started."""

    event_kind: ClassVar[EventKind] = "effect_started"
    key: str
    name: str
    recovery: str
    attempt: int
    operation_id: str


@dataclass(frozen=True, slots=True)
class EffectCompleted(Payload):
    """A step's or effect's result was committed (``failed``: it raised ``error``)."""

    event_kind: ClassVar[EventKind] = "effect_completed"
    key: str
    name: str
    failed: bool
    output: JSON
    error: str | None = None
    resolved: bool | None = None


@dataclass(frozen=True, slots=True)
class TimerSet(Payload):
    """A task sleeps, or waits for a signal with a timeout, until ``until``."""

    event_kind: ClassVar[EventKind] = "timer_set"
    key: str
    until: str


@dataclass(frozen=True, slots=True)
class TimerFired(Payload):
    event_kind: ClassVar[EventKind] = "timer_fired"
    key: str


@dataclass(frozen=True, slots=True)
class SignalReceived(Payload):
    """A signal was journaled for the run (the ``number``-th of its ``name``)."""

    event_kind: ClassVar[EventKind] = "signal_received"
    name: str
    request_id: str
    number: int


@dataclass(frozen=True, slots=True)
class ChildStarted(Payload):
    """The run created an owned child run (``kind`` ``agent`` or ``task``)."""

    event_kind: ClassVar[EventKind] = "child_started"
    key: str
    child_run_id: str
    kind: str
    definition: str


@dataclass(frozen=True, slots=True)
class ChildCompleted(Payload):
    """An owned child run ended (``status``: completed, failed or cancelled)."""

    event_kind: ClassVar[EventKind] = "child_completed"
    key: str
    child_run_id: str
    status: str


@dataclass(frozen=True, slots=True)
class Custom(Payload):
    """A task's own progress event (``ctx.emit(name, value)``)."""

    event_kind: ClassVar[EventKind] = "custom"
    name: str
    value: JSON


# -- the events of an operation ----------------------------------------------------------------
#
# An operation's intent and result carry their events' data already: the first start of a model
# call or a tool and its result are announced from the operation row (its ``started_seq`` and
# ``completed_seq``) instead of being copied into an event row. These functions are the one place
# that data is built, for the live announcement and for every later read.

#: Characters of a tool's output that its ``tool_completed`` event previews.
PREVIEW_CHARS = 200

OPERATION_EVENT_KINDS = frozenset({"model", "tool", "step", "effect", "timer", "child", "emit"})


def preview(output: JSON) -> JSON:
    """A tool's output as its event shows it: whole when short, else its first characters."""
    text = output if isinstance(output, str) else None
    if text is None:
        encoded = dumps(output)
        return output if len(encoded) <= PREVIEW_CHARS else encoded[:PREVIEW_CHARS] + "…"
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def operation_started(
    kind: str, key: str, stored_input: JSON, attempt: int, operation_id: str
) -> Payload | None:
    """The event of an attempt of an operation, from what its row holds (``None``: a kind that
    has no such event)."""
    data = stored_input if isinstance(stored_input, dict) else {}
    if kind == "model":
        return ModelStarted(key=key, turn=_turn(key, data), attempt=attempt)
    if kind == "tool":
        return ToolStarted(
            key=key,
            tool=str(data.get("tool", "")),
            call_id=str(data.get("call_id", "")),
            attempt=attempt,
            operation_id=operation_id,
        )
    if kind in ("step", "effect"):
        return EffectStarted(
            key=key,
            name=str(data.get("name", key)),
            recovery=str(data.get("recovery", "safe")),
            attempt=attempt,
            operation_id=operation_id,
        )
    if kind == "timer" and attempt == 1:
        return TimerSet(key=key, until=str(data.get("until", "")))
    if kind == "emit":
        return Custom(name=str(data.get("name", "")), value=data.get("value"))
    if kind == "child" and attempt == 1:
        return ChildStarted(
            key=key,
            child_run_id=str(data.get("run_id", "")),
            kind=str(data.get("kind", "")),
            definition=str(data.get("definition", "")),
        )
    return None


def started_event_kind(kind: str, attempt: int) -> EventKind | None:
    """The kind of event :func:`operation_started` builds, without building it: what a commit
    announces live (its data is built from the row when the event is read)."""
    if kind in ("timer", "child") and attempt != 1:
        return None
    return _STARTED_KINDS.get(kind)


def completed_event_kind(kind: str) -> EventKind | None:
    """The kind of event :func:`operation_completed` builds, without building it."""
    return _COMPLETED_KINDS.get(kind)


def operation_completed(kind: str, key: str, stored_input: JSON, result: JSON) -> Payload | None:
    """The event of an operation's result, from what its row holds (``None``: a kind that has
    no such event)."""
    data = stored_input if isinstance(stored_input, dict) else {}
    found = result if isinstance(result, dict) else {}
    if kind == "model":
        message = found.get("message")
        message = message if isinstance(message, dict) else {}
        usage = found.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        calls = message.get("tool_calls")
        return ModelCompleted(
            key=key,
            turn=_turn(key, data),
            model=str(data.get("model", "")),
            text=str(message.get("text", "")),
            tool_calls=[
                {"id": c.get("id"), "name": c.get("name")}
                for c in (calls if isinstance(calls, list) else [])
                if isinstance(c, dict)
            ],
            usage={
                "input_tokens": int(usage.get("input_tokens", 0)),
                "output_tokens": int(usage.get("output_tokens", 0)),
                "cache_read_tokens": int(usage.get("cache_read_tokens", 0)),
                "cache_write_tokens": int(usage.get("cache_write_tokens", 0)),
                "requests": 1,
            },
            cost_usd=found.get("cost_usd"),
        )
    if kind == "tool":
        return ToolCompleted(
            key=key,
            tool=data.get("tool"),
            call_id=data.get("call_id"),
            failed=bool(found.get("failed")),
            output=preview(found.get("output")),
        )
    if kind in ("step", "effect"):
        error = found.get("error")
        return EffectCompleted(
            key=key,
            name=str(data.get("name", key)),
            failed=bool(found.get("failed")),
            output=preview(found.get("output")),
            error=_error_text(error) if error else None,
            resolved=True if found.get("resolved") else None,
        )
    if kind == "timer":
        return TimerFired(key=key)
    if kind == "child":
        return ChildCompleted(
            key=key, child_run_id=str(data.get("run_id", "")), status=str(found.get("status", ""))
        )
    return None


def _error_text(error: JSON) -> str:
    if isinstance(error, dict):
        return f"{error.get('type', 'Error')}: {error.get('message', '')}"
    return str(error)


def _turn(key: str, data: dict[str, Any]) -> int:
    turn = data.get("turn")
    if isinstance(turn, int):
        return turn
    try:
        return int(key.split(":", 1)[1])
    except (IndexError, ValueError):
        return 0


_STARTED_KINDS: dict[str, EventKind] = {
    "model": ModelStarted.event_kind,
    "tool": ToolStarted.event_kind,
    "step": EffectStarted.event_kind,
    "effect": EffectStarted.event_kind,
    "timer": TimerSet.event_kind,
    "emit": Custom.event_kind,
    "child": ChildStarted.event_kind,
}
_COMPLETED_KINDS: dict[str, EventKind] = {
    "model": ModelCompleted.event_kind,
    "tool": ToolCompleted.event_kind,
    "step": EffectCompleted.event_kind,
    "effect": EffectCompleted.event_kind,
    "timer": TimerFired.event_kind,
    "child": ChildCompleted.event_kind,
}
#: The kinds of event that announce an operation's result (its row's ``completed_seq``).
RESULT_EVENT_KINDS: frozenset[str] = frozenset(_COMPLETED_KINDS.values())
