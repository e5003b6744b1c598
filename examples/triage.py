"""A durable workflow: triage a ticket with an agent, wait for a manager's signal, charge a card,
wait, follow up.

``triage`` is a task: plain ``async def`` code over durable operations. Each ``ctx.`` call is
journaled under a key (``fetch``, ``agent:summarizer``, ``signal:manager``, ``charge``,
``sleep``, ``follow_up``); a crash or a redeploy anywhere replays the journal and continues —
the ticket is not fetched again, the agent not asked again, the card never charged twice. While
it waits for the manager (days, in real life) and while it sleeps, the run is ``waiting``: it
holds no slot and nothing in memory, and wakes when the signal comes or the time is up.

Run it:  .venv/bin/python examples/triage.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

import stead
from stead.testing import ScriptedModel

charges: list[str] = []  # the payment provider's books: one line per charge it made


class Ticket(BaseModel):
    id: int
    customer: str


class Report(BaseModel):
    ticket: int
    summary: str
    receipt: str
    approved_by: str


def fetch_ticket(ticket_id: int) -> str:
    return f"Ticket {ticket_id}: the teapot arrived broken; the customer asks for 100 EUR back."


async def charge_card(customer: str, amount: int, operation_id: str) -> str:
    """Credit the customer. The provider deduplicates by ``operation_id``, so running this
    again after a crash (recovery "idempotent") cannot pay twice."""
    if operation_id not in charges:
        charges.append(operation_id)
    return f"credit of {amount} EUR to {customer} ({operation_id})"


def send_follow_up(customer: str) -> str:
    return f"follow-up sent to {customer}"


@stead.task(name="triage", version=1)
async def triage(ctx: stead.TaskContext, ticket: Ticket) -> Report:
    text = await ctx.step("fetch", fetch_ticket, ticket.id)
    summary = await ctx.run_agent("summarizer", prompt=text)
    ctx.emit("progress", {"stage": "summarized"})
    decision = await ctx.wait_for_signal("manager", timeout=timedelta(days=2))
    if not decision.get("approve"):
        return Report(ticket=ticket.id, summary=summary.output, receipt="", approved_by="")
    receipt = await ctx.effect("charge", charge_card, ticket.customer, 100, recovery="idempotent")
    await ctx.sleep(timedelta(seconds=1))  # a day, in real life
    await ctx.step("follow_up", send_follow_up, ticket.customer)
    return Report(
        ticket=ticket.id, summary=summary.output, receipt=receipt, approved_by=decision["by"]
    )


summarizer = stead.Agent(
    id="summarizer",
    version="1",
    model=ScriptedModel(["Broken teapot on arrival; refund of 100 EUR requested."]),
    instructions="Summarize the ticket in one sentence.",
)
app = stead.App(agents=[summarizer], tasks=[triage])


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "triage.db"
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit_task(
            "triage", Ticket(id=42, customer="ana"), session_id="ticket-42", request_id="t1"
        )
        async for event in run.events():
            if event.kind == "child_completed":
                print(f"child {event.data['key']}: {event.data['status']}")
            elif event.kind == "custom":
                print(f"progress: {event.data['value']}")
            elif event.kind == "status" and event.data["status"] == "waiting":
                print(f"waiting: {event.data['reason']}")
                if "manager" in event.data["reason"]:
                    # The manager answers, from this process or any other (a stead.Client, the
                    # CLI's `stead signal`). The same request id again is a no-op.
                    await run.signal("manager", {"approve": True, "by": "rui"}, request_id="m-1")
            elif event.kind in ("timer_set", "timer_fired", "effect_completed"):
                print(f"{event.kind}: {event.data['key']}")
        outcome = await run.result()

    report = Report.model_validate(outcome.output)
    print(f"summary: {report.summary}")
    print(f"receipt: {report.receipt.split(' (')[0]}, approved by {report.approved_by}")
    print(f"the provider's books: {len(charges)} charge(s)")


if __name__ == "__main__":
    asyncio.run(main())
