"""Schedules: a task on a cron expression, exactly one run per slot, catch-up after downtime.

``stead.Schedule("morning-report", cron="0 9 * * MON-FRI", timezone="Europe/Lisbon", ...)``
submits the task at 09:00 Lisbon time on weekdays. Each slot's run has the slot as its request
id, so however many restarts (or PostgreSQL workers) race on a slot, it runs once. Slots missed
while nothing ran follow ``catch_up``: "latest" runs the most recent one, "all" each of them,
"skip" none.

To show a week in a second, this example drives the runtime with ``stead.testing.FakeClock``;
in production leave the store's clock alone.

Run it:  .venv/bin/python examples/schedules.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import stead
from stead.testing import FakeClock


@stead.task(name="report")
async def report(ctx: stead.TaskContext, region: str) -> str:
    return f"sales report for {region}, made {ctx.now():%a %H:%M} UTC"


app = stead.App(
    tasks=[report],
    schedules=[
        stead.Schedule(
            "morning-report",
            cron="0 9 * * MON-FRI",
            task="report",
            input="EMEA",
            timezone="Europe/Lisbon",
            catch_up="latest",
        )
    ],
)


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def reports(runtime: stead.Runtime, count: int) -> list[str]:
    """The schedule's runs, oldest first, once there are ``count``: each one's slot (its
    request id) and output."""
    while True:
        runs = (await runtime.list_runs(session_id="schedule:morning-report")).runs
        if len(runs) >= count:
            return [
                f"{r.request_id} -> {(await runtime.get_run(r.id).result()).output}"
                for r in reversed(runs)
            ]
        await asyncio.sleep(0.02)


async def main() -> None:
    db = example_dir() / "schedules.db"
    clock = FakeClock(datetime(2026, 11, 30, 7, 0, tzinfo=UTC))  # Monday 07:00 in Lisbon
    async with await app.open(stead.SqliteStore(db, clock=clock)) as runtime:
        clock.advance(hours=2)  # Monday 09:00
        print("monday:", (await reports(runtime, 1))[-1])
    # The service is down from Monday until Thursday noon: Tuesday's, Wednesday's and
    # Thursday's slots pass with nothing running.
    clock.advance(days=3, hours=3)
    async with await app.open(stead.SqliteStore(db, clock=clock)) as runtime:
        found = await reports(runtime, 2)
        print("after the downtime:", found[-1])
        await asyncio.sleep(0.2)
        total = len((await runtime.list_runs(session_id="schedule:morning-report")).runs)
        print(f"runs in all: {total} (catch_up='latest' ran only the most recent missed slot)")


if __name__ == "__main__":
    asyncio.run(main())
