"""How much CPU an idle runtime uses: an open store, an empty inbox, nothing to run.

An owner notices commands other processes post with a diskless check of the file every 200 ms
(``PRAGMA data_version``); this prints what that costs, as CPU seconds per idle minute, and
what a command posted from another process waits before it is applied.

    python benchmarks/idle_cpu.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import stead
from stead.testing import ScriptedModel

_CLIENT = """
import asyncio, sys, time
import stead

async def main() -> None:
    async with stead.Client(stead.SqliteStore(sys.argv[1])) as client:
        (pending,) = await client.list_interactions()
        started = time.perf_counter()
        await client.respond(pending.interaction_id, stead.Approve())
        print(f"{time.perf_counter() - started:.3f}")

asyncio.run(main())
"""


async def main(seconds: float, folder: Path) -> None:
    @stead.tool(recovery="safe", approval=True)
    def gated() -> str:
        """Needs a person."""
        return "ok"

    model = ScriptedModel([[stead.ToolCall(name="gated", id="c1")], "done"])
    agent = stead.Agent(id="a", version="1", model=model, tools=[gated])
    db = folder / "idle.db"
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        while (await run.status()) is not stead.RunStatus.WAITING:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        reply = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _CLIENT, str(db)],
            capture_output=True,
            text=True,
            check=True,
        )
        await run.result(timeout=10)
    per_minute = cpu / wall * 60
    print(f"idle runtime, one run waiting for a person, empty inbox, {wall:.1f} s measured:")
    print(f"  CPU: {per_minute:.3f} s per idle minute ({cpu / wall:.2%} of one core)")
    print(f"  a command from another process was applied in {reply.stdout.strip()} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to measure")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database")
    args = parser.parse_args()
    if not args.seconds > 0:
        parser.error(f"--seconds must be a number above 0, got {args.seconds}")
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        asyncio.run(main(args.seconds, Path(folder)))
