"""``stead.run_agent``: the one-call form for scripts."""

from __future__ import annotations

from .agent.agent import Agent
from .app import App
from .handle import RunOutcome
from .runtime.runtime import Runtime
from .journal.protocol import OwnedStore

__all__ = ["run_agent"]


async def run_agent(
    agent: Agent,
    prompt: str,
    *,
    store: OwnedStore,
    run_id: str,
    session_id: str | None = None,
) -> RunOutcome:
    """Run ``agent`` on ``prompt`` durably and return its outcome.

    ``run_id`` names the run: calling again with the same ``run_id`` (after a crash, say)
    resumes that run, or returns its stored outcome, instead of starting over. The run is in
    session ``session_id`` (default: the run id).
    """
    app = App(agents=[agent])
    runtime: Runtime
    async with await app.open(store) as runtime:
        handle = await runtime.submit(
            agent.id,
            session_id=session_id or run_id,
            request_id=run_id,
            prompt=prompt,
            run_id=run_id,
        )
        return await handle.result()
