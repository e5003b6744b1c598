"""The headline figures of a durable step, in one process run, each against its target.

    python benchmarks/summary.py [--runs 10] [--dir PATH]

Every stead figure is a ratio to the *Python floor* measured in the same run: the same journal
work written by hand with no engine (one journal row per step, ``json.dumps``, ``sqlite3`` in WAL
with ``synchronous=NORMAL``, the WAL fdatasync'd only at the barriers: the submission, the run's
end, and around each ``manual`` tool). The tool is a plain synchronous function, as most tools
are written; the ``blocking=False`` rows declare that it never waits, so it runs on the event
loop. Floor and stead run alternately, several times each, and the median of the pairs' ratios
is printed, so that the machine's drift hits both alike. Two rows without a target measure what
handing the tool to a thread costs alone: the floor written as a coroutine that calls its tool
through stead's hand-off, and through ``asyncio.to_thread``. The peers (DBOS, LangGraph) run
the same 10-tool-call loop side by side (see peers.py), with the floor of that loop fsync'd as
each stead setting is (at the submission and the end, and after every commit).
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
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))

import peers
import scale
import step_overhead
from stead._threads import run_in_thread, wait_here_when

TURNS = 100  # tool calls of the long sequential runs
SHORT = 10  # tool calls of the short runs (21 steps, as in peers.py)


def _row(table: Table, figure: str, value: float, unit: str, target: str, ok: bool) -> None:
    table.add_row(figure, f"{value:,.2f}{unit}", target, "PASS" if ok else "MISS")


async def _paired(
    floor: Callable[[], float], engine: Callable[[], Awaitable[float]], rounds: int
) -> tuple[float, float, float]:
    """The floor and stead measured alternately, ``rounds`` times each, so that the machine's
    drift (a shared virtual machine's speed changes within a minute) hits both alike: the
    median floor, the median stead figure and the median of the rounds' ratios."""
    floors, steads, ratios = [], [], []
    for _ in range(rounds):
        a = floor()
        b = await engine()
        floors.append(a)
        steads.append(b)
        ratios.append(b / a)
    return statistics.median(floors), statistics.median(steads), statistics.median(ratios)


async def stead_figures(folder: Path, runs: int, table: Table) -> None:
    def floor_long() -> float:
        return step_overhead.python_floor_ms(folder, TURNS, "safe")

    def floor_manual() -> float:
        return step_overhead.python_floor_ms(folder, TURNS // 2, "manual")

    def floor_short() -> float:
        return step_overhead.python_floor_runs_ms(folder, SHORT, 1)

    await step_overhead.sequential_ms(folder, 20, "safe", "barriers")  # warm-up
    floors: dict[str, float] = {}
    ratios: list[tuple[str, str, float]] = []
    for blocking in (True, False):
        floor, _, ratio = await _paired(
            floor_long,
            lambda blocking=blocking: step_overhead.sequential_ms(  # type: ignore[misc]
                folder, TURNS, "safe", "barriers", blocking=blocking
            ),
            7,
        )
        floors.setdefault("Python floor: 100-turn run, safe tools", floor)
        label = "" if blocking else ", blocking=False"
        ratios.append((f"safe step (100-turn run{label}) ÷ Python floor", "≤ 3x", ratio))

    # What handing a plain function to a thread costs alone: the floor itself as a coroutine
    # whose tool is called through a hand-off; no target, a yardstick for the rows above.
    async def floor_waited_here() -> float:
        # As a runtime executing one run has it: the loop waits for the thread's answer itself.
        withdraw = wait_here_when(asyncio.get_running_loop(), lambda: True)
        try:
            return await step_overhead.python_floor_handoff_ms(folder, TURNS, run_in_thread)
        finally:
            withdraw()

    handoffs: list[tuple[str, float]] = []
    for name, engine in (
        (
            "stead's thread hand-off",
            lambda: step_overhead.python_floor_handoff_ms(folder, TURNS, run_in_thread),
        ),
        ("stead's thread hand-off, the loop waiting for it itself (one run)", floor_waited_here),
        (
            "asyncio.to_thread",
            lambda: step_overhead.python_floor_handoff_ms(folder, TURNS, asyncio.to_thread),
        ),
    ):
        _, _, ratio = await _paired(floor_long, engine, 7)
        handoffs.append((f"… Python floor with {name} ÷ Python floor", ratio))
    floor, _, ratio = await _paired(
        floor_short, lambda: step_overhead.short_runs_ms(folder, SHORT, 1), max(runs, 5)
    )
    floors["Python floor: 10-step runs, fresh database"] = floor
    ratios.append(("10-step runs, per step ÷ Python floor", "≤ 3x", ratio))
    floor, _, ratio = await _paired(
        floor_manual,
        lambda: step_overhead.sequential_ms(folder, TURNS // 2, "manual", "barriers"),
        7,
    )
    floors["Python floor: manual tools"] = floor
    ratios.append(("manual-tool run, per step ÷ Python floor", "≤ 2x", ratio))
    for figure, value in floors.items():
        table.add_row(figure, f"{value * 1000:.1f} µs/step", "", "")
    for figure, target, ratio in ratios:
        _row(table, figure, ratio, "x", target, ratio <= float(target[2:-1]))
        if figure.startswith("safe step (100-turn run) "):
            for note, value in handoffs:
                table.add_row(note, f"{value:,.2f}x", "", "")
    # Median of three: one sample of a 0.2-second burst moves by a fifth from run to run.
    rate = statistics.median(
        [await step_overhead.concurrent_steps_per_second(folder, 100, SHORT) for _ in range(3)]
    )
    _row(table, "durable steps/s, 100 concurrent runs", rate, "", "≥ 10,000", rate >= 10_000)
    # The target is absolute, so it moves with the machine; against the floor's own rate (one
    # run, one step after another) it moves much less from one machine to another.
    floor_rate = 1000 / floors["Python floor: 100-turn run, safe tools"]
    table.add_row("… ÷ the Python floor's steps/s (one run)", f"{rate / floor_rate:,.2f}x", "", "")
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
        peers.floor_system("barriers"),
        peers.floor_system("always"),
    ]
    peers.measure(systems, runs, 2, base)
    by_name = {(s.name, s.setting): s for s in systems}
    rivals = [s for s in systems if s.name not in ("stead", peers.FLOOR)]
    for system in systems:
        if system.median is None:
            table.add_row(f"{system.name} {system.setting}", system.skipped or "-", "", "")
            continue
        table.add_row(
            f"{system.name}: {system.setting}", f"{system.median * 1000:.1f} µs/step", "", ""
        )
    for fsync, target in (("barriers", 10.0), ("always", 5.0)):
        ours = by_name[("stead", f'SqliteStore(fsync="{fsync}")')].median
        for peer in rivals:
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
    # The same loop's journal written by hand (no engine), in the same round-robin, fsync'd as
    # each stead setting is: a speed-up over a peer is bounded by the floor's own.
    for fsync, what in (("barriers", "at submission and end"), ("always", "after every commit")):
        setting = f'SqliteStore(fsync="{fsync}")'
        ours = by_name[("stead", setting)].median
        floor = peers.floor_for(systems, setting)
        if ours is None or floor is None or floor.median is None:
            continue
        for peer in rivals:
            if peer.median is not None:
                table.add_row(
                    f"… the Python floor's own speed-up over {peer.name} (no engine, fsync {what})",
                    f"{peer.median / floor.median:.1f}x",
                    "",
                    "",
                )
        table.add_row(
            f'stead fsync="{fsync}" ÷ the Python floor fsync\'d {what}, this loop',
            f"{ours / floor.median:.2f}x",
            "",
            "",
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="short runs per system (median)")
    parser.add_argument("--dir", default=None, help="folder for the databases (not tmpfs)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
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
