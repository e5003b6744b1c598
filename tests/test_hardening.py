"""Hardening: odd data, operational accidents and crafted input never loop, lose work or poison
the runtime (in-process cases; those needing other processes are in tests/crash)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.agent import loop
from stead.store.sqlite import store as sqlite_store
from stead.testing import FakeClock, FunctionModel, ScriptedModel

LONE = "\ud83d"  # the first half of an emoji, as a stream decoded piece by piece can hand it over
TERMINAL = (stead.RunStatus.COMPLETED, stead.RunStatus.FAILED, stead.RunStatus.NEEDS_ATTENTION)


async def _settle(run: stead.RunHandle, statuses: tuple[stead.RunStatus, ...] = TERMINAL) -> Any:
    for _ in range(500):
        record = await run.run()
        if record.status in statuses:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"run never settled; it is {(await run.run()).status}")


def _counting(answer: Any) -> FunctionModel:
    return FunctionModel(answer)


# -- 2. no hot loop on data that cannot be journaled, or on an unexpected exception -----------


@pytest.mark.parametrize(
    "response",
    [
        stead.ModelResponse(text=f"half an emoji: {LONE}"),
        stead.ModelResponse(tool_calls=(stead.ToolCall(name="t", arguments={"x": math.nan}),)),
        stead.ModelResponse(tool_calls=(stead.ToolCall(name="t", arguments={"x": 10**5000}),)),
    ],
    ids=["lone-surrogate", "nan-argument", "huge-integer"],
)
async def test_a_response_that_cannot_be_journaled_is_a_retryable_model_failure(
    db: str, response: stead.ModelResponse
) -> None:
    model = _counting(lambda request: response)
    agent = stead.Agent(
        id="a",
        version="1",
        model=model,
        model_retry=stead.RetryPolicy(max_attempts=2, initial_delay=0.01, max_delay=0.01),
    )
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run, (stead.RunStatus.FAILED,))
        assert runtime.health()["ok"]
    assert len(model.requests) == 2  # the policy's attempts, not hundreds
    assert "cannot be journaled" in record.error["reason"]


async def test_tool_call_arguments_of_the_wrong_type_fail_the_run_once(db: str) -> None:
    bad = stead.ToolCall(name="t", arguments=None)  # type: ignore[arg-type]
    model = _counting(lambda request: stead.ModelResponse(tool_calls=(bad,)))
    agent = stead.Agent(id="a", version="1", model=model)
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run, (stead.RunStatus.FAILED,))
    assert len(model.requests) == 1
    assert "arguments are a dict" in record.error["reason"]


async def test_an_openai_answer_holding_half_an_emoji_is_retried_then_fails(db: str) -> None:
    openai = pytest.importorskip("openai")
    try:  # openai>=3 runs on httpx2; older releases on httpx
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        import httpx  # type: ignore[no-redef]
    from stead.models.openai import OpenAIModel

    requests: list[Any] = []

    def server(request: Any) -> Any:
        requests.append(request)
        # JSON escapes the lone half as \ud83d, as a provider's encoder does
        return httpx.Response(
            200,
            headers={"content-type": "application/json"},
            content=json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1745422390,
                    "model": "gpt-4.1-mini",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"hello {LONE}"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
                }
            ).encode(),
        )

    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="https://api.openai.com/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
    )
    agent = stead.Agent(
        id="a",
        version="1",
        model=OpenAIModel("gpt-4.1-mini", client=client),
        model_retry=stead.RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.01),
    )
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run, (stead.RunStatus.FAILED,))
        assert runtime.health()["ok"]
    assert len(requests) == 3
    assert "lone surrogate" in record.error["reason"]


def _returning(value: Any, recovery: str, runs: list[int]) -> stead.Agent:
    @stead.tool(recovery=recovery)  # type: ignore[call-overload]
    def listing() -> Any:
        """List something."""
        runs.append(1)
        return value

    model = ScriptedModel([[stead.ToolCall(name="listing", id="c1")], "done"])
    return stead.Agent(id="a", version="1", model=model, tools=[listing])


@pytest.mark.parametrize("value", [f"name-{chr(0xDCFF)}.txt", {"x": math.nan}, object()])
async def test_a_safe_tool_returning_what_cannot_be_journaled_is_a_failed_result(
    db: str, value: Any
) -> None:
    runs: list[int] = []
    async with await stead.App(agents=[_returning(value, "safe", runs)]).open(
        stead.SqliteStore(db)
    ) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        outcome = await run.result(timeout=10)
        snapshot = await run.snapshot()
    assert outcome.output == "done"
    assert runs == [1]
    (result,) = snapshot.checkpoint.tool_results.values()
    assert result["failed"] and "cannot be journaled" in result["error"]


@pytest.mark.parametrize("recovery", ["idempotent", "manual"])
async def test_a_side_effect_returning_unstorable_text_needs_attention_once(
    db: str, recovery: str
) -> None:
    runs: list[int] = []
    agent = _returning(f"name-{chr(0xDCFF)}.txt", recovery, runs)
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run)
        await asyncio.sleep(0.1)
        assert runtime.health()["ok"]
    assert record.status is stead.RunStatus.NEEDS_ATTENTION
    assert record.attention_key == "tool:1:c1"
    assert runs == [1]


async def test_an_unexpected_exception_fails_the_run_with_its_traceback(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(call: Any, result: Any, output_text: Any = None) -> Any:
        raise RuntimeError("a defect in the loop")

    monkeypatch.setattr(loop, "tool_result_message", broken)
    model = _counting(
        lambda request: [stead.ToolCall(name="look", id="c1")] if request.turn == 1 else "done"
    )

    @stead.tool(recovery="safe")
    def look() -> str:
        """Look."""
        return "seen"

    agent = stead.Agent(id="a", version="1", model=model, tools=[look])
    with caplog.at_level(logging.ERROR, logger="stead"):
        async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
            run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
            record = await _settle(run, (stead.RunStatus.FAILED,))
            await asyncio.sleep(0.1)
            assert runtime.health()["ok"]
    assert len(model.requests) == 1
    assert record.error_kind == "internal"
    assert "RuntimeError: a defect in the loop" in record.error["reason"]
    assert "Traceback" in record.error["traceback"]
    assert any("a defect in the loop" in r.getMessage() for r in caplog.records)


async def test_an_unexpected_exception_during_a_side_effect_names_it(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A defect in what the runtime does with a tool's result once the tool has run: encoding
    # it for the journal fails.
    def broken(outputs: list[str], result: Any) -> str:
        raise RuntimeError("a defect after the effect")

    monkeypatch.setattr(loop, "_tool_result_text", broken)
    runs: list[int] = []
    async with await stead.App(agents=[_returning("ok", "manual", runs)]).open(
        stead.SqliteStore(db)
    ) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run)
    assert record.status is stead.RunStatus.NEEDS_ATTENTION
    assert record.attention_key == "tool:1:c1"
    assert "its effect may have happened" in record.error["reason"]
    assert runs == [1]


# -- 5. a caller's bad id never poisons the runtime ---------------------------------------------


@pytest.mark.parametrize("field", ["session_id", "request_id", "prompt", "run_id"])
async def test_unstorable_text_from_a_caller_is_refused_before_anything_is_written(
    db: str, field: str
) -> None:
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok", "ok"]))
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        kwargs = {"session_id": "s", "request_id": "r", "prompt": "hi", field: f"x{LONE}"}
        with pytest.raises(stead.ValidationError, match="lone surrogate"):
            await runtime.submit("a", **kwargs)
        with pytest.raises(stead.ValidationError):
            await runtime.get_run(f"run{LONE}").status()
        with pytest.raises(stead.ValidationError):
            await runtime.list_runs(session_id=LONE)
        with pytest.raises(stead.ValidationError):
            await runtime.list_interactions(session_id=LONE)
        with pytest.raises(stead.ValidationError):
            await runtime.respond(f"int_{LONE}", stead.Approve())
        with pytest.raises(stead.ValidationError):
            stead.Deny(reason=LONE)
        with pytest.raises(stead.ValidationError):
            await runtime.list_runs(after=str(10**30))
        assert runtime.health()["ok"]
        run = await runtime.submit("a", session_id="s2", request_id="r", prompt="hi")
        assert (await run.result(timeout=10)).output == "ok"
        assert (await runtime.list_runs()).runs[0].id == run.id


# -- 1. a deleted or replaced database fails closed ---------------------------------------------


@pytest.mark.parametrize("accident", ["unlink", "replace", "unlink-wal", "replace-wal"])
async def test_a_deleted_or_replaced_database_is_never_acknowledged_into(
    tmp_path: Path, accident: str
) -> None:
    db = tmp_path / "stead.db"
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"] * 10))
    app = stead.App(agents=[agent])
    async with await app.open(stead.SqliteStore(tmp_path / "other.db")):
        pass
    runtime = await app.open(stead.SqliteStore(db))
    try:
        first = await runtime.submit("a", session_id="s", request_id="r1", prompt="hi")
        await first.result(timeout=10)
        if accident == "unlink":
            os.unlink(db)
        elif accident == "replace":
            os.replace(tmp_path / "other.db", db)
        elif accident == "unlink-wal":
            os.unlink(f"{db}-wal")
        else:
            (tmp_path / "other.db-wal").write_bytes(b"")
            os.replace(tmp_path / "other.db-wal", f"{db}-wal")
        with pytest.raises(stead.StorageError, match=r"(deleted|replaced)"):
            await runtime.submit("a", session_id="s2", request_id="r2", prompt="hi")
        with pytest.raises(stead.StorageError):
            await runtime.submit("a", session_id="s3", request_id="r3", prompt="hi")
        assert not runtime.health()["ok"]
    finally:
        await runtime.close()


async def test_a_log_that_cannot_be_written_ahead_is_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing the log ahead at open is an optimization: a disk that refuses it (full, say)
    leaves the log as it was, the store opens, and runs complete."""
    db = tmp_path / "stead.db"
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))
    app = stead.App(agents=[agent])
    async with await app.open(stead.SqliteStore(db)):
        pass

    def refuse(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sqlite_store.os, "pwrite", refuse)
    async with await app.open(stead.SqliteStore(db)) as runtime:
        assert 0 < os.path.getsize(f"{db}-wal") < sqlite_store.WAL_PREFILL
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="hi")
        assert (await run.result(timeout=10)).output == "ok"
        assert runtime.health()["ok"]
    monkeypatch.undo()
    async with await app.open(stead.SqliteStore(db)) as runtime:
        assert os.path.getsize(f"{db}-wal") == sqlite_store.WAL_PREFILL
        assert [r.status for r in (await runtime.list_runs()).runs] == [stead.RunStatus.COMPLETED]


