"""The demo's support agent, run as a child process so the demo can SIGKILL it.

``python -m stead.cli._demo_app DB LEDGER`` opens DB, submits (or, after a crash, finds again)
the demo request, prints each event as a JSON line, and prints the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import stead
from stead.testing import ScriptedModel

SESSION, REQUEST = "customer-42:chat-1", "msg-1"
PROMPT = "My order 17 arrived broken. Please refund it."


def build_app(ledger: str, model: stead.Model | str | None = None) -> stead.App:
    """The demo's support agent. ``model`` defaults to ``$STEAD_MODEL`` (for example
    ``openai:gpt-4.1-mini``, or ``openai-compatible:llama3.1@http://localhost:11434/v1`` for a
    local Ollama), else the offline scripted model."""

    @stead.tool(recovery="safe")
    async def lookup_order(order_id: str) -> dict[str, object]:
        """Look up an order by id."""
        await asyncio.sleep(0.3)
        return {"order_id": order_id, "item": "teapot", "total": 49.0, "status": "delivered"}

    @stead.tool(recovery="idempotent")
    async def refund(order_id: str, amount: float, ctx: stead.ToolContext) -> dict[str, object]:
        """Refund an order through the payment provider (deduplicates on the idempotency key)."""
        await asyncio.sleep(0.3)
        # The outside world: a payments API that keeps one payment per idempotency key.
        seen = ""
        if os.path.exists(ledger):
            with open(ledger, encoding="utf-8") as f:
                seen = f.read()
        if ctx.operation_id not in seen:
            with open(ledger, "a", encoding="utf-8") as f:
                line = {"order_id": order_id, "amount": amount, "idempotency_key": ctx.operation_id}
                f.write(json.dumps(line) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return {"refund_id": f"re_{order_id}", "amount": amount}

    async def slow(request: stead.ModelRequest) -> stead.ModelResponse:
        await asyncio.sleep(0.4)  # a model takes its time
        return await scripted.complete(request)

    scripted = ScriptedModel(
        [
            [stead.ToolCall(name="lookup_order", arguments={"order_id": "17"}, id="call_lookup")],
            [
                stead.ToolCall(
                    name="refund", arguments={"order_id": "17", "amount": 49.0}, id="call_refund"
                )
            ],
            "I've refunded the 49.00 for your broken teapot (order 17); it reaches your card in "
            "3-5 days.",
        ]
    )
    chosen = (
        model
        or os.environ.get("STEAD_MODEL")
        or stead.testing.FunctionModel(slow, model_id="stead:demo-scripted")
    )
    agent = stead.Agent(
        id="support",
        version="1",
        model=chosen,
        instructions="You are a support agent. Look orders up before refunding.",
        tools=[lookup_order, refund],
        max_turns=8,
    )
    return stead.App(agents=[agent])


async def main(db: str, ledger: str) -> None:
    app = build_app(ledger)
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("support", session_id=SESSION, request_id=REQUEST, prompt=PROMPT)
        print(json.dumps({"run_id": run.id}), flush=True)
        async for event in run.events():
            print(
                json.dumps({"sequence": event.sequence, "kind": event.kind, "data": event.data}),
                flush=True,
            )
        outcome = await run.result()
        print(json.dumps({"output": outcome.output}), flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    except stead.SteadError as exc:  # the parent shows it as one line
        print(json.dumps({"error": str(exc)}), flush=True)
        sys.exit(1)
