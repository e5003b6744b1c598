"""Runs, sessions, dedup, the agent loop and its errors, on a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest

import stead
from stead._json import canonical
from stead.testing import FunctionModel, ScriptedModel

from ._journal import Journal, PgJournal, journal_events, open_store
from .conftest import counted_outcome_reads, ledger_tool, paused_app


def _agent(
    model: stead.Model,
    tools: list[stead.Tool] | None = None,
    *,
    version: str = "1",
    agent_id: str = "agent",
    max_turns: int = 10,
) -> stead.Agent:
    return stead.Agent(
        id=agent_id,
        version=version,
        model=model,
        instructions="be brief",
        tools=tools or [],
        max_turns=max_turns,
    )


@pytest.fixture
def db(any_db: object) -> object:
    """Every test here runs on SQLite and on PostgreSQL."""
    return any_db


def _rows(db: Journal, sql: str) -> list[tuple[object, ...]]:
    if isinstance(db, PgJournal):
        return db.query(sql)
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_tool_loop_runs_and_journals_every_step(db: str) -> None:
    calls: list[str] = []
    model = ScriptedModel(
        [
            [
                stead.ToolCall(name="charge", arguments={"amount": 5}, id="c1"),
                stead.ToolCall(name="charge", arguments={"amount": 7}, id="c2"),
            ],
            "charged twice",
        ]
    )
    app = stead.App(agents=[_agent(model, [ledger_tool(calls)])])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="charge")
        outcome = await run.result()
        snapshot = await run.snapshot()
    assert outcome.output == "charged twice"
    assert [m.kind for m in outcome.messages] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert outcome.usage.requests == 2
    assert sorted(calls) == [f"{run.id}/tool:1:c1", f"{run.id}/tool:1:c2"]
    assert [(op.key, op.kind, op.status, op.recovery) for op in snapshot.operations] == [
        ("model:1", "model", "completed", "safe"),
        ("tool:1:c1", "tool", "completed", "idempotent"),
        ("tool:1:c2", "tool", "completed", "idempotent"),
        ("model:2", "model", "completed", "safe"),
    ]
    assert snapshot.run.status is stead.RunStatus.COMPLETED
    # the second model request saw both tool results
    second = model.requests[1]
    assert second.turn == 2
    assert [m.kind for m in second.messages][-2:] == ["tool_result", "tool_result"]


async def test_a_fresh_model_result_stores_its_message_as_the_text_the_history_hashes(
    db: str,
) -> None:
    # Arguments out of key order: the message's canonical text sorts them, a plain encoding
    # of the result would not. The message is encoded once, for the history chain, and that
    # text is what the row keeps; it reads back as the same result.
    call = stead.ToolCall(name="charge", arguments={"note": "x", "amount": 5}, id="c1")
    app = stead.App(agents=[_agent(ScriptedModel([[call], "done"]), [ledger_tool([])])])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    rows = _rows(db, "SELECT key, result FROM stead_operations WHERE kind = 'model' ORDER BY key")
    message = {
        "kind": "assistant",
        "text": "",
        "tool_calls": [{"id": "c1", "name": "charge", "arguments": {"note": "x", "amount": 5}}],
    }
    usage = {
        "input_tokens": 14,
        "output_tokens": 8,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "requests": 0,
    }
    text = str(rows[0][1])
    assert text == (
        '{"message":'
        + canonical(message)
        + ',"usage":'
        + json.dumps(usage, separators=(",", ":"))
        + ',"model":"stead:scripted","finish_reason":"tool_calls","cost_usd":null}'
    )
    assert json.loads(text) == {
        "message": message,
        "usage": usage,
        "model": "stead:scripted",
        "finish_reason": "tool_calls",
        "cost_usd": None,
    }
    assert json.loads(str(rows[1][1]))["message"] == {"kind": "assistant", "text": "done"}


async def test_a_tool_result_is_stored_and_shown_as_its_output_encoded_once(db: str) -> None:
    @stead.tool(recovery="safe")
    def lookup(kind: str) -> Any:
        """Look something up."""
        if kind == "fail":
            raise ValueError("no such thing")
        return {"z": 1, "a": [1.5, None, "é"]} if kind == "dict" else "plain text"

    calls = [stead.ToolCall(name="lookup", arguments={"kind": k}, id=k) for k in ("dict", "text")]
    model = ScriptedModel(
        [calls, [stead.ToolCall(name="lookup", arguments={"kind": "fail"}, id="fail")], "done"]
    )
    app = stead.App(agents=[_agent(model, [lookup])])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    rows = dict(_rows(db, "SELECT key, result FROM stead_operations WHERE kind = 'tool'"))
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    assert rows["tool:1:dict"] == json.dumps(
        {"output": {"z": 1, "a": [1.5, None, "é"]}, "failed": False, "error": None}, **compact
    )
    assert rows["tool:1:text"] == '{"output":"plain text","failed":false,"error":null}'
    failed = json.loads(str(rows["tool:2:fail"]))
    assert failed["failed"] is True and failed["exception"] == "ValueError"
    # the model saw the output as the journal keeps it
    shown = [m for m in model.requests[1].messages if isinstance(m, stead.ToolResultMessage)]
    assert [m.content for m in shown] == ['{"z":1,"a":[1.5,null,"é"]}', "plain text"]


async def test_identical_submission_returns_the_original_run_also_after_restart(db: str) -> None:
    app = stead.App(agents=[_agent(ScriptedModel(["hi"]))])
    async with await app.open(open_store(db)) as runtime:
        first = await runtime.submit("agent", session_id="s", request_id="r", prompt="hello")
        again = await runtime.submit("agent", session_id="s", request_id="r", prompt="hello")
        assert again.id == first.id
        await first.result()
        with pytest.raises(stead.ConflictError, match="different submission"):
            await runtime.submit("agent", session_id="s", request_id="r", prompt="other")
    async with await app.open(open_store(db)) as runtime:
        after = await runtime.submit("agent", session_id="s", request_id="r", prompt="hello")
        assert after.id == first.id
        assert (await after.result()).output == "hi"
    assert _rows(db, "SELECT COUNT(*) FROM stead_runs") == [(1,)]


async def test_busy_session_conflicts_unless_enqueued_and_history_carries_over(db: str) -> None:
    release = asyncio.Event()

    async def answer(request: stead.ModelRequest) -> str:
        if request.messages[-1].content == "first":  # type: ignore[union-attr]
            await release.wait()
        return f"answer {len(request.messages)}"

    model = FunctionModel(answer)
    app = stead.App(agents=[_agent(model)])
    async with await app.open(open_store(db)) as runtime:
        first = await runtime.submit("agent", session_id="s", request_id="1", prompt="first")
        with pytest.raises(stead.ConflictError, match="enqueue=True"):
            await runtime.submit("agent", session_id="s", request_id="2", prompt="second")
        second = await runtime.submit(
            "agent", session_id="s", request_id="2", prompt="second", enqueue=True
        )
        assert await second.status() is stead.RunStatus.QUEUED
        other = await runtime.submit("agent", session_id="t", request_id="1", prompt="solo")
        assert (await other.result()).output == "answer 1"  # other sessions are not blocked
        release.set()
        assert (await first.result()).output == "answer 1"
        # the second run starts with the first run's conversation as history
        assert (await second.result()).output == "answer 3"
    second_request = model.requests[-1]
    assert [getattr(m, "content", getattr(m, "text", None)) for m in second_request.messages] == [
        "first",
        "answer 1",
        "second",
    ]


async def test_queue_order_is_kept_across_a_restart(db: str) -> None:
    gate = asyncio.Event()

    async def answer(request: stead.ModelRequest) -> str:
        await gate.wait()
        return "ok"

    app = stead.App(agents=[_agent(FunctionModel(answer))])
    runtime = await app.open(open_store(db))
    ids = [
        (
            await runtime.submit(
                "agent", session_id="s", request_id=str(i), prompt=f"p{i}", enqueue=True
            )
        ).id
        for i in range(4)
    ]
    await runtime.close()  # the first run was in flight: it stays running in the journal
    gate.set()
    async with await app.open(open_store(db)) as runtime:
        for run_id in ids:
            await runtime.get_run(run_id).result()
        finished = [(await runtime.get_run(i).run()).finished_at for i in ids]
    assert finished == sorted(finished)  # type: ignore[type-var]
    started = _rows(db, "SELECT request_id FROM stead_runs ORDER BY started_at")
    assert [r[0] for r in started] == ["0", "1", "2", "3"]


class _Overlap:
    """A model answer that counts how many of its calls are going at once (``peak``: the most)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.running = self.peak = 0

    async def __call__(self, request: stead.ModelRequest) -> str:
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(self.seconds)
        self.running -= 1
        return "ok"


