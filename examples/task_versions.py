"""Task versions: a deploy that drops version 1 while its runs still wait, and ``migrate``.

A run is pinned to the task version it was submitted with. Here version 1 charges an order
and waits for the warehouse to say it shipped; while it waits, a deploy replaces it with
version 2, which takes a structured input. Version 2 declares ``migrate``: the waiting run is
carried over (re-pinned to version 2 with the input ``migrate`` returns), replays its journal
under the new code — the charge is committed, so it is not made again — and finishes there.

Run it:  .venv/bin/python examples/task_versions.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import stead

charges: list[str] = []  # stands in for the payment provider's records


async def charge(order: str, operation_id: str) -> str:
    """An idempotent effect: the provider dedups on operation_id."""
    charges.append(order)
    return f"receipt-{order}"


@stead.task(name="fulfil", version=1)
async def fulfil_v1(ctx: stead.TaskContext, order: str) -> str:
    receipt = await ctx.effect("charge", charge, order, recovery="idempotent")
    await ctx.wait_for_signal("shipped")
    return f"{order}: {receipt}, shipped"


class Order(BaseModel):
    order: str
    gift_wrap: bool = False


def from_v1(version: str, input: Any) -> dict[str, Any]:
    """Version 1 took the order id alone."""
    return {"order": input, "gift_wrap": False}


@stead.task(name="fulfil", version=2, migrate=from_v1)
async def fulfil_v2(ctx: stead.TaskContext, order: Order) -> str:
    receipt = await ctx.effect("charge", charge, order.order, recovery="idempotent")
    await ctx.wait_for_signal("shipped")
    wrapped = " (gift-wrapped)" if order.gift_wrap else ""
    return f"{order.order}: {receipt}, shipped{wrapped}"


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "versions.db"
    async with await stead.App(tasks=[fulfil_v1]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit_task("fulfil", "A-1", session_id="orders", request_id="A-1")
        while (await run.status()) != "waiting":
            await asyncio.sleep(0.02)
        print(f"version 1: charged {charges}, waiting for the warehouse")

    # The deploy: only version 2 is registered now.
    async with await stead.App(tasks=[fulfil_v2]).open(stead.SqliteStore(db)) as runtime:
        handle = runtime.get_run(run.id)
        await handle.signal("shipped", True, request_id="warehouse-A-1")
        outcome = await handle.result(timeout=10)
        record = await handle.run()
        moved = [
            event.data["migrated_from"]
            async for event in handle.events()  # ends after the run's terminal event
            if event.kind == "status" and event.data.get("migrated_from")
        ]
    print(f"the run is on version {record.version} now (migrated from version {moved[0]})")
    print(f"its input: {record.input['input']}")
    print(f"outcome: {outcome.output}")
    print(f"charges made: {len(charges)}")


if __name__ == "__main__":
    asyncio.run(main())
