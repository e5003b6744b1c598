"""End to end on a real provider adapter: the demo agent on OpenAIModel against a local
OpenAI-compatible server, in process, streamed, and through `stead demo` with a SIGKILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stead
from stead.cli._demo_app import PROMPT, build_app

from .fake_openai import FakeOpenAI

pytest.importorskip("openai")


async def test_demo_agent_on_openai_model(tmp_path: Path) -> None:
    from stead.models.openai import OpenAIModel

    ledger = tmp_path / "payments.jsonl"
    with FakeOpenAI().running() as server:
        model = OpenAIModel("fake-gpt", base_url=server.base_url, api_key="test-key")
        app = build_app(str(ledger), model=model)
        async with await app.open(stead.SqliteStore(tmp_path / "stead.db")) as runtime:
            run = await runtime.submit("support", session_id="s", request_id="r", prompt=PROMPT)
            outcome = await run.result()
            snapshot = await run.snapshot()
    assert outcome.output == "Your order 17 has been refunded: 49.00."
    refunds = ledger.read_text().splitlines()
    assert len(refunds) == 1
    assert json.loads(refunds[0])["idempotency_key"] == f"{run.id}/tool:2:call_refund"
    assert len(server.requests) == 3
    last = server.requests[-1]
    assert [m["role"] for m in last["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert {t["function"]["name"] for t in last["tools"]} == {"lookup_order", "refund"}
    model_ops = [op for op in snapshot.operations if op.kind == "model"]
    assert {op.input["model"] for op in model_ops} == {
        f"openai-compatible:fake-gpt@{server.base_url}"
    }
    assert snapshot.run.usage["input_tokens"] > 0


async def test_streamed_openai_run_folds_to_the_answer(tmp_path: Path) -> None:
    from stead.models.openai import OpenAIModel
    from stead.testing import fold_text

    with FakeOpenAI().running() as server:
        model = OpenAIModel("fake-gpt", base_url=server.base_url, api_key="test-key")
        base = build_app(str(tmp_path / "ledger.jsonl"), model=model).agent("support")
        agent = stead.Agent(
            id=base.id,
            version="stream",
            model=model,
            tools=base.tools,
            instructions=base.instructions,
            stream=True,
        )
        async with await stead.App(agents=[agent]).open(
            stead.SqliteStore(tmp_path / "s.db")
        ) as runtime:
            run = await runtime.submit("support", session_id="s", request_id="r", prompt=PROMPT)
            outcome = await run.result()
            events = [e async for e in run.events()]
    assert all(body["stream"] for body in server.requests)
    assert outcome.output == "Your order 17 has been refunded: 49.00."
    assert fold_text(events) == outcome.output
    deltas = [e for e in events if e.kind == "model_delta"]
    assert any("tool_calls" in e.data for e in deltas)  # streamed tool-call arguments


async def test_a_429_waits_for_retry_after_then_succeeds(tmp_path: Path) -> None:
    import asyncio

    from stead.models.openai import OpenAIModel
    from stead.testing import FakeClock

    clock = FakeClock()
    with FakeOpenAI(rate_limited=1).running() as server:
        model = OpenAIModel("fake-gpt", base_url=server.base_url, api_key="test-key")
        app = build_app(str(tmp_path / "ledger.jsonl"), model=model)
        async with await app.open(stead.SqliteStore(tmp_path / "s.db", clock=clock)) as runtime:
            run = await runtime.submit("support", session_id="s", request_id="r", prompt=PROMPT)
            for _ in range(500):
                record = await run.run()
                if record.status is stead.RunStatus.RETRY_WAIT:
                    break
                await asyncio.sleep(0.01)
            assert record.next_attempt_at is not None
            assert (record.next_attempt_at - clock.now()).total_seconds() == 7.0
            assert record.error is not None and "429" in record.error["reason"]
            clock.advance(7)
            outcome = await asyncio.wait_for(run.result(), 10)
            ops = {op.key: op for op in (await run.snapshot()).operations}
    assert outcome.output == "Your order 17 has been refunded: 49.00."
    assert ops["model:1"].attempts == 2
    assert len(server.requests) == 4


def test_stead_demo_on_a_local_openai_compatible_server(tmp_path: Path) -> None:
    stead_cli = Path(sys.executable).with_name("stead")
    with FakeOpenAI().running() as server:
        env = dict(os.environ, STEAD_MODEL=f"openai-compatible:fake-gpt@{server.base_url}")
        result = subprocess.run(
            [str(stead_cli), "demo", "--db", str(tmp_path / "demo.db")],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed with SIGKILL" in result.stdout
    assert "the refund ran exactly once" in result.stdout
    assert f"openai-compatible:fake-gpt@{server.base_url}" in result.stdout
    # the attempt the kill interrupted is journaled, whether or not its request had gone out
    assert "model:3 was attempted 2 times" in " ".join(result.stdout.split())
    assert len(server.requests) in (3, 4)