async def test_different_sessions_run_in_parallel_up_to_the_limit(db: str) -> None:
    overlap = _Overlap(0.05)
    app = stead.App(agents=[_agent(FunctionModel(overlap))])
    async with await app.open(open_store(db), max_concurrent_runs=3) as runtime:
        runs = [
            await runtime.submit("agent", session_id=f"s{i}", request_id="r", prompt="go")
            for i in range(8)
        ]
        await asyncio.gather(*(r.result() for r in runs))
    assert overlap.peak == 3


async def test_runs_submitted_at_once_beyond_max_concurrent_runs_each_begin_once(
    db: Journal,
) -> None:
    """Submissions made at once each see room before any of them commits: only as many as
    there are slots begin in their submission's transaction; the others wait ``pending`` and
    begin when a slot frees, each once. None is marked ``running`` and then resumed."""
    overlap = _Overlap(0.01)
    app = stead.App(agents=[_agent(FunctionModel(overlap))])
    async with await app.open(open_store(db), max_concurrent_runs=2) as runtime:
        runs = await asyncio.gather(
            *(
                runtime.submit("agent", session_id=f"s{i}", request_id="r", prompt="go")
                for i in range(8)
            )
        )
        await asyncio.gather(*(r.result() for r in runs))
    assert overlap.peak == 2
    for run in runs:
        statuses = [
            (e.data["status"], e.data.get("resumed"))
            for e in journal_events(db, run.id)
            if e.kind == "status"
        ]
        assert statuses == [("running", False), ("completed", None)], run.id


