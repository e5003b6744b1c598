"""People in the loop: approvals and questions.

The agent asks the user which orders to refund (``stead.ask_user``), then refunds two orders
and closes an account. ``refund`` needs approval only above 100 (a predicate);
``close_account`` always does (``approval=True``). The run waits (status ``waiting``) while
people decide; ``list_interactions()`` is the queue, and ``respond()`` records each decision
once: ``stead.Answer`` for the question, ``stead.Approve`` / ``stead.Deny`` for the gated calls.
A denied call is never run: the model receives the denial as the tool's result.

Run it:  .venv/bin/python examples/approvals.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel

done: list[str] = []  # what the tools actually did


@stead.tool(recovery="idempotent", approval=lambda args: args["amount"] > 100)
async def refund(order_id: str, amount: float, ctx: stead.ToolContext) -> str:
    """Refund an order (amounts over 100 need a person's approval)."""
    done.append(f"refund {order_id} {amount:.2f}")
    return f"refunded {amount:.2f} on order {order_id}"


@stead.tool(recovery="manual", approval=True)
async def close_account(customer_id: str) -> str:
    """Close a customer's account (always needs a person's approval)."""
    done.append(f"close {customer_id}")
    return f"closed {customer_id}"


model = ScriptedModel(
    [
        [stead.ToolCall(name="ask_user", arguments={"question": "Which orders?"}, id="ask")],
        [
            stead.ToolCall(name="refund", arguments={"order_id": "17", "amount": 20.0}, id="r17"),
            stead.ToolCall(name="refund", arguments={"order_id": "18", "amount": 500.0}, id="r18"),
            stead.ToolCall(name="close_account", arguments={"customer_id": "c42"}, id="close"),
        ],
        "Both orders are refunded; the account stays open.",
    ]
)
support = stead.Agent(
    id="support", version="1", model=model, tools=[refund, close_account, stead.ask_user]
)


async def until_waiting(run: stead.RunHandle, after: int) -> int:
    """Follow the run's events after ``after`` until it waits for a person; returns the
    sequence of that event, to continue from."""
    async for event in run.events(after=after):
        if event.kind == "status" and event.data["status"] == "waiting":
            return event.sequence
    raise RuntimeError(f"run {run.id} ended without waiting for anyone")


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "approvals.db"
    async with await stead.App(agents=[support]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("support", session_id="c42", request_id="m1", prompt="Help")

        # 1. The model asked the user a question: answer it.
        cursor = await until_waiting(run, after=0)
        (question,) = await runtime.list_interactions()
        print(f"question {question.key}: {question.payload['question']}")
        await runtime.respond(question.interaction_id, stead.Answer(value="orders 17 and 18"))

        # 2. The small refund ran at once; the large one and the account closure wait.
        await until_waiting(run, after=cursor)
        print(f"done before any approval: {done}")
        pending = {item.tool: item for item in await runtime.list_interactions()}
        for item in pending.values():
            print(f"approval {item.key}: {item.tool} {item.arguments}")
        await runtime.respond(pending["refund"].interaction_id, stead.Approve(reviewer="ana"))
        await runtime.respond(
            pending["close_account"].interaction_id,
            stead.Deny(reason="closing accounts needs a phone call", reviewer="ana"),
        )
        outcome = await run.result()

    print(f"done in the end: {done}")
    for message in model.requests[-1].messages:  # what the model saw for each call
        if isinstance(message, stead.ToolResultMessage):
            print(f"  {message.call_id}: {message.content}")
    print(f"outcome: {outcome.output}")


if __name__ == "__main__":
    asyncio.run(main())
