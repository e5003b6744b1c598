"""Model back-off, budgets, forks, checkpoints, limits and the one-call form."""

from __future__ import annotations

import asyncio

import pytest

import stead
from stead.testing import FakeClock, FunctionModel, ScriptedModel

from ._journal import open_store
from .conftest import paused_app


@pytest.fixture
def db(any_db: object) -> object:
    """Every test here runs on SQLite and on PostgreSQL."""
    return any_db


async def _until(run: stead.RunHandle, status: stead.RunStatus) -> stead.Run:
    for _ in range(500):
        record = await run.run()
        if record.status is status:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"run never reached {status}; it is {(await run.run()).status}")


def _flaky(failures: int, *, retry_after: float | None = None) -> FunctionModel:
    calls = {"n": 0}

    def answer(request: stead.ModelRequest) -> str:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise stead.ModelError(
                "rate limited",
                provider="test",
                status_code=429,
                retryable=True,
                retry_after=retry_after,
            )
        return "finally"

    return FunctionModel(answer)


async def test_retry_wait_survives_a_restart_and_fires_at_its_time(db: str) -> None:
    clock = FakeClock()
    model = _flaky(1)
    agent = stead.Agent(
        id="a",
        version="1",
        model=model,
        model_retry=stead.RetryPolicy(max_attempts=3, initial_delay=10, max_delay=60),
    )
    app = stead.App(agents=[agent])
    async with await app.open(open_store(db, clock=clock)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        waiting = await _until(run, stead.RunStatus.RETRY_WAIT)
    assert waiting.next_attempt_at is not None
    delay = (waiting.next_attempt_at - clock.now()).total_seconds()
    assert 5 <= delay <= 10  # exponential step 10 s, jittered down to no less than half
    async with await app.open(open_store(db, clock=clock)) as runtime:
        handle = runtime.get_run(run.id)
        await asyncio.sleep(0.1)
        assert await handle.status() is stead.RunStatus.RETRY_WAIT  # not before its time
        assert len(model.requests) == 1
        clock.advance(seconds=delay + 0.001)
        outcome = await asyncio.wait_for(handle.result(), 5)
        (op,) = (await handle.snapshot()).operations
    assert outcome.output == "finally"
    assert len(model.requests) == 2
    assert (op.key, op.attempts) == ("model:1", 2)


async def test_retry_after_from_the_provider_is_honoured(db: str) -> None:
    clock = FakeClock()
    agent = stead.Agent(
        id="a",
        version="1",
        model=_flaky(1, retry_after=42.0),
        model_retry=stead.RetryPolicy(max_attempts=2, initial_delay=1, max_delay=60),
    )
    async with await stead.App(agents=[agent]).open(open_store(db, clock=clock)) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        waiting = await _until(run, stead.RunStatus.RETRY_WAIT)
        assert waiting.next_attempt_at is not None
        assert (waiting.next_attempt_at - clock.now()).total_seconds() == 42.0
        clock.advance(42)
        assert (await asyncio.wait_for(run.result(), 5)).output == "finally"


async def test_exhausted_attempts_fail_the_run_and_retry_continues(db: str) -> None:
    clock = FakeClock()
    model = _flaky(2)
    agent = stead.Agent(
        id="a",
        version="1",
        model=model,
        model_retry=stead.RetryPolicy(max_attempts=2, initial_delay=1, max_delay=1),
    )
    async with await stead.App(agents=[agent]).open(open_store(db, clock=clock)) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        await _until(run, stead.RunStatus.RETRY_WAIT)
        clock.advance(1)
        with pytest.raises(stead.RunFailed, match="failed after 2 attempts") as failed:
            await asyncio.wait_for(run.result(), 5)
        assert failed.value.kind == "model"
        await run.retry()
        assert (await asyncio.wait_for(run.result(), 5)).output == "finally"
        (op,) = (await run.snapshot()).operations
        assert op.attempts == 3


async def test_non_retryable_model_errors_fail_at_once(db: str) -> None:
    def answer(request: stead.ModelRequest) -> str:
        raise stead.ModelError("invalid api key; check OPENAI_API_KEY", status_code=401)

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer))
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        with pytest.raises(stead.RunFailed, match="check OPENAI_API_KEY"):
            await run.result()


