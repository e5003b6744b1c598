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
through stead's hand-off, and through ``asyncio.to_thread``. One more measures what the disk
charges for a pause: the floor's fdatasyncs, each after 100 µs of work (an engine's own, between
two barriers of a ``manual`` tool), against its fdatasyncs right behind their commits. The peers
(DBOS, LangGraph) run the same 10-tool-call loop side by side (see peers.py), with the floor of
that loop fsync'd as each stead setting is (at the submission and the end, and after every
commit). Each system's run there is its first on a fresh database; the speed-ups are measured
once more with each system's third run on its database (the two before it untimed, on the same
open runtime, DBOS launch or LangGraph saver), as a process that has served runs already has
them, without what each system pays once for a new setup (statements prepared, caches filled).
Targets are printed as PASS/MISS, never asserted: a slow disk reports a MISS, not a failure.
``--repeat N`` measures everything N times over and prints each figure's spread (lowest to
highest) and how many of the N rounds met its target, then every round's figures side by side
(a miss marked ✗): figures on a shared machine move from one minute to the next, and a claim
that a target holds wants more than one round.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sqlite3
import statistics
import subprocess
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
#: Which run on its database each system's second set of peer rows times (see the docstring).
WARM_NTH = 3
#: Seconds of work before each of the floor's fdatasyncs in the yardstick for the manual row:
#: about what stead's own work between two barriers of a manual tool's step takes.
PAUSE = 100e-6


@dataclasses.dataclass(frozen=True)
class Figure:
    """One row: a measured value (``None``: a row with only ``text``, a peer that was not run)
    written as ``format(value, spec) + unit``, and its target, if it has one."""

    name: str
    value: float | None
    spec: str = ",.2f"
    unit: str = ""
    target: str = ""
    ok: bool | None = None
    text: str = ""

    def shown(self, value: float) -> str:
        return format(value, self.spec)


class Figures:
    """The rows of one round of measurements, in the order they are printed."""

    def __init__(self) -> None:
        self.rows: list[Figure] = []

    def add(
        self, name: str, value: float, unit: str = "", spec: str = ",.2f", target: str = ""
    ) -> None:
        """A row; ``target`` as ``"≤ 3x"`` or ``"≥ 10,000"`` (its bound, then ``unit``), which
        the value is checked against."""
        ok = None
        if target:
            bound = float(target[2:].removesuffix(unit.strip()).replace(",", ""))
            ok = value <= bound if target.startswith("≤") else value >= bound
        self.rows.append(Figure(name, value, spec, unit, target, ok))

    def note(self, name: str, text: str, target: str = "") -> None:
        """A row with no value: ``text`` in its place (a peer that did not run); a ``target``
        it has is shown as not measured."""
        self.rows.append(Figure(name, None, target=target, text=text))


def table_of(rounds: list[Figures]) -> Table:
    """One round's figures as they are; several rounds' as each figure's lowest and highest
    value and how many rounds met its target."""
    many = len(rounds) > 1
    spread = f"lowest to highest of {len(rounds)} rounds"
    table = Table("figure", spread if many else "value", "target", "")
    names: dict[str, list[Figure]] = {}
    for figures in rounds:
        for row in figures.rows:
            names.setdefault(row.name, []).append(row)
    for name, rows in names.items():
        measured = [row for row in rows if row.value is not None]
        if not measured:
            first = rows[0]
            table.add_row(name, first.text, first.target, "NOT MEASURED" if first.target else "")
            continue
        first = measured[0]
        values = [row.value for row in measured if row.value is not None]
        low, high = min(values), max(values)
        shown = first.shown(low) if low == high else f"{first.shown(low)} to {first.shown(high)}"
        verdict = ""
        if first.target:
            met = sum(1 for row in measured if row.ok)
            verdict = "PASS" if met == len(measured) else "MISS"
            if many and 0 < met < len(measured):
                verdict = f"MISS ({met} of {len(measured)} met)"
        shown += first.unit
        if len(measured) < len(rounds):  # a peer that ran in some rounds only
            shown += f" ({len(measured)} of {len(rounds)} rounds)"
        table.add_row(name, shown, first.target, verdict)
    return table


