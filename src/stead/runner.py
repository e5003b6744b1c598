"""``stead.run_agent``: the one-call form for scripts."""

from __future__ import annotations

from .agent.agent import Agent
from .app import App
from .errors import RunBlocked
from .handle import RunHandle, RunOutcome
from .journal.protocol import OwnedStore
from .journal.records import RunStatus
from .runtime.runtime import Runtime

__all__ = ["run_agent"]

_BLOCKED = (RunStatus.WAITING, RunStatus.NEEDS_ATTENTION)


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

    It never hangs on a person: when the run waits for an approval or an answer, or needs
    attention, it raises :class:`~stead.RunBlocked` naming the command that continues it
    (``stead approve``, ``stead resolve``...); answer it, then call again with the same
    ``run_id``.
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
        async for event in handle.events():
            if event.kind == "status" and event.data.get("status") in _BLOCKED:
                run = await handle.run()
                if run.status in _BLOCKED:
                    raise await _blocked(runtime, handle, store)
        return await handle.result()


async def _blocked(runtime: Runtime, handle: RunHandle, store: object) -> RunBlocked:
    run = await handle.run()
    pending = await handle.interactions(status="pending")
    where = getattr(store, "cli_args", "")  # how the stead command names this store
    db = f" {where}" if isinstance(where, str) and where else ""
    if pending:
        commands = "; ".join(
            f"stead answer {i.interaction_id} VALUE{db}"
            if i.kind == "question"
            else f"stead approve {i.interaction_id}{db} (or stead deny … --reason …)"
            for i in pending
        )
        reason = (run.error or {}).get("reason") or "it waits for a person"
        next_step = f"; continue it with {commands}, then call run_agent again"
    else:
        reason = (run.error or {}).get("reason") or "it needs attention"
        key = run.attention_key
        if key is not None:
            next_step = (
                f"; continue it with stead resolve {run.id} {key} --output JSON{db} or "
                f"stead retry {run.id}{db}, then call run_agent again"
            )
        else:
            next_step = f"; continue it with stead retry {run.id}{db}, then call run_agent again"
    return RunBlocked(run.id, run.status.value, reason, pending, next_step=next_step)
