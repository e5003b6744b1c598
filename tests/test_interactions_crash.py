"""Approvals across SIGKILL: a pending approval survives the process, is answered in another
one, and the approved tool runs exactly once even when the process dies right after the
decision is recorded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r'''
import asyncio, json, sys
import stead
from stead.testing import ScriptedModel, kill_self

db, ledger, mode = sys.argv[1], sys.argv[2], sys.argv[3]

@stead.tool(recovery="idempotent", approval=True)
async def refund(order_id: str, ctx: stead.ToolContext) -> str:
    """Refund an order."""
    with open(ledger, "a") as f:
        f.write(ctx.operation_id + "\n")
    return "refunded"

model = ScriptedModel([[stead.ToolCall(name="refund", arguments={"order_id": "17"}, id="r")],
                       "finished"])
agent = stead.Agent(id="support", version="1", model=model, tools=[refund])

async def main():
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        if mode == "submit":
            run = await runtime.submit("support", session_id="s", request_id="r",
                                       prompt="refund 17")
            while await run.status() is not stead.RunStatus.WAITING:
                await asyncio.sleep(0.01)
            kill_self()  # the process dies while the run waits for a person
        elif mode in ("approve", "deny"):
            (pending,) = await runtime.list_interactions()
            decision = stead.Approve(reviewer="ana") if mode == "approve" else \
                stead.Deny(reason="not eligible")
            await runtime.respond(pending.interaction_id, decision)
            kill_self()  # dies right after the decision is on disk, before the tool runs
        else:
            (record,) = (await runtime.list_runs()).runs
            run = runtime.get_run(record.id)
            outcome = await run.result()
            last = model.requests[-1].messages[-1] if model.requests else None
            print(json.dumps({"output": outcome.output, "run_id": record.id,
                              "tool_result": getattr(last, "content", None)}), flush=True)

asyncio.run(main())
'''


def _child(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "stead.db"), str(tmp_path / "ledger"), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_approval_across_sigkills(tmp_path: Path, decision: str) -> None:
    submitted = _child(tmp_path, "submit")
    assert submitted.returncode == -signal.SIGKILL, submitted.stderr
    answered = _child(tmp_path, decision)
    assert answered.returncode == -signal.SIGKILL, answered.stderr
    ledger = tmp_path / "ledger"
    assert not ledger.exists()  # nothing ran before the resumed process
    finished = _child(tmp_path, "finish")
    assert finished.returncode == 0, finished.stderr
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert result["output"] == "finished"
    if decision == "approve":
        assert ledger.read_text().splitlines() == [f"{result['run_id']}/tool:1:r"]
        assert result["tool_result"] == "refunded"
    else:
        assert not ledger.exists()
        assert result["tool_result"] == "a reviewer denied this call: not eligible"
    again = _child(tmp_path, "finish")  # a later process changes nothing
    assert json.loads(again.stdout.strip().splitlines()[-1])["output"] == "finished"
    if decision == "approve":
        assert len(ledger.read_text().splitlines()) == 1
