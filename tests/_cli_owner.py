"""A runtime that owns a database in a child process, for the CLI's process tests.

``python tests/_cli_owner.py MODE DB LEDGER``:

* ``approval`` submits a run whose refund tool needs approval and reports it once it waits;
* ``attention`` submits a run whose ``manual`` ship tool blocks, closes the runtime mid-call
  (the intent stays without a result), reopens it and reports the run once it needs attention;
* ``resume`` opens the database and reports the first run, to continue whatever was left.

Each prints one JSON line ``{"ready": ...}`` and keeps owning the database until its run ends
(then prints ``{"done": status}`` and exits), or exits on its own after ``DEADLINE`` seconds.
The refund tool appends its operation id to LEDGER: the outside world, to count effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable

import stead
from stead.testing import ScriptedModel

DEADLINE = 60.0
STARTED = time.monotonic()


def build_app(ledger: str, shipping: asyncio.Event | None = None) -> stead.App:
    @stead.tool(recovery="idempotent", approval=True)
    async def refund(order_id: str, amount: int, ctx: stead.ToolContext) -> str:
        """Refund an order."""
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(ctx.operation_id + "\n")
        return f"refunded {amount}"

    @stead.tool(recovery="manual")
    async def ship(order_id: str) -> str:
        """Ship an order (blocks until the runtime closes)."""
        if shipping is not None:
            shipping.set()
        await asyncio.Event().wait()
        return "shipped"

    support = stead.Agent(
        id="support",
        version="1",
        model=ScriptedModel(
            [
                [stead.ToolCall(name="refund", arguments={"order_id": "1", "amount": 10}, id="c1")],
                "Refunded 10 for order 1.",
            ]
        ),
        tools=[refund],
    )
    shipper = stead.Agent(
        id="shipper",
        version="1",
        model=ScriptedModel(
            [[stead.ToolCall(name="ship", arguments={"order_id": "7"}, id="s1")], "Shipped."]
        ),
        tools=[ship],
    )
    return stead.App(agents=[support, shipper])


def say(**data: object) -> None:
    print(json.dumps(data), flush=True)


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(1000):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise SystemExit(f"gave up waiting for {what}")


async def serve(runtime: stead.Runtime, run: stead.RunHandle) -> None:
    """Own the database until the run ends, or the deadline."""
    remaining = DEADLINE - (time.monotonic() - STARTED)
    with contextlib.suppress(stead.RunFailed, stead.RunCancelled, TimeoutError):
        await run.result(timeout=max(remaining, 0.1))
    say(done=(await run.status()).value)


async def main(mode: str, db: str, ledger: str) -> None:
    if mode == "approval":
        app = build_app(ledger)
        async with await app.open(stead.SqliteStore(db)) as runtime:
            run = await runtime.submit("support", session_id="s", request_id="r", prompt="go")

            async def waiting() -> bool:
                return await run.status() is stead.RunStatus.WAITING

            await until(waiting, "the approval")
            (pending,) = await runtime.list_interactions(run_id=run.id)
            say(ready=True, run_id=run.id, interaction_id=pending.interaction_id)
            await serve(runtime, run)
    elif mode == "attention":
        shipping = asyncio.Event()
        app = build_app(ledger, shipping)
        async with await app.open(stead.SqliteStore(db)) as runtime:
            run = await runtime.submit("shipper", session_id="t", request_id="r", prompt="go")
            await asyncio.wait_for(shipping.wait(), 10)
        # closing interrupted ship mid-call: on reopen the run needs attention
        async with await build_app(ledger).open(stead.SqliteStore(db)) as runtime:
            run = runtime.get_run(run.id)

            async def attention() -> bool:
                return await run.status() is stead.RunStatus.NEEDS_ATTENTION

            await until(attention, "needs_attention")
            say(ready=True, run_id=run.id, attention_key=(await run.run()).attention_key)
            await serve(runtime, run)
    elif mode == "resume":
        async with await build_app(ledger).open(stead.SqliteStore(db)) as runtime:
            page = await runtime.list_runs(limit=1)
            run = runtime.get_run(page.runs[0].id)
            say(ready=True, run_id=run.id)
            await serve(runtime, run)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
