"""Where a run of ``peers.py``'s stead loop spends its time, phase by phase.

The run is ``peers.py``'s: ten calls of a trivial synchronous ``safe`` tool, eleven model calls
of a ``ScriptedModel``, 21 durable steps, on a fresh file with ``fsync="barriers"``. Its clock
is cut where the model is called:

* **submission**: ``runtime.submit`` until it returns (the run inserted and begun in one
  transaction, and that commit's fdatasync);
* **start**: from there to the first model call (the run's task starts, the agent loop sets
  up, the first model call's intent commits);
* **turn**: from one model call to the next, the mean of the ten (the model's result, the tool
  on its thread and its row, the next call's intent: one commit);
* **end**: from the last model call until ``handle.result()`` returns (its result, the run's
  completion and that commit's fdatasync, the outcome delivered).

Each phase shows its wall time, the time spent in SQLite statements (every ``execute`` and
``executemany`` of stead's connections, timed through a connection subclass, which adds about
0.5 µs to each), the time in ``fdatasync``, and the rest: Python — stead's own, asyncio's and
the tool's hand-off to its thread. Medians over runs, each on a fresh file as ``peers.py`` has
them (opening the store is not timed). ``--tool-on-loop`` declares the tool ``blocking=False``,
so it runs on the event loop with no hand-off. ``--nth N`` measures the N-th run of each
runtime instead of its first (the ones before it untimed): what a run costs without what a
runtime's first run pays once, such as the statements its connection prepares the first time it
runs them.

    .venv/bin/python benchmarks/phases.py [--runs 200] [--warmup 5] [--dir PATH] [--tool-on-loop]
                                          [--nth 1]
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from rich.console import Console
from rich.table import Table

import stead
from peers import (
    FINAL_ANSWER,
    PROMPT,
    STEPS_PER_RUN,
    TOOL_CALLS,
    BenchError,
    parse_runs,
    runs_parser,
    stead_agent,
    stead_script,
)
from stead.store.sqlite import store as sqlite_store
from stead.testing import ScriptedModel
from step_overhead import collect_garbage

console = Console() if sys.stdout.isatty() else Console(width=120)


@dataclass
class Spent:
    """What the process has spent so far in SQLite statements and in fdatasync (seconds)."""

    sql: float = 0.0
    statements: int = 0
    sync: float = 0.0

    def mark(self) -> Mark:
        return Mark(time.perf_counter(), self.sql, self.statements, self.sync)


@dataclass(frozen=True)
class Mark:
    """A point on a run's clock, with what had been spent by then."""

    at: float
    sql: float
    statements: int
    sync: float


SPENT = Spent()


class _TimedConnection(sqlite3.Connection):
    """A connection whose statements add their time to :data:`SPENT`."""

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return _statement(super().execute, args)

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        return _statement(super().executemany, args)


def _statement(run: Callable[..., sqlite3.Cursor], args: tuple[Any, ...]) -> sqlite3.Cursor:
    """``run(*args)``, one statement, its time added to :data:`SPENT`."""
    start = time.perf_counter()
    try:
        return run(*args)
    finally:
        SPENT.sql += time.perf_counter() - start
        SPENT.statements += 1


@contextlib.contextmanager
def timed() -> Iterator[None]:
    """Time stead's SQLite statements and fdatasyncs into :data:`SPENT` (connections opened
    meanwhile are :class:`_TimedConnection`)."""
    connect = sqlite3.connect
    fdatasync = sqlite_store._fdatasync

    def timed_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _TimedConnection)
        conn: sqlite3.Connection = connect(*args, **kwargs)
        return conn

    def timed_fdatasync(fd: int) -> None:
        start = time.perf_counter()
        try:
            fdatasync(fd)
        finally:
            SPENT.sync += time.perf_counter() - start

    with (
        mock.patch.object(sqlite3, "connect", timed_connect),
        mock.patch.object(sqlite_store, "_fdatasync", timed_fdatasync),
    ):
        yield


class _MarkedModel(ScriptedModel):
    """``peers.py``'s script, marking the clock each time the model is called."""

    def __init__(self, marks: list[Mark]) -> None:
        super().__init__(stead_script())
        self.marks = marks

    async def complete(self, request: stead.ModelRequest) -> stead.ModelResponse:
        self.marks.append(SPENT.mark())
        return await super().complete(request)


@dataclass(frozen=True)
class RunMarks:
    """One run's clock: the submission's start and return, each model call, the result."""

    start: Mark
    submitted: Mark
    models: tuple[Mark, ...]
    end: Mark


@dataclass(frozen=True)
class Phase:
    """One phase of a run (or a share of one): µs of wall time, in SQLite statements (and how
    many), in fdatasync, and the rest."""

    wall: float
    sql: float
    statements: float
    sync: float

    @property
    def rest(self) -> float:
        return self.wall - self.sql - self.sync


