"""The headline figures of a durable step, in one process run, each against its target.

    python benchmarks/summary.py [--runs 10] [--dir PATH]

Every stead figure is a ratio to the *Python floor* measured in the same run: the same journal
work written by hand with no engine (one journal row per step, ``json.dumps``, ``sqlite3`` in WAL
with ``synchronous=NORMAL``, the WAL fdatasync'd only at the barriers: the submission, the run's
end, and around each ``manual`` tool). The tool is a plain synchronous function, as most tools
are written; the ``blocking=False`` rows declare that it never waits, so it runs on the event
loop. The peers (DBOS, LangGraph) run the same 10-tool-call loop side by side (see peers.py).
Targets are printed as PASS/MISS, never asserted: a slow disk reports a MISS, not a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))

import peers
import scale
import step_overhead

TURNS = 100  # tool calls of the long sequential runs
SHORT = 10  # tool calls of the short runs (21 steps, as in peers.py)


def _row(table: Table, figure: str, value: float, unit: str, target: str, ok: bool) -> None:
    table.add_row(figure, f"{value:,.2f}{unit}", target, "PASS" if ok else "MISS")


async def stead_figures(folder: Path, runs: int, table: Table) -> None:
    floor = statistics.median(
        [step_overhead.python_floor_ms(folder, TURNS, "safe") for _ in range(5)]
    )
    floor_manual = statistics.median(
        [step_overhead.python_floor_ms(folder, TURNS // 2, "manual") for _ in range(5)]
    )
    floor_short = step_overhead.python_floor_runs_ms(folder, SHORT, runs)
    table.add_row("Python floor: 100-turn run, safe tools", f"{floor * 1000:.1f} µs/step", "", "")
    table.add_row(
        "Python floor: 10-step runs, fresh database", f"{floor_short * 1000:.1f} µs/step", "", ""
    )
    table.add_row("Python floor: manual tools", f"{floor_manual * 1000:.1f} µs/step", "", "")
    await step_overhead.sequential_ms(folder, 20, "safe", "barriers")  # warm-up
    for blocking in (True, False):
        safe = statistics.median(
            [
                await step_overhead.sequential_ms(
                    folder, TURNS, "safe", "barriers", blocking=blocking
                )
                for _ in range(5)
            ]
        )
        label = "" if blocking else ", blocking=False"
        _row(
            table,
            f"safe step (100-turn run{label}) ÷ Python floor",
            safe / floor,
            "x",
            "≤ 3x",
            safe / floor <= 3,
        )
    short = await step_overhead.short_runs_ms(folder, SHORT, runs)
    _row(
        table,
        "10-step runs, per step ÷ Python floor",
        short / floor_short,
        "x",
        "≤ 3x",
        short / floor_short <= 3,
    )
    manual = statistics.median(
        [
            await step_overhead.sequential_ms(folder, TURNS // 2, "manual", "barriers")
            for _ in range(5)
        ]
    )
    _row(
        table,
        "manual-tool run, per step ÷ Python floor",
        manual / floor_manual,
        "x",
        "≤ 2x",
        manual / floor_manual <= 2,
    )
    rate = await step_overhead.concurrent_steps_per_second(folder, 100, SHORT)
    _row(table, "durable steps/s, 100 concurrent runs", rate, "", "≥ 10,000", rate >= 10_000)
    size, content = await scale.storage_ratio(folder, TURNS)
    _row(
        table,
        "database bytes ÷ unique content, 100-turn conversation",
        size / content,
        "x",
        "≤ 2.5x",
        size / content <= 2.5,
    )
    ready, first = await scale.open_figures(folder, 10_000)
    _row(table, "open a store of 10,000 unfinished runs", ready, " ms", "≤ 20 ms", ready <= 20)
    _row(table, "… until the first runnable one executes", first, " ms", "≤ 100 ms", first <= 100)
    held = await scale.waiting_bytes(folder)
    _row(table, "Python bytes held per waiting run", held, " B", "≤ 2,048 B", held <= 2048)


def peer_figures(runs: int, base: Path, table: Table) -> None:
    systems = [
        peers.stead_system("barriers"),
        peers.stead_system("always"),
        peers.dbos_system(),
        peers.langgraph_system(),
    ]
    peers.measure(systems, runs, 2, base)
    by_name = {(s.name, s.setting): s for s in systems}
    for system in systems:
        if system.median is None:
            table.add_row(f"{system.name} {system.setting}", system.skipped or "-", "", "")
            continue
        table.add_row(
            f"{system.name}: {system.setting}", f"{system.median * 1000:.1f} µs/step", "", ""
        )
    for fsync, target in (("barriers", 10.0), ("always", 5.0)):
        ours = by_name[("stead", f'SqliteStore(fsync="{fsync}")')].median
        for peer in systems[2:]:
            if ours is None or peer.median is None:
                continue
            speedup = peer.median / ours
            _row(
                table,
                f'speed-up over {peer.name}, fsync="{fsync}"',
                speedup,
                "x",
                f"≥ {target:g}x",
                speedup >= target,
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="short runs per system (median)")
    parser.add_argument("--dir", default=None, help="folder for the databases (not tmpfs)")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 110))
    table = Table("figure", "value", "target", "")
    with tempfile.TemporaryDirectory(dir=args.dir or os.getcwd()) as tmp:
        await stead_figures(Path(tmp), args.runs, table)
        await asyncio.to_thread(peer_figures, args.runs, Path(tmp), table)
    console.print(table)
    console.print(
        f"[dim]Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs[/]"
    )


if __name__ == "__main__":
    asyncio.run(main())
