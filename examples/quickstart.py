"""Quickstart: an agent with a ``safe`` and an ``idempotent`` tool.

Submits one run, prints its events as they are committed, then prints the outcome.
Offline (a scripted model), no API key needed.

Run it:  .venv/bin/python examples/quickstart.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel


@stead.tool(recovery="safe")  # only reads: running it again after a crash is harmless
async def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order."""
    return {"order_id": order_id, "item": "teapot", "total": 49.0}


@stead.tool(recovery="idempotent")  # the payments API deduplicates on ctx.operation_id
async def refund(order_id: str, amount: float, ctx: stead.ToolContext) -> str:
    """Refund an order."""
    return f"refunded {amount:.2f} for order {order_id} (idempotency key {ctx.operation_id})"


# The model's turns, scripted: look the order up, refund it, answer.
model = ScriptedModel(
    [
        [stead.ToolCall(name="lookup_order", arguments={"order_id": "17"})],
        [stead.ToolCall(name="refund", arguments={"order_id": "17", "amount": 49.0})],
        "Refunded 49.00 for your teapot.",
    ]
)
support = stead.Agent(
    id="support",
    version="1",
    model=model,
    instructions="You are a support agent. Look orders up before refunding.",
    tools=[lookup_order, refund],
)


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "quickstart.db"
    app = stead.App(agents=[support])
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit(
            "support", session_id="customer-42", request_id="msg-1", prompt="Refund order 17"
        )
        async for event in run.events():  # persisted events, then live ones; ends at the end
            detail = event.data.get("key") or event.data.get("status") or ""
            print(f"  {event.sequence:>3} {event.kind:<16} {detail}")
        outcome = await run.result()
    print(f"outcome: {outcome.output}")
    print(f"usage: {outcome.usage.requests} model requests; journal in {db}")


if __name__ == "__main__":
    asyncio.run(main())
