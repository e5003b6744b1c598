"""stead against its peers: the same 10-tool-call agent loop, durable, side by side.

One run is the loop an agent framework journals: model turn 1 asks for tool call 1, the tool
runs, model turn 2 asks for tool call 2, ..., ten tool calls, then a final model answer. That is
21 durable steps (11 model calls + 10 tool calls). The model is fake and the tool is trivial, so
what is left is the cost of making each step durable.

Systems, each at its fastest *durable* setting on SQLite (WAL journal, synchronous=FULL, i.e.
every commit is fsynced before the step counts as done):

* stead, ``SqliteStore(fsync="barriers")`` (the default) and ``fsync="always"``;
* DBOS Transact, SQLite system database, a ``@DBOS.workflow()`` calling ``@DBOS.step()``
  functions ``model`` and ``tool`` in a loop (the database is created in WAL mode before launch,
  since DBOS leaves SQLite's default rollback journal alone);
* LangGraph, ``StateGraph`` with an ``agent`` node, a ``tools`` node and a conditional edge,
  compiled with a ``SqliteSaver`` checkpointer (it switches the file to WAL itself) and invoked
  with ``durability="sync"``, so every super-step is checkpointed before the next one starts.

Beside them, without a target, the Python floor: the same loop's journal written by hand with no
engine (``step_overhead``'s floor), at each of stead's two settings: fdatasync'd at the submission
and the end, as stead's barriers, and fdatasync'd after every commit, as ``fsync="always"`` (the
submission and a row a step: 22 fsyncs a run, where stead commits 13 times). Its speed-up over
each peer is what the machine allows any engine in this loop, and the script prints what each
target asks of stead as a multiple of the floor of the same setting.

Each run gets a fresh database in a fresh temporary directory, per system; opening the
database, migrations and launch happen before the clock starts. Runs are interleaved across
systems (round-robin) so that machine noise hits all of them alike, after warm-up rounds that are
not counted; an untimed run follows each DBOS run, whose disk work slowed the run after it
(``measure``). The figure reported is the median over runs of (run wall time / 21) in ms.

    .venv/bin/python benchmarks/peers.py [--runs 20] [--warmup 2] [--dir PATH] [--nth 1]

``--nth N`` times each system's N-th run on its fresh database instead of its first, the runs
before it untimed on the same setup (stead's open runtime, DBOS's launch, LangGraph's compiled
graph and saver, the floor's connection): a run of a process that has served runs already,
without what each system pays once per setup (statements prepared, caches filled).

Peers are optional: ``pip install -e '.[bench]'`` installs them; a missing one is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import inspect
import logging
import operator
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from rich.console import Console
from rich.table import Table

TOOL_CALLS = 10
STEPS_PER_RUN = 2 * TOOL_CALLS + 1  # 11 model calls + 10 tool calls
FINAL_ANSWER = "done"
PROMPT = "go"

# Targets: stead's speed-up per durable step over *each* peer.
TARGET_BARRIERS = 10.0  # stead default (fsync="barriers")
TARGET_ALWAYS = 5.0  # stead fsync="always"

# Piped output (CI logs, files) would otherwise wrap at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=120)


# --------------------------------------------------------------------------------------------
# The shared workload: one fake model and one trivial tool, identical for every system.
# --------------------------------------------------------------------------------------------


@dataclass
class StepCounter:
    """Counts the model and tool calls a run really made, to check every system did 21 steps."""

    model: int = 0
    tool: int = 0

    def reset(self) -> None:
        self.model = 0
        self.tool = 0

    @property
    def steps(self) -> int:
        return self.model + self.tool


COUNTER = StepCounter()


def fake_model(turn: int) -> dict[str, Any]:
    """The fake model the peers call: a tool call for turns 1..10, then the final answer.

    It answers exactly what stead's ``ScriptedModel`` is scripted to answer (see ``_stead_app``).
    """
    COUNTER.model += 1
    if turn <= TOOL_CALLS:
        n = turn - 1
        return {
            "role": "assistant",
            "tool_call": {"name": "lookup", "arguments": {"i": n}, "id": f"c{n}"},
        }
    return {"role": "assistant", "text": FINAL_ANSWER}


def lookup_tool(i: int) -> dict[str, Any]:
    """The tool every system runs: trivial work, JSON-able result."""
    COUNTER.tool += 1
    return {"i": i}


# --------------------------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------------------------

# One run of a system: set up a fresh database in run_dir (untimed), run the agent loop once
# (timed), check it did the whole workload, and return the timed wall time in seconds.
RunOnce = Callable[[Path, int], float]


@dataclass
class System:
    name: str
    setting: str
    run_once: RunOnce | None
    skipped: str | None = None
    samples_ms_per_step: list[float] = field(default_factory=list)
    #: Whether the run leaves the disk slow for the run after it (see measure).
    leaves_disk_busy: bool = False
    #: Whether measure collects the garbage the systems before left before each run's setup
    #: (see step_overhead.collect_garbage).
    collected: bool = True

    @property
    def median(self) -> float | None:
        if not self.samples_ms_per_step:
            return None
        return statistics.median(self.samples_ms_per_step)


class BenchError(RuntimeError):
    """A system did not run the workload it was asked to run."""


def _check(system: str, output: object, expected_steps: int | None = STEPS_PER_RUN) -> None:
    if output != FINAL_ANSWER:
        raise BenchError(f"{system}: final output {output!r}, expected {FINAL_ANSWER!r}")
    if expected_steps is not None and COUNTER.steps != expected_steps:
        raise BenchError(f"{system}: ran {COUNTER.steps} steps, expected {expected_steps}")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _missing(what: str, exc: BaseException) -> str:
    return f"{what} is not installed ({exc}); install the peers with: pip install -e '.[bench]'"


# --------------------------------------------------------------------------------------------
# stead
# --------------------------------------------------------------------------------------------

_stead_cache: dict[str, Any] = {}


def _stead_app() -> Any:
    """The stead App, built once: ScriptedModel answers by turn, so one instance serves all runs."""
    if "app" in _stead_cache:
        return _stead_cache["app"]
    import stead
    from stead.testing import ScriptedModel

    app = stead.App(agents=[stead_agent(ScriptedModel(stead_script()))])
    _stead_cache["app"] = app
    return app


def stead_script() -> list[Any]:
    """The turns stead's ``ScriptedModel`` answers with: what :func:`fake_model` answers."""
    import stead

    script: list[Any] = [
        [stead.ToolCall(name="lookup", arguments={"i": n}, id=f"c{n}")] for n in range(TOOL_CALLS)
    ]
    script.append(FINAL_ANSWER)
    return script