# -- 7. a crafted database runs no one's triggers -----------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TRIGGER approve_all AFTER INSERT ON stead_interactions BEGIN "
        "UPDATE stead_interactions SET status = 'resolved', "
        """response = '{"kind":"approve","reviewer":null,"note":null}' WHERE id = NEW.id; END""",
        "CREATE VIEW stead_peek AS SELECT * FROM stead_runs",
        "CREATE TABLE stead_extra (x)",
        "CREATE INDEX stead_runs_odd ON stead_runs (request_id)",
    ],
    ids=["trigger", "view", "table", "index"],
)
async def test_a_database_with_a_foreign_schema_is_refused(db: str, statement: str) -> None:
    async with await stead.App(agents=[]).open(stead.SqliteStore(db)):
        pass
    conn = sqlite3.connect(db)
    conn.execute(statement)
    conn.commit()
    conn.close()
    with pytest.raises(stead.StorageError, match="schema stead did not create"):
        await stead.App(agents=[]).open(stead.SqliteStore(db))
    cli = Path(sys.executable).with_name("stead")
    shown = subprocess.run(
        [str(cli), "runs", "list", "--db", db], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 1 and "schema stead did not create" in shown.stderr
    assert "Traceback" not in shown.stderr


async def test_a_gated_tool_never_runs_unapproved_on_a_crafted_database(db: str) -> None:
    """The attack of the report: a trigger that approves every interaction."""
    async with await stead.App(agents=[]).open(stead.SqliteStore(db)):
        pass
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TRIGGER approve_all AFTER INSERT ON stead_interactions BEGIN "
        "UPDATE stead_interactions SET status = 'resolved', "
        """response = '{"kind":"approve","reviewer":null,"note":null}' WHERE id = NEW.id; END"""
    )
    conn.commit()
    conn.close()
    ran: list[int] = []

    @stead.tool(recovery="manual", approval=True)
    def pay() -> str:
        """Pay."""
        ran.append(1)
        return "paid"

    agent = stead.Agent(
        id="a",
        version="1",
        model=ScriptedModel([[stead.ToolCall(name="pay", id="c1")], "done"]),
        tools=[pay],
    )
    with pytest.raises(stead.StorageError):
        await stead.App(agents=[agent]).open(stead.SqliteStore(db))
    assert ran == []


