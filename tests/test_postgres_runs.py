"""Runs on PostgreSQL: a runtime owns a schema, clients in other connections answer it, and a
killed runtime's work continues on the next one exactly as on SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.testing import ScriptedModel

POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="STEAD_TEST_POSTGRES_URL is not set")
CHILD = Path(__file__).with_name("_pg_child.py")


def _store(schema: str) -> Any:
    from stead.store.postgres import PostgresStore

    return PostgresStore(str(POSTGRES_URL), schema=schema)


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"pgruns_{uuid.uuid4().hex[:12]}"
    yield name
    conn = _store(name).connect()
    try:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        conn.close()


def _bank(wired: list[str]) -> stead.App:
    @stead.tool(recovery="idempotent", approval=lambda args: args["amount"] > 100)
    async def wire(amount: int, ctx: stead.ToolContext) -> str:
        """Wire money."""
        wired.append(ctx.operation_id)
        return f"wired {amount}"

    model = ScriptedModel(
        [[stead.ToolCall(name="wire", arguments={"amount": 500}, id="w")], "Wired 500."]
    )
    return stead.App(agents=[stead.Agent(id="bank", version="1", model=model, tools=[wire])])


async def _until(run: Any, status: stead.RunStatus) -> None:
    for _ in range(1000):
        if await run.status() is status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run.id} never became {status.value}")


async def test_a_client_on_another_connection_answers_a_waiting_run(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stead.store.postgres import store as pg

    monkeypatch.setattr(pg._Listener, "fallback", 3600.0)  # only the notification wakes it
    wired: list[str] = []
    async with await _bank(wired).open(_store(schema)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
        async with stead.Client(_store(schema), command_timeout=10) as client:
            (pending,) = await client.list_interactions(status="pending")
            assert pending.key == "approval:1:w"
            await client.respond(pending.interaction_id, stead.Approve())
            outcome = await client.result(run.id, timeout=10)
    assert outcome.output == "Wired 500." and wired == [f"{run.id}/tool:1:w"]


async def test_with_no_runtime_a_client_applies_the_command_and_the_next_runtime_goes_on(
    schema: str,
) -> None:
    wired: list[str] = []
    app = _bank(wired)
    async with await app.open(_store(schema)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
    async with stead.Client(_store(schema)) as client:
        (pending,) = await client.list_interactions(status="pending")
        await client.respond(pending.interaction_id, stead.Approve())
        assert (await client.get_run(run.id).status()) is stead.RunStatus.PENDING
    async with await app.open(_store(schema)) as runtime:
        assert (await runtime.get_run(run.id).result(timeout=10)).output == "Wired 500."
    assert wired == [f"{run.id}/tool:1:w"]


async def test_a_killed_runtime_frees_the_schema_and_its_manual_tool_needs_attention(
    schema: str,
) -> None:
    from tests._pg_child import build_app

    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(POSTGRES_URL), schema],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)
        assert json.loads(line) == {"started": "tool:1:w"}, child.stderr
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()  # waits, and closes the pipes
    # the server ends the dead runtime's session, and its owner lock with it
    for _ in range(100):
        try:
            runtime = await build_app().open(_store(schema))
            break
        except stead.OwnershipError:
            await asyncio.sleep(0.05)
    async with runtime:
        (run,) = (await runtime.list_runs()).runs
        handle = runtime.get_run(run.id)
        await _until(handle, stead.RunStatus.NEEDS_ATTENTION)
        assert (await handle.run()).attention_key == "tool:1:w"
        await handle.resolve("tool:1:w", output="wired 500 (checked by hand)")
        assert (await handle.result(timeout=10)).output == "Wired."


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


async def test_the_stead_command_takes_a_postgresql_url_and_a_schema(schema: str) -> None:
    wired: list[str] = []
    app = _bank(wired)
    async with await app.open(_store(schema)) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await _until(run, stead.RunStatus.WAITING)
    where = ["--db", str(POSTGRES_URL), "--schema", schema]
    listed = await asyncio.to_thread(_cli, "interactions", "list", *where, "--json")
    assert listed.returncode == 0, listed.stderr
    (pending,) = json.loads(listed.stdout)["interactions"]
    assert pending["key"] == "approval:1:w"
    # the URL and the schema from the environment, as a deployment sets them
    env = {"STEAD_DB": str(POSTGRES_URL), "STEAD_SCHEMA": schema}
    approved = await asyncio.to_thread(_cli, "approve", pending["interaction_id"], env=env)
    assert approved.returncode == 0, approved.stderr
    shown = await asyncio.to_thread(_cli, "runs", "show", run.id, *where, "--json")
    assert json.loads(shown.stdout)["run"]["status"] == "pending"
    async with await app.open(_store(schema)) as runtime:
        assert (await runtime.get_run(run.id).result(timeout=10)).output == "Wired 500."


def test_the_stead_command_never_prints_a_password() -> None:
    done = _cli("runs", "list", "--db", "postgresql://ana:hunter2-secret@127.0.0.1:1/orders")
    assert done.returncode == 1
    assert "hunter2-secret" not in done.stderr + done.stdout
    assert "127.0.0.1:1, database 'orders'" in done.stderr