def stead_agent(model: Any, *, blocking: bool = True) -> Any:
    """The loop's agent on ``model``, its tool a ``safe`` plain function (on the event loop
    when not ``blocking``, else handed to a thread, as stead runs a synchronous tool)."""
    import stead

    @stead.tool(recovery="safe", blocking=blocking)
    def lookup(i: int) -> dict[str, Any]:
        return lookup_tool(i)

    return stead.Agent(
        id="bench",
        version="1",
        model=model,
        instructions="Call lookup until the script says done.",
        tools=[lookup],
        max_turns=50,
    )


def stead_system(fsync: Literal["barriers", "always"], nth: int = 1) -> System:
    """stead at ``fsync``; each timed run is the ``nth`` of a runtime opened on a fresh file
    (the ones before it untimed)."""
    name, setting = "stead", f'SqliteStore(fsync="{fsync}")'
    try:
        import stead

        app = _stead_app()
    except Exception as exc:  # stead is written alongside this script: report, don't crash
        return System(name, setting, None, skipped=f"stead is not usable: {exc!r}")

    async def once(run_dir: Path, n: int) -> float:
        store = stead.SqliteStore(str(run_dir / "stead.db"), fsync=fsync)
        async with await app.open(store) as runtime:
            for k in range(1, nth + 1):
                t0 = time.perf_counter()
                handle = await runtime.submit(
                    "bench", session_id=f"s{n}-{k}", request_id=f"r{n}", prompt=PROMPT
                )
                outcome = await handle.result()
                elapsed = time.perf_counter() - t0
                # ScriptedModel's calls are not counted by COUNTER: check the tool calls only.
                _check(f"stead {setting}", outcome.output, expected_steps=None)
        if COUNTER.tool != TOOL_CALLS * nth:
            raise BenchError(f"stead: ran {COUNTER.tool} tool calls, expected {TOOL_CALLS * nth}")
        return elapsed

    def run_once(run_dir: Path, n: int) -> float:
        return asyncio.run(once(run_dir, n))

    return System(name, setting, run_once)


# --------------------------------------------------------------------------------------------
# DBOS Transact
# --------------------------------------------------------------------------------------------