async def test_a_look_put_off_by_a_submissions_held_slot_is_made_when_it_is_given_back() -> None:
    """A submission holds a slot while it may begin its run (``Scheduler.reserve``); a look
    for runnable runs finding no room but that slot waits for it, and if the submission gives
    the slot back unused (it failed, or its run was queued), the look is made then."""
    from stead.journal.records import Claim
    from stead.runtime.scheduler import Scheduler

    runnable: list[Claim] = []
    looks: list[int] = []
    started: list[str] = []
    done = asyncio.Event()

    class Store:
        async def claim_runs(self, limit: int, exclude: set[str]) -> tuple[list[Claim], None]:
            looks.append(limit)
            taken = runnable[:limit]
            del runnable[:limit]
            return taken, None

    async def execute(claim: Claim, begun: object) -> bool:
        started.append(claim.run_id)
        done.set()
        return False

    scheduler = Scheduler(Store(), execute, max_concurrent_runs=1)  # type: ignore[arg-type]
    await scheduler.start_loop()
    assert looks == [1]
    assert scheduler.reserve()
    assert not scheduler.reserve()  # the one slot is held
    runnable.append(Claim("run_p"))
    scheduler.wake()
    for _ in range(5):
        await asyncio.sleep(0)
    assert looks == [1] and started == []  # no room but the held slot: the look waits
    scheduler.unreserve()  # the submission did not begin a run
    await asyncio.wait_for(done.wait(), 2)
    assert started == ["run_p"]
    scheduler.halt()