def between(first: Mark, last: Mark, parts: int = 1) -> Phase:
    """What was spent from ``first`` to ``last``, divided by ``parts``."""
    return Phase(
        wall=(last.at - first.at) * 1e6 / parts,
        sql=(last.sql - first.sql) * 1e6 / parts,
        statements=(last.statements - first.statements) / parts,
        sync=(last.sync - first.sync) * 1e6 / parts,
    )


PHASES = ("submission", "start", "turn (mean of ten)", "end", "whole run, a step")


def phases_of(run: RunMarks) -> dict[str, Phase]:
    """A run's phases (see the module docstring), and the whole run per durable step."""
    first, last = run.models[0], run.models[-1]
    return dict(
        zip(
            PHASES,
            (
                between(run.start, run.submitted),
                between(run.submitted, first),
                between(first, last, len(run.models) - 1),
                between(last, run.end),
                between(run.start, run.end, STEPS_PER_RUN),
            ),
            strict=True,
        )
    )


def _app(marks: list[Mark], tool_on_loop: bool) -> stead.App:
    return stead.App(agents=[stead_agent(_MarkedModel(marks), blocking=not tool_on_loop)])


async def _run(app: stead.App, marks: list[Mark], folder: Path, n: int, nth: int) -> RunMarks:
    """The ``nth`` run of a runtime opened on a fresh file in ``folder`` (those before it
    untimed)."""
    async with await app.open(stead.SqliteStore(str(folder / "stead.db"))) as runtime:
        for k in range(1, nth + 1):
            marks.clear()
            start = SPENT.mark()
            handle = await runtime.submit(
                "bench", session_id=f"s{n}-{k}", request_id=f"r{n}", prompt=PROMPT
            )
            submitted = SPENT.mark()
            outcome = await handle.result()
            end = SPENT.mark()
            if outcome.output != FINAL_ANSWER or len(marks) != TOOL_CALLS + 1:
                raise BenchError(
                    f"stead: run {n} answered {outcome.output!r} after {len(marks)} model "
                    f"calls, expected {FINAL_ANSWER!r} after {TOOL_CALLS + 1}"
                )
    return RunMarks(start, submitted, tuple(marks), end)


def measure(
    runs: int, warmup: int, base: Path, *, tool_on_loop: bool = False, nth: int = 1
) -> list[RunMarks]:
    """``runs`` runs after ``warmup`` uncounted ones, each the ``nth`` run of a runtime opened
    on a fresh file under ``base``."""
    if nth < 1:
        raise BenchError(f"nth counts a runtime's runs from 1, got {nth}")
    marks: list[Mark] = []
    app = _app(marks, tool_on_loop)
    measured = []
    with timed(), tempfile.TemporaryDirectory(dir=base, prefix="phases-") as folder:
        for n in range(warmup + runs):
            run_dir = Path(folder) / f"run-{n}"
            run_dir.mkdir()
            collect_garbage()
            run = asyncio.run(_run(app, marks, run_dir, n, nth))
            if n >= warmup:
                measured.append(run)
    return measured


def medians(runs: Sequence[RunMarks]) -> dict[str, Phase]:
    """Each phase's figures, each the median over ``runs``."""
    each = [phases_of(run) for run in runs]
    return {
        name: Phase(
            **{
                figure.name: statistics.median(getattr(p[name], figure.name) for p in each)
                for figure in dataclasses.fields(Phase)
            }
        )
        for name in PHASES
    }


def table_of(phases: dict[str, Phase], title: str) -> Table:
    table = Table(title=title)
    table.add_column("phase")
    for column in ("wall µs", "SQLite µs (statements)", "fdatasync µs", "the rest µs"):
        table.add_column(column, justify="right")
    for name, phase in phases.items():
        table.add_row(
            name,
            f"{phase.wall:,.1f}",
            f"{phase.sql:,.1f} ({phase.statements:.3g})",
            f"{phase.sync:,.1f}",
            f"{phase.rest:,.1f}",
        )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = runs_parser(__doc__, runs=200, warmup=5)
    parser.add_argument(
        "--tool-on-loop",
        action="store_true",
        help="declare the tool blocking=False: it runs on the event loop, with no hand-off",
    )
    parser.add_argument(
        "--nth",
        type=int,
        default=1,
        help="measure the N-th run of each runtime (the ones before it untimed; default: its "
        "first, as peers.py has it)",
    )
    args, base = parse_runs(parser, argv)
    if args.nth < 1:
        parser.error(f"--nth counts a runtime's runs from 1, got {args.nth}")
    runs = measure(args.runs, args.warmup, base, tool_on_loop=args.tool_on_loop, nth=args.nth)
    where = "on the event loop" if args.tool_on_loop else "on its thread"
    which = "" if args.nth == 1 else f", each its runtime's run {args.nth}"
    console.print(
        table_of(
            medians(runs),
            f"a run of peers.py's loop, the tool {where}: medians of {args.runs} fresh "
            f"files{which}",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
