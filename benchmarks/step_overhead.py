"""Wall time per durable step, against floors measured in the same process run.

    python benchmarks/step_overhead.py [--steps 200] [--dir PATH]

Rows:
* bare commit: one INSERT + COMMIT on SQLite in WAL mode with ``synchronous=FULL``, what every
  durable system on SQLite pays per write it makes durable.
* Python floor: the same journal work written by hand with no engine — one journal row per step,
  ``json.dumps``, ``sqlite3`` in WAL with ``synchronous=NORMAL``, the WAL fdatasync'd only at
  the barriers (submission, run end, and around each ``manual`` tool).
* safe steps: one sequential run whose model calls and tools are ``safe`` (the tool is a plain
  synchronous function, run in a worker thread, as most tools are written).
* manual tools: one sequential run whose tools are ``manual`` (intent and result on disk).
Each stead row is run with ``fsync="barriers"`` (the default) and ``fsync="always"``, and printed
as a ratio to the bare commit and to the Python floor. Last, durable steps per second with 100
concurrent runs. No targets: ``summary.py`` judges the figures the work is held to.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

import stead
from stead.testing import ScriptedModel, Turn

JSON = Any
Recovery = Literal["safe", "idempotent", "manual"]
Fsync = Literal["barriers", "always"]


def collect_garbage() -> None:
    """Collect what earlier measurements left, before a measurement sets up (opens its store
    or its database), not between the setup and the clock. Each measurement opens a fresh app
    and store, and a closed runtime is freed by Python's cyclic collector (its parts refer to
    each other); a collection of the older generations that comes due inside a later
    measurement charges that one for another's garbage, tens of milliseconds in a run of forty.
    The collector stays on: what a measurement's own work costs it is still counted.

    A full collection walks every object in the process and empties the interpreter's free
    lists, and the work that follows it runs slower until it has warmed up again: right after
    one, a 21-step run took 400 to 550 µs longer, stead's and the Python floor's alike (more
    with the peers imported, whose modules the collection walks too). A process serving runs
    one after another does not collect everything before each, and a cost the same on both
    sides of a ratio shrinks it toward 1 (10-step runs read 2.33 to 2.40 times the floor
    collected right before the clock, 2.72 to 2.74 times collected before the setup). So the
    setup, which every system has, comes between. Every system and every floor is measured
    after it alike."""
    gc.collect()


def bare_commit_ms(folder: Path, count: int = 2000) -> float:
    collect_garbage()
    path = folder / f"bare-{time.perf_counter_ns()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    body = "x" * 200
    start = time.perf_counter()
    for _ in range(count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (body) VALUES (?)", (body,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / count * 1000


def _floor_steps(
    folder: Path,
    tool_calls: int,
    recovery: str,
    sync: Callable[[int], None] = os.fdatasync,
    *,
    collect: bool = True,
    runs: int = 1,
) -> Generator[int, JSON | None, float]:
    """The Python floor's run, step by step: it yields each turn's number where the tool runs,
    takes the tool's output (None: none was called, ``{"i": turn}`` is written) and returns ms
    per step. ``sync(fd)`` flushes the WAL at each barrier. ``collect``: collect garbage first
    (:func:`collect_garbage`). ``runs``: that many runs one after another on the same
    connection, the last one timed (its statements prepared by the ones before it)."""
    if collect:
        collect_garbage()
    path = folder / f"floor-{recovery}-{time.perf_counter_ns()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE journal (run TEXT, key TEXT, body TEXT, PRIMARY KEY (run, key))")
    wal = os.open(f"{path}-wal", os.O_RDONLY)

    def row(run: str, key: str, body: object) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT OR REPLACE INTO journal VALUES (?, ?, ?)", (run, key, json.dumps(body))
        )
        conn.execute("COMMIT")

    for number in range(1, runs + 1):
        run = f"run{number}"
        start = time.perf_counter()
        row(run, "submitted", {"prompt": "go"})
        sync(wal)  # barrier: the submission is acknowledged
        for turn in range(1, tool_calls + 1):
            body = {"tool_calls": [{"name": "lookup", "arguments": {"i": turn}}]}
            row(run, f"model:{turn}", body)
            if recovery == "manual":
                sync(wal)  # barrier: the intent is on disk before the effect
            output = yield turn
            row(run, f"tool:{turn}", {"output": {"i": turn} if output is None else output})
            if recovery == "manual":
                sync(wal)  # barrier: the result is on disk before the run builds on it
        row(run, f"model:{tool_calls + 1}", {"text": "done"})
        sync(wal)  # barrier: the completed run is acknowledged
        elapsed = time.perf_counter() - start
    os.close(wal)
    conn.close()
    return elapsed / (2 * tool_calls + 1) * 1000


def python_floor_ms(
    folder: Path, tool_calls: int, recovery: str, sync: Callable[[int], None] = os.fdatasync
) -> float:
    """ms per step of a run written by hand: what stead's journal work costs with no engine."""
    steps = _floor_steps(folder, tool_calls, recovery, sync)
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return float(done.value)


