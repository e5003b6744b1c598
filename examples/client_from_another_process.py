"""A client in another process: approve a pending call without owning the database.

A child process (``sys.executable`` running this file with ``--owner``) opens the runtime, which
owns the SQLite file, and submits a run whose refund needs approval. The parent never opens an
App: it uses ``stead.Client(stead.SqliteStore(path))`` to follow the run's events, list the
approval queue, approve the call, and wait for the result. The client posts its decision to the
file's inbox; the owning runtime applies it, runs the tool and finishes the run.

Run it:  .venv/bin/python examples/client_from_another_process.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel


async def owner(db: str) -> None:
    """The child: own the store, submit the run, and keep running until it ends."""

    @stead.tool(recovery="idempotent", approval=True)
    async def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        return f"refunded {amount:.2f} on order {order_id}"

    model = ScriptedModel(
        [
            [stead.ToolCall(name="refund", arguments={"order_id": "17", "amount": 250.0})],
            "Refund approved and issued.",
        ]
    )
    agent = stead.Agent(id="support", version="1", model=model, tools=[refund])
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("support", session_id="c42", request_id="m1", prompt="Refund")
        print(run.id, flush=True)  # tell the parent which run to watch
        await run.result()
    print(f"owner (pid {os.getpid()}): run finished, runtime closed", flush=True)


async def main(db: str) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--owner", db, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    run_id = (await child.stdout.readline()).decode().strip()
    print(f"owner (pid {child.pid}) submitted {run_id}")

    async with stead.Client(stead.SqliteStore(db)) as client:
        async for event in client.events(run_id):  # events committed by the other process
            if event.kind == "interaction_requested":
                break
        for item in await client.list_interactions(status="pending"):
            print(f"pending {item.kind} {item.key}: {item.tool} {item.arguments}")
            await client.respond(item.interaction_id, stead.Approve(reviewer="ana"))
            print(f"approved {item.interaction_id} from pid {os.getpid()}")
        outcome = await client.result(run_id, timeout=30)
    print(f"outcome: {outcome.output}")

    rest, _ = await child.communicate()
    print(rest.decode().strip())
    if child.returncode != 0:
        raise SystemExit(f"the owner process exited with {child.returncode}")


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--owner"]:
        asyncio.run(owner(sys.argv[2]))
    else:
        asyncio.run(main(str(example_dir() / "client.db")))