def _looping(tokens: int) -> tuple[stead.Tool, FunctionModel]:
    @stead.tool(recovery="safe")
    def step() -> str:
        """One more step."""
        return "ok"

    def answer(request: stead.ModelRequest) -> stead.ModelResponse:
        return stead.ModelResponse(
            tool_calls=(stead.ToolCall(name="step", arguments={}),),
            usage=stead.Usage(input_tokens=tokens, output_tokens=0),
        )

    return step, FunctionModel(answer)


async def test_budget_is_enforced_from_committed_totals_across_a_restart(db: str) -> None:
    step, model = _looping(40)
    agent = stead.Agent(
        id="a",
        version="1",
        model=model,
        tools=[step],
        max_turns=50,
        budget=stead.Budget(max_tokens=100),
    )
    gate = asyncio.Event()
    original = model.fn

    async def slow(request: stead.ModelRequest) -> object:
        if request.turn == 3:
            await gate.wait()  # the process stops here, with 80 tokens committed
        return original(request)

    model.fn = slow  # type: ignore[assignment]
    runtime = await stead.App(agents=[agent]).open(open_store(db))
    run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
    while len(model.requests) < 3:
        await asyncio.sleep(0.01)
    await runtime.close()
    gate.set()
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        with pytest.raises(
            stead.RunFailed, match=r"budget max_tokens \(100\) reached: 120"
        ) as failed:
            await runtime.get_run(run.id).result()
    assert failed.value.kind == "budget"
    assert len(model.requests) == 4  # turns 1-3, and turn 3 again after the restart


async def test_budget_breach_can_ask_a_person(db: str) -> None:
    step, model = _looping(60)
    agent = stead.Agent(
        id="a",
        version="1",
        model=model,
        tools=[step],
        max_turns=10,
        budget=stead.Budget(max_tokens=100, on_breach="approve"),
    )
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await _until(run, stead.RunStatus.WAITING)
        (ask,) = await runtime.list_interactions()
        assert (ask.key, ask.kind, ask.payload["limit"]) == ("budget:3", "budget", "max_tokens")
        await runtime.respond(ask.interaction_id, stead.Approve(reviewer="ops"))
        await _until(run, stead.RunStatus.WAITING)  # the next turn asks again
        (again,) = await runtime.list_interactions()
        assert again.key == "budget:4"
        await runtime.respond(again.interaction_id, stead.Deny(reason="enough"))
        with pytest.raises(stead.RunFailed, match="declined to go on: enough"):
            await run.result()


async def test_fork_reuses_results_before_the_key_and_continues_on_todays_code(db: str) -> None:
    calls: list[int] = []

    @stead.tool(recovery="safe")
    def look(n: int) -> int:
        """Look."""
        calls.append(n)
        return n * 10

    script = [[stead.ToolCall(name="look", arguments={"n": i}, id=f"c{i}")] for i in range(3)]
    first = ScriptedModel([*script, "first answer"])
    agent = stead.Agent(id="a", version="1", model=first, tools=[look], max_turns=10)
    app = stead.App(agents=[agent])
    async with await app.open(open_store(db)) as runtime:
        original = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await original.result()
        assert calls == [0, 1, 2]
        second = ScriptedModel([*script, "second answer"])
        app.register(
            stead.Agent(
                id="a",
                version="2",
                model=second,
                tools=[look],
                max_turns=10,
                instructions="new instructions",
            )
        )
        fork = await runtime.fork(original.id, before="model:3")
        outcome = await fork.result()
        assert outcome.output == "second answer"
        again = await runtime.fork(original.id, before="model:3")
        assert again.id == fork.id
        with pytest.raises(stead.NotFoundError, match="has no operation 'model:99'"):
            await runtime.fork(original.id, before="model:99")
        record = await fork.run()
    assert record.version == "2"
    assert calls == [0, 1, 2, 2]  # only tool:3 ran again; tools 1 and 2 were reused
    assert [r.turn for r in second.requests] == [3, 4]  # models 1-2 were reused