def floor_sync_us(folder: Path, tool_calls: int, work: float) -> float:
    """µs an fdatasync takes on average in the Python floor's run of ``manual`` tools when
    ``work`` seconds of busy CPU come between each barrier's commit and its fdatasync, as an
    engine's own work for the step would (0: at once, as the floor has it). On a virtual disk
    a flush that follows a pause in the I/O can cost more than one right behind the last."""
    spent: list[float] = []

    def sync(fd: int) -> None:
        until = time.perf_counter() + work
        while time.perf_counter() < until:
            pass
        start = time.perf_counter()
        os.fdatasync(fd)
        spent.append(time.perf_counter() - start)

    python_floor_ms(folder, tool_calls, "manual", sync)
    return sum(spent) / len(spent) * 1e6


def _lookup(i: int) -> dict[str, int]:
    return {"i": i}


async def python_floor_handoff_ms(
    folder: Path, tool_calls: int, handoff: Callable[..., Awaitable[JSON]]
) -> float:
    """ms per step of the Python floor written as a coroutine whose tool, a plain function, is
    called through ``handoff(fn, *args)`` (``asyncio.to_thread``, say): what handing a
    synchronous tool to a thread costs before any journal work of an engine."""
    steps = _floor_steps(folder, tool_calls, "safe")
    try:
        turn = next(steps)
        while True:
            turn = steps.send(await handoff(_lookup, turn))
    except StopIteration as done:
        return float(done.value)


def python_floor_runs_ms(folder: Path, tool_calls: int, runs: int) -> float:
    """ms per step of short runs written by hand, each on a fresh database (median)."""
    samples = []
    for _ in range(runs):
        run_folder = Path(tempfile.mkdtemp(dir=folder))
        samples.append(python_floor_ms(run_folder, tool_calls, "safe"))
    return statistics.median(samples)


def make_app(tool_calls: int, recovery: Recovery, *, blocking: bool = True) -> stead.App:
    # A plain synchronous function, as most tools are written: it runs in a worker thread
    # unless declared blocking=False.
    @stead.tool(name="lookup", recovery=recovery, blocking=blocking)
    def lookup(i: int) -> dict[str, int]:
        """Look something up."""
        return {"i": i}

    script: list[Turn] = [
        [stead.ToolCall(name="lookup", arguments={"i": n}, id=f"c{n}")] for n in range(tool_calls)
    ]
    script.append("done")
    agent = stead.Agent(
        id="bench",
        version="1",
        model=ScriptedModel(script),
        instructions="Look things up.",
        tools=[lookup],
        max_turns=tool_calls + 1,
    )
    return stead.App(agents=[agent])


async def sequential_ms(
    folder: Path, tool_calls: int, recovery: Recovery, fsync: Fsync, *, blocking: bool = True
) -> float:
    """ms per durable step of one run of ``tool_calls`` tool calls (2 * tool_calls + 1 steps)."""
    app = make_app(tool_calls, recovery, blocking=blocking)
    path = folder / f"seq-{recovery}-{fsync}-{time.perf_counter_ns()}.db"
    store = stead.SqliteStore(path, fsync=fsync)
    collect_garbage()
    async with await app.open(store) as runtime:
        start = time.perf_counter()
        run = await runtime.submit("bench", session_id="s", request_id="r", prompt="go")
        outcome = await run.result()
        elapsed = time.perf_counter() - start
    assert outcome.output == "done"
    return elapsed / (2 * tool_calls + 1) * 1000