async def test_result_reports_a_timeout_of_the_store_as_its_own_not_as_the_wait_running_out(
    db: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TimeoutError raised while result() waits (a store with no free connection, say) is
    the store's, and says so: with no timeout given it is not turned into a TypeError, and with
    one it is not reported as the run not ending in time."""
    app = stead.App(agents=[_agent(ScriptedModel(["ok"]))])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        assert (await run.result(timeout=10)).output == "ok"

        async def busy(run_id: str) -> Any:
            raise TimeoutError("no connection was free within 30s")

        monkeypatch.setattr(runtime, "_await_outcome", busy)
        for timeout in (None, 10):
            with pytest.raises(TimeoutError, match="no connection was free"):
                await run.result(timeout=timeout)

        async def slow(run_id: str) -> Any:
            await asyncio.sleep(10)

        monkeypatch.setattr(runtime, "_await_outcome", slow)
        with pytest.raises(TimeoutError, match=f"run {run.id} did not end within 0.05s"):
            await run.result(timeout=0.05)


async def test_list_runs_filters_and_pages(db: str) -> None:
    app = stead.App(agents=[_agent(ScriptedModel(["ok"]))])
    async with await app.open(open_store(db)) as runtime:
        handles = [
            await runtime.submit(
                "agent", session_id=f"s{i % 2}", request_id=str(i), prompt="go", enqueue=True
            )
            for i in range(5)
        ]
        for handle in handles:
            await handle.result()
        page = await runtime.list_runs(limit=2)
        assert [r.id for r in page.runs] == [handles[4].id, handles[3].id]
        rest = await runtime.list_runs(limit=10, after=page.next_cursor)
        assert [r.id for r in rest.runs] == [h.id for h in reversed(handles[:3])]
        assert rest.next_cursor is None
        mine = await runtime.list_runs(session_id="s1", status="completed")
        assert {r.id for r in mine.runs} == {handles[1].id, handles[3].id}
        assert (await runtime.list_runs(status=["failed"])).runs == []
        with pytest.raises(stead.ValidationError, match="unknown status"):
            await runtime.list_runs(status="done")
        with pytest.raises(stead.ValidationError, match="cursor"):
            await runtime.list_runs(after="x")


async def test_events_replay_persisted_then_live_and_end_at_terminal(db: str) -> None:
    gate = asyncio.Event()

    async def answer(request: stead.ModelRequest) -> str:
        await gate.wait()
        return "done"

    app = stead.App(agents=[_agent(FunctionModel(answer))])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        seen: list[stead.Event] = []

        async def consume() -> None:
            async for event in run.events():
                seen.append(event)
                if event.kind == "model_started":
                    gate.set()

        await asyncio.wait_for(consume(), 5)
        types = [e.kind for e in seen]
        assert types == ["submitted", "status", "model_started", "model_completed", "status"]
        assert seen[-1].data["status"] == "completed"
        sequences = [e.sequence for e in seen]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
        # resuming from a cursor yields exactly what came after it
        tail = [e.sequence async for e in run.events(after=sequences[2])]
        assert tail == sequences[3:]


async def test_open_returns_with_the_runnable_runs_started(db: str) -> None:
    """The runtime's first look for work is part of opening it: a run left unfinished is
    executing again when ``open`` returns."""
    entered, gate = asyncio.Event(), asyncio.Event()
    app = paused_app(entered, gate)
    async with await app.open(open_store(db), resume=False) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
    async with await app.open(open_store(db)) as runtime:
        assert runtime.health()["active_runs"] == 1
        await asyncio.wait_for(entered.wait(), 10)
        gate.set()
        assert (await runtime.get_run(run.id).result(timeout=10)).output == "done"


async def test_unregistered_version_needs_attention_then_retry_continues(db: str) -> None:
    model = ScriptedModel(["v1 answer"])
    v1 = _agent(model, version="1")
    async with await stead.App(agents=[v1]).open(open_store(db), resume=False) as rt:
        run = await rt.submit("agent", session_id="s", request_id="r", prompt="go")
    v2 = _agent(ScriptedModel(["v2 answer"]), version="2")
    app = stead.App(agents=[v2])
    async with await app.open(open_store(db)) as runtime:
        handle = runtime.get_run(run.id)
        for _ in range(100):
            if await handle.status() is stead.RunStatus.NEEDS_ATTENTION:
                break
            await asyncio.sleep(0.01)
        record = await handle.run()
        assert record.status is stead.RunStatus.NEEDS_ATTENTION
        assert "version '1' is not registered" in record.error["reason"]  # type: ignore[index]
        assert model.requests == []
        app.register(v1)
        await handle.retry()
        assert (await handle.result()).output == "v1 answer"


async def test_changed_definition_at_a_saved_checkpoint_needs_attention(db: str) -> None:
    gate = asyncio.Event()

    async def tool_call(request: stead.ModelRequest) -> object:
        if request.turn == 1:
            return [stead.ToolCall(name="wait", arguments={}, id="w")]
        return "done"

    @stead.tool(recovery="safe")
    async def wait() -> str:
        await gate.wait()
        return "waited"

    first = stead.Agent(
        id="a", version="1", model=FunctionModel(tool_call), instructions="one", tools=[wait]
    )
    runtime = await stead.App(agents=[first]).open(open_store(db))
    run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
    while not any(op.key == "tool:1:w" for op in (await run.snapshot()).operations):
        await asyncio.sleep(0.01)
    await runtime.close()
    # same id and version, but the instructions changed: model:1's saved input no longer matches
    changed = stead.Agent(
        id="a", version="1", model=FunctionModel(tool_call), instructions="two", tools=[wait]
    )
    async with await stead.App(agents=[changed]).open(open_store(db)) as runtime:
        handle = runtime.get_run(run.id)
        while await handle.status() is not stead.RunStatus.NEEDS_ATTENTION:
            await asyncio.sleep(0.01)
        record = await handle.run()
    assert record.error is not None
    assert record.error["reason"].startswith("definition changed at operation model:1")
    assert record.attention_key == "model:1"


async def test_tool_errors_reach_the_model_as_failed_results(db: str) -> None:
    @stead.tool(recovery="safe")
    def divide(a: int, b: int) -> float:
        """Divide."""
        return a / b

    @stead.tool(recovery="safe")
    def picky(word: str) -> str:
        raise stead.ModelRetry(f"say it louder than {word!r}")

    model = ScriptedModel(
        [
            [
                stead.ToolCall(name="divide", arguments={"a": 1, "b": "zero"}, id="bad_args"),
                stead.ToolCall(name="divide", arguments={"a": 1, "b": 0}, id="raises"),
                stead.ToolCall(name="nope", arguments={}, id="unknown"),
                stead.ToolCall(name="picky", arguments={"word": "hi"}, id="retry"),
            ],
            "handled",
        ]
    )
    app = stead.App(agents=[_agent(model, [divide, picky])])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "handled"
    results = {
        m.call_id: m for m in model.requests[1].messages if isinstance(m, stead.ToolResultMessage)
    }
    assert all(m.is_error for m in results.values())
    assert "invalid arguments for tool 'divide': b:" in results["bad_args"].content
    assert results["raises"].content.startswith("ZeroDivisionError")
    assert "unknown tool 'nope'; available tools: divide, picky" in results["unknown"].content
    assert results["retry"].content == "say it louder than 'hi'"


async def test_non_json_tool_result_blocks_the_run_and_records_nothing(db: str) -> None:
    @stead.tool(recovery="manual")
    def make() -> object:
        return object()

    model = ScriptedModel([[stead.ToolCall(name="make", arguments={}, id="m")], "done"])
    app = stead.App(agents=[_agent(model, [make])])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        while await run.status() is not stead.RunStatus.NEEDS_ATTENTION:
            await asyncio.sleep(0.01)
        snapshot = await run.snapshot()
        assert "not JSON" in snapshot.run.error["reason"]  # type: ignore[index]
        op = next(op for op in snapshot.operations if op.key == "tool:1:m")
        assert op.status == "started" and op.result is None
        await run.resolve("tool:1:m", {"made": True})
        assert (await run.result()).output == "done"
    assert model.requests[1].messages[-1].content == '{"made":true}'  # type: ignore[union-attr]


async def test_max_turns_fails_the_run_with_a_reason(db: str) -> None:
    @stead.tool(recovery="safe")
    def again() -> str:
        return "again"

    model = FunctionModel(lambda r: [stead.ToolCall(name="again", arguments={})])
    app = stead.App(agents=[_agent(model, [again], max_turns=3)])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        with pytest.raises(stead.RunFailed, match=r"max_turns \(3\) reached"):
            await run.result()
    assert len(model.requests) == 3


async def test_model_error_fails_the_run_and_retry_continues(db: str) -> None:
    broken = True

    def answer(request: stead.ModelRequest) -> str:
        if broken:
            raise RuntimeError("provider down")
        return "recovered"

    app = stead.App(agents=[_agent(FunctionModel(answer))])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        with pytest.raises(stead.RunFailed, match="model call model:1 failed: RuntimeError"):
            await run.result()
        broken = False
        await run.retry()
        assert (await run.result()).output == "recovered"
        ops = (await run.snapshot()).operations
        assert [(op.key, op.attempts) for op in ops] == [("model:1", 2)]
        with pytest.raises(stead.ConflictError, match="only failed and needs_attention"):
            await run.retry()


async def test_cancel_is_terminal_and_reaches_the_model_call(db: str) -> None:
    cancelled = asyncio.Event()

    async def slow(request: stead.ModelRequest) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    app = stead.App(agents=[_agent(FunctionModel(slow))])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        while not (await run.snapshot()).operations:
            await asyncio.sleep(0.01)
        await run.cancel("changed my mind")
        await asyncio.wait_for(cancelled.wait(), 2)  # the in-flight call was cancelled
        with pytest.raises(stead.RunCancelled, match="changed my mind"):
            await run.result()
        await run.cancel()  # again: a no-op
        events = [e async for e in run.events()]
        assert events[-1].data == {"status": "cancelled", "reason": "changed my mind"}
    async with await app.open(open_store(db)) as runtime:
        assert await runtime.get_run(run.id).status() is stead.RunStatus.CANCELLED
        with pytest.raises(stead.ConflictError, match="only failed and needs_attention"):
            await runtime.get_run(run.id).retry()


def _record_begins(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[stead.Run, stead.Run | None, int, bool]]:
    """Every execution's begin, as it happens: the run it begins from, the run as reading it
    back after gives it, how often the begin read the run, and whether it was fresh (begun in
    its submission's transaction)."""
    from stead.journal import transitions

    begin = transitions.begin
    begun: list[tuple[stead.Run, stead.Run | None, int, bool]] = []

    def recorded_begin(tx: Any, run_id: str, *args: Any, **options: Any) -> Any:
        reads = 0
        get_run, ask_run = tx.get_run, tx.ask_run

        def counted(read: Any) -> Any:
            def reading(wanted: str) -> Any:
                nonlocal reads
                reads += 1
                return read(wanted)

            return reading

        tx.get_run, tx.ask_run = counted(get_run), counted(ask_run)
        try:
            found = begin(tx, run_id, *args, **options)
        finally:
            del tx.get_run, tx.ask_run
        if found is not None:
            begun.append((found.run, get_run(run_id), reads, bool(options.get("fresh"))))
        return found

    monkeypatch.setattr(transitions, "begin", recorded_begin)
    return begun


async def test_a_run_begun_in_its_submission_is_not_read_back_and_is_what_the_journal_holds(
    db: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction that submits a run and begins it knows what it wrote: the run it begins
    from is not read, neither before nor after its ``running`` status is written, and it is
    equal, field for field and to the journal's precision, to what reading it back gives."""
    begun = _record_begins(monkeypatch)
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["done"]))])
    async with await app.open(open_store(db)) as runtime:
        for n in range(2):  # the second takes the first's conversation as its history
            run = await runtime.submit("a", session_id="s", request_id=f"r{n}", prompt="go")
            assert (await run.result()).output == "done"
    assert len(begun) == 2
    for run, stored, reads, fresh in begun:
        assert fresh
        assert reads == 0
        assert run == stored
    assert begun[0][0].number < begun[1][0].number
    assert begun[1][0].history_run == begun[0][0].id