async def test_snapshot_checkpoint_is_the_simple_view(db: str) -> None:
    @stead.tool(recovery="safe")
    def look(n: int) -> int:
        """Look."""
        return n + 1

    model = ScriptedModel([[stead.ToolCall(name="look", arguments={"n": 1}, id="c")], "two"])
    agent = stead.Agent(id="a", version="1", model=model, tools=[look])
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await run.result()
        checkpoint = (await run.snapshot()).checkpoint
    assert [m.kind for m in checkpoint.messages] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert checkpoint.turns == 2
    assert checkpoint.tool_results == {"c": {"output": 2, "failed": False, "error": None}}
    assert checkpoint.final_text == "two"
    assert checkpoint.usage.requests == 2
    assert checkpoint.pending_interactions == []
    assert checkpoint.possibly_billed_attempts == 0
    assert checkpoint.cost_usd is None  # the scripted model has no price


async def test_limit_hit_during_execution_needs_attention(db: str) -> None:
    @stead.tool(recovery="safe")
    def big() -> str:
        """Return a lot."""
        return "x" * 5000

    model = ScriptedModel([[stead.ToolCall(name="big", arguments={}, id="b")], "done"])
    agent = stead.Agent(id="a", version="1", model=model, tools=[big])
    limits = stead.Limits(max_payload_bytes=2000, max_operations_per_run=10)
    async with await stead.App(agents=[agent]).open(open_store(db), limits=limits) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _until(run, stead.RunStatus.NEEDS_ATTENTION)
    assert record.error is not None
    assert "limit max_payload_bytes hit at tool:1:b" in record.error["reason"]