async def short_runs_ms(folder: Path, tool_calls: int, runs: int) -> float:
    """ms per durable step of runs of ``tool_calls`` tool calls, each on a fresh database
    opened before the clock starts (median)."""
    app = make_app(tool_calls, "safe")
    samples = []
    for n in range(runs + 2):
        path = Path(tempfile.mkdtemp(dir=folder)) / "short.db"
        collect_garbage()
        async with await app.open(stead.SqliteStore(path)) as runtime:
            start = time.perf_counter()
            run = await runtime.submit("bench", session_id=f"s{n}", request_id="r", prompt="go")
            outcome = await run.result()
            elapsed = time.perf_counter() - start
        assert outcome.output == "done"
        if n >= 2:  # two warm-up runs
            samples.append(elapsed / (2 * tool_calls + 1) * 1000)
    return statistics.median(samples)


async def concurrent_steps_per_second(
    folder: Path, runs: int, tool_calls: int, *, blocking: bool = True
) -> float:
    app = make_app(tool_calls, "safe", blocking=blocking)
    store = stead.SqliteStore(folder / f"concurrent-{time.perf_counter_ns()}.db")
    collect_garbage()
    async with await app.open(store, max_concurrent_runs=runs) as runtime:
        start = time.perf_counter()
        handles = await asyncio.gather(
            *(
                runtime.submit("bench", session_id=f"s{i}", request_id="r", prompt="go")
                for i in range(runs)
            )
        )
        outcomes = await asyncio.gather(*(h.result() for h in handles))
        elapsed = time.perf_counter() - start
    assert all(o.output == "done" for o in outcomes)
    return runs * (2 * tool_calls + 1) / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="tool calls per sequential run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row (median)")
    parser.add_argument("--dir", default=None, help="folder for the databases (not tmpfs)")
    args = parser.parse_args()
    if args.steps < 2:  # the manual rows run half as many tool calls
        parser.error(f"--steps must be at least 2, got {args.steps}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    console = Console(width=max(Console().width, 120))
    with tempfile.TemporaryDirectory(dir=args.dir or os.getcwd()) as tmp:
        folder = Path(tmp)
        bare = statistics.median([bare_commit_ms(folder) for _ in range(3)])
        floors = {
            recovery: statistics.median(
                [python_floor_ms(folder, args.steps, recovery) for _ in range(3)]
            )
            for recovery in ("safe", "manual")
        }
        table = Table("row", "fsync", "ms/step", "x bare commit", "x Python floor")
        table.add_row("bare commit (WAL, synchronous=FULL)", "", f"{bare:.3f}", "1.00", "")
        for recovery, floor in floors.items():
            table.add_row(
                f"Python floor, {recovery} tools",
                "",
                f"{floor:.3f}",
                f"{floor / bare:.2f}",
                "1.00",
            )
        await sequential_ms(folder, 20, "safe", "barriers")  # warm-up
        rows: tuple[tuple[Recovery, Fsync], ...] = (
            ("safe", "barriers"),
            ("safe", "always"),
            ("manual", "barriers"),
            ("manual", "always"),
        )
        for recovery, fsync in rows:
            steps = args.steps if recovery == "safe" else args.steps // 2
            ms = statistics.median(
                [await sequential_ms(folder, steps, recovery, fsync) for _ in range(args.repeat)]
            )
            table.add_row(
                f"{recovery} steps" if recovery == "safe" else "manual tools run",
                fsync,
                f"{ms:.3f}",
                f"{ms / bare:.2f}",
                f"{ms / floors[recovery]:.1f}",
            )
        console.print(table)
        rate = await concurrent_steps_per_second(folder, 100, 10)
        console.print(
            f"100 concurrent runs (10 tool calls each): [bold]{rate:,.0f}[/] durable steps/s"
        )
        console.print(
            f"[dim]Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
            f"{os.cpu_count()} CPUs, databases in {folder}[/]"
        )


if __name__ == "__main__":
    asyncio.run(main())