async def test_a_run_the_scheduler_begins_is_read_once_and_is_what_the_journal_holds(
    db: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run begun in a transaction of its own (queued for a slot) is read once, before its
    ``running`` status is written; its journal is read, the run itself not again, and what it
    begins from equals what reading it back gives."""
    begun = _record_begins(monkeypatch)
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["done"] * 3))])
    async with await app.open(open_store(db), max_concurrent_runs=1) as runtime:
        runs = await asyncio.gather(
            *(
                runtime.submit("a", session_id=f"s{n}", request_id="r", prompt="go")
                for n in range(3)
            )
        )
        for run in runs:
            assert (await run.result()).output == "done"
    assert [fresh for *_, fresh in begun] == [True, False, False]
    for run, stored, reads, fresh in begun:
        assert run == stored
        assert reads == (0 if fresh else 1)


async def test_an_agents_instructions_and_tools_are_encoded_once_not_at_every_run(
    db: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every model call's input refers to (the instructions and the tools' specs, in
    canonical JSON, and its digest) is the same for every run of a registered agent: it is
    encoded once per agent, and every run journals the same context."""
    from stead.agent.tools import Tool

    specs = 0
    spec = Tool.spec

    def counted(tool: Tool) -> Any:
        nonlocal specs
        specs += 1
        return spec.fget(tool)  # type: ignore[attr-defined]

    monkeypatch.setattr(Tool, "spec", property(counted))
    charge = ledger_tool([])
    model = ScriptedModel(
        [[stead.ToolCall(name="charge", arguments={"amount": 1}, id="c1")], "done"] * 3
    )
    app = stead.App(agents=[_agent(model, [charge])])
    async with await app.open(open_store(db)) as runtime:
        for n in range(3):
            run = await runtime.submit("agent", session_id=f"s{n}", request_id="r", prompt="go")
            assert (await run.result()).output == "done"
    assert specs == 1  # its one tool's spec, for the first run only
    contexts = {
        row[0]
        for row in _rows(
            db, "SELECT input FROM stead_operations WHERE key = 'model:1' ORDER BY run_id"
        )
    }
    assert len(contexts) == 1  # and each run refers to the same


async def test_result_of_a_run_executing_here_waits_for_its_end_without_reading_first(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run this runtime executes ends here, and its end wakes whoever waits for it: result()
    reads nothing before (a read would queue ahead of the run's next step). A run cancelled
    while someone waits still gives its RunCancelled, and a run that is not executing here
    (waiting for an approval) is read as before."""
    import stead.runtime.events as events_module
    import stead.runtime.runtime as runtime_module

    reads = counted_outcome_reads(monkeypatch, runtime_module)
    gate = asyncio.Event()

    @stead.tool(recovery="safe", blocking=False)
    async def hold() -> str:
        """Wait for the test."""
        await gate.wait()
        return "held"

    @stead.tool(recovery="idempotent", approval=True)
    def send() -> str:
        """Send it."""
        return "sent"

    def answer(request: stead.ModelRequest) -> object:
        last = request.messages[-1]
        if last.kind == "user":
            name = "send" if last.content == "send" else "hold"
            return [stead.ToolCall(name=name, arguments={}, id="c1")]
        return "done"

    app = stead.App(agents=[_agent(FunctionModel(answer), [hold, send])])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        waiter = asyncio.create_task(run.result())
        # Longer than a shared store's poll, which is for runs executing elsewhere.
        await asyncio.sleep(events_module.REMOTE_POLL * 2.5)
        assert not waiter.done() and reads == []
        gate.set()
        assert (await waiter).output == "done"
        assert reads == []  # its outcome came from memory

        gate.clear()
        cancelled = await runtime.submit("agent", session_id="c", request_id="r", prompt="go")
        waiter = asyncio.create_task(cancelled.result())
        await asyncio.sleep(0.05)
        await cancelled.cancel("no longer needed")
        with pytest.raises(stead.RunCancelled, match="no longer needed"):
            await asyncio.wait_for(waiter, 5)

        waiting = await runtime.submit("agent", session_id="w", request_id="r", prompt="send")
        while (await waiting.status()) is not stead.RunStatus.WAITING:
            await asyncio.sleep(0.01)
        reads.clear()
        waiter = asyncio.create_task(waiting.result())
        await asyncio.sleep(0.05)
        assert reads == [waiting.id] and not waiter.done()
        (pending,) = await waiting.interactions()
        await runtime.respond(pending.interaction_id, stead.Approve())
        assert (await asyncio.wait_for(waiter, 5)).output == "done"


async def test_an_outcome_is_held_for_the_result_waiting_for_it_and_no_longer(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A completed run's outcome holds its whole conversation: the runtime keeps it in memory
    only to hand it to the result() waiting when the run ends. A later result(), and that of
    a run nobody waited for, read the journal, and get the same outcome."""
    import gc

    import stead.runtime.runtime as runtime_module

    reads = counted_outcome_reads(monkeypatch, runtime_module)
    model = ScriptedModel(
        [[stead.ToolCall(name="charge", arguments={"amount": 1}, id="c1")], "done"], keep_requests=0
    )
    app = stead.App(agents=[_agent(model, [ledger_tool([])])])

    def held(run_id: str) -> list[stead.RunOutcome]:
        gc.collect()
        return [
            o for o in gc.get_objects() if isinstance(o, stead.RunOutcome) and o.run_id == run_id
        ]

    def same(a: stead.RunOutcome, b: stead.RunOutcome) -> bool:
        return (a.output, list(a.messages), a.usage) == (b.output, list(b.messages), b.usage)

    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("agent", session_id="s", request_id="r", prompt="go")
        waited = await run.result()
        assert waited.output == "done" and reads == []  # handed over from memory
        assert len(held(run.id)) == 1  # the one the test holds
        again = await run.result()
        assert reads == [run.id] and same(again, waited)

        left = await runtime.submit("agent", session_id="l", request_id="r", prompt="go")
        for _ in range(1000):
            if (await left.status()).terminal:
                break
            await asyncio.sleep(0.01)
        assert (await left.status()) is stead.RunStatus.COMPLETED
        assert held(left.id) == []
        reads.clear()
        late = await left.result()
        assert reads == [left.id] and late.output == "done" and len(late.messages) == 4


async def test_retry_conflicts_once_the_session_has_moved_on(db: str) -> None:
    def answer(request: stead.ModelRequest) -> str:
        if request.messages[-1].content == "first":  # type: ignore[union-attr]
            raise stead.ModelError("bad request", retryable=False)
        return "ok"

    app = stead.App(agents=[_agent(FunctionModel(answer))])
    async with await app.open(open_store(db)) as runtime:
        first = await runtime.submit("agent", session_id="s", request_id="1", prompt="first")
        with pytest.raises(stead.RunFailed):
            await first.result()
        second = await runtime.submit("agent", session_id="s", request_id="2", prompt="second")
        await second.result()
        with pytest.raises(stead.ConflictError, match="has moved on"):
            await first.retry()


async def test_bad_input_gets_a_clear_error_and_writes_nothing(db: str) -> None:
    app = stead.App(agents=[_agent(ScriptedModel(["ok"]))])
    limits = stead.Limits(max_payload_bytes=1000)
    async with await app.open(open_store(db), limits=limits) as runtime:
        with pytest.raises(
            stead.NotFoundError, match="unknown agent 'ghost'; registered agents: agent"
        ):
            await runtime.submit("ghost", session_id="s", request_id="r", prompt="go")
        for field in ("session_id", "request_id"):
            kwargs = {"session_id": "s", "request_id": "r", field: "  "}
            with pytest.raises(stead.ValidationError, match=f"{field} must be a non-blank"):
                await runtime.submit("agent", prompt="go", **kwargs)
        with pytest.raises(stead.ValidationError, match="prompt must be a non-blank string"):
            await runtime.submit("agent", session_id="s", request_id="r", prompt="")
        with pytest.raises(stead.LimitError, match="over max_payload_bytes"):
            await runtime.submit("agent", session_id="s", request_id="r", prompt="x" * 2000)
        with pytest.raises(stead.NotFoundError, match="no run 'run_missing'"):
            await runtime.get_run("run_missing").status()
    assert _rows(db, "SELECT COUNT(*) FROM stead_runs") == [(0,)]
    assert journal_events(db) == []


def test_definitions_are_validated_at_registration() -> None:
    with pytest.raises(stead.ValidationError, match="version must be a non-blank"):
        stead.Agent(id="a", version=" ", model=ScriptedModel(["x"]))
    with pytest.raises(stead.ValidationError, match="has no complete"):
        stead.Agent(id="a", version="1", model=object())  # type: ignore[arg-type]
    with pytest.raises(stead.ValidationError, match="unknown model 'gpt': use 'openai:<model>'"):
        stead.Agent(id="a", version="1", model="gpt")
    with pytest.raises(stead.ValidationError, match="recovery must be one of"):
        stead.tool(recovery="sometimes")(lambda: None)  # type: ignore[call-overload]
    with pytest.raises(stead.ValidationError, match="needs a type hint"):

        @stead.tool
        def untyped(x):  # type: ignore[no-untyped-def]
            return x

    @stead.tool(recovery="safe")
    def twin() -> None: ...

    with pytest.raises(stead.ValidationError, match="two tools are named 'twin'"):
        stead.Agent(id="a", version="1", model=ScriptedModel(["x"]), tools=[twin, twin])
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["x"]))
    app = stead.App(agents=[agent])
    with pytest.raises(stead.ValidationError, match="already registered"):
        app.register(stead.Agent(id="a", version="1", model=ScriptedModel(["y"])))


def test_tool_schema_comes_from_type_hints() -> None:
    @stead.tool(recovery="safe")
    def search(query: str, limit: int = 5, ctx: stead.ToolContext | None = None) -> list[str]:
        """Search the catalogue."""
        return []

    assert search.description == "Search the catalogue."
    assert search.parameters["required"] == ["query"]
    assert set(search.parameters["properties"]) == {"query", "limit"}
    assert search.validate({"query": "tea"}) == {"query": "tea", "limit": 5}