def rounds_of(rounds: list[Figures]) -> Table:
    """Several rounds' figures side by side, a column a round, a value that missed its target
    marked ✗: which rounds missed, and what else moved with them (a peer's own speed, the
    floor's), where :func:`table_of` gives only each figure's range."""
    table = Table("figure", *(f"round {number}" for number in range(1, len(rounds) + 1)))
    names: dict[str, dict[int, Figure]] = {}
    for number, figures in enumerate(rounds):
        for figure in figures.rows:
            names.setdefault(figure.name, {})[number] = figure
    for name, rows in names.items():
        if all(figure.value is None for figure in rows.values()):
            continue  # a note (a peer that is not installed): the range table shows it
        cells = []
        for number in range(len(rounds)):
            row = rows.get(number)
            if row is None or row.value is None:
                cells.append("—")
                continue
            cells.append(row.shown(row.value) + row.unit + (" ✗" if row.ok is False else ""))
        table.add_row(name, *cells)
    return table


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


async def stead_figures(folder: Path, runs: int, figures: Figures) -> None:
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

    # What the disk charges for a pause: the floor's flushes with an engine's work before each,
    # against its flushes right behind their commits; no target, a yardstick for the row above.
    async def paused_sync() -> float:
        return step_overhead.floor_sync_us(folder, TURNS // 2, PAUSE)

    _, _, paused = await _paired(
        lambda: step_overhead.floor_sync_us(folder, TURNS // 2, 0.0), paused_sync, 7
    )
    for figure, value in floors.items():
        figures.add(figure, value * 1000, " µs/step", ".1f")
    for figure, target, ratio in ratios:
        figures.add(figure, ratio, "x", target=target)
        if figure.startswith("safe step (100-turn run) "):
            for note, value in handoffs:
                figures.add(note, value, "x")
        if figure.startswith("manual-tool run"):
            figures.add(
                f"… the floor's fdatasync after {PAUSE * 1e6:.0f} µs of work ÷ right after its "
                "commit",
                paused,
                "x",
            )
    # Median of three: one sample of a 0.2-second burst moves by a fifth from run to run.
    rate = statistics.median(
        [await step_overhead.concurrent_steps_per_second(folder, 100, SHORT) for _ in range(3)]
    )
    figures.add("durable steps/s, 100 concurrent runs", rate, spec=",.0f", target="≥ 10,000")
    # The target is absolute, so it moves with the machine; against the floor's own rate (one
    # run, one step after another) it moves much less from one machine to another.
    floor_rate = 1000 / floors["Python floor: 100-turn run, safe tools"]
    figures.add("… ÷ the Python floor's steps/s (one run)", rate / floor_rate, "x")
    size, content = await scale.storage_ratio(folder, TURNS)
    figures.add(
        "database bytes ÷ unique content, 100-turn conversation",
        size / content,
        "x",
        target="≤ 2.5x",
    )
    ready, first = await scale.open_figures(folder, 10_000)
    figures.add("open a store of 10,000 unfinished runs", ready, " ms", target="≤ 20 ms")
    figures.add("… until the first runnable one executes", first, " ms", target="≤ 100 ms")
    held = await scale.waiting_bytes(folder)
    figures.add("Python bytes held per waiting run", held, " B", spec=",.0f", target="≤ 2,048 B")


def peer_figures(runs: int, base: Path, figures: Figures) -> None:
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
            figures.note(f"{system.name} {system.setting}", system.skipped or "-")
            continue
        figures.add(f"{system.name}: {system.setting}", system.median * 1000, " µs/step", ".1f")
    targets = {"barriers": peers.TARGET_BARRIERS, "always": peers.TARGET_ALWAYS}
    steads = {fsync: by_name[("stead", f'SqliteStore(fsync="{fsync}")')] for fsync in targets}
    add_speedups(figures, steads, rivals)
    warm_speedups(runs, base, figures)
    # The same loop's journal written by hand (no engine), in the same round-robin, fsync'd as
    # each stead setting is: a speed-up over a peer is bounded by the floor's own. Under stead's
    # ratio to that floor, the most each target lets it be.
    for fsync, what in (("barriers", "at submission and end"), ("always", "after every commit")):
        setting = f'SqliteStore(fsync="{fsync}")'
        ours = by_name[("stead", setting)].median
        floor = peers.floor_for(systems, setting)
        if ours is None or floor is None or floor.median is None:
            continue
        for peer in rivals:
            if peer.median is not None:
                figures.add(
                    f"… the Python floor's own speed-up over {peer.name} (no engine, fsync {what})",
                    peer.median / floor.median,
                    "x",
                    ".1f",
                )
        figures.add(
            f'stead fsync="{fsync}" ÷ the Python floor fsync\'d {what}, this loop',
            ours / floor.median,
            "x",
        )
        for peer in rivals:
            if peer.median is not None:
                figures.add(
                    f"… what {targets[fsync]:g}x over {peer.name} asks of that ratio (at most)",
                    peer.median / targets[fsync] / floor.median,
                    "x",
                )


def warm_speedups(runs: int, base: Path, figures: Figures) -> None:
    """The speed-ups over the peers again, each system's run the :data:`WARM_NTH`-th on its
    database."""
    nth = WARM_NTH
    steads = {fsync: peers.stead_system(fsync, nth) for fsync in ("barriers", "always")}
    rivals = [peers.dbos_system(nth), peers.langgraph_system(nth)]
    peers.measure([*steads.values(), *rivals], runs, 2, base)
    add_speedups(figures, steads, rivals, f", {peers.ordinal(nth)} run")


def add_speedups(
    figures: Figures,
    steads: dict[str, peers.System],
    rivals: list[peers.System],
    suffix: str = "",
) -> None:
    """A row for stead's speed-up at each fsync setting over each peer, against its target
    (not measured: the row says who did not run); ``suffix`` ends each row's name."""
    targets = {"barriers": peers.TARGET_BARRIERS, "always": peers.TARGET_ALWAYS}
    for fsync, target in targets.items():
        ours = steads[fsync].median
        for peer in rivals:
            label = f'speed-up over {peer.name}, fsync="{fsync}"{suffix}'
            if ours is None or peer.median is None:
                figures.note(
                    label,
                    f"not measured: {'stead' if ours is None else peer.name} did not run",
                    target=f"≥ {target:g}x",
                )
                continue
            figures.add(label, peer.median / ours, "x", target=f"≥ {target:g}x")


async def measure(runs: int, folder: str | None) -> Figures:
    """One round of every figure, in this process."""
    figures = Figures()
    with tempfile.TemporaryDirectory(dir=folder or os.getcwd()) as tmp:
        await stead_figures(Path(tmp), runs, figures)
        await asyncio.to_thread(peer_figures, runs, Path(tmp), figures)
    return figures


def measure_apart(runs: int, folder: str | None) -> Figures:
    """One round in a process of its own, as a single run of this script measures it: rounds
    in one process would share what the first one warmed up (imports, caches, the
    interpreter's allocations: the bytes held per waiting run read a quarter in a later
    round)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        command = [sys.executable, __file__, "--runs", str(runs), "--round", str(out)]
        if folder is not None:
            command += ["--dir", folder]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"a round of summary.py failed:\n{done.stdout}{done.stderr}")
        figures = Figures()
        figures.rows = [Figure(**row) for row in json.loads(out.read_text())]
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="short runs per system (median)")
    parser.add_argument("--dir", default=None, help="folder for the databases (not tmpfs)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds, each in a process of its own"
    )
    parser.add_argument("--round", type=Path, help=argparse.SUPPRESS)  # one round, as JSON
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.round is not None:
        figures = await measure(args.runs, args.dir)
        args.round.write_text(json.dumps([dataclasses.asdict(row) for row in figures.rows]))
        return
    console = Console(width=max(Console().width, 110))
    if args.repeat == 1:
        rounds = [await measure(args.runs, args.dir)]
    else:
        rounds = []
        for number in range(1, args.repeat + 1):
            console.print(f"[dim]round {number} of {args.repeat}[/]")
            rounds.append(await asyncio.to_thread(measure_apart, args.runs, args.dir))
    console.print(table_of(rounds))
    if len(rounds) > 1:
        console.print(rounds_of(rounds))
    console.print(
        f"[dim]Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs[/]"
    )


if __name__ == "__main__":
    asyncio.run(main())
