"""Recovery at scale and storage: what a store full of unfinished runs costs to reopen, what a
waiting run holds in memory, and how many bytes a conversation takes against its content.

    python benchmarks/scale.py [--runs 10000] [--turns 100] [--dir PATH]

Rows:
* open: reopening a store holding ``--runs`` unfinished runs (half ``waiting`` on an approval,
  half ``pending``) until the runtime is ready, and until the first runnable one executes.
* waiting run: Python memory a runtime holds per run that waits for a person (``tracemalloc``,
  over 1,000 such runs).
* storage: database bytes of a ``--turns``-turn conversation with 1 KB tool results, divided by
  its unique content (the arguments and results, once each).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
import tracemalloc
from pathlib import Path

from rich.console import Console
from rich.table import Table

import stead
from stead.testing import FunctionModel, ScriptedModel, Turn

TARGETS = {"open": 20.0, "first": 100.0, "waiting": 2048.0, "storage": 2.5}


def _gated_app(started: asyncio.Event | None = None) -> stead.App:
    @stead.tool(recovery="safe", approval=True)
    def gated() -> str:
        """Needs a person."""
        return "ok"

    def answer(request: stead.ModelRequest) -> Turn:
        if started is not None:
            started.set()
        if request.turn == 1 and request.messages[-1].content == "wait":  # type: ignore[union-attr]
            return [stead.ToolCall(name="gated", id="c1")]
        return "done"

    agent = stead.Agent(id="a", version="1", model=FunctionModel(answer), tools=[gated])
    return stead.App(agents=[agent])


async def _fill(db: Path, runs: int) -> None:
    """``runs`` unfinished runs: half wait for a person, half are pending (not yet started)."""
    app = _gated_app()
    async with await app.open(stead.SqliteStore(db), resume=False) as runtime:
        for i in range(runs):
            prompt = "wait" if i % 2 == 0 else "go"
            await runtime.submit("a", session_id=f"s{i}", request_id="r", prompt=prompt)
    conn = sqlite3.connect(db)
    # Waiting runs are made by hand, in one go: the real ones would take minutes to create.
    conn.execute("UPDATE stead_runs SET status = 'waiting' WHERE number % 2 = 1")
    conn.commit()
    conn.close()


async def open_figures(folder: Path, runs: int) -> tuple[float, float]:
    db = folder / "scale.db"
    await _fill(db, runs)
    started = asyncio.Event()
    app = _gated_app(started)
    t0 = time.perf_counter()
    runtime = await app.open(stead.SqliteStore(db), max_concurrent_runs=4)
    ready = time.perf_counter() - t0
    await started.wait()
    first = time.perf_counter() - t0
    await runtime.close()
    return ready * 1000, first * 1000


async def waiting_bytes(folder: Path, runs: int = 1000) -> float:
    db = folder / "waiting.db"
    app = _gated_app()
    async with await app.open(stead.SqliteStore(db), max_concurrent_runs=50) as runtime:
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        handles = [
            await runtime.submit("a", session_id=f"w{i}", request_id="r", prompt="wait")
            for i in range(runs)
        ]
        for handle in handles:
            while (await handle.status()) is not stead.RunStatus.WAITING:
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.2)
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        del handles
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return grown / runs


async def storage_ratio(folder: Path, turns: int) -> tuple[int, int]:
    @stead.tool(recovery="safe")
    def note(text: str) -> str:
        """Store a note."""
        return text.upper()

    content = 0
    script: list[Turn] = []
    for i in range(turns):
        text = f"turn {i:04d} " + ("lorem ipsum dolor sit amet " * 40)[:1000]
        content += len(text) + len(text.upper())
        script.append([stead.ToolCall(name="note", arguments={"text": text}, id=f"n{i}")])
    script.append("done")
    agent = stead.Agent(
        id="a", version="1", max_turns=turns + 1, model=ScriptedModel(script), tools=[note]
    )
    db = folder / "storage.db"
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        await run.result()
    conn = sqlite3.connect(db)
    conn.execute("VACUUM")
    size = (
        conn.execute("PRAGMA page_count").fetchone()[0]
        * conn.execute("PRAGMA page_size").fetchone()[0]
    )
    conn.close()
    return size, content


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="unfinished runs to reopen")
    parser.add_argument("--turns", type=int, default=100, help="turns of the stored conversation")
    parser.add_argument("--dir", default=None, help="folder for the databases (not tmpfs)")
    args = parser.parse_args()
    if args.runs < 2:  # half of them wait for a person, the others are runnable
        parser.error(f"--runs must be at least 2, got {args.runs}")
    if args.turns < 1:
        parser.error(f"--turns must be at least 1, got {args.turns}")
    console = Console(width=max(Console().width, 110))
    with tempfile.TemporaryDirectory(dir=args.dir or os.getcwd()) as tmp:
        folder = Path(tmp)
        ready, first = await open_figures(folder, args.runs)
        per_waiting = await waiting_bytes(folder)
        size, content = await storage_ratio(folder, args.turns)
    table = Table("figure", "value", "target", "")
    rows = [
        (f"open a store of {args.runs:,} unfinished runs (ms)", ready, TARGETS["open"]),
        ("… until the first runnable one executes (ms)", first, TARGETS["first"]),
        ("Python bytes held per waiting run", per_waiting, TARGETS["waiting"]),
        (
            f"database bytes ÷ unique content, {args.turns}-turn conversation",
            size / content,
            TARGETS["storage"],
        ),
    ]
    for name, value, target in rows:
        verdict = "PASS" if value <= target else "MISS"
        table.add_row(name, f"{value:,.2f}", f"≤ {target:,g}", verdict)
    console.print(table)
    console.print(f"[dim]{size:,} database bytes for {content:,} bytes of content[/]")


if __name__ == "__main__":
    asyncio.run(main())
