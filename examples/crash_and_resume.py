"""Crash and resume: a run killed with SIGKILL mid-flight continues in a new process.

The parent starts a child process (``sys.executable`` running this same file) that submits a
run. The agent looks an order up, refunds it (an ``idempotent`` tool that appends to a ledger
file: the outside world), and the child kills itself with SIGKILL the moment the next model call
starts (``stead.testing.crash_at``). The parent then opens the same database: the run resumes
from the journal, the committed refund is replayed rather than run again, and the ledger still
holds exactly one line.

Run it:  .venv/bin/python examples/crash_and_resume.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel, crash_at

PROMPT = "My teapot arrived broken. Refund order 17."


def build_app(ledger: Path) -> stead.App:
    """The same agent in both processes: code is not journaled, so each process registers it."""

    @stead.tool(recovery="safe")
    async def lookup_order(order_id: str) -> dict[str, object]:
        """Look up an order."""
        return {"order_id": order_id, "item": "teapot", "total": 49.0}

    @stead.tool(recovery="idempotent")
    async def refund(order_id: str, amount: float, ctx: stead.ToolContext) -> str:
        """Refund an order through the payments API."""
        with ledger.open("a", encoding="utf-8") as f:  # the side effect
            line = {"order_id": order_id, "amount": amount, "idempotency_key": ctx.operation_id}
            f.write(json.dumps(line) + "\n")
        return f"refund re_{order_id} of {amount:.2f} issued"

    model = ScriptedModel(
        [
            [stead.ToolCall(name="lookup_order", arguments={"order_id": "17"}, id="lookup")],
            [
                stead.ToolCall(
                    name="refund", arguments={"order_id": "17", "amount": 49.0}, id="refund"
                )
            ],
            "Your refund of 49.00 is on its way.",
        ]
    )
    agent = stead.Agent(id="support", version="1", model=model, tools=[lookup_order, refund])
    return stead.App(agents=[agent])


async def submit(runtime: stead.Runtime) -> stead.RunHandle:
    """The submission. The same (session_id, request_id) again returns the original run."""
    return await runtime.submit(
        "support", session_id="customer-42", request_id="msg-1", prompt=PROMPT
    )


async def child(db: Path, ledger: Path) -> None:
    """Submit the run and die (SIGKILL) when model:3 starts, after the refund is committed."""
    crash_at("intent_committed", "model:3")
    async with await build_app(ledger).open(stead.SqliteStore(db)) as runtime:
        run = await submit(runtime)
        print(f"child: submitted {run.id}", flush=True)
        await run.result()  # never returns: the process is killed first
    raise SystemExit("child: the crash never happened")


async def parent(db: Path, ledger: Path) -> None:
    started = subprocess.run(
        [sys.executable, __file__, "--child", str(db), str(ledger)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(started.stdout.strip())
    if started.returncode != -signal.SIGKILL:
        raise SystemExit(f"the child was expected to die by SIGKILL:\n{started.stderr}")
    print(f"child process killed by SIGKILL (exit status {started.returncode})")
    print(f"ledger after the crash: {len(ledger.read_text().splitlines())} refund(s)")

    # A new process opens the same file: open() resumes unfinished runs. Submitting the same
    # (session_id, request_id) again returns the original run instead of starting a new one.
    async with await build_app(ledger).open(stead.SqliteStore(db)) as runtime:
        run = await submit(runtime)
        outcome = await run.result()
        snapshot = await run.snapshot()
    print(f"resumed {run.id}: {outcome.output}")
    for op in snapshot.operations:
        print(f"  {op.key:<14} {op.recovery:<10} attempts={op.attempts}")
    refunds = ledger.read_text().splitlines()
    print(f"ledger after the resume: {len(refunds)} refund(s): {refunds[0]}")
    if len(refunds) != 1:
        raise SystemExit("the refund ran more than once")
    print("the refund ran exactly once")


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        workdir = example_dir()
        asyncio.run(parent(workdir / "crash_and_resume.db", workdir / "payments.jsonl"))
