"""stead.Client acts on runs without owning the store: through the owner's inbox when a runtime
lives, or in place when none does; and what a new user hit: run_agent never hangs, tool errors
keep their traceback, a provider request is counted once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.testing import FunctionModel, ScriptedModel

from ._journal import PgJournal, open_store


@pytest.fixture
def db(any_db: object) -> object:
    """Every test here that takes ``db`` runs on SQLite and on PostgreSQL."""
    return any_db


def _gated_agent(ran: list[str]) -> stead.Agent:
    @stead.tool(recovery="manual", approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        ran.append(f"pay {amount}")
        return f"paid {amount}"

    model = ScriptedModel([[stead.ToolCall(name="pay", arguments={"amount": 5}, id="c1")], "done"])
    return stead.Agent(id="a", version="1", model=model, tools=[pay])


async def _until(run: stead.RunHandle, status: stead.RunStatus) -> stead.Run:
    for _ in range(500):
        record = await run.run()
        if record.status is status:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"run never reached {status}; it is {(await run.run()).status}")


async def test_a_client_answers_through_the_owners_inbox(db: str) -> None:
    ran: list[str] = []
    app = stead.App(agents=[_gated_agent(ran)])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await _until(run, stead.RunStatus.WAITING)
        async with stead.Client(open_store(db)) as client:
            (pending,) = await client.list_interactions()
            assert (pending.tool, pending.arguments) == ("pay", {"amount": 5})
            await client.respond(pending.interaction_id, stead.Approve(reviewer="ana"))
            with pytest.raises(stead.ConflictError, match="answered differently"):
                await client.respond(pending.interaction_id, stead.Deny(reason="no"))
            with pytest.raises(stead.NotFoundError):
                await client.respond("int_nope", stead.Approve())
            handle = client.get_run(run.id)
            outcome = await handle.result(timeout=10)
            kinds = [event.kind async for event in handle.events()]
    assert outcome.output == "done"
    assert ran == ["pay 5"]
    assert kinds.count("interaction_responded") == 1
    assert kinds[-1] == "status"


async def test_with_no_live_owner_the_client_applies_the_command_itself(db: str) -> None:
    ran: list[str] = []
    app = stead.App(agents=[_gated_agent(ran)])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await _until(run, stead.RunStatus.WAITING)
    async with stead.Client(open_store(db)) as client:
        (pending,) = await client.list_interactions()
        await client.respond(pending.interaction_id, stead.Approve())
        assert (await client.run_record(run.id)).status is stead.RunStatus.PENDING
        assert await client.list_interactions() == []
    async with await app.open(open_store(db)) as runtime:
        outcome = await runtime.get_run(run.id).result(timeout=10)
    assert outcome.output == "done" and ran == ["pay 5"]


async def test_a_command_the_owner_does_not_apply_times_out_naming_it(db: str) -> None:
    if not isinstance(db, str):
        pytest.skip("PostgreSQL has no owner and no inbox: a client applies its own commands")
    ran: list[str] = []
    app = stead.App(agents=[_gated_agent(ran)])
    async with await app.open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await _until(run, stead.RunStatus.WAITING)
        runtime._inbox.halt()  # an owner that stopped draining
        async with stead.Client(open_store(db), command_timeout=0.3) as client:
            (pending,) = await client.list_interactions()
            with pytest.raises(TimeoutError, match=r"respond\(int_.*stays in the inbox"):
                await client.respond(pending.interaction_id, stead.Approve())
    # The next owner applies the posted command: the run completes.
    async with await app.open(open_store(db)) as runtime:
        outcome = await runtime.get_run(run.id).result(timeout=10)
    assert outcome.output == "done" and ran == ["pay 5"]


async def test_client_commands_resolve_retry_cancel_and_fork(db: str) -> None:
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["one", "two"]))
    app = stead.App(agents=[agent])
    async with await app.open(open_store(db)) as runtime:
        first = await runtime.submit("a", session_id="s", request_id="r1", prompt="go")
        await first.result(timeout=10)
        async with stead.Client(open_store(db)) as client:
            fork = await client.fork(first.id, before="model:1")
            assert (await fork.result(timeout=10)).output == "one"
            with pytest.raises(stead.ConflictError, match="only failed and needs_attention"):
                await client.retry(first.id)
            with pytest.raises(stead.ConflictError, match="already ended completed"):
                await client.cancel(first.id)
            with pytest.raises(stead.NotFoundError, match="no operation"):
                await client.resolve(first.id, "tool:9:x", output=1)
            with pytest.raises(stead.ValidationError):
                await client.list_runs(status="sleeping")
            page = await client.list_runs(limit=1)
            assert len(page.runs) == 1 and page.next_cursor is not None


async def test_a_client_refuses_a_database_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(stead.ValidationError, match="no stead database"):
        async with stead.Client(stead.SqliteStore(tmp_path / "missing.db")) as client:
            await client.list_runs()
    assert not (tmp_path / "missing.db").exists()


# -- what a new user hit ------------------------------------------------------------------------


async def test_run_agent_raises_run_blocked_instead_of_hanging(db: str) -> None:
    ran: list[str] = []
    with pytest.raises(stead.RunBlocked, match=r"stead approve int_\w+ --db") as blocked:
        await asyncio.wait_for(
            stead.run_agent(_gated_agent(ran), "go", store=open_store(db), run_id="job-1"),
            10,
        )
    assert blocked.value.run_id == "job-1" and blocked.value.status == "waiting"
    (pending,) = blocked.value.interactions
    async with stead.Client(open_store(db)) as client:
        await client.respond(pending.interaction_id, stead.Approve())  # type: ignore[attr-defined]
    outcome = await stead.run_agent(_gated_agent(ran), "go", store=open_store(db), run_id="job-1")
    assert outcome.output == "done" and ran == ["pay 5"]


async def test_run_agent_names_the_resolve_command_of_a_needs_attention_run(db: str) -> None:
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["x"]))
    app = stead.App(agents=[agent])
    async with await app.open(open_store(db)):
        pass
    other = stead.Agent(id="a", version="2", model=ScriptedModel(["x"]))
    # The run is pinned to version 2 and left unstarted (a runtime that resumed would run it).
    async with await stead.App(agents=[other]).open(open_store(db), resume=False) as runtime:
        await runtime.submit(
            "a", session_id="job-2", request_id="job-2", prompt="go", run_id="job-2"
        )
    with pytest.raises(stead.RunBlocked, match="stead retry job-2"):
        await asyncio.wait_for(
            stead.run_agent(agent, "go", store=open_store(db), run_id="job-2"), 10
        )


async def test_a_tool_that_raises_is_logged_and_keeps_its_traceback(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    @stead.tool(recovery="safe")
    def lookup(order: str) -> str:
        """Look an order up."""
        raise KeyError(f"no order {order}")

    model = ScriptedModel(
        [[stead.ToolCall(name="lookup", arguments={"order": "17"}, id="c1")], "sorry"]
    )
    agent = stead.Agent(id="a", version="1", model=model, tools=[lookup])
    with caplog.at_level(logging.WARNING, logger="stead"):
        async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
            run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
            outcome = await run.result(timeout=10)
            snapshot = await run.snapshot()
    (op,) = [op for op in snapshot.operations if op.kind == "tool"]
    assert op.result["failed"] and op.result["exception"] == "KeyError"
    assert "Traceback" in op.result["traceback"] and "no order 17" in op.result["traceback"]
    assert outcome.output == "sorry"
    seen: Any = model.requests[1].messages[-1]
    assert seen.is_error and "KeyError" in seen.content
    assert any(r.exc_info and "lookup" in r.getMessage() for r in caplog.records)


async def test_a_provider_request_is_counted_once(db: str) -> None:
    def answer(request: stead.ModelRequest) -> stead.ModelResponse:
        usage = stead.Usage(input_tokens=10, output_tokens=2, requests=1)
        if request.turn == 1:
            call = stead.ToolCall(name="noop", id="c1")
            return stead.ModelResponse(tool_calls=(call,), usage=usage)
        return stead.ModelResponse(text="ok", usage=usage)

    @stead.tool(recovery="safe")
    def noop() -> str:
        """Nothing."""
        return "ok"

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer), tools=[noop])
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        outcome = await run.result(timeout=10)
        snapshot = await run.snapshot()
    assert outcome.usage.requests == 2
    assert snapshot.checkpoint.usage.requests == 2
    assert (snapshot.checkpoint.usage.input_tokens, outcome.usage.output_tokens) == (20, 4)


async def test_a_runs_usage_is_counted_from_its_responses_until_it_completes(db: str) -> None:
    """The runtime writes a run's usage total when the run completes, not at every model
    response; until then every reader counts it from the committed responses."""

    def answer(request: stead.ModelRequest) -> stead.ModelResponse:
        usage = stead.Usage(input_tokens=10 * request.turn, output_tokens=2, requests=7)
        if request.turn == 1:
            call = stead.ToolCall(name="pay", arguments={"amount": 5}, id="c1")
            return stead.ModelResponse(tool_calls=(call,), usage=usage)
        return stead.ModelResponse(text="done", usage=usage)

    tools = _gated_agent([]).tools  # pay, which waits for an approval
    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer), tools=tools)
    async with await stead.App(agents=[agent]).open(open_store(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        waiting = await _until(run, stead.RunStatus.WAITING)
        stored = await runtime._read(lambda tx: tx.get_run(run.id))
        (listed,) = (await runtime.list_runs()).runs
        snapshot = await run.snapshot()
        (pending,) = await runtime.list_interactions()
        await runtime.respond(pending.interaction_id, stead.Approve())
        outcome = await run.result(timeout=10)
        done = await run.run()
    one = {
        "input_tokens": 10,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "requests": 1,
    }
    assert stored is not None and stored.usage == {}  # not written while the run executes
    assert waiting.usage == listed.usage == snapshot.run.usage == one
    assert snapshot.checkpoint.usage == stead.Usage.from_json(one)
    assert snapshot.checkpoint.updated_at >= stored.updated_at
    assert (
        done.usage
        == outcome.usage.to_json()
        == {**one, "input_tokens": 30, "output_tokens": 4, "requests": 2}
    )


async def test_a_client_submits_through_the_owner_or_with_a_named_version(db: str) -> None:
    agent = stead.Agent(id="a", version="7", model=ScriptedModel(["hi", "hi"]))
    app = stead.App(agents=[agent])
    async with await app.open(open_store(db)) as runtime:
        async with stead.Client(open_store(db)) as client:
            run = await client.submit("a", session_id="s", request_id="r", prompt="go")
            assert (await run.result(timeout=10)).output == "hi"
            assert (await run.run()).version == "7"
            again = await client.submit("a", session_id="s", request_id="r", prompt="go")
            assert again.id == run.id
            with pytest.raises(stead.NotFoundError, match="unknown agent 'b'"):
                await client.submit("b", session_id="s2", request_id="r", prompt="go")
        assert runtime.health()["ok"]
    async with stead.Client(open_store(db)) as client:
        if isinstance(db, str):  # no owner to ask which version is the latest
            with pytest.raises(stead.ValidationError, match="pass version="):
                await client.submit("a", session_id="s3", request_id="r", prompt="go")
            queued = await client.submit(
                "a", session_id="s3", request_id="r", prompt="go", version="7"
            )
        else:  # the version the workers declared latest
            queued = await client.submit("a", session_id="s3", request_id="r", prompt="go")
            assert (await queued.run()).version == "7"
    async with await app.open(open_store(db)) as runtime:
        assert (await runtime.get_run(queued.id).result(timeout=10)).output == "hi"


async def test_the_owner_forgets_answers_its_callers_read_long_ago(db: str) -> None:
    import sqlite3

    if not isinstance(db, str):
        pytest.skip("PostgreSQL has no inbox: a client applies its own commands")

    from stead.testing import FakeClock

    clock = FakeClock()
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["one", "two"]))
    app = stead.App(agents=[agent])
    async with (
        await app.open(open_store(db, clock=clock)),
        stead.Client(open_store(db)) as client,
    ):
        first = await client.submit("a", session_id="s1", request_id="r", prompt="go")
        await first.result(timeout=10)
        clock.advance(seconds=2 * 3600)
        second = await client.submit("a", session_id="s2", request_id="r", prompt="go")
        await second.result(timeout=10)
    if isinstance(db, PgJournal):
        rows = db.query("SELECT command FROM stead_inbox")
    else:
        conn = sqlite3.connect(db)
        rows = conn.execute("SELECT command FROM stead_inbox").fetchall()
        conn.close()
    assert len(rows) == 1 and '"s2"' in rows[0][0]


async def test_the_owner_looks_for_answers_to_forget_once_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding the answers to forget reads every answered row the inbox keeps (an hour of
    them), so busy clients, each of whose commands makes the owner drain the inbox, do not make
    it look each time: at opening, then at most once a minute."""
    from stead.store.rows.inbox import InboxRows
    from stead.testing import FakeClock

    looks: list[object] = []
    plain = InboxRows.forget_answered

    def counted(self: InboxRows, before: Any) -> int:
        looks.append(before)
        return plain(self, before)

    monkeypatch.setattr(InboxRows, "forget_answered", counted)
    clock = FakeClock()
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["hi"]))
    db = tmp_path / "busy.db"
    async with (
        await stead.App(agents=[agent]).open(stead.SqliteStore(db, clock=clock)),
        stead.Client(stead.SqliteStore(db)) as client,
    ):
        assert len(looks) == 1  # opening
        for n in range(3):  # each command is drained on its own
            handle = await client.submit("a", session_id=f"s{n}", request_id="r", prompt="go")
            assert (await handle.result(timeout=10)).output == "hi"
        assert len(looks) == 1
        clock.advance(seconds=61)
        handle = await client.submit("a", session_id="later", request_id="r", prompt="go")
        assert (await handle.result(timeout=10)).output == "hi"
        assert len(looks) == 2


async def test_opening_a_runtime_waits_for_no_lazy_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forgetting old answers is a lazy write: opening commits it with the inbox's first read
    instead of waiting for the lazy timer (2 ms on every open; here, a minute)."""
    from stead.store.sqlite.writer import Writer

    monkeypatch.setattr(Writer, "lazy_delay", 60.0)
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["hi"]))])
    runtime = await asyncio.wait_for(app.open(stead.SqliteStore(tmp_path / "x.db")), 10)
    async with runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result(timeout=10)).output == "hi"


async def test_a_client_without_a_runtime_names_the_version_parameter(tmp_path: Path) -> None:
    """No runtime owns the store, so none picks the latest version: the error says to pass
    ``version=`` and names the parameter for callers that spell it otherwise."""
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))
    store = stead.SqliteStore(tmp_path / "idle.db")
    async with await stead.App(agents=[agent]).open(store):
        pass
    async with stead.Client(stead.SqliteStore(tmp_path / "idle.db")) as client:
        with pytest.raises(stead.ValidationError, match=r"pass version=\.\.\.") as caught:
            await client.submit("a", session_id="s", request_id="r", prompt="go")
    assert caught.value.parameter == "version"
