"""Machine instructions per durable step, counted by valgrind's callgrind: the same on a busy
machine as on an idle one.

    python benchmarks/instructions.py [--rows safe,floor,...] [--jobs 2] [--dir PATH]

Time on a shared virtual machine swings by half within a minute, so a change to the engine that
saves a few percent of a step cannot be told from noise by a clock. Callgrind counts the
instructions the process executes in user space instead: the same program with the same input
gives the same count, whatever else the machine does. What the count leaves out is the kernel's
work — the writes of the write-ahead log, the fsyncs, the thread wake-ups — which is most of the
Python floor's time and little of stead's, so the ratio to the floor here is much larger than the
ratio of times in ``summary.py``: it is not a figure the targets are judged by. It is the yardstick
for what a change does to the engine's own work.

Only the thread that runs the event loop is counted: it is the one a step waits for, and it is
where the engine's work is done (the worker thread that runs a synchronous tool, the flush
thread and the WAL checkpointer are left out; the checkpointer runs every half second of real
time, which under valgrind is fifty times as often per step as natively).

Each row runs twice, each time in a fresh process under callgrind: the same workload with a
small and a large number of steps, after the same warm-up. The difference of the two counts,
divided by the difference in steps, is what one more step costs: start-up, imports, the warm-up
and the process's end cancel out. Rows:

* floor: the Python floor of ``step_overhead`` (one journal row a step, ``json.dumps``,
  ``sqlite3`` in WAL), a run of safe tools.
* safe: one stead run of safe steps whose tool is a plain synchronous function (handed to a
  worker thread), as ``summary.py``'s ``safe`` row.
* safe, blocking=False: the same with the tool declared ``blocking=False`` (run on the loop).
* manual: a run of ``manual`` tools (intent and result on disk around each).
* short: runs of 10 tool calls (21 steps), each on a fresh store opened for it, as the 10-step
  rows of ``summary.py`` and ``peers.py`` have them: what a run costs besides its steps (the
  submission, beginning it, ending it, the statements a new connection prepares) spread over its
  steps. Opening and closing the store are measured alone at the same sizes and subtracted.
* 100 concurrent: 100 runs at once, each with the same synchronous tool, and with the tool
  declared ``blocking=False``. Their runs' own cost cancels out: both sizes run as many runs.
* runs: what a run costs besides its steps where it is cheapest, on a runtime that is open
  already: bursts of 100 runs at once, each run a single model call (its submission, its
  start, its one step and its end), on one open store. Counted per run.

Two runs of every row repeat within about 0.3%. Some branches still follow the clock: under
valgrind a program runs about fifty times slower while the engine's timeouts stay in real
seconds (the millisecond the loop waits for a thread's answer itself, say),
so the synchronous-tool rows take some branches a native run would not. A change to the hand-off
to threads is judged by the clock; a change to the journal's work by the ``blocking=False`` row,
which takes no such branch. Running two rows at a time (``--jobs 2``, the default) changes no
count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

import stead
import step_overhead

HERE = Path(__file__).resolve()


@dataclass(frozen=True)
class Row:
    name: str
    label: str
    #: The two sizes the row runs at (tool calls per run).
    small: int
    large: int
    #: Durable steps a run of ``n`` tool calls makes, for the marginal cost.
    steps: Callable[[int], int]
    #: A workload measured at the same sizes whose cost is subtracted (what the row does
    #: besides its steps: opening and closing a store for each run).
    baseline: str | None = None


def _sequential_steps(tool_calls: int) -> int:
    return 2 * tool_calls + 1


def _concurrent_steps(tool_calls: int) -> int:
    return 100 * (2 * tool_calls + 1)


def _burst_runs(bursts: int) -> int:
    return 100 * bursts


def _short_run_steps(runs: int) -> int:
    return runs * (2 * SHORT + 1)


#: Tool calls of each of the short runs (21 steps, as in ``summary.py`` and ``peers.py``).
SHORT = 10


ROWS = {
    row.name: row
    for row in (
        Row("floor", "Python floor (no engine), safe tools", 20, 120, _sequential_steps),
        Row("safe", "safe step, plain synchronous tool", 20, 120, _sequential_steps),
        Row("nonblocking", "safe step, tool declared blocking=False", 20, 120, _sequential_steps),
        Row("manual", "manual-tool run", 10, 60, _sequential_steps),
        Row(
            "short",
            "10-step runs, each on a fresh store (its opening and closing subtracted)",
            2,
            8,
            _short_run_steps,
            baseline="opens",
        ),
        Row("concurrent", "100 concurrent runs, synchronous tool", 2, 6, _concurrent_steps),
        Row(
            "concurrent-nonblocking",
            "100 concurrent runs, tool declared blocking=False",
            2,
            6,
            _concurrent_steps,
        ),
        Row(
            "runs",
            "100 concurrent 1-step runs on an open store: instructions per run",
            1,
            3,
            _burst_runs,
        ),
    )
}


def workload(name: str, tool_calls: int, folder: Path) -> None:
    """In the child process, under callgrind: a warm-up, then the row's run of ``tool_calls``
    tool calls."""
    if name == "floor":
        step_overhead.python_floor_ms(folder, 5, "safe")
        step_overhead.python_floor_ms(folder, tool_calls, "safe")
        return

    async def run() -> None:
        if name in ("short", "opens"):  # ``tool_calls`` counts runs here
            app = step_overhead.make_app(SHORT, "safe")
            for n in range(2 + tool_calls):  # two to warm up
                path = Path(tempfile.mkdtemp(dir=folder)) / "short.db"
                async with await app.open(stead.SqliteStore(path)) as runtime:
                    if name == "short":
                        handle = await runtime.submit(
                            "bench", session_id=f"s{n}", request_id="r", prompt="go"
                        )
                        await handle.result()
            return
        if name == "runs":  # ``tool_calls`` counts bursts here
            app = step_overhead.make_app(0, "safe")
            store = stead.SqliteStore(folder / "runs.db")
            async with await app.open(store, max_concurrent_runs=100) as runtime:
                for burst in range(1 + tool_calls):  # one to warm up
                    handles = await asyncio.gather(
                        *(
                            runtime.submit(
                                "bench", session_id=f"s{burst}-{i}", request_id="r", prompt="go"
                            )
                            for i in range(100)
                        )
                    )
                    await asyncio.gather(*(handle.result() for handle in handles))
            return
        blocking = not name.endswith("nonblocking")
        if name.startswith("concurrent"):
            await step_overhead.concurrent_steps_per_second(folder, 100, 1, blocking=blocking)
            await step_overhead.concurrent_steps_per_second(
                folder, 100, tool_calls, blocking=blocking
            )
            return
        recovery: step_overhead.Recovery = "manual" if name == "manual" else "safe"
        await step_overhead.sequential_ms(folder, 5, recovery, "barriers", blocking=blocking)
        await step_overhead.sequential_ms(
            folder, tool_calls, recovery, "barriers", blocking=blocking
        )

    asyncio.run(run())


def count(valgrind: str, name: str, tool_calls: int, folder: Path) -> int:
    """Instructions of one child process running workload ``name`` with ``tool_calls`` tool
    calls (runs, for the short runs and their baseline)."""
    out = Path(tempfile.mkdtemp(dir=folder))
    # The same hash seed in every child: set and dict orders (and so the work) repeat.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [
            valgrind,
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={out / 'callgrind.out'}",
            sys.executable,
            str(HERE),
            "--child",
            name,
            str(tool_calls),
            "--dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    # The loop's thread only (callgrind numbers threads from 1, the main one): the others run
    # on real-time timers that valgrind's slowdown makes fifty times as frequent per step (the
    # WAL checkpointer wakes every half second of real time), which made the totals swing.
    main = out / "callgrind.out-01"
    found = re.search(r"^summary: (\d+)$", main.read_text(), re.M) if main.exists() else None
    if done.returncode != 0 or found is None:
        raise SystemExit(
            f"the {name} workload failed under valgrind (exit {done.returncode}):\n"
            f"{done.stderr[-2000:]}"
        )
    return int(found.group(1))


def measure(valgrind: str, rows: list[Row], jobs: int, folder: Path) -> dict[str, float]:
    """Instructions per step of each row: the large run's count less the small one's, over
    the steps between them."""
    sizes = [
        (name, n)
        for row in rows
        for name in (row.name, row.baseline)
        if name is not None
        for n in (row.small, row.large)
    ]
    with ThreadPoolExecutor(jobs) as pool:
        counts = list(pool.map(lambda job: count(valgrind, job[0], job[1], folder), sizes))
    by_size = dict(zip(sizes, counts, strict=True))

    def grown(name: str, row: Row) -> int:
        return by_size[name, row.large] - by_size[name, row.small]

    return {
        row.name: (grown(row.name, row) - (grown(row.baseline, row) if row.baseline else 0))
        / (row.steps(row.large) - row.steps(row.small))
        for row in rows
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        default=",".join(ROWS),
        help=f"which rows, comma-separated (default: all of {', '.join(ROWS)})",
    )
    parser.add_argument("--jobs", type=int, default=2, help="child processes at a time")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the databases")
    parser.add_argument("--child", nargs=2, metavar=("ROW", "TOOL_CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, tool_calls = args.child
        workload(name, int(tool_calls), args.dir)
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print(
            "instructions.py counts instructions with valgrind's callgrind, and valgrind is not "
            "installed: install it (Debian and Ubuntu: apt install valgrind) and run this again."
        )
        return 0
    names = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = [name for name in names if name not in ROWS]
    if unknown or not names:
        parser.error(
            f"unknown rows {', '.join(unknown) or '(none given)'}; choose from {', '.join(ROWS)}"
        )
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        per_step = measure(valgrind, [ROWS[name] for name in names], args.jobs, Path(tmp))
    table = Table("row", "instructions per step", "÷ Python floor")
    floor = per_step.get("floor")
    for name, value in per_step.items():
        # The floor's row is one long run: the short runs' per-run work has no counterpart.
        ratio = "" if floor is None or name in ("short", "runs") else f"{value / floor:.2f}x"
        table.add_row(ROWS[name].label, f"{value:,.0f}", ratio)
    console = Console(width=max(Console().width, 100))
    console.print(table)
    console.print(
        f"user-space instructions of the event loop's thread (callgrind), large run less small "
        "run; "
        f"Python {sys.version.split()[0]}, {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