async def test_a_run_that_used_every_operation_position_needs_attention(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store keys an operation by its run and position, 32 bits of it the position: a run
    past the last position stops before it writes a row the next run's range would hold.
    (The last position is lowered to 2 here: the model's call and the tool's call fit.)"""
    from stead.runtime import context

    monkeypatch.setattr(context, "MAX_POSITION", 2)

    @stead.tool(recovery="safe")
    def look(n: int) -> int:
        return n

    model = ScriptedModel([[stead.ToolCall(name="look", arguments={"n": 1}, id="c")], "done"])
    agent = stead.Agent(id="a", version="1", model=model, tools=[look])
    async with await stead.App(agents=[agent]).open(open_store(db)) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _until(run, stead.RunStatus.NEEDS_ATTENTION)
        keys = [op.key for op in (await run.snapshot()).operations]
    assert record.error is not None
    reason = record.error["reason"]
    assert "has used every operation position (2) and cannot record model:2" in reason
    assert record.attention_key == "model:2"
    assert keys == ["model:1", "tool:1:c"]


async def test_max_pending_runs_is_checked_at_submit(db: str) -> None:
    gate = asyncio.Event()

    async def answer(request: stead.ModelRequest) -> str:
        await gate.wait()
        return "ok"

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer))
    limits = stead.Limits(max_pending_runs=2)
    async with await stead.App(agents=[agent]).open(open_store(db), limits=limits) as rt:
        await rt.submit("a", session_id="s1", request_id="r", prompt="go")
        await rt.submit("a", session_id="s2", request_id="r", prompt="go")
        with pytest.raises(stead.LimitError, match=r"max_pending_runs \(2\) reached"):
            await rt.submit("a", session_id="s3", request_id="r", prompt="go")
        # an identical resubmission is still answered: dedup comes before the limit
        await rt.submit("a", session_id="s1", request_id="r", prompt="go")
        gate.set()


async def test_run_agent_resumes_or_returns_the_stored_outcome(db: str) -> None:
    model = ScriptedModel(["hello"])
    agent = stead.Agent(id="a", version="1", model=model)
    first = await stead.run_agent(agent, "hi", store=open_store(db), run_id="job-1")
    again = await stead.run_agent(agent, "hi", store=open_store(db), run_id="job-1")
    assert first.output == again.output == "hello"
    assert first.run_id == again.run_id == "job-1"
    assert len(model.requests) == 1


async def test_cost_per_response_and_per_run_with_an_overridable_price_table(db: str) -> None:
    from stead.models.pricing import DEFAULT_PRICES, Price

    def answer(request: stead.ModelRequest) -> stead.ModelResponse:
        return stead.ModelResponse(
            text="ok", usage=stead.Usage(input_tokens=1_000_000, output_tokens=500_000)
        )

    agent = stead.Agent(
        id="a",
        version="1",
        model=FunctionModel(answer, model_id="my:model"),
        budget=stead.Budget(max_cost_usd=100),
    )
    prices = {**DEFAULT_PRICES, "my:model": Price(input=2.0, output=8.0)}
    app = stead.App(agents=[agent], prices=prices)
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await run.result()
        events = [e async for e in run.events()]
        checkpoint = (await run.snapshot()).checkpoint
    (completed,) = [e for e in events if e.kind == "model_completed"]
    assert completed.data["cost_usd"] == 6.0  # 1M input at $2 + 0.5M output at $8
    assert checkpoint.cost_usd == 6.0


async def test_max_cost_budget_needs_a_price(db: str) -> None:
    agent = stead.Agent(
        id="a", version="1", model=ScriptedModel(["x"]), budget=stead.Budget(max_cost_usd=1)
    )
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        with pytest.raises(stead.RunFailed, match="no price for model 'stead:scripted'"):
            await run.result()


async def test_drain_lets_the_operation_in_progress_finish_and_hands_the_run_back(
    db: str,
) -> None:
    started = asyncio.Event()
    ran: list[int] = []

    @stead.tool(recovery="idempotent")
    async def step(n: int) -> str:
        """One slow step."""
        started.set()
        await asyncio.sleep(0.3)
        ran.append(n)
        return f"step {n}"

    def answer(request: stead.ModelRequest) -> object:
        done = sum(isinstance(m, stead.ToolResultMessage) for m in request.messages)
        if done < 2:
            return [stead.ToolCall(name="step", arguments={"n": done + 1}, id=f"s{done + 1}")]
        return "two steps"

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer), tools=[step])
    app = stead.App(agents=[agent])
    runtime = await app.open(open_store(db))
    run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
    await started.wait()
    with pytest.raises(stead.ValidationError, match="timeout must be a number of seconds"):
        await runtime.drain(float("nan"))
    await runtime.drain(10)
    assert ran == [1]  # the step in progress finished and was committed; no new one started
    async with stead.Client(open_store(db)) as client:
        assert (await client.run_record(run.id)).status is stead.RunStatus.RUNNING
        (first,) = [o for o in (await client.snapshot(run.id)).operations if o.kind == "tool"]
        assert first.status == "completed"
    async with await app.open(open_store(db)) as again:
        assert (await again.get_run(run.id).result(timeout=10)).output == "two steps"
    assert ran == [1, 2]


async def test_a_run_given_back_in_good_order_is_not_counted_as_interrupted(
    db: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime that closes while a run executes gives the run back in good order: however
    often that happens before the run commits anything new (here a ``safe`` tool whose intent
    is still held back when the runtime closes: the hold is raised to 5 s), the run is not sent
    to needs_attention as one whose executions keep being interrupted."""
    from stead.runtime import context

    monkeypatch.setattr(context, "INTENT_HOLD", 5.0)
    started = asyncio.Event()
    app = paused_app(started, asyncio.Event())  # its tool never ends
    run_id = None
    for _ in range(stead.Limits().max_interruptions + 2):
        started.clear()
        async with await app.open(open_store(db)) as runtime:
            if run_id is None:
                run_id = (await runtime.submit("a", session_id="s", request_id="r", prompt="go")).id
            await asyncio.wait_for(started.wait(), 10)  # closed while the tool runs
        async with stead.Client(open_store(db)) as client:
            assert (await client.get_run(run_id).status()) is stead.RunStatus.RUNNING
