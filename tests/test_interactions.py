"""Approvals and questions: a run waits for a person, and acts on the decision exactly once."""

from __future__ import annotations

import asyncio

import pytest

import stead
from stead.testing import ScriptedModel

from ._journal import open_store


@pytest.fixture
def db(any_db: object) -> object:
    """Every test here runs on SQLite and on PostgreSQL."""
    return any_db


def _refund_agent(
    calls: list[str], model: stead.Model, *, approval: object = True, recovery: str = "idempotent"
) -> stead.Agent:
    @stead.tool(recovery=recovery, approval=approval)  # type: ignore[call-overload]
    async def refund(order_id: str, amount: int, ctx: stead.ToolContext) -> str:
        """Refund an order."""
        calls.append(f"{ctx.operation_id}:{amount}")
        return f"refunded {amount}"

    return stead.Agent(id="support", version="1", model=model, tools=[refund])


async def _wait_status(run: stead.RunHandle, status: stead.RunStatus) -> None:
    for _ in range(500):
        if await run.status() is status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run never reached {status}; it is {await run.status()}")


def _two_refunds() -> ScriptedModel:
    return ScriptedModel(
        [
            [
                stead.ToolCall(name="refund", arguments={"order_id": "1", "amount": 10}, id="a"),
                stead.ToolCall(name="refund", arguments={"order_id": "2", "amount": 500}, id="b"),
            ],
            "done",
        ]
    )


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
async def test_two_pending_approvals_answered_in_either_order(
    db: str, order: tuple[str, str]
) -> None:
    calls: list[str] = []
    model = _two_refunds()
    echo = stead.Agent(id="echo", version="1", model=ScriptedModel(["hi"]))
    app = stead.App(agents=[_refund_agent(calls, model), echo])
    async with await app.open(open_store(db), max_concurrent_runs=1) as runtime:
        run = await runtime.submit("support", session_id="s", request_id="r", prompt="refund")
        await _wait_status(run, stead.RunStatus.WAITING)
        pending = await runtime.list_interactions(status="pending")
        assert [(i.key, i.kind, i.tool, i.arguments) for i in pending] == [
            ("approval:1:a", "approval", "refund", {"order_id": "1", "amount": 10}),
            ("approval:1:b", "approval", "refund", {"order_id": "2", "amount": 500}),
        ]
        # a waiting run frees its slot: with one slot, another session still runs meanwhile
        other = await runtime.submit("echo", session_id="t", request_id="r", prompt="hello")
        assert (await asyncio.wait_for(other.result(), 5)).output == "hi"
        by_call = {i.key.rsplit(":", 1)[1]: i for i in pending}
        first, second = order
        await run.respond(by_call[first].interaction_id, stead.Approve(reviewer="ana"))
        assert await run.status() is stead.RunStatus.WAITING  # one still pending
        assert calls == []
        await run.respond(by_call[second].interaction_id, stead.Deny(reason="too much"))
        outcome = await run.result()
    assert outcome.output == "done"
    approved = "a" if first == "a" else "b"
    amount = 10 if approved == "a" else 500
    assert calls == [f"{run.id}/tool:1:{approved}:{amount}"]
    results = {
        m.call_id: m for m in model.requests[1].messages if isinstance(m, stead.ToolResultMessage)
    }
    denied = second
    assert results[denied].is_error
    assert results[denied].content == "a reviewer denied this call: too much"
    assert not results[approved].is_error


async def test_respond_is_recorded_exactly_once(db: str) -> None:
    calls: list[str] = []
    app = stead.App(agents=[_refund_agent(calls, _two_refunds())])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("support", session_id="s", request_id="r", prompt="refund")
        await _wait_status(run, stead.RunStatus.WAITING)
        first, second = await runtime.list_interactions()
        await run.respond(first.interaction_id, stead.Approve(reviewer="ana"))
        await run.respond(first.interaction_id, stead.Approve(reviewer="ana"))  # same: no-op
        with pytest.raises(stead.ConflictError, match="already answered differently"):
            await run.respond(first.interaction_id, stead.Deny(reason="changed my mind"))
        with pytest.raises(stead.NotFoundError, match="no interaction 'int_nope'"):
            await runtime.respond("int_nope", stead.Approve())
        with pytest.raises(stead.ValidationError, match=r"answer it with stead\.Approve"):
            await runtime.respond(second.interaction_id, stead.Answer(value="yes"))
        await runtime.respond(second.interaction_id, stead.Approve())
        await run.result()
        with pytest.raises(stead.ConflictError, match="already answered"):
            await runtime.respond(second.interaction_id, stead.Deny(reason="late"))
    assert len(calls) == 2


