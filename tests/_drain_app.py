"""The App of the ``stead worker`` tests: one run, two slow tools in a row.

The tool ``step`` appends ``{"key", "pid", "phase"}`` lines to the file ``$STEAD_TEST_LEDGER``
(``start`` as it begins, ``done`` as it returns) and takes ``$STEAD_TEST_STEP_SECONDS`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import os

import stead
from stead.testing import FunctionModel


def _note(key: str, phase: str) -> None:
    with open(os.environ["STEAD_TEST_LEDGER"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"key": key, "pid": os.getpid(), "phase": phase}) + "\n")
        f.flush()
        os.fsync(f.fileno())


@stead.tool(recovery="idempotent")
async def step(n: int, ctx: stead.ToolContext) -> str:
    """Do one slow step."""
    _note(ctx.key, "start")
    await asyncio.sleep(float(os.environ.get("STEAD_TEST_STEP_SECONDS", "1")))
    _note(ctx.key, "done")
    return f"step {n} done"


def _answer(request: stead.ModelRequest) -> object:
    done = sum(isinstance(m, stead.ToolResultMessage) for m in request.messages)
    if done < 2:
        return [stead.ToolCall(name="step", arguments={"n": done + 1}, id=f"s{done + 1}")]
    return "both steps done"


app = stead.App(
    agents=[stead.Agent(id="stepper", version="1", model=FunctionModel(_answer), tools=[step])]
)
