"""Durable tasks on many ``stead worker`` processes sharing one PostgreSQL schema, under random
SIGKILLs: the task counterpart of the agent failover test in ``tests/test_workers.py``.

The workers run ``tests/_task_worker_app.py``: a parent task (a step, an idempotent and a manual
effect, a one-second durable timer, a ``go`` signal, two child tasks in ``ctx.gather``) whose
steps and effects write "the outside world" to a ledger directory. The test process submits
runs into a few sessions, delivers each run's signal (twice) with a :class:`stead.Client` while
the run waits, resolves the runs whose manual effect a kill interrupted, and SIGKILLs a worker
every second or two (half the time one inside a step or an effect, preferably a manual one),
starting another in its place. Afterwards the ledger is checked against the journal. Set
``STEAD_TASK_FAILOVER_SEED`` to replay a kill schedule (the moments still depend on timing).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import stead
from tests import _task_worker_app as apps
from tests._journal import PgJournal, journal_events
from tests.crash._helpers import OpRow, operations
from tests.test_workers import (
    Worker,
    _store,
    fleet,
    lost_claims,
    stop_fleet,
    until,
)

POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="STEAD_TEST_POSTGRES_URL is not set")

SESSIONS = 10
RUNS_PER_SESSION = 10
WORKERS = 4
#: Seconds between kills (uniform).
KILL_GAP = (1.0, 2.0)
#: The share of kills aimed at a worker that is inside a step or an effect.
AIMED = 0.5
TERMINAL = ("completed", "failed", "cancelled")


@pytest.fixture
def journal() -> Iterator[PgJournal]:
    found = PgJournal(str(POSTGRES_URL), f"task_failover_{uuid.uuid4().hex[:12]}")
    try:
        yield found
    finally:
        found.drop()


def start_worker(journal: PgJournal, folder: Path, ledger: Path) -> Worker:
    """One ``stead worker tests._task_worker_app:app`` process (its stderr in a file)."""
    return Worker.start(
        "tests._task_worker_app:app", journal, folder, env={apps.LEDGER_ENV: str(ledger)}
    )


# -- the outside world ---------------------------------------------------------------------------


@dataclass
class Span:
    """One execution of a step or an effect (``operation_id`` set), or one visit of a process
    in a task body (``operation_id`` None), from its two ledger lines."""

    run_id: str
    operation_id: str | None
    what: str
    pid: int
    nonce: str
    start: float
    done: float | None = None

    def end(self, killed: dict[int, float]) -> float:
        """When it ended: its second line, or its process's death."""
        if self.done is not None:
            return self.done
        assert self.pid in killed, f"a live worker's execution never ended: {self}"
        return killed[self.pid]


def spans(folder: Path) -> list[Span]:
    found: dict[str, Span] = {}
    for line in apps.read_ledger(folder):
        if line["phase"] in ("start", "enter"):
            assert line["nonce"] not in found
            found[line["nonce"]] = Span(
                line["run_id"],
                line["operation_id"],
                line["what"],
                line["pid"],
                line["nonce"],
                line["t"],
            )
        else:
            span = found[line["nonce"]]
            assert span.done is None and span.pid == line["pid"], (span, line)
            span.done = line["t"]
    return sorted(found.values(), key=lambda s: s.start)


