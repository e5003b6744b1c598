"""The one-call form: ``await stead.run_agent(agent, prompt, store=..., run_id=...)``.

``run_agent`` opens the store, submits the run, waits for its outcome and closes the store.
``run_id`` names the run: calling again with the same ``run_id`` (after a crash, or simply
again) resumes that run or returns its stored outcome instead of starting over. Here the second
call returns the first call's outcome without asking the model again.

Run it:  .venv/bin/python examples/run_agent.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel

model = ScriptedModel(["Three: ask, act, answer."])
agent = stead.Agent(id="summarizer", version="1", model=model)


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "run_agent.db"
    prompt = "How many steps does an agent turn have?"
    first = await stead.run_agent(agent, prompt, store=stead.SqliteStore(db), run_id="job-1")
    print(f"first call:  {first.run_id}: {first.output}")
    again = await stead.run_agent(agent, prompt, store=stead.SqliteStore(db), run_id="job-1")
    print(f"second call: {again.run_id}: {again.output}")
    print(f"the model was called {len(model.requests)} time(s); the second call read the journal")


if __name__ == "__main__":
    asyncio.run(main())
