"""A graph of agents: two researchers in parallel, a writer after both, a critic task last.

A graph is data — nodes and their dependencies — submitted as one run. Everything is checked
before anything is written (ids, unknown dependencies, cycles, registered agents and tasks). A
node starts once its prerequisites completed and receives their outputs as JSON keyed by node
id. If a node fails, its dependents wait while independent branches go on; ``retry()`` the
failed node's run and the graph continues from there.

Run it:  .venv/bin/python examples/graph.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import stead
from stead.testing import FunctionModel, ScriptedModel

flaky = {"failures_left": 1}  # the critic fails once, as a flaky service would


def writer_reply(request: stead.ModelRequest) -> str:
    prompt = request.messages[-1].content
    return f"Draft built on {prompt.count('Lisbon')} facts about Lisbon."


@stead.task(name="critic")
async def critic(ctx: stead.TaskContext, data: dict[str, Any]) -> dict[str, Any]:
    if flaky["failures_left"]:
        flaky["failures_left"] -= 1
        raise ConnectionError("the review service timed out")
    draft = data["upstream"]["write"]
    return {"verdict": "approved", "style": data["input"]["style"], "draft": draft}


agents = [
    stead.Agent(
        id="historian", version="1", model=ScriptedModel(["Lisbon was rebuilt after 1755."])
    ),
    stead.Agent(id="guide", version="1", model=ScriptedModel(["Lisbon has seven hills."])),
    stead.Agent(id="writer", version="1", model=FunctionModel(writer_reply)),
]
app = stead.App(agents=agents, tasks=[critic])

nodes = [
    stead.GraphNode(id="history", agent_id="historian", prompt="One fact about Lisbon's past."),
    stead.GraphNode(id="sights", agent_id="guide", prompt="One fact about Lisbon's sights."),
    stead.GraphNode(
        id="write", agent_id="writer", prompt="Write a paragraph.", depends_on=["history", "sights"]
    ),
    stead.GraphNode(id="review", task="critic", input={"style": "short"}, depends_on=["write"]),
]


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "graph.db"
    async with await app.open(stead.SqliteStore(db)) as runtime:
        try:  # checked before anything is written
            await runtime.submit_graph(
                [
                    stead.GraphNode(id="a", agent_id="writer", prompt="x", depends_on=["b"]),
                    stead.GraphNode(id="b", agent_id="writer", prompt="y", depends_on=["a"]),
                ],
                session_id="article-7",
                request_id="bad",
            )
        except stead.ValidationError as exc:
            print(f"refused: {exc}")

        graph = await runtime.submit_graph(nodes, session_id="article-7", request_id="a1")
        failed = None
        while failed is None:  # the critic fails once: find its node run
            await asyncio.sleep(0.05)
            runs = (await runtime.list_runs(parent_id=graph.id)).runs
            failed = next((r for r in runs if r.status == "failed"), None)
        print(f"node {failed.request_id} failed: {failed.error['reason']}")
        done = sorted(r.request_id for r in runs if r.status == "completed")
        print(f"completed meanwhile: {done}")
        await runtime.retry(failed.id)  # the graph goes on from there
        outcome = await graph.result()

    for node_id, output in outcome.output.items():
        print(f"{node_id}: {output}")


if __name__ == "__main__":
    asyncio.run(main())