# -- 9. whatever the approval queue shows can be answered ---------------------------------------


async def test_an_approval_of_a_needs_attention_run_is_recorded_and_applies_later(
    db: str,
) -> None:
    release = asyncio.Event()
    effects: list[str] = []

    @stead.tool(recovery="manual")
    async def ship(ctx: stead.ToolContext) -> str:
        """Ship."""
        effects.append("ship")
        await release.wait()
        return "shipped"

    @stead.tool(recovery="manual", approval=True)
    def refund() -> str:
        """Refund."""
        effects.append("refund")
        return "refunded"

    model = ScriptedModel(
        [[stead.ToolCall(name="refund", id="r1"), stead.ToolCall(name="ship", id="s1")], "done"]
    )
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[ship, refund])])
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        for _ in range(500):
            if effects and await runtime.list_interactions():
                break
            await asyncio.sleep(0.01)
        # closing interrupts ship while it runs: its intent stays without a result
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = runtime.get_run(run.id)
        record = await _settle(run)
        assert record.status is stead.RunStatus.NEEDS_ATTENTION
        assert record.attention_key == "tool:1:s1"
        (pending,) = await runtime.list_interactions(status="pending")
        await runtime.respond(pending.interaction_id, stead.Approve(reviewer="ana"))
        await runtime.respond(pending.interaction_id, stead.Approve(reviewer="ana"))  # no-op
        with pytest.raises(stead.ConflictError):
            await runtime.respond(pending.interaction_id, stead.Deny(reason="no"))
        assert await runtime.list_interactions(status="pending") == []
        assert (await run.status()) is stead.RunStatus.NEEDS_ATTENTION
        await run.resolve("tool:1:s1", output="shipped by hand")
        outcome = await run.result(timeout=10)
    assert outcome.output == "done"
    assert effects == ["ship", "refund"]