_dbos_cache: dict[str, Any] = {}


def _dbos_workflow() -> Callable[[str], str]:
    """Register the DBOS workflow and steps once per process (DBOS keeps a global registry)."""
    if "workflow" in _dbos_cache:
        return _dbos_cache["workflow"]  # type: ignore[no-any-return]
    from dbos import DBOS

    @DBOS.step()
    def model(turn: int) -> dict[str, Any]:
        return fake_model(turn)

    @DBOS.step()
    def tool(i: int) -> dict[str, Any]:
        return lookup_tool(i)

    @DBOS.workflow()
    def agent_run(prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        turn = 0
        while True:
            turn += 1
            reply = model(turn)
            messages.append(reply)
            if "tool_call" not in reply:
                return str(reply["text"])
            call = reply["tool_call"]
            result = tool(**call["arguments"])
            messages.append({"role": "tool", "id": call["id"], "content": result})

    _dbos_cache["workflow"] = agent_run
    return agent_run


def sqlite_default_problem(who: str, expression: str) -> str | None:
    """Why ``who`` cannot keep its rows in this Python's SQLite, if a column default it writes
    (``expression``) comes out NULL or fails here; ``None`` if it evaluates."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        try:
            value = conn.execute(f"SELECT {expression}").fetchone()[0]
        except sqlite3.Error as exc:
            outcome = f"fails ({exc})"
        else:
            if value is not None:
                return None
            outcome = "gives NULL"
    return (
        f"{who} fills a NOT NULL column with {expression}, which SQLite "
        f"{sqlite3.sqlite_version} (this Python's sqlite3) {outcome}, so its launch fails; "
        "run the benchmarks on a Python whose sqlite3 has a newer SQLite (check with: python "
        "-c 'import sqlite3; print(sqlite3.sqlite_version)')"
    )


def _dbos_sqlite_problem() -> str | None:
    """DBOS on Python 3.12 and later writes its timestamps with ``unixepoch('subsec')``
    (SQLite 3.42 and later), whatever SQLite the interpreter links: on an older one, such as
    Debian 12's 3.40, ``DBOS.launch`` fails on a NOT NULL constraint. The expression is DBOS's
    own (``dbos._migration``); a release without that helper is not checked here."""
    try:
        from dbos import _migration

        expression = _migration.get_sqlite_timestamp_expr()
    except (ImportError, AttributeError):
        return None
    return sqlite_default_problem(f"DBOS {_version('dbos')}", str(expression))


def dbos_system(nth: int = 1) -> System:
    """DBOS; each timed run is the ``nth`` workflow after a launch on a fresh file."""
    name, setting = "DBOS", "SQLite system db, WAL, synchronous=FULL"
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError as exc:
        return System(name, setting, None, skipped=_missing("dbos", exc))
    problem = _dbos_sqlite_problem()
    if problem is not None:
        return System(name, setting, None, skipped=problem)
    workflow = _dbos_workflow()
    # Keep DBOS quiet and local: no OTLP export, no Conductor; older releases also start an
    # HTTP admin server on launch unless told not to.
    logging.getLogger("dbos").setLevel(logging.WARNING)
    extra: dict[str, Any] = {}
    if "run_admin_server" in DBOSConfig.__annotations__:
        extra["run_admin_server"] = False

    def run_once(run_dir: Path, n: int) -> float:
        db = run_dir / "dbos.sqlite"
        # WAL is persistent in the file; DBOS itself opens SQLite in the default rollback
        # journal mode, which is slower. synchronous stays at SQLite's default, FULL.
        with contextlib.closing(sqlite3.connect(db)) as conn:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise BenchError(f"DBOS: could not put {db} in WAL mode (got {mode!r})")
        config: dict[str, Any] = {
            "name": "stead-peers-bench",
            "system_database_url": f"sqlite:///{db}",
            "enable_otlp": False,
            "log_level": "WARNING",
            **extra,
        }
        DBOS(config=config)  # type: ignore[arg-type]
        try:
            DBOS.launch()
            for _ in range(nth):
                COUNTER.reset()
                t0 = time.perf_counter()
                output = workflow(PROMPT)
                elapsed = time.perf_counter() - t0
                _check(name, output)
        finally:
            DBOS.destroy()
        return elapsed

    return System(name, setting, run_once, leaves_disk_busy=True)


# --------------------------------------------------------------------------------------------
# LangGraph
# --------------------------------------------------------------------------------------------


class AgentState(TypedDict):
    """LangGraph's graph state (module level: LangGraph resolves its annotations by name)."""

    messages: Annotated[list[dict[str, Any]], operator.add]
    turn: int


def langgraph_system(nth: int = 1) -> System:
    """LangGraph; each timed run is the ``nth`` invocation of a graph compiled with a saver on
    a fresh file (each run a thread of its own)."""
    name, setting = "LangGraph", 'SqliteSaver, WAL, synchronous=FULL, durability="sync"'
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError as exc:
        return System(name, setting, None, skipped=_missing("langgraph-checkpoint-sqlite", exc))

    def agent(state: AgentState) -> dict[str, Any]:
        turn = state["turn"] + 1
        return {"messages": [fake_model(turn)], "turn": turn}

    def tools(state: AgentState) -> dict[str, Any]:
        call = state["messages"][-1]["tool_call"]
        result = lookup_tool(**call["arguments"])
        return {"messages": [{"role": "tool", "id": call["id"], "content": result}]}

    def route(state: AgentState) -> str:
        return "tools" if "tool_call" in state["messages"][-1] else END

    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")

    if "durability" not in inspect.signature(builder.compile().invoke).parameters:
        return System(
            name,
            setting,
            None,
            skipped=f"langgraph {_version('langgraph')} has no durability= (needs >= 0.6)",
        )

    def run_once(run_dir: Path, n: int) -> float:
        with contextlib.closing(
            sqlite3.connect(run_dir / "langgraph.sqlite", check_same_thread=False)
        ) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            saver = SqliteSaver(conn)
            saver.setup()
            graph = builder.compile(checkpointer=saver)
            for k in range(1, nth + 1):
                config: Any = {
                    "configurable": {"thread_id": f"t{n}-{k}"},
                    "recursion_limit": 100,
                }
                COUNTER.reset()
                t0 = time.perf_counter()
                state = graph.invoke(
                    {"messages": [{"role": "user", "content": PROMPT}], "turn": 0},
                    config,
                    durability="sync",
                )
                elapsed = time.perf_counter() - t0
                _check(name, state["messages"][-1].get("text"))
        return elapsed

    return System(name, setting, run_once)


# --------------------------------------------------------------------------------------------
# The Python floor: the same run's journal written by hand, with no engine
# --------------------------------------------------------------------------------------------

FLOOR = "Python floor"
FLOOR_SETTINGS = {
    "barriers": "no engine: sqlite3 WAL, fsync at submission and end",
    "always": "no engine: sqlite3 WAL, fsync after every commit",
}


def floor_system(fsync: Literal["barriers", "always"] = "barriers", nth: int = 1) -> System:
    """The journal work of the same loop with no engine at all (``step_overhead``'s floor: a
    row a step, ``json.dumps``, ``sqlite3`` in WAL with ``synchronous=NORMAL``). With
    ``fsync="barriers"`` the WAL is fdatasync'd at the submission and at the run's end, as
    stead's default barriers; with ``"always"`` after every commit (the floor of ``manual``
    tools, whose every row is one), as stead's ``fsync="always"``. It runs in the same
    round-robin as the others, so its figure is what the machine allows any engine here: a
    speed-up over a peer above the floor's own is out of reach. Each timed run is the ``nth``
    on its connection (the ones before it untimed)."""
    name = FLOOR
    setting = FLOOR_SETTINGS[fsync]
    try:
        import step_overhead
    except Exception as exc:  # it imports stead, which is written alongside this script
        return System(name, setting, None, skipped=f"the floor is not usable: {exc!r}")
    recovery = "safe" if fsync == "barriers" else "manual"

    def run_once(run_dir: Path, n: int) -> float:
        steps = step_overhead._floor_steps(run_dir, TOOL_CALLS, recovery, collect=False, runs=nth)
        try:
            turn = next(steps)
            while True:
                turn = steps.send(lookup_tool(turn - 1))
        except StopIteration as done:
            ms_per_step = float(done.value)
        if COUNTER.tool != TOOL_CALLS * nth:
            raise BenchError(f"{name}: ran {COUNTER.tool} tool calls, expected {TOOL_CALLS * nth}")
        return ms_per_step * STEPS_PER_RUN / 1000.0

    # Not collected before its runs: its setup (a connection and a table) is too short to absorb
    # what follows a full collection, which here, with the peers imported, read its step about
    # 29% long (52 against 40 µs) while stead's did not move; and it leaves next to no garbage.
    return System(name, setting, run_once, collected=False)


def floor_for(systems: list[System], stead_setting: str) -> System | None:
    """The measured floor of the same fsync setting as stead's ``stead_setting``."""
    fsync = "always" if '"always"' in stead_setting else "barriers"
    return next(
        (
            s
            for s in systems
            if s.name == FLOOR and s.setting == FLOOR_SETTINGS[fsync] and s.median is not None
        ),
        None,
    )


# --------------------------------------------------------------------------------------------
# Driver and report
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _run_dir(base: Path | None, label: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"stead-peers-{label}-", dir=base) as d:
        yield Path(d)


def _fs_type(path: Path) -> str:
    """The filesystem type holding path (from /proc/mounts; 'unknown' elsewhere)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, fstype = "", "unknown"
    target = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) < 3 or len(parts[1]) < len(best):
            continue
        if target == parts[1] or target.startswith(parts[1].rstrip("/") + "/"):
            best, fstype = parts[1], parts[2]
    return fstype


def absorb(run_dir: Path) -> None:
    """An untimed run of the floor with an fdatasync after every commit (see measure)."""
    import step_overhead

    step_overhead.python_floor_ms(run_dir, TOOL_CALLS, "manual")


def measure(
    systems: list[System],
    runs: int,
    warmup: int,
    base: Path | None,
    *,
    absorber: Callable[[Path], None] = absorb,
) -> None:
    """Each system's runs, round-robin. After a run of a system that ``leaves_disk_busy``
    (DBOS), ``absorber`` runs untimed: the run measured right after a DBOS run paid for what it
    left on the disk. In a fixed round-robin that was always LangGraph's; 30 alternating rounds
    in one process read its step 1,654 µs without the absorber and 1,402 with it, and the
    absorber's own run (the floor's 22 fdatasyncs) took 331 µs a step where it takes 215-260
    elsewhere in the round (``HISTORY.md``, a second Intel Xeon at 2.6 GHz)."""
    active = [s for s in systems if s.run_once is not None]
    for rnd in range(warmup + runs):
        for system in active:
            assert system.run_once is not None
            label = system.name.lower()
            with _run_dir(base, label) as run_dir:
                COUNTER.reset()
                if system.collected:
                    gc.collect()
                try:
                    elapsed = system.run_once(run_dir, rnd)
                except Exception as exc:
                    # Reported, not raised: the other systems' figures still come out, and the
                    # failure is printed where its figures would be.
                    system.skipped = f"{system.name} failed: {type(exc).__name__}: {exc}"
                    system.run_once = None
                    system.samples_ms_per_step.clear()
                    continue
            if system.leaves_disk_busy:
                with _run_dir(base, "absorber") as run_dir:
                    absorber(run_dir)
            if rnd >= warmup:
                system.samples_ms_per_step.append(elapsed * 1000.0 / STEPS_PER_RUN)
        active = [s for s in active if s.run_once is not None]


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report(systems: list[System], runs: int, warmup: int, base: Path, nth: int = 1) -> None:
    which = (
        "fresh database per run"
        if nth == 1
        else f"each timed run the {ordinal(nth)} on its fresh database (those before untimed)"
    )
    console.print(
        f"[bold]stead vs peers[/bold]: {TOOL_CALLS}-tool-call agent loop = {STEPS_PER_RUN} "
        f"durable steps/run; {runs} runs after {warmup} warm-up, {which}"
    )
    console.print(
        f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"stead {_version('stead')}, dbos {_version('dbos')}, "
        f"langgraph {_version('langgraph')}, "
        f"langgraph-checkpoint-sqlite {_version('langgraph-checkpoint-sqlite')}"
    )
    fstype = _fs_type(base)
    console.print(f"databases under {base} ({fstype}), {os.cpu_count()} CPUs")
    if fstype in {"tmpfs", "ramfs"}:
        console.print(
            "[yellow]warning: the databases are on a RAM filesystem, fsync costs nothing "
            "there; pass --dir on a disk for meaningful numbers[/yellow]"
        )

    table = Table(title="ms per durable step (median over runs, lower is better)")
    table.add_column("system")
    table.add_column("setting")
    table.add_column("ms/step", justify="right")
    table.add_column("min", justify="right")
    table.add_column("max", justify="right")
    table.add_column("ms/run", justify="right")
    for s in systems:
        if s.skipped is not None or not s.samples_ms_per_step:
            table.add_row(s.name, s.setting, "skipped", "", "", "")
            continue
        med = s.median
        table.add_row(
            s.name,
            s.setting,
            _fmt_ms(med),
            _fmt_ms(min(s.samples_ms_per_step)),
            _fmt_ms(max(s.samples_ms_per_step)),
            _fmt_ms(None if med is None else med * STEPS_PER_RUN),
        )
    console.print(table)
    for s in systems:
        if s.skipped is not None:
            console.print(f"[yellow]skipped {s.name} ({s.setting}): {s.skipped}[/yellow]")

    steads = [s for s in systems if s.name == "stead"]
    floors = [s for s in systems if s.name == FLOOR and s.median is not None]
    peers = [s for s in systems if s.name not in ("stead", FLOOR)]
    ratios = Table(title="stead speed-up per durable step (peer ms/step / stead ms/step)")
    ratios.add_column("stead setting")
    ratios.add_column("vs")
    ratios.add_column("speed-up", justify="right")
    ratios.add_column("target", justify="right")
    ratios.add_column("result")
    for st in steads:
        target = TARGET_ALWAYS if '"always"' in st.setting else TARGET_BARRIERS
        for peer in peers:
            if st.median is None or peer.median is None:
                ratios.add_row(st.setting, peer.name, "-", f">= {target:g}x", "n/a")
                continue
            speedup = peer.median / st.median
            verdict = "[green]PASS[/green]" if speedup >= target else "[red]MISS[/red]"
            ratios.add_row(st.setting, peer.name, f"{speedup:.1f}x", f">= {target:g}x", verdict)
    console.print(ratios)
    if not floors:
        return
    ceiling = Table(
        title="the Python floor (no engine) in the same loop: what the machine allows any engine"
    )
    ceiling.add_column("figure")
    ceiling.add_column("value", justify="right")
    for floor in floors:
        assert floor.median is not None
        for peer in peers:
            if peer.median is not None:
                ceiling.add_row(
                    f"floor ({floor.setting})'s speed-up over {peer.name}",
                    f"{peer.median / floor.median:.1f}x",
                )
    for st in steads:
        same = floor_for(systems, st.setting)
        if st.median is None or same is None or same.median is None:
            continue
        ceiling.add_row(
            f"stead {st.setting} / floor ({same.setting})", f"{st.median / same.median:.2f}x"
        )
        target = TARGET_ALWAYS if '"always"' in st.setting else TARGET_BARRIERS
        for peer in peers:
            if peer.median is not None:
                needed = peer.median / target / same.median
                ceiling.add_row(
                    f"{target:g}x over {peer.name} needs stead {st.setting} at most",
                    f"{needed:.2f}x that floor",
                )
    console.print(ceiling)


def runs_parser(doc: str | None, *, runs: int, warmup: int) -> argparse.ArgumentParser:
    """A parser with ``--runs``, ``--warmup`` and ``--dir`` (a script's description: the first
    line of its ``doc``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--runs", type=int, default=runs, help="measured runs")
    parser.add_argument("--warmup", type=int, default=warmup, help="unmeasured warm-up runs")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where to create the per-run temporary databases (default: the system temp dir; "
        "not tmpfs)",
    )
    return parser


def parse_runs(
    parser: argparse.ArgumentParser, argv: list[str] | None
) -> tuple[argparse.Namespace, Path]:
    """The arguments, checked, and the folder the runs' databases go in (created)."""
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")
    base: Path = args.dir if args.dir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    return args, base


def main(argv: list[str] | None = None) -> int:
    parser = runs_parser(__doc__, runs=20, warmup=2)
    parser.add_argument(
        "--nth",
        type=int,
        default=1,
        help="time each system's N-th run on its fresh database, the ones before it untimed "
        "on the same open runtime, launch, compiled graph or connection (default: 1, the "
        "first)",
    )
    args, base = parse_runs(parser, argv)
    if args.nth < 1:
        parser.error(f"--nth counts a database's runs from 1, got {args.nth}")
    nth = args.nth
    systems = [
        stead_system("barriers", nth),
        stead_system("always", nth),
        dbos_system(nth),
        langgraph_system(nth),
        floor_system("barriers", nth),
        floor_system("always", nth),
    ]
    measure(systems, args.runs, args.warmup, args.dir)
    report(systems, args.runs, args.warmup, base, nth)
    return 0


if __name__ == "__main__":
    sys.exit(main())
