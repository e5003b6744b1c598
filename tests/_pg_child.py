"""A worker on PostgreSQL in a child process, killed by the test while a manual tool runs.

    python tests/_pg_child.py URL SCHEMA

Prints ``{"started": key}`` once the tool's intent is committed and the tool is running, then
waits forever inside the tool.
"""

from __future__ import annotations

import asyncio
import json
import sys

import stead
from stead.store.postgres import PostgresStore
from stead.testing import ScriptedModel

#: The lease of the child's claims (seconds): another worker takes its run over this long after
#: it died.
LEASE = 1.0


def build_app() -> stead.App:
    @stead.tool(recovery="manual")
    async def wire(amount: int, ctx: stead.ToolContext) -> str:
        """Wire money."""
        print(json.dumps({"started": ctx.key}), flush=True)
        await asyncio.Event().wait()
        return "wired"

    model = ScriptedModel(
        [[stead.ToolCall(name="wire", arguments={"amount": 500}, id="w")], "Wired."]
    )
    return stead.App(agents=[stead.Agent(id="bank", version="1", model=model, tools=[wire])])


async def main(url: str, schema: str) -> None:
    async with await build_app().open(
        PostgresStore(url, schema=schema, lease_seconds=LEASE)
    ) as runtime:
        run = await runtime.submit("bank", session_id="s", request_id="r", prompt="wire")
        await run.result()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