# -- 10. non-finite policy values ---------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: stead.Budget(max_cost_usd=math.nan),
        lambda: stead.Budget(max_cost_usd=math.inf),
        lambda: stead.RetryPolicy(initial_delay=math.nan),
        lambda: stead.RetryPolicy(initial_delay=math.inf, max_delay=math.inf),
        lambda: stead.RetryPolicy(max_delay=math.nan),
    ],
)
def test_non_finite_policy_values_are_refused(build: Any) -> None:
    with pytest.raises(stead.ValidationError, match="finite"):
        build()


def test_a_huge_or_odd_retry_after_is_capped_at_max_delay() -> None:
    policy = stead.RetryPolicy(initial_delay=1, max_delay=30)
    assert policy.delay(1, 3e11) == 30
    assert policy.delay(1, math.inf) == 30
    assert 0.5 <= policy.delay(1, math.nan) <= 1
    assert policy.delay(1, 7) == 7


async def test_a_huge_retry_after_from_the_provider_waits_max_delay(db: str) -> None:
    clock = FakeClock()
    calls: list[int] = []

    def answer(request: stead.ModelRequest) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise stead.ModelError("busy", retryable=True, retry_after=3e11)
        return "ok"

    agent = stead.Agent(
        id="a",
        version="1",
        model=FunctionModel(answer),
        model_retry=stead.RetryPolicy(max_attempts=2, initial_delay=1, max_delay=5),
    )
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db, clock=clock)) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run, (stead.RunStatus.RETRY_WAIT,))
        assert (record.next_attempt_at - clock.now()).total_seconds() == 5
        clock.advance(5)
        assert (await run.result(timeout=10)).output == "ok"


# -- 12. smaller ones ---------------------------------------------------------------------------


