"""Retries with back-off, and a budget that asks a person before going on.

The model is rate limited twice on its first call (``stead.ModelError(retryable=True,
retry_after=30)``). Under ``stead.RetryPolicy`` the run waits in status ``retry_wait`` with
``next_attempt_at`` persisted (so the wait survives a restart), then tries again. A
``stead.testing.FakeClock`` given to the store makes the 30 s waits pass at once.

The agent also has ``stead.Budget(max_turns=3, on_breach="approve")``: before a fourth model
call, the run asks a person (an interaction of kind ``budget``) instead of failing.

Run it:  .venv/bin/python examples/retries_and_budgets.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

import stead
from stead.testing import FakeClock, FunctionModel

rate_limited = {"left": 2}  # the provider refuses the first two requests


def answer(request: stead.ModelRequest) -> str | list[stead.ToolCall]:
    """A provider that is rate limited at first, then searches three times and answers."""
    if rate_limited["left"]:
        rate_limited["left"] -= 1
        raise stead.ModelError(
            "429 Too Many Requests", status_code=429, retryable=True, retry_after=30.0
        )
    if request.turn <= 3:
        return [stead.ToolCall(name="search", arguments={"page": request.turn})]
    return "Found it on page 3."


@stead.tool(recovery="safe")
def search(page: int) -> str:
    """Search one page of the catalogue."""
    return f"page {page}: nothing yet" if page < 3 else "page 3: the blue teapot"


researcher = stead.Agent(
    id="researcher",
    version="1",
    model=FunctionModel(answer),
    tools=[search],
    model_retry=stead.RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=60.0),
    budget=stead.Budget(max_turns=3, on_breach="approve"),
)


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    clock = FakeClock()
    store = stead.SqliteStore(example_dir() / "retries.db", clock=clock)
    started = time.monotonic()
    async with await stead.App(agents=[researcher]).open(store) as runtime:
        run = await runtime.submit("researcher", session_id="s", request_id="r", prompt="Find")
        async for event in run.events():
            data = event.data
            if event.kind == "status" and data["status"] == "retry_wait":
                due = datetime.fromisoformat(data["next_attempt_at"])
                wait = (due - clock.now()).total_seconds()
                print(f"retry_wait at {data['operation']}: {data['reason']}")
                print(f"  next attempt in {wait:g}s; advancing the fake clock")
                clock.advance(wait)
            elif event.kind == "interaction_requested" and data["kind"] == "budget":
                print(f"budget reached: {data['payload']}")
                await runtime.respond(data["interaction_id"], stead.Approve(reviewer="ops"))
                print("  approved one more turn")
        outcome = await run.result()
        (model_1, *_) = (await run.snapshot()).operations
    print(f"{model_1.key} was attempted {model_1.attempts} times")
    print(f"outcome: {outcome.output} (in {time.monotonic() - started:.2f}s of real time)")


if __name__ == "__main__":
    asyncio.run(main())
