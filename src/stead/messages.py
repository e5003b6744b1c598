"""Provider-neutral messages, model requests and responses.

Plain frozen dataclasses with a ``kind`` discriminator. They are stored in the journal as JSON by
:func:`message_to_json` / :func:`message_from_json`; fields added later must get defaults so old
journals still load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._json import JSON

__all__ = [
    "AssistantMessage",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "message_from_json",
    "message_to_json",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call requested by the model. ``id`` is the provider's call id."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_json(self) -> JSON:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(name=data["name"], arguments=data.get("arguments") or {}, id=data.get("id"))


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of committed model responses."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(  # positional: a sum is taken at every model call
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.requests + other.requests,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> JSON:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "requests": self.requests,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Usage:
        if not data:
            return cls()
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cache_read_tokens=int(data.get("cache_read_tokens", 0)),
            cache_write_tokens=int(data.get("cache_write_tokens", 0)),
            requests=int(data.get("requests", 0)),
        )

    @classmethod
    def of_response(cls, result: Mapping[str, Any]) -> Usage:
        """What one committed model response adds (``result`` is its operation's result):
        its tokens, and one request, whatever the adapter reported, so a request is never
        counted twice."""
        usage = result.get("usage") or {}
        return cls(
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            cache_read_tokens=int(usage.get("cache_read_tokens", 0)),
            cache_write_tokens=int(usage.get("cache_write_tokens", 0)),
            requests=1,
        )


@dataclass(frozen=True, slots=True)
class UserMessage:
    content: str
    kind: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    kind: Literal["assistant"] = "assistant"


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    """The result of one tool call as the model sees it (``content`` is text)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    kind: Literal["tool_result"] = "tool_result"


Message = UserMessage | AssistantMessage | ToolResultMessage


def message_to_json(message: Message) -> JSON:
    if isinstance(message, UserMessage):
        return {"kind": "user", "content": message.content}
    if isinstance(message, AssistantMessage):
        data: dict[str, JSON] = {"kind": "assistant", "text": message.text}
        if message.tool_calls:
            data["tool_calls"] = [call.to_json() for call in message.tool_calls]
        return data
    return {
        "kind": "tool_result",
        "call_id": message.call_id,
        "name": message.name,
        "content": message.content,
        "is_error": message.is_error,
    }


def message_from_json(data: Mapping[str, Any]) -> Message:
    kind = data["kind"]
    if kind == "user":
        return UserMessage(content=data["content"])
    if kind == "assistant":
        calls = tuple(ToolCall.from_json(c) for c in data.get("tool_calls", ()))
        return AssistantMessage(text=data.get("text", ""), tool_calls=calls)
    if kind == "tool_result":
        return ToolResultMessage(
            call_id=data["call_id"],
            name=data["name"],
            content=data["content"],
            is_error=bool(data.get("is_error", False)),
        )
    raise ValueError(f"unknown message kind {kind!r} in the journal")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: its name, description and JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_json(self) -> JSON:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a model is asked in one turn.

    ``turn`` is 1-based within the run, so a test model can answer by turn and give the same
    answer after a restart.
    """

    messages: Sequence[Message]
    instructions: str = ""
    tools: Sequence[ToolSpec] = ()
    turn: int = 1


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A complete model response: final text, or tool calls to run (or both)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    finish_reason: str | None = None

    def to_json(self) -> JSON:
        return {
            "text": self.text,
            "tool_calls": [call.to_json() for call in self.tool_calls],
            "usage": self.usage.to_json(),
            "model": self.model,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelResponse:
        return cls(
            text=data.get("text", ""),
            tool_calls=tuple(ToolCall.from_json(c) for c in data.get("tool_calls", ())),
            usage=Usage.from_json(data.get("usage")),
            model=data.get("model"),
            finish_reason=data.get("finish_reason"),
        )


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of streamed answer text."""

    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call: ``index`` orders calls within the response; ``id`` and
    ``name`` arrive on the first delta of a call, ``arguments`` is a fragment of its JSON."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    kind: Literal["tool_call_delta"] = "tool_call_delta"


StreamDelta = TextDelta | ToolCallDelta
