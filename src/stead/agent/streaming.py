"""Streaming a model call while the journal stays correct.

Each attempt of a streamed call is announced by ``model_attempt_started`` with its attempt id;
deltas are coalesced into ``model_delta`` events (one commit per ``interval`` at most, so a fast
stream does not cost one commit per token, and never waiting for the disk); the attempt ends with
``model_completed`` — the only checkpoint — or ``model_attempt_failed``. A client drops the partial
text of an attempt when a new attempt of the same operation starts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._json import JSON, storable_text
from ..errors import ValidationError, described
from ..journal.events import ModelAttemptFailed, ModelAttemptStarted, ModelDelta
from ..messages import ModelRequest, ModelResponse, TextDelta, ToolCallDelta
from ..models._redact import redact
from ..runtime.context import RunContext

__all__ = ["DeltaWriter", "stream_response"]

#: Seconds between delta commits of one stream: at most 20 commits per second.
DELTA_INTERVAL = 0.05


class DeltaWriter:
    """Buffers deltas of one attempt and writes them as ``model_delta`` events."""

    def __init__(
        self, ctx: RunContext, key: str, attempt_id: str, interval: float = DELTA_INTERVAL
    ) -> None:
        self._ctx = ctx
        self._key = key
        self._attempt_id = attempt_id
        self._interval = interval
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, delta: TextDelta | ToolCallDelta) -> None:
        if isinstance(delta, TextDelta):
            if delta.text:
                self._text.append(str(delta.text))
        else:
            index = delta.index if isinstance(delta.index, int) else 0
            call = self._calls.setdefault(index, {"index": index, "arguments": ""})
            if delta.id is not None:
                call["id"] = storable_text(str(delta.id))
            if delta.name is not None:
                call["name"] = storable_text(str(delta.name))
            call["arguments"] += str(delta.arguments or "")
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._interval, self.flush)

    def flush(self, final: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        text = "".join(self._text)
        held = ""
        if text and "\ud800" <= text[-1] <= "\udbff" and not final:
            text, held = text[:-1], text[-1]  # the first half of a character: wait for the rest
        if not text and not self._calls:
            self._text = [held] if held else []
            return
        # Progress text is shown, never replayed: halves of a character split across chunks
        # are joined, and what still cannot be stored is replaced rather than refused.
        calls: list[dict[str, JSON]] | None = None
        if self._calls:
            calls = [
                {**call, "arguments": storable_text(call["arguments"])}
                for _, call in sorted(self._calls.items())
            ]
        self._text, self._calls = ([held] if held else []), {}
        self._ctx.emit(
            ModelDelta(
                key=self._key,
                attempt_id=self._attempt_id,
                text=storable_text(text) if text else None,
                tool_calls=calls,
            )
        )

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def stream_response(
    model: Any, request: ModelRequest, ctx: RunContext, key: str, attempt: int
) -> ModelResponse:
    """Stream one attempt of ``key``; returns the final response (raises what the model
    raised, after recording ``model_attempt_failed``)."""
    attempt_id = f"{ctx.operation_id(key)}#{attempt}"
    ctx.emit(ModelAttemptStarted(key=key, attempt=attempt, attempt_id=attempt_id))
    writer = DeltaWriter(ctx, key, attempt_id)
    final: ModelResponse | None = None
    try:
        async for item in model.stream(request):
            if isinstance(item, ModelResponse):
                final = item
            elif isinstance(item, TextDelta | ToolCallDelta):
                writer.add(item)
            else:
                raise ValidationError(
                    f"model stream yielded {type(item).__name__}; a stream "
                    "yields TextDelta, ToolCallDelta, then one ModelResponse"
                )
        if final is None:
            raise ValidationError(
                f"the model's stream for {key} ended without a final ModelResponse"
            )
    except asyncio.CancelledError:
        writer.close()
        raise
    except Exception as exc:
        writer.flush(final=True)
        ctx.emit(
            ModelAttemptFailed(
                key=key,
                attempt=attempt,
                attempt_id=attempt_id,
                error=storable_text(redact(described(exc))),
            )
        )
        raise
    writer.flush(final=True)
    return final