async def test_result_with_a_timeout_leaves_no_waiter_behind(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    @stead.tool(recovery="safe", approval=True)
    def gated() -> str:
        """Gated."""
        return "ok"

    model = ScriptedModel([[stead.ToolCall(name="gated", id="c1")], "done"])
    agent = stead.Agent(id="a", version="1", model=model, tools=[gated])
    with caplog.at_level(logging.ERROR):
        async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
            run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
            for _ in range(50):
                with pytest.raises(TimeoutError, match="did not end within"):
                    await run.result(timeout=0.001)
            assert runtime._hub.waiting == 0
            with pytest.raises(stead.ValidationError):
                await run.result(timeout=math.nan)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_closed_runtime_raises_a_named_error(db: str) -> None:
    runtime = await stead.App(agents=[]).open(stead.SqliteStore(db))
    await runtime.close()
    with pytest.raises(stead.RuntimeClosedError, match="closed"):
        await runtime.list_runs()


async def test_fork_does_not_ask_again_for_an_approval_whose_result_it_copied(db: str) -> None:
    ran: list[int] = []

    @stead.tool(recovery="manual", approval=True)
    def pay() -> str:
        """Pay."""
        ran.append(1)
        return "paid"

    model = ScriptedModel([[stead.ToolCall(name="pay", id="c1")], "done"])
    app = stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[pay])])
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await _settle(run, (stead.RunStatus.WAITING,))
        (pending,) = await runtime.list_interactions()
        await runtime.respond(pending.interaction_id, stead.Approve())
        await run.result(timeout=10)
        fork = await runtime.fork(run.id, before="model:2")
        outcome = await fork.result(timeout=10)
        assert await runtime.list_interactions(run_id=fork.id, status=None) == []
    assert outcome.output == "done"
    assert ran == [1]


def test_a_file_that_is_not_a_database_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 100)

    async def open_it() -> None:
        await stead.App(agents=[]).open(stead.SqliteStore(path))

    with pytest.raises(stead.StorageError, match="is not a SQLite database") as caught:
        asyncio.run(open_it())
    assert "writable" not in str(caught.value)


@pytest.mark.parametrize("name", ["a#b.db", "a%41.db", "a?b.db"])
def test_the_cli_reads_databases_whose_names_look_like_uri_syntax(
    tmp_path: Path, name: str
) -> None:
    cli = Path(sys.executable).with_name("stead")
    missing = subprocess.run(
        [str(cli), "runs", "list", "--db", name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert missing.returncode == 1 and "no stead database" in missing.stderr
    assert sorted(os.listdir(tmp_path)) == []  # no stray file
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))

    async def make() -> str:
        async with await stead.App(agents=[agent]).open(
            stead.SqliteStore(tmp_path / name)
        ) as runtime:
            run = await runtime.submit("a", session_id="s", request_id="r", prompt="hi")
            await run.result(timeout=10)
            return run.id

    run_id = asyncio.run(make())
    shown = subprocess.run(
        [str(cli), "runs", "list", "--db", name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert run_id in shown.stdout
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("value", [0, -1, None, True, 2.5, "3"])
def test_limits_max_interruptions_is_validated(value: object) -> None:
    with pytest.raises(
        stead.ValidationError, match=r"Limits\.max_interruptions must be a positive"
    ):
        stead.Limits(max_interruptions=value)  # type: ignore[arg-type]


@pytest.mark.skipif(shutil.which("true") is None, reason="POSIX only")
def test_tool_max_attempts_is_validated() -> None:
    with pytest.raises(stead.ValidationError, match="max_attempts"):
        stead.tool(recovery="safe", max_attempts=0)(lambda: None)


# -- 6. no credential in the journal ------------------------------------------------------------


async def test_no_credential_reaches_the_journal(tmp_path: Path) -> None:
    openai = pytest.importorskip("openai")
    try:  # openai>=3 runs on httpx2; older releases on httpx
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        import httpx  # type: ignore[no-redef]
    from stead.models.openai import OpenAIModel

    key = "sk-proj-CONFIGUREDKEY1234567890"
    base_url = "http://gw-user:GATEWAYSECRET99@gateway.local/v1?api-key=QUERYSECRET77"

    def server(request: Any) -> Any:
        message = f"Incorrect API key provided: {key}. Also tried sk-OTHERKEY0987654321abcd."
        return httpx.Response(401, json={"error": {"message": message, "type": "invalid"}})

    client = openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
    )
    model = OpenAIModel("gpt-4.1-mini", api_key=key, base_url=base_url, client=client)
    agent = stead.Agent(id="a", version="1", model=model)
    db = tmp_path / "stead.db"
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        record = await _settle(run, (stead.RunStatus.FAILED,))
        events = [event async for event in run.events()]
    assert "401" in record.error["reason"]
    text = "".join(path.read_bytes().decode("utf-8", "replace") for path in tmp_path.iterdir())
    text += repr(record) + repr(events) + repr(model)
    for secret in ("CONFIGUREDKEY", "GATEWAYSECRET", "QUERYSECRET", "OTHERKEY", "gw-user"):
        assert secret not in text, secret