async def test_approval_predicate_gates_only_matching_calls(db: str) -> None:
    calls: list[str] = []
    agent = _refund_agent(calls, _two_refunds(), approval=lambda args: args["amount"] > 100)
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("support", session_id="s", request_id="r", prompt="refund")
        await _wait_status(run, stead.RunStatus.WAITING)
        assert calls == [f"{run.id}/tool:1:a:10"]  # the small refund ran while b waits
        (pending,) = await run.interactions(status="pending")
        assert pending.key == "approval:1:b"
        await run.respond(pending.interaction_id, stead.Approve())
        await run.result()
    assert calls == [f"{run.id}/tool:1:a:10", f"{run.id}/tool:1:b:500"]


async def test_tool_can_ask_for_approval_while_running(db: str) -> None:
    attempts: list[bool] = []

    @stead.tool(recovery="manual")
    async def wire(amount: int, ctx: stead.ToolContext) -> str:
        """Wire money."""
        attempts.append(ctx.approved)
        if amount > 1000 and not ctx.approved:
            raise stead.ApprovalRequired({"why": "large wire", "amount": amount})
        return "wired"

    model = ScriptedModel(
        [[stead.ToolCall(name="wire", arguments={"amount": 5000}, id="w")], "sent"]
    )
    agent = stead.Agent(id="bank", version="1", model=model, tools=[wire])
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _wait_status(run, stead.RunStatus.WAITING)
        (pending,) = await runtime.list_interactions()
        assert pending.payload == {"why": "large wire", "amount": 5000}
        snapshot = await run.snapshot()
        assert "tool:1:w" not in [op.key for op in snapshot.operations]  # the intent was undone
        await run.respond(pending.interaction_id, stead.Approve())
        assert (await run.result()).output == "sent"
    assert attempts == [False, True]


async def test_ask_user_waits_for_an_answer(db: str) -> None:
    model = ScriptedModel(
        [
            [stead.ToolCall(name="ask_user", arguments={"question": "Which order?"}, id="q")],
            "thanks",
        ]
    )
    agent = stead.Agent(id="a", version="1", model=model, tools=[stead.ask_user])
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="help")
        await _wait_status(run, stead.RunStatus.WAITING)
        (question,) = await runtime.list_interactions(session_id="s")
        assert question.kind == "question"
        assert question.payload == {"question": "Which order?"}
        with pytest.raises(stead.ValidationError, match=r"answer it with stead\.Answer"):
            await run.respond(question.interaction_id, stead.Approve())
        await run.respond(question.interaction_id, stead.Answer(value="order 17"))
        assert (await run.result()).output == "thanks"
    reply = model.requests[1].messages[-1]
    assert isinstance(reply, stead.ToolResultMessage) and reply.content == "order 17"


async def test_a_pending_approval_survives_a_restart_and_awaiting_approves_nothing(db: str) -> None:
    calls: list[str] = []
    app = stead.App(agents=[_refund_agent(calls, _two_refunds())])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("support", session_id="s", request_id="r", prompt="refund")
        await _wait_status(run, stead.RunStatus.WAITING)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run.result(), 0.2)
    async with await app.open(open_store(db)) as runtime:
        await asyncio.sleep(0.1)
        handle = runtime.get_run(run.id)
        assert await handle.status() is stead.RunStatus.WAITING
        assert calls == []
        for interaction in await runtime.list_interactions():
            await runtime.respond(interaction.interaction_id, stead.Approve())
        await handle.result()
    assert sorted(calls) == [f"{run.id}/tool:1:a:10", f"{run.id}/tool:1:b:500"]


async def test_cancel_while_waiting_cancels_the_interactions(db: str) -> None:
    calls: list[str] = []
    app = stead.App(agents=[_refund_agent(calls, _two_refunds())])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("support", session_id="s", request_id="r", prompt="refund")
        await _wait_status(run, stead.RunStatus.WAITING)
        interaction = (await runtime.list_interactions())[0]
        await run.cancel("customer withdrew")
        with pytest.raises(stead.RunCancelled):
            await run.result()
        assert await runtime.list_interactions() == []
        with pytest.raises(stead.ConflictError, match="cancelled with run"):
            await runtime.respond(interaction.interaction_id, stead.Approve())
        events = [e.kind async for e in run.events()]
        assert events[-1] == "status"
    assert calls == []
