"""Streaming that is also durable: coalesced deltas, attempts, folding, reconnects."""

from __future__ import annotations

import asyncio

import stead
from stead.testing import FunctionModel, ScriptedModel, fold_text


async def test_streamed_run_emits_attempts_deltas_and_one_checkpoint(db: str) -> None:
    answer = " ".join(f"word{i}" for i in range(40))
    model = ScriptedModel([answer], chunk_delay=0.005)
    agent = stead.Agent(id="a", version="1", model=model, stream=True)
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="talk")
        live = [event async for event in run.events()]
        outcome = await run.result()
        replayed = [event async for event in run.events()]
        (op,) = (await run.snapshot()).operations
    types = [e.kind for e in live]
    assert types[:4] == ["submitted", "status", "model_started", "model_attempt_started"]
    assert types[-2:] == ["model_completed", "status"]
    deltas = [e for e in live if e.kind == "model_delta"]
    # 40 chunks over ~0.2 s, coalesced to at most one commit per 50 ms (plus the last flush)
    assert 2 <= len(deltas) <= 8, len(deltas)
    assert "".join(d.data["text"] for d in deltas) == answer
    assert fold_text(live) == answer == outcome.output
    assert [e.sequence for e in replayed] == [e.sequence for e in live]
    assert op.status == "completed" and op.attempts == 1


async def test_a_reconnecting_subscriber_sees_each_event_once(db: str) -> None:
    model = ScriptedModel(["one two three four five six seven eight"], chunk_delay=0.02)
    agent = stead.Agent(id="a", version="1", model=model, stream=True)
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="talk")
        first: list[stead.Event] = []
        async for event in run.events():
            first.append(event)
            if event.kind == "model_delta":
                break  # the client disconnects mid-stream
        rest = [event async for event in run.events(after=first[-1].sequence)]
        everything = [event async for event in run.events()]
    assert [e.sequence for e in first + rest] == [e.sequence for e in everything]
    assert fold_text(first + rest) == "one two three four five six seven eight"


async def test_a_failed_attempt_is_dropped_by_the_fold(db: str) -> None:
    calls = {"n": 0}

    async def flaky(request: stead.ModelRequest) -> str:
        calls["n"] += 1
        return "partial answer that breaks" if calls["n"] == 1 else "the real answer"

    model = FunctionModel(flaky)
    original = model.stream

    async def breaking(request: stead.ModelRequest):  # type: ignore[no-untyped-def]
        async for item in original(request):
            if calls["n"] == 1 and isinstance(item, stead.ModelResponse):
                raise stead.ModelError("connection reset", retryable=True, retry_after=0.0)
            yield item

    model.stream = breaking  # type: ignore[method-assign]
    agent = stead.Agent(
        id="a",
        version="1",
        model=model,
        stream=True,
        model_retry=stead.RetryPolicy(max_attempts=2, initial_delay=0.01, max_delay=0.01),
    )
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="talk")
        outcome = await asyncio.wait_for(run.result(), 5)
        events = [event async for event in run.events()]
    assert outcome.output == "the real answer"
    types = [e.kind for e in events]
    assert types.count("model_attempt_started") == 2
    assert "model_attempt_failed" in types
    attempt_ids = {e.data["attempt_id"] for e in events if e.kind == "model_attempt_started"}
    assert len(attempt_ids) == 2
    assert fold_text(events) == "the real answer"
    # folding only up to the failure shows the partial text of the first attempt
    cut = types.index("model_attempt_failed")
    assert fold_text(events[:cut]) == "partial answer that breaks"