class LedgerTail:
    """Follows the ledger files as the workers write them: which executions are under way."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        #: nonce → (pid, what) of each step or effect started and not done.
        self.open: dict[str, tuple[int, str]] = {}

    def poll(self) -> None:
        for path in self.folder.glob("*.jsonl"):
            offset = self.offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            complete, _, _ = chunk.rpartition(b"\n")
            if not complete:
                continue
            self.offsets[path] = offset + len(complete) + 1
            for text in complete.decode().split("\n"):
                line = json.loads(text)
                if line["phase"] == "start":
                    self.open[line["nonce"]] = (line["pid"], line["what"])
                elif line["phase"] == "done":
                    self.open.pop(line["nonce"], None)

    def busy(self, pids: set[int]) -> list[tuple[int, str]]:
        """The steps and effects under way in the processes ``pids``."""
        self.poll()
        return [(pid, what) for pid, what in self.open.values() if pid in pids]


# -- the journal -----------------------------------------------------------------------------


_RUN_COLUMNS = (
    "id",
    "number",
    "session_id",
    "request_id",
    "parent_id",
    "status",
    "outcome",
    "attention_key",
    "started_at",
    "finished_at",
    "claimed_by",
)


def run_rows(journal: PgJournal) -> dict[str, dict[str, Any]]:
    rows = journal.query(f"SELECT {', '.join(_RUN_COLUMNS)} FROM stead_runs")
    return {row[0]: dict(zip(_RUN_COLUMNS, row, strict=True)) for row in rows}


# -- what the test does while the workers run ----------------------------------------------------


@dataclass
class Attention:
    """A needs_attention run as the test found it, before resolving it."""

    run_id: str
    key: str | None
    error: Any
    #: The operation at ``key`` then (None: the journal had none).
    op: OpRow | None
    #: Its executions in the ledger then.
    ran: list[Span]


@dataclass
class Failover:
    """What the test did, for the checks afterwards."""

    #: run id → (session, k, order) of each submitted parent run.
    orders: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    #: run id → where the run waited when its signal came, and what the two deliveries said.
    signalled: dict[str, tuple[str, list[bool]]] = field(default_factory=dict)
    attention: dict[str, Attention] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)
    aimed: list[str] = field(default_factory=list)


async def _signal_waiting_runs(client: stead.Client, journal: PgJournal, world: Failover) -> None:
    """Send each parent its ``go`` once it waits: even runs of a session while they sleep
    (before the wait for the signal; one resumed after its deadline never waits there), odd
    ones at that wait; each twice at once under one request id (the journal keeps one)."""
    while True:
        rows = journal.query(
            "SELECT r.id, o.key FROM stead_runs AS r JOIN stead_operations AS o "
            "ON o.run_id = r.id WHERE r.parent_id IS NULL AND r.status = 'waiting' "
            "AND o.status = 'started' AND o.key IN ('sleep', 'signal:go')"
        )
        for run_id, key in rows:
            if run_id in world.signalled or run_id not in world.orders:
                continue
            _, k, order = world.orders[run_id]
            if key == "sleep" and k % 2 == 1:
                continue  # an odd run: at its wait for the signal
            value, request = apps.go_value(order), f"go-{order}"
            sent = await asyncio.gather(
                client.signal(run_id, "go", value, request_id=request),
                client.signal(run_id, "go", value, request_id=request),
            )
            world.signalled[run_id] = (key, sorted(sent))
        await asyncio.sleep(0.05)


async def _resolve_attention(
    client: stead.Client, journal: PgJournal, world: Failover, ledger: Path
) -> None:
    """Record each needs_attention run with its operation and ledger, then resolve it as a
    person who checked the carrier would. Only an interrupted ``ship`` may need attention;
    anything else ends the test."""
    while True:
        page = await client.list_runs(status="needs_attention", limit=1000)
        for run in page.runs:
            key = run.attention_key
            op = operations(journal, run.id).get(f"{run.id}/{key}")
            ran = [s for s in spans(ledger) if s.operation_id == f"{run.id}/{key}"]
            world.attention[run.id] = Attention(run.id, key, run.error, op, ran)
            assert run.id in world.orders and key == "ship", (
                f"run {run.id} needs attention at {key}, not at an interrupted ship: {run.error}"
            )
            _, _, order = world.orders[run.id]
            await client.resolve(run.id, key, output=apps.shipped_by_hand(order))
        await asyncio.sleep(0.05)


async def _kill_at_random(
    world: Failover, journal: PgJournal, folder: Path, ledger: Path, rng: random.Random
) -> int:
    """SIGKILL a worker every KILL_GAP seconds and start another (WORKERS stay alive), until
    every run is terminal or needs attention. Of the kills, AIMED are aimed at a worker inside
    a step or an effect (if one is within a second), and all of them until one has been."""
    tail = LedgerTail(ledger)
    kills = 0
    while True:
        await asyncio.sleep(rng.uniform(*KILL_GAP))
        rows = run_rows(journal).values()
        parents = [row for row in rows if row["parent_id"] is None]
        settled = (*TERMINAL, "needs_attention")
        if len(parents) == len(world.orders) and all(row["status"] in settled for row in rows):
            return kills
        alive = {w.pid: w for w in world.workers if w.killed_at is None}
        victim = alive[rng.choice(sorted(alive))]
        # Until one kill has landed inside a step or an effect, every kill is aimed (and waits
        # longer for one), so that a run of unlucky draws cannot leave the test testing nothing.
        if not world.aimed or rng.random() < AIMED:
            # inside a manual effect if one comes within half a second, else inside anything
            begun = time.monotonic()
            while time.monotonic() < begun + (1.0 if world.aimed else 5.0):
                busy = tail.busy(set(alive))
                shipping = [(pid, what) for pid, what in busy if what == "ship"]
                if shipping or (busy and time.monotonic() > begun + 0.5):
                    pid, what = rng.choice(sorted(shipping or busy))
                    victim = alive[pid]
                    world.aimed.append(what)
                    break
                await asyncio.sleep(0.002)
        await asyncio.to_thread(victim.kill)
        kills += 1
        replacement = start_worker(journal, folder, ledger)
        world.workers.append(replacement)
        await replacement.ready()


async def test_tasks_survive_workers_killed_at_random_and_no_effect_is_done_twice(
    journal: PgJournal, tmp_path: Path
) -> None:
    seed = int(os.environ.get("STEAD_TASK_FAILOVER_SEED") or time.time_ns() % 2**32)
    print(f"task failover seed: {seed} (replay with STEAD_TASK_FAILOVER_SEED={seed})")
    rng = random.Random(seed)
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    world = Failover()
    total = SESSIONS * RUNS_PER_SESSION
    started = time.monotonic()
    async with fleet() as world.workers:
        world.workers.extend(start_worker(journal, tmp_path, ledger) for _ in range(WORKERS))
        for worker in world.workers:
            await worker.ready()
        up = time.monotonic()
        async with stead.Client(_store(journal)) as client:
            for k in range(RUNS_PER_SESSION):  # each session's runs in order, sessions mixed
                for s in range(SESSIONS):
                    order = f"o{s:02d}-{k}"
                    handle = await client.submit_task(
                        apps.PARENT,
                        order,
                        session_id=f"s{s:02d}",
                        request_id=f"r{k}",
                        enqueue=True,
                    )
                    world.orders[handle.id] = (f"s{s:02d}", k, order)
            helpers = [
                asyncio.create_task(_signal_waiting_runs(client, journal, world)),
                asyncio.create_task(_resolve_attention(client, journal, world, ledger)),
            ]
            killer = asyncio.create_task(_kill_at_random(world, journal, tmp_path, ledger, rng))

            def all_completed() -> bool:
                for task in (*helpers, killer):  # a delivery or a resolution that failed
                    if task.done() and (task is not killer or task.exception()):
                        task.result()
                rows = run_rows(journal).values()
                return len(rows) == total * (1 + apps.PARTS) and all(
                    row["status"] == "completed" for row in rows
                )

            try:
                try:
                    await until(all_completed, 75, f"all {total} runs to complete", every=0.2)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}; unfinished: {_unfinished(journal)}") from None
                finished = time.monotonic()
                kills = await killer
            finally:
                for task in (*helpers, killer):
                    task.cancel()
                await asyncio.gather(*helpers, killer, return_exceptions=True)
        logs = await stop_fleet(world.workers)
    print(
        f"{total} parent runs, {kills} kills ({len(world.aimed)} aimed inside {world.aimed}), "
        f"{len(world.workers)} workers, {len(world.attention)} needs_attention; workers up in "
        f"{up - started:.1f}s, all completed {finished - up:.1f}s after"
    )
    failed = [line for line in logs.splitlines() if "the store failed" in line]
    assert not failed, f"a worker's store failed {len(failed)} times: {failed[0]}"
    lost = lost_claims(logs)
    print(f"{len(lost)} times a live worker found it had lost a run's claim: {lost}")
    _check(journal, world, spans(ledger))
    assert kills >= 3, f"only {kills} kills landed before the runs were done"


def _unfinished(journal: PgJournal) -> list[tuple[Any, ...]]:
    """What the runs that did not complete were doing (for a timeout's message)."""
    return journal.query(
        "SELECT id, parent_id, session_id, status, attention_key, next_attempt_at, claimed_by, "
        "error FROM stead_runs WHERE status <> 'completed' ORDER BY number LIMIT 20"
    )


# -- the checks ----------------------------------------------------------------------------------


def _check(journal: PgJournal, world: Failover, ledger: list[Span]) -> None:
    killed = {w.pid: w.killed_at for w in world.workers if w.killed_at is not None}
    pids = {w.pid for w in world.workers}
    runs = run_rows(journal)
    ops = operations(journal)
    events = journal_events(journal)
    parents = {run_id: row for run_id, row in runs.items() if row["parent_id"] is None}
    assert set(parents) == set(world.orders)
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in runs.values():
        assert row["status"] == "completed" and row["claimed_by"] is None, row
        if row["parent_id"] is not None:
            children[row["parent_id"]].append(row)

    by_op: dict[str, list[Span]] = defaultdict(list)
    by_run: dict[str, list[Span]] = defaultdict(list)
    for span in ledger:
        assert span.pid in pids, span
        span.end(killed)  # a live worker's execution or visit always ended
        by_run[span.run_id].append(span)
        if span.operation_id is not None:
            by_op[span.operation_id].append(span)
    effects = {op.operation_id: op for op in ops.values() if op.kind in ("step", "effect")}
    assert set(by_op) <= set(effects), "an execution the journal does not know"
    kept_nonce: dict[str, str] = {}

    # Needs attention only where a kill interrupted a manual effect: its intent was committed
    # and its result was not, it ran at most once (by the killed worker: before its first
    # line, possibly), and the person's answer is the result the run went on with.
    for attention in world.attention.values():
        op = attention.op
        assert op is not None and (op.key, op.kind, op.recovery) == ("ship", "effect", "manual")
        assert (op.status, op.result, op.attempts) == ("started", None, 1), attention
        assert len(attention.ran) <= 1 and all(s.pid in killed for s in attention.ran), attention
        now = ops[op.operation_id]
        assert now.result["resolved"] is True and now.attempts == 1, now
        assert by_op[op.operation_id] == attention.ran, "a resolved manual effect ran again"

    # Each step and effect: the execution whose result the journal kept finished and was the
    # last to start; any other started (and ended, or its worker died) before it, in a worker
    # that was killed: a committed result never ran again, an interrupted one ran again only
    # as its policy allows, and never two at once.
    for operation_id, op in effects.items():
        ran = by_op[operation_id]
        assert op.status == "completed", op
        if op.result.get("resolved"):
            assert op.run_id in world.attention and op.key == "ship", op
            continue
        receipt = op.result["output"]
        (kept,) = [s for s in ran if s.nonce == receipt["nonce"]]
        assert kept.done is not None and kept.pid == receipt["pid"], (op, kept)
        kept_nonce[operation_id] = kept.nonce
        for other in ran:
            if other is not kept:
                assert other.pid in killed, f"{operation_id} ran again, not after a kill: {ran}"
                assert other.end(killed) < kept.start, f"{operation_id} ran after its result: {ran}"
        if op.recovery != "safe":
            assert len(ran) <= op.attempts, f"{operation_id}: more executions than intents: {ran}"
        if op.recovery == "manual":
            assert ran == [kept] and op.attempts == 1, f"a manual effect ran twice: {ran}"
        for earlier, later in itertools.pairwise(ran):
            assert earlier.end(killed) < later.start, f"{operation_id} ran twice at once: {ran}"

    # The journal agrees: one effect_started event per recorded attempt, one effect_completed
    # event, and no attempt started after the result.
    seen: dict[str, list[str]] = defaultdict(list)
    for event in events:
        if event.kind in ("effect_started", "effect_completed"):
            seen[f"{event.run_id}/{event.data['key']}"].append(event.kind)
    for operation_id, op in effects.items():
        kinds = seen[operation_id]
        assert kinds == ["effect_started"] * op.attempts + ["effect_completed"], (op, kinds)

    # Every parent completed with the results it built on: its step's and effects' kept
    # executions (or the person's answer), its signal, and each of its children's outputs.
    for run_id, row in parents.items():
        session, _, order = world.orders[run_id]
        output = json.loads(row["outcome"])["output"]
        assert output["order"] == order and output["go"] == apps.go_value(order), output
        for what in ("check", "reserve", "ship"):
            if what == "ship" and run_id in world.attention:
                assert output["ship"] == apps.shipped_by_hand(order), output
            else:
                assert output[what]["nonce"] == kept_nonce[f"{run_id}/{what}"], (what, output)
        owned = children[run_id]
        assert len(owned) == apps.PARTS and all(
            c["session_id"].startswith(f"{session}/") for c in owned
        )
        parts = {part["run_id"]: part["output"] for part in output["parts"]}
        assert set(parts) == {c["id"] for c in owned}, (output, owned)
        for child in owned:
            child_output = json.loads(child["outcome"])["output"]
            assert parts[child["id"]] == child_output
            assert child_output["order"] == order
            assert child_output["pack"]["nonce"] == kept_nonce[f"{child['id']}/pack"]
        assert sorted(p["part"] for p in parts.values()) == list(range(1, apps.PARTS + 1))

    # Each parent's signal was journaled once, however often it was sent.
    assert set(world.signalled) == set(parents)
    received: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event.kind == "signal_received":
            received[event.run_id].append(dict(event.data))
    for run_id, (_, sent) in world.signalled.items():
        order = world.orders[run_id][2]
        assert sent == [False, True], (run_id, sent)
        assert received[run_id] == [{"name": "go", "request_id": f"go-{order}", "number": 1}]

    # One worker at a time executes a run: its visits and executions, in blocks of one
    # worker's, never interleave (each block ended, or its worker was dead, before the next
    # worker entered the run's body).
    for run_id, mine in by_run.items():
        blocks: list[list[Span]] = []
        for span in mine:  # in start order
            if blocks and blocks[-1][0].pid == span.pid:
                blocks[-1].append(span)
            else:
                blocks.append([span])
        for previous, following in itertools.pairwise(blocks):
            end = max(s.end(killed) for s in previous)
            assert end < following[0].start, f"two workers executed run {run_id} at once: {mine}"

    # Per session, one run at a time, in submission order: run k+1 started once run k ended.
    status_at: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for event in events:
        if event.kind == "status":
            status_at[event.run_id].append((event.sequence, event.data["status"]))
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sorted(parents.values(), key=lambda row: row["number"]):
        sessions[row["session_id"]].append(row)
    assert len(sessions) == SESSIONS
    for session, rows in sessions.items():
        assert [world.orders[row["id"]][1] for row in rows] == list(range(RUNS_PER_SESSION))
        for before, after in itertools.pairwise(rows):
            early = f"session {session}: run {after['id']} started before {before['id']} ended"
            assert before["finished_at"] <= after["started_at"], (early, before, after)
            ended = [seq for seq, status in status_at[before["id"]] if status == "completed"]
            began = [seq for seq, status in status_at[after["id"]] if status == "running"]
            assert len(ended) == 1 and began and ended[0] < began[0], (early, before, after)

    # The journal itself: gap-free event sequences; every timer, signal and child wait closed.
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(sequences) + 1)), "a gap in the event sequences"
    waits = [op for op in ops.values() if op.kind in ("timer", "signal", "child")]
    assert len(waits) == len(parents) * (2 + apps.PARTS) and all(
        op.status == "completed" for op in waits
    ), [op for op in waits if op.status != "completed"]
    resumed = [
        e
        for e in events
        if e.kind == "status" and e.data.get("status") == "running" and e.data.get("resumed")
    ]
    cut = [s for s in ledger if s.operation_id is not None and s.done is None]
    visits = [s for s in ledger if s.operation_id is None and s.done is None]
    again = [op for op, ran in by_op.items() if len(ran) > 1]
    print(
        f"{len(resumed)} executions resumed a run another worker had been executing, "
        f"{len(visits)} visits of a task body cut short by a kill, {len(cut)} steps or effects "
        f"cut short ({sorted(s.what for s in cut)}), {len(again)} run again, "
        f"{len(world.attention)} manual effects resolved by a person, signals sent at "
        f"{Counter(where for where, _ in world.signalled.values())}"
    )
    assert resumed, "no kill interrupted a run: the test tested nothing"
