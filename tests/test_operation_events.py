"""The events of an operation are announced by its row: what a follower sees live is exactly what
is read back later, sequence for sequence, and the response is not stored a second time."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import stead
from stead.journal.records import Event
from stead.testing import ScriptedModel

from ._journal import journal_events


async def _follow(run: stead.RunHandle, into: list[Event]) -> None:
    async for event in run.events():
        into.append(event)


def _agent(wired: list[bool]) -> stead.Agent:
    @stead.tool(recovery="safe")
    def lookup(order: int) -> dict[str, object]:
        """Look an order up."""
        return {"order": order, "total": "49.00", "notes": "n" * 500}  # previewed in the event

    @stead.tool(recovery="manual")
    async def wire(amount: int, ctx: stead.ToolContext) -> str:
        """Wire money."""
        wired.append(ctx.approved)
        if not ctx.approved:
            raise stead.ApprovalRequired({"amount": amount})
        return "wired"

    script: list[object] = [
        [
            stead.ToolCall(name="lookup", arguments={"order": 17}, id="l"),
            stead.ToolCall(name="wire", arguments={"amount": 4900}, id="w"),
        ],
        "Refunded 49.00.",
    ]
    return stead.Agent(
        id="support",
        version="1",
        model=ScriptedModel(script),  # type: ignore[arg-type]
        tools=[lookup, wire],
    )


async def test_a_follower_sees_live_what_is_read_back_later(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    wired: list[bool] = []
    seen: list[Event] = []
    async with await stead.App(agents=[_agent(wired)]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("support", session_id="s", request_id="r", prompt="refund")
        follower = asyncio.create_task(_follow(run, seen))
        for _ in range(500):
            if await run.status() is stead.RunStatus.WAITING:
                break
            await asyncio.sleep(0.01)
        (pending,) = await run.interactions(status="pending")
        await run.respond(pending.interaction_id, stead.Approve())
        assert (await run.result(timeout=10)).output == "Refunded 49.00."
        await asyncio.wait_for(follower, 10)
    assert wired == [False, True]

    stored = journal_events(db, run.id)
    assert [(e.sequence, e.kind, e.data, e.created_at) for e in seen] == [
        (e.sequence, e.kind, e.data, e.created_at) for e in stored
    ]
    assert [e.sequence for e in journal_events(db)] == list(range(1, len(stored) + 1))
    kinds = [e.kind for e in stored]
    # wire started once before it asked for approval (that intent was forgotten, its event was
    # not) and once after it was approved
    assert kinds.count("tool_started") == 3 and kinds.count("tool_completed") == 2
    assert kinds.count("model_started") == 2 and kinds.count("model_completed") == 2
    first, answer = (e for e in stored if e.kind == "model_completed")
    assert first.data["tool_calls"] == [{"id": "l", "name": "lookup"}, {"id": "w", "name": "wire"}]
    assert answer.data["text"] == "Refunded 49.00." and answer.data["usage"]["requests"] == 1
    lookup = next(e for e in stored if e.kind == "tool_completed" and e.data["tool"] == "lookup")
    assert isinstance(lookup.data["output"], str) and lookup.data["output"].endswith("…")
    assert len(lookup.data["output"]) == 201

    # the responses and results are kept once, in the operation rows; no event row copies them
    conn = sqlite3.connect(db)
    rows = dict(conn.execute("SELECT kind, COUNT(*) FROM stead_events GROUP BY kind").fetchall())
    conn.close()
    assert "model_completed" not in rows and "tool_completed" not in rows
    assert rows["tool_started"] == 1  # the forgotten intent's event, kept as a row of its own


async def test_a_follower_is_woken_by_an_operations_event_alone(tmp_path: Path) -> None:
    # Once the follower has caught up and waits, the first tool's result and what follows up
    # to the second tool's start are commits of operations alone (no event row, no status):
    # those alone must wake it.
    gates = {"first": asyncio.Event(), "second": asyncio.Event()}

    @stead.tool(recovery="safe")
    async def hold(gate: str) -> str:
        """Wait for the test."""
        await gates[gate].wait()
        return gate

    script: list[object] = [
        [stead.ToolCall(name="hold", arguments={"gate": gate}, id=gate)] for gate in gates
    ]
    agent = stead.Agent(
        id="a",
        version="1",
        model=ScriptedModel([*script, "done"]),  # type: ignore[list-item]
        tools=[hold],
    )

    async def until(seen: list[Event], count: int) -> None:
        for _ in range(500):
            if sum(e.kind == "tool_started" for e in seen) == count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the follower saw {[e.kind for e in seen]}")

    seen: list[Event] = []
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(tmp_path / "e.db")) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        follower = asyncio.create_task(_follow(run, seen))
        await until(seen, 1)
        await asyncio.sleep(0.05)  # the follower waits for the next commit
        caught_up = len(seen)
        gates["first"].set()
        await until(seen, 2)
        assert [e.kind for e in seen[caught_up:]] == [
            "tool_completed",
            "model_started",
            "model_completed",
            "tool_started",
        ]
        gates["second"].set()
        assert (await run.result(timeout=10)).output == "done"
        await asyncio.wait_for(follower, 10)


async def test_following_from_a_cursor_inside_the_operations_resumes_there(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cursor.db"
    model = ScriptedModel(
        [[stead.ToolCall(name="echo", arguments={"n": n}, id=f"c{n}")] for n in range(5)] + ["ok"]
    )

    @stead.tool(recovery="safe")
    def echo(n: int) -> int:
        """Echo."""
        return n

    agent = stead.Agent(id="a", version="1", model=model, tools=[echo], max_turns=10)
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await run.result(timeout=10)
        every = [e async for e in run.events()]
        cursor = every[7].sequence
        later = [e async for e in run.events(after=cursor)]
    assert [e.sequence for e in later] == [e.sequence for e in every[8:]]
    assert [e.kind for e in every[1:6]] == [
        "status",
        "model_started",
        "model_completed",
        "tool_started",
        "tool_completed",
    ]


def test_a_commit_announces_the_kind_of_event_the_row_is_read_back_as() -> None:
    """A commit announces an operation's events by kind alone (their data is built from the row
    when read): for every kind of operation and attempt, the kind is the built event's."""
    from stead.journal.events import (
        completed_event_kind,
        operation_completed,
        operation_started,
        started_event_kind,
    )

    kinds = ("model", "tool", "step", "effect", "timer", "emit", "child", "custom", "")
    for kind in kinds:
        for attempt in (1, 2):
            built = operation_started(kind, f"{kind}:1", {"name": "n"}, attempt, "run/key")
            assert started_event_kind(kind, attempt) == (built and built.event_kind), kind
        built = operation_completed(kind, f"{kind}:1", {"name": "n"}, {"output": 1})
        assert completed_event_kind(kind) == (built and built.event_kind), kind
