"""Fork: replay a finished run up to a point, then continue on a new agent version.

Version 1 of the agent looks up the weather and answers. Then version 2 is registered with new
instructions and a new model. ``runtime.fork(run_id, before="model:2")`` starts a new run that
reuses every committed operation of the original before ``model:2`` (the first model call and
the weather lookup are copied, not run again) and continues from there on version 2: a way to
debug an agent or try a new prompt from the middle of a real conversation.

Run it:  .venv/bin/python examples/fork.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel

lookups: list[str] = []


@stead.tool(recovery="safe")
def weather(city: str) -> str:
    """Today's weather in a city."""
    lookups.append(city)
    return "sunny, 31°C"


look_up = [stead.ToolCall(name="weather", arguments={"city": "Lisbon"}, id="w")]
v1 = stead.Agent(
    id="concierge",
    version="1",
    model=ScriptedModel([look_up, "Sunny in Lisbon: bring sunglasses."]),
    instructions="Answer briefly.",
    tools=[weather],
)
v2_model = ScriptedModel([look_up, "Sunny and 31°C in Lisbon: sunglasses, sunscreen, water."])
v2 = stead.Agent(
    id="concierge",
    version="2",
    model=v2_model,
    instructions="Answer briefly, and always mention sun protection.",
    tools=[weather],
)


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    app = stead.App(agents=[v1])
    async with await app.open(stead.SqliteStore(example_dir() / "fork.db")) as runtime:
        original = await runtime.submit(
            "concierge", session_id="guest-7", request_id="q1", prompt="What to pack today?"
        )
        print(f"original (v1): {(await original.result()).output}")

        app.register(v2)  # new runs, and forks, use the latest registered version
        fork = await runtime.fork(original.id, before="model:2")
        print(f"fork (v{(await fork.run()).version}):     {(await fork.result()).output}")
        snapshot = await fork.snapshot()

    for op in snapshot.operations:
        origin = f"copied from {op.copied_from}" if op.copied_from else "ran in the fork"
        print(f"  {op.key:<10} {origin}")
    print(
        f"weather was looked up {len(lookups)} time(s); v2's model was asked for turn(s) "
        f"{[request.turn for request in v2_model.requests]}"
    )


if __name__ == "__main__":
    asyncio.run(main())
