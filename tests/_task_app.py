"""A small App of tasks for the CLI's task tests, and a runtime that owns a database with it.

``triage`` fetches a ticket (a step), waits for the ``manager`` signal, has the ``summarizer``
agent summarize it and the ``critic`` task (which runs the summarizer too) review it: a run
with a child agent, and a child task with a child of its own. ``python tests/_task_app.py DB``
opens DB with the app, prints one JSON line ``{"ready": true}`` and keeps owning it (running
whatever is submitted) until it is killed or ``DEADLINE`` seconds have passed.
"""

from __future__ import annotations

import asyncio
import json
import sys

import stead
from stead.testing import ScriptedModel

DEADLINE = 60.0

summarizer = stead.Agent(
    id="summarizer", version="1", model=ScriptedModel(["A short summary."]), instructions="Sum up."
)


def _fetch(ticket: str) -> dict[str, str]:
    return {"ticket": ticket, "body": f"the body of {ticket}"}


@stead.task(name="critic", version=1)
async def critic(ctx: stead.TaskContext, text: str) -> dict[str, object]:
    review = await ctx.run_agent("summarizer", f"Review: {text}")
    return {"review": review.output, "length": len(text)}


@stead.task(name="triage", version=1)
async def triage(ctx: stead.TaskContext, ticket: str) -> dict[str, object]:
    fetched = await ctx.step("fetch", _fetch, ticket)
    decision = await ctx.wait_for_signal("manager")
    summary = await ctx.run_agent("summarizer", fetched["body"])
    reviewed = await ctx.run_task("critic", summary.output)
    return {"decision": decision, "summary": summary.output, "critic": reviewed.output}


@stead.task(name="echo", version=1)
async def echo(ctx: stead.TaskContext, value: object) -> object:
    return await ctx.step("echo", lambda: value)


def graph_nodes() -> list[stead.GraphNode]:
    """A graph: ``draft`` (an agent), then ``check`` (a task) on its output."""
    return [
        stead.GraphNode(id="draft", agent_id="summarizer", prompt="Draft a reply."),
        stead.GraphNode(id="check", task="echo", input="checked", depends_on=["draft"]),
    ]


def waiting_graph_nodes() -> list[stead.GraphNode]:
    """A graph that stays waiting: ``wait`` (a triage) waits for its signal, so ``then`` never
    starts."""
    return [
        stead.GraphNode(id="wait", task="triage", input="T-9"),
        stead.GraphNode(id="then", task="echo", input=1, depends_on=["wait"]),
    ]


app = stead.App(agents=[summarizer], tasks=[triage, critic, echo])


async def own(db: str) -> None:
    async with await app.open(stead.SqliteStore(db)):
        print(json.dumps({"ready": True}), flush=True)
        await asyncio.sleep(DEADLINE)


if __name__ == "__main__":
    asyncio.run(own(sys.argv[1]))
