"""Streaming: print a model's answer live, and fold the stream the way a client should.

With ``Agent(stream=True)`` each attempt of a model call emits ``model_attempt_started`` (with
an ``attempt_id``), then ``model_delta`` events (text coalesced to at most 20 commits a second),
then ``model_completed`` (the only checkpoint) or ``model_attempt_failed``. Here the connection
drops halfway through the first attempt; the call is retried, and a client drops the partial
text of the old attempt when the new one starts. ``stead.testing.fold_text(events)`` does that
folding for you.

Run it:  .venv/bin/python examples/streaming.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import stead
from stead.messages import StreamDelta
from stead.testing import ScriptedModel, fold_text

ANSWER = (
    "Durable execution means every model response and tool result is committed to a journal, "
    "so a run that crashes continues from what it already did."
)


class DroppingModel(ScriptedModel):
    """Streams like ScriptedModel (word by word), but its first stream breaks halfway."""

    dropped = False

    async def stream(
        self, request: stead.ModelRequest
    ) -> AsyncIterator[StreamDelta | stead.ModelResponse]:
        sent = 0
        async for item in super().stream(request):
            if not self.dropped and sent == 8:
                self.dropped = True
                raise stead.ModelError("connection reset by peer", retryable=True, retry_after=0)
            sent += 1
            yield item


model = DroppingModel([ANSWER], chunk_delay=0.01)
explainer = stead.Agent(
    id="explainer",
    version="1",
    model=model,
    stream=True,
    model_retry=stead.RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.1),
)


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "streaming.db"
    async with await stead.App(agents=[explainer]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("explainer", session_id="s", request_id="r", prompt="Explain")
        events: list[stead.Event] = []
        attempts: dict[str, str] = {}  # model call key -> the attempt being shown
        async for event in run.events():
            events.append(event)
            data = event.data
            if event.kind == "model_attempt_started":
                attempts[data["key"]] = data["attempt_id"]
                print(f"[attempt {data['attempt']}] ", end="", flush=True)
            elif event.kind == "model_delta" and attempts.get(data["key"]) == data["attempt_id"]:
                print(data.get("text", ""), end="", flush=True)
            elif event.kind == "model_attempt_failed":
                print(f"\n  ! {data['error']}: this attempt's text is dropped")
            elif event.kind == "model_completed":
                print()
        outcome = await run.result()

    deltas = sum(1 for event in events if event.kind == "model_delta")
    print(f"{deltas} delta events over 2 attempts")
    print(f"folded: {fold_text(events)}")
    if fold_text(events) != outcome.output:
        raise SystemExit("the folded stream differs from the committed answer")


if __name__ == "__main__":
    asyncio.run(main())
