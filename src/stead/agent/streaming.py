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

from .._json import JSON
from ..errors import ValidationError
from ..messages import ModelRequest, ModelResponse, TextDelta, ToolCallDelta
from ..runtime.journal import RunJournal
from ..store.sqlite_tx import SqliteTx

__all__ = ["DeltaWriter", "stream_response"]

#: Seconds between delta commits of one stream: at most 20 commits per second.
DELTA_INTERVAL = 0.05


class DeltaWriter:
    """Buffers deltas of one attempt and writes them as ``model_delta`` events."""

    def __init__(
        self, journal: RunJournal, key: str, attempt_id: str, interval: float = DELTA_INTERVAL
    ) -> None:
        self._journal = journal
        self._key = key
        self._attempt_id = attempt_id
        self._interval = interval
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.commits = 0

    def add(self, delta: TextDelta | ToolCallDelta) -> None:
        if isinstance(delta, TextDelta):
            if delta.text:
                self._text.append(delta.text)
        else:
            call = self._calls.setdefault(delta.index, {"index": delta.index, "arguments": ""})
            if delta.id is not None:
                call["id"] = delta.id
            if delta.name is not None:
                call["name"] = delta.name
            call["arguments"] += delta.arguments
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._interval, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._text and not self._calls:
            return
        data: dict[str, JSON] = {"key": self._key, "attempt_id": self._attempt_id}
        if self._text:
            data["text"] = "".join(self._text)
        if self._calls:
            data["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        self._text, self._calls = [], {}
        run_id = self._journal.run.id
        self._journal.write(lambda tx: _append(tx, run_id, "model_delta", data))
        self.commits += 1

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _append(tx: SqliteTx, run_id: str, type: str, data: JSON) -> None:
    tx.append_event(run_id, type, data)


async def stream_response(
    model: Any, request: ModelRequest, journal: RunJournal, key: str, attempt: int
) -> ModelResponse:
    """Stream one attempt of ``key``; returns the final response (raises what the model
    raised, after recording ``model_attempt_failed``)."""
    run_id = journal.run.id
    attempt_id = f"{run_id}/{key}#{attempt}"
    started = {"key": key, "attempt": attempt, "attempt_id": attempt_id}
    journal.write(lambda tx: _append(tx, run_id, "model_attempt_started", started))
    writer = DeltaWriter(journal, key, attempt_id)
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
        writer.flush()
        failed = {
            "key": key,
            "attempt": attempt,
            "attempt_id": attempt_id,
            "error": f"{type(exc).__name__}: {exc}",
        }
        journal.write(lambda tx: _append(tx, run_id, "model_attempt_failed", failed))
        raise
    writer.flush()
    return final
