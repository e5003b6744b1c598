"""Where a tool's function runs: async ones on the loop, sync ones in a worker thread unless
declared ``blocking=False``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import stead
from stead.testing import ScriptedModel


async def _threads_of(tmp_path: Path, **options: bool) -> tuple[int, int]:
    seen: list[int] = []

    @stead.tool(recovery="safe", **options)
    def where() -> str:
        """Say where."""
        seen.append(threading.get_ident())
        return "here"

    script = ScriptedModel([[stead.ToolCall(name="where", id="w")], "done"])
    agent = stead.Agent(id="a", version="1", model=script, tools=[where])
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(tmp_path / "s.db")) as rt:
        run = await rt.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "done"
    return seen[0], threading.get_ident()


async def test_a_sync_tool_runs_in_a_worker_thread(tmp_path: Path) -> None:
    tool_thread, loop_thread = await _threads_of(tmp_path)
    assert tool_thread != loop_thread


async def test_a_sync_tool_declared_non_blocking_runs_on_the_loop(tmp_path: Path) -> None:
    tool_thread, loop_thread = await _threads_of(tmp_path, blocking=False)
    assert tool_thread == loop_thread


def test_blocking_must_be_a_bool() -> None:
    with pytest.raises(stead.ValidationError, match="blocking must be True or False"):
        stead.tool(blocking="no")(lambda: None)  # type: ignore[call-overload]
