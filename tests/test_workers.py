"""Many ``stead worker`` processes on one PostgreSQL schema: failover under random SIGKILLs,
fencing of a worker that was stopped past its lease, and workers finishing what
``stead migrate-store`` copied from SQLite.

The workers run the apps of ``tests/_worker_app.py``; their tools write "the outside world" to a
ledger directory (fsync'd JSON lines, a file per process, ``time.monotonic()`` stamps), which is
checked against the journal once the workers are done. Set ``STEAD_WORKERS_SEED`` to replay the
failover test's kill schedule (the moments still depend on timing).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import stead
from tests import _worker_app as apps
from tests._journal import PgJournal, journal_events
from tests.crash._helpers import check_store

POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="STEAD_TEST_POSTGRES_URL is not set")
ROOT = Path(__file__).parent.parent
#: The lease of every worker here (seconds): a dead worker's runs move on this long after.
LEASE = 1.0
_SCRIPT = Path(sys.executable).with_name("stead")
STEAD = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "stead"]


@pytest.fixture
def journal() -> Iterator[PgJournal]:
    found = PgJournal(str(POSTGRES_URL), f"workers_{uuid.uuid4().hex[:12]}")
    try:
        yield found
    finally:
        found.drop()


def _store(journal: PgJournal) -> stead.PostgresStore:
    return stead.PostgresStore(journal.url, schema=journal.schema, lease_seconds=LEASE)


# -- worker processes ----------------------------------------------------------------------------


@dataclass
class Worker:
    """One ``stead worker`` process; its log (stderr) goes to a file."""

    process: subprocess.Popen[str]
    log: Path
    name: str = ""
    #: ``time.monotonic()`` once it was dead of our SIGKILL.
    killed_at: float | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        app: str,
        journal: PgJournal,
        folder: Path,
        *,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
    ) -> Worker:
        log = folder / f"worker-{time.monotonic_ns()}.log"
        with open(log, "w", encoding="utf-8") as err:
            process = subprocess.Popen(
                [
                    *STEAD,
                    "worker",
                    app if ":" in app else f"tests._worker_app:{app}",
                    "--db",
                    journal.url,
                    "--schema",
                    journal.schema,
                    "--lease",
                    str(LEASE),
                    "--concurrency",
                    str(concurrency),
                ],
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        return cls(process, log)

    async def ready(self, timeout: float = 60.0) -> Worker:
        """Wait for its one line ``stead worker NAME ready on ...``."""
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), timeout)
        except TimeoutError:
            self.process.kill()
            raise AssertionError(
                f"worker {self.pid} not ready in {timeout}s: {self.logs()}"
            ) from None
        words = line.split()
        assert words[:2] == ["stead", "worker"] and words[3] == "ready", (
            f"worker {self.pid} said {line!r}: {self.logs()}"
        )
        self.name = words[2]
        assert self.name.split(":")[1] == str(self.pid)
        return self

    def logs(self) -> str:
        return self.log.read_text(encoding="utf-8")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait(10)
        self.killed_at = time.monotonic()

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (the worker drains) and its exit status."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
        return await asyncio.to_thread(self.process.wait, timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.asynccontextmanager
async def fleet() -> AsyncIterator[list[Worker]]:
    """Every worker started inside is gone after it (killed if still running)."""
    workers: list[Worker] = []
    try:
        yield workers
    finally:
        for worker in workers:
            worker.close()


async def until(check: Any, timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll ``await check()`` (or ``check()``) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


# -- reading the outside world and the journal ---------------------------------------------------


@dataclass
class Execution:
    """One execution of a tool, from its ledger lines."""

    operation_id: str
    tool: str
    attempt: int
    pid: int
    nonce: str
    start: float
    done: float | None = None

    @property
    def run_id(self) -> str:
        return self.operation_id.partition("/")[0]


def executions(folder: Path) -> list[Execution]:
    found: dict[str, Execution] = {}
    for line in apps.read_ledger(folder):
        if line["phase"] == "start":
            assert line["nonce"] not in found
            found[line["nonce"]] = Execution(
                line["operation_id"],
                line["tool"],
                line["attempt"],
                line["pid"],
                line["nonce"],
                line["t"],
            )
        else:
            execution = found[line["nonce"]]
            assert execution.done is None and execution.pid == line["pid"]
            execution.done = line["t"]
    return sorted(found.values(), key=lambda e: e.start)


@dataclass(frozen=True)
class Op:
    run_id: str
    key: str
    kind: str
    status: str
    recovery: str
    attempts: int
    result: Any
    input: Any

    @property
    def operation_id(self) -> str:
        return f"{self.run_id}/{self.key}"


def operations(journal: PgJournal) -> dict[str, Op]:
    rows = journal.query(
        "SELECT run_id, key, kind, status, recovery, attempts, result, input FROM stead_operations"
    )
    ops = [
        Op(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else None, json.loads(r[7]))
        for r in rows
    ]
    return {op.operation_id: op for op in ops}


_RUN_ROW = (
    "SELECT id, number, session_id, status, outcome, error, attention_key, started_at, "
    "finished_at, updated_at, claim_epoch, claimed_by FROM stead_runs"
)


def run_rows(journal: PgJournal) -> dict[str, dict[str, Any]]:
    names = [
        "id",
        "number",
        "session_id",
        "status",
        "outcome",
        "error",
        "attention_key",
        "started_at",
        "finished_at",
        "updated_at",
        "claim_epoch",
        "claimed_by",
    ]
    return {row[0]: dict(zip(names, row, strict=True)) for row in journal.query(_RUN_ROW)}


async def stop_fleet(workers: list[Worker]) -> str:
    """SIGTERM the workers still alive (each drains and must exit 0); every worker's log, which
    must hold no error."""
    survivors = [w for w in workers if w.killed_at is None]
    codes = await asyncio.gather(*(w.terminate() for w in survivors))
    for worker, code in zip(survivors, codes, strict=True):
        assert code == 0, f"worker {worker.pid} exited {code} on SIGTERM: {worker.logs()}"
    logs = "".join(w.logs() for w in workers)
    assert " ERROR " not in logs and "Traceback" not in logs, logs
    return logs


def lost_claims(logs: str) -> list[str]:
    """The lines where a live worker found another held a run it was executing."""
    return [
        line
        for line in logs.splitlines()
        if "another worker holds" in line or "lost its lease" in line
    ]


def status_counts(journal: PgJournal) -> dict[str, int]:
    rows = journal.query("SELECT status, COUNT(*) FROM stead_runs GROUP BY status")
    return {status: int(count) for status, count in rows}


# -- 1. failover -----------------------------------------------------------------------------------

SESSIONS = 50
RUNS_PER_SESSION = 10
WORKERS = 4
KILLS = 6
#: The kills land at random points of the work, as fractions of the runs completed: kills at
#: points in time would land fewer, or none, the faster the workers finish.
KILL_POINTS = (0.03, 0.8)


def _amount(session: int, k: int) -> int:
    """Every 7th run or so ships above the approval threshold."""
    return 150 if (session * 3 + k) % 7 == 0 else 40


@dataclass
class Attention:
    """What a needs_attention run looked like when the test resolved it."""

    run_id: str
    key: str
    kind: str | None


@dataclass
class Failover:
    """What the failover test did, for the checks afterwards."""

    orders: dict[str, tuple[str, int]] = field(default_factory=dict)  # run id → (order, amount)
    attention: dict[str, Attention] = field(default_factory=dict)
    approved: set[str] = field(default_factory=set)
    workers: list[Worker] = field(default_factory=list)


async def _answer_approvals(client: stead.Client, world: Failover) -> None:
    while True:
        for pending in await client.list_interactions(status="pending", limit=1000):
            await client.respond(pending.interaction_id, stead.Approve())
            world.approved.add(pending.run_id)
        await asyncio.sleep(0.05)


async def _resolve_attention(client: stead.Client, world: Failover) -> None:
    while True:
        page = await client.list_runs(status="needs_attention", limit=1000)
        for run in page.runs:
            assert run.attention_key is not None, run.error
            world.attention[run.id] = Attention(run.id, run.attention_key, run.error_kind)
            order, _ = world.orders[run.id]
            await client.resolve(
                run.id, run.attention_key, output={"order": order, "shipped_by": "a person"}
            )
        await asyncio.sleep(0.05)


async def _kill_at_random(
    world: Failover, journal: PgJournal, folder: Path, env: dict[str, str], rng: random.Random
) -> int:
    """SIGKILL a random ready worker each time the completed runs pass one of ``KILLS`` random
    points of the work, and start a replacement at once (four processes stay alive); the
    replacements are ready before this returns."""
    total = SESSIONS * RUNS_PER_SESSION
    points = sorted(rng.uniform(*KILL_POINTS) * total for _ in range(KILLS))
    starting: list[asyncio.Task[Worker]] = []

    def ready() -> list[Worker]:
        return [w for w in world.workers if w.killed_at is None and w.name]

    for point in points:
        await until(
            lambda point=point: (
                status_counts(journal).get("completed", 0) >= point and len(ready()) > 1
            ),
            60,
            f"{point:.0f} runs completed, with two workers ready",
        )
        await asyncio.to_thread(rng.choice(ready()).kill)
        replacement = Worker.start(apps.COURIER, journal, folder, env=env)
        world.workers.append(replacement)
        starting.append(asyncio.create_task(replacement.ready()))
    await asyncio.gather(*starting)
    return len(points)


async def test_runs_survive_workers_killed_at_random_and_no_work_is_done_twice(
    journal: PgJournal, tmp_path: Path
) -> None:
    seed = int(os.environ.get("STEAD_WORKERS_SEED") or time.time_ns() % 2**32)
    print(f"failover seed: {seed} (replay with STEAD_WORKERS_SEED={seed})")
    rng = random.Random(seed)
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    env = {apps.LEDGER_ENV: str(ledger)}
    world = Failover()
    started = time.monotonic()
    total = SESSIONS * RUNS_PER_SESSION
    async with fleet() as world.workers:
        world.workers.extend(
            Worker.start(apps.COURIER, journal, tmp_path, env=env) for _ in range(WORKERS)
        )
        for worker in world.workers:
            await worker.ready()
        up = time.monotonic()
        async with stead.Client(_store(journal)) as client:
            gate = asyncio.Semaphore(8)

            async def submit_session(session: int) -> None:
                for k in range(RUNS_PER_SESSION):
                    order, amount = f"o{session:02d}-{k}", _amount(session, k)
                    async with gate:
                        handle = await client.submit(
                            apps.COURIER,
                            session_id=f"s{session:02d}",
                            request_id=f"r{k}",
                            prompt=apps.courier_prompt(order, amount),
                            enqueue=True,
                        )
                    world.orders[handle.id] = (order, amount)

            helpers = [
                asyncio.create_task(_answer_approvals(client, world)),
                asyncio.create_task(_resolve_attention(client, world)),
            ]
            killer = asyncio.create_task(_kill_at_random(world, journal, tmp_path, env, rng))
            try:
                await asyncio.gather(*(submit_session(s) for s in range(SESSIONS)))
                submitted = time.monotonic()
                kills = await killer
                killed = time.monotonic()

                def all_completed() -> bool:
                    for task in helpers:  # an approval or a resolution that failed
                        if task.done():
                            task.result()
                    return status_counts(journal).get("completed") == total

                await until(all_completed, 60, f"all {total} runs to complete", every=0.2)
                finished = time.monotonic()
            finally:
                for task in (*helpers, killer):
                    task.cancel()
                await asyncio.gather(*helpers, killer, return_exceptions=True)
        logs = await stop_fleet(world.workers)
    print(
        f"{total} runs, {kills} kills, {len(world.workers)} workers, "
        f"{len(world.approved)} approvals, {len(world.attention)} needs_attention; workers up in "
        f"{up - started:.1f}s, submitted in {submitted - up:.1f}s, kills over "
        f"{killed - up:.1f}s, all completed {finished - up:.1f}s after the workers were up"
    )
    assert len(world.orders) == total
    killed = sum(worker.killed_at is not None for worker in world.workers)
    assert killed == kills == KILLS, f"{killed} workers were killed, {kills} kills meant"
    lost = lost_claims(logs)
    print(f"{len(lost)} times a live worker lost a run's lease (a stall past the lease): {lost}")
    _check_failover(journal, world, executions(ledger))


def _check_failover(journal: PgJournal, world: Failover, done: list[Execution]) -> None:
    killed = {w.pid: w.killed_at for w in world.workers if w.killed_at is not None}
    pids = {w.pid for w in world.workers}
    runs = run_rows(journal)
    ops = operations(journal)
    assert len(runs) == len(world.orders)

    # Every run completed, with the answer built from the results the model saw.
    for run_id, row in runs.items():
        order, _ = world.orders[run_id]
        assert row["status"] == "completed", row
        output = json.loads(row["outcome"])["output"]
        assert output.startswith(f"shipped {order}: ") and output.count(" | ") == 2, output
        assert row["claimed_by"] is None, row
    # Every approval asked was for an amount over the threshold, and every such run asked.
    assert world.approved == {
        run_id for run_id, (_, amount) in world.orders.items() if amount > apps.APPROVAL_ABOVE
    }

    by_op: dict[str, list[Execution]] = defaultdict(list)
    by_run: dict[str, list[Execution]] = defaultdict(list)
    for execution in done:
        assert execution.pid in pids, execution
        by_op[execution.operation_id].append(execution)
        by_run[execution.run_id].append(execution)
        if execution.done is None:
            assert execution.pid in killed, f"a live worker's execution never ended: {execution}"

    # Needs attention only where a manual tool was interrupted by a kill; the person's answer
    # is what the journal kept, and the tool never ran again.
    for attention in world.attention.values():
        op = ops[f"{attention.run_id}/{attention.key}"]
        assert attention.kind == "needs_attention" and op.input["tool"] == "ship", attention
        assert op.result["resolved"] is True, op
        assert "a person" in json.loads(runs[attention.run_id]["outcome"])["output"]
        # at most once, by a worker that was killed (before its first line, possibly: its
        # intent was committed, then the kill came before the tool wrote anything)
        ran = by_op[op.operation_id]
        assert len(ran) <= 1 and all(e.pid in killed and e.attempt == 1 for e in ran), ran

    tools = [op for op in ops.values() if op.kind == "tool"]
    assert len(tools) == 3 * len(runs) and all(op.status == "completed" for op in tools)
    assert set(by_op) <= {op.operation_id for op in tools}, "an effect the journal does not know"
    for op in tools:
        tool = op.input["tool"]
        ran = by_op[op.operation_id]
        assert op.recovery == {"reserve": "idempotent", "quote": "safe", "ship": "manual"}[tool]
        if op.result.get("resolved"):
            assert op.run_id in world.attention and world.attention[op.run_id].key == op.key
            continue
        # The execution whose result the journal kept: it finished, it is the last one
        # started, and nothing ran the call again after it.
        receipt = op.result["output"]
        (kept,) = [e for e in ran if e.nonce == receipt["nonce"]]
        assert kept.done is not None and (kept.pid, kept.attempt) == (
            receipt["pid"],
            receipt["attempt"],
        )
        assert all(e.start < kept.start for e in ran if e is not kept), (op, ran)
        if op.recovery != "safe":
            # its intent committed before each effect: one effect per recorded attempt
            attempts = [e.attempt for e in ran]
            assert len(set(attempts)) == len(attempts) and max(attempts) == op.attempts, (op, ran)
            assert kept.attempt == op.attempts
        if tool == "ship":
            assert ran == [kept], f"a manual tool ran more than once: {ran}"
        # Two executions of one call never overlapped: the earlier one finished, or its
        # worker was dead, before the next one started.
        for earlier, later in itertools.pairwise(ran):
            end = earlier.done if earlier.done is not None else killed[earlier.pid]
            assert end < later.start, f"{op.operation_id} ran twice at once: {earlier}, {later}"

    # One worker at a time executes a run: its tool activity, in blocks of one worker's
    # executions, never interleaves (each block ended, or its worker was dead, before the
    # next worker started a tool of the run).
    takeovers = returns = 0
    for run_id, ran in by_run.items():
        blocks: list[list[Execution]] = []
        for execution in ran:  # in start order
            if blocks and blocks[-1][0].pid == execution.pid:
                blocks[-1].append(execution)
            else:
                blocks.append([execution])
        for previous, following in itertools.pairwise(blocks):
            end = max(e.done if e.done is not None else killed[e.pid] for e in previous)
            assert end < following[0].start, f"two workers executed run {run_id} at once: {ran}"
            assert previous[0].pid != following[0].pid
            takeovers += previous[0].pid in killed
        workers = [block[0].pid for block in blocks]
        returns += len(workers) != len(set(workers))  # back after another: a lost lease

    # Per session, one run at a time, in order: run k+1 starts once run k has finished.
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sorted(runs.values(), key=lambda row: row["number"]):
        sessions[row["session_id"]].append(row)
    assert len(sessions) == SESSIONS
    for session, rows in sessions.items():
        assert len(rows) == RUNS_PER_SESSION
        for before, after in itertools.pairwise(rows):
            assert before["finished_at"] <= after["started_at"], (session, before, after)

    # The journal itself: gap-free sequences, an event for every recorded attempt.
    check_store(journal)
    resumed = [
        e
        for e in journal_events(journal)
        if e.kind == "status" and e.data.get("status") == "running" and e.data.get("resumed")
    ]
    interrupted = sum(1 for e in done if e.done is None)
    print(
        f"{len(resumed)} executions resumed a run another worker had been executing, "
        f"{takeovers} runs' tools moved on from a killed worker, {interrupted} tool executions "
        f"cut short by a kill, {sum(len(r) > 1 for r in by_op.values())} calls run again, "
        f"{returns} runs back on a worker after another had them"
    )
    assert resumed, "no kill interrupted a run: the test tested nothing"


# -- 2. fencing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("recovery", ["idempotent", "manual"])
async def test_a_stopped_worker_whose_run_was_taken_over_writes_nothing_after_it(
    journal: PgJournal, tmp_path: Path, recovery: str
) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    ledger.mkdir()
    gate.mkdir()
    env = {apps.LEDGER_ENV: str(ledger), apps.GATE_ENV: str(gate)}
    app = "holder" if recovery == "idempotent" else "manual_holder"
    async with contextlib.AsyncExitStack() as stack:
        workers = await stack.enter_async_context(fleet())
        first = Worker.start(app, journal, tmp_path, concurrency=1, env=env)
        workers.append(first)
        await first.ready()  # it creates the schema
        client = await stack.enter_async_context(stead.Client(_store(journal)))
        run = await client.submit(
            apps.HOLDER, session_id="s", request_id="r", prompt="parcel", version="1"
        )
        # its tool runs (its intent is committed) and waits at the gate: stop the worker there
        (started,) = await until(lambda: executions(ledger), 30, "the tool to start")
        assert (started.pid, started.attempt, started.done) == (first.pid, 1, None)
        (claim,) = journal.query(
            "SELECT claimed_by, claim_epoch FROM stead_runs WHERE id = ?", run.id
        )
        assert claim[0] == first.name
        os.kill(first.pid, signal.SIGSTOP)
        await asyncio.sleep(LEASE + 0.5)

        second = Worker.start(app, journal, tmp_path, concurrency=1, env=env)
        workers.append(second)
        await second.ready()
        key = started.operation_id.partition("/")[2]
        if recovery == "idempotent":
            outcome = await client.result(run.id, timeout=30)
            op = operations(journal)[started.operation_id]
            receipt = op.result["output"]
            assert (op.attempts, receipt["pid"], receipt["attempt"]) == (2, second.pid, 2)
            assert receipt["nonce"] in outcome.output and started.nonce not in outcome.output
        else:
            await until(
                lambda: run_rows(journal)[run.id]["status"] == "needs_attention",
                30,
                "the second worker to find the manual call interrupted",
            )
            op = operations(journal)[started.operation_id]
            assert (op.status, op.result, op.attempts) == ("started", None, 1)
            assert run_rows(journal)[run.id]["attention_key"] == key
        row = run_rows(journal)[run.id]
        assert row["claimed_by"] is None and row["claim_epoch"] > claim[1]
        before = _journal_state(journal)

        # The stopped worker wakes up, its tool returns, and it tries to go on.
        (gate / "open").touch()
        os.kill(first.pid, signal.SIGCONT)
        await until(
            lambda: [e for e in executions(ledger) if e.nonce == started.nonce and e.done],
            30,
            "the first worker's tool to return",
        )
        # It finds its claim lost: at its fenced write or its heartbeat (or, if it was stopped
        # inside a transaction, the server ended its session after 5 s: its store failed).
        signs = ("another worker holds it now", "lost its lease", "the store failed")
        lost = await until(
            lambda: [line for line in first.logs().splitlines() if any(s in line for s in signs)],
            30,
            "the first worker to find its claim lost",
        )
        print(f"the first worker: {lost}")
        assert await first.terminate() == 0, first.logs()
        assert _journal_state(journal) == before, "a write of the stopped worker landed"
        assert await second.terminate() == 0, second.logs()
    assert _journal_state(journal) == before
    check_store(journal)
    if recovery == "idempotent":
        ran = [e for e in executions(ledger) if e.operation_id == started.operation_id]
        assert [(e.pid, e.attempt, e.done is not None) for e in ran] == [
            (first.pid, 1, True),
            (second.pid, 2, True),
        ]


async def test_a_worker_frozen_between_an_intent_and_its_effect_never_starts_the_effect_later(
    journal: PgJournal, tmp_path: Path
) -> None:
    """The journal is fenced, and so is the outside world: a worker that wakes up after
    another took its run over (and a person resolved the interrupted call) does not go on to
    perform the effect."""
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    ledger.mkdir()
    gate.mkdir()
    (gate / "open").touch()  # the tool would not wait: only the freeze holds it back
    env = {apps.LEDGER_ENV: str(ledger), apps.GATE_ENV: str(gate)}
    async with contextlib.AsyncExitStack() as stack:
        workers = await stack.enter_async_context(fleet())
        first = Worker.start(
            "frozen_manual_holder",
            journal,
            tmp_path,
            concurrency=1,
            env={**env, apps.STOP_ENV: "1"},
        )
        workers.append(first)
        await first.ready()
        client = await stack.enter_async_context(stead.Client(_store(journal)))
        run = await client.submit(
            apps.HOLDER, session_id="s", request_id="r", prompt="parcel", version="1"
        )

        def frozen() -> bool:
            return Path(f"/proc/{first.pid}/stat").read_text().split()[2] == "T"

        await until(frozen, 30, "the first worker to freeze after the intent committed")
        await asyncio.sleep(LEASE + 0.5)
        second = Worker.start("frozen_manual_holder", journal, tmp_path, concurrency=1, env=env)
        workers.append(second)
        await second.ready()
        handle = client.get_run(run.id)
        await _until_status(handle, stead.RunStatus.NEEDS_ATTENTION)
        key = (await handle.run()).attention_key
        assert key is not None and key.startswith("tool:")
        await handle.resolve(key, output={"shipped": False, "note": "checked: never shipped"})
        outcome = await client.result(run.id, timeout=30)
        assert "never shipped" in outcome.output
        before = _journal_state(journal)

        os.kill(first.pid, signal.SIGCONT)
        await until(
            lambda: "another worker holds it now" in first.logs(),
            30,
            "the first worker to find its claim lost before the effect",
        )
        assert await first.terminate() == 0, first.logs()
        assert await second.terminate() == 0, second.logs()
    assert executions(ledger) == [], "the frozen worker performed the effect after the takeover"
    assert _journal_state(journal) == before


def _journal_state(journal: PgJournal) -> tuple[Any, ...]:
    """Everything a worker writes: runs, operations, events, interactions."""
    return (
        journal.query("SELECT * FROM stead_runs ORDER BY number"),
        journal.query("SELECT * FROM stead_operations ORDER BY run_id, key"),
        journal.query("SELECT * FROM stead_events ORDER BY sequence"),
        journal.query("SELECT * FROM stead_interactions ORDER BY number"),
        journal.query("SELECT next_sequence FROM stead_meta"),
    )


# -- 3. migrate-store, then workers ----------------------------------------------------------------


@dataclass
class Held:
    """The SQLite phase's tool gate: a tool of a session in ``sessions`` waits here forever."""

    sessions: set[str] = field(default_factory=set)
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, ctx: stead.ToolContext) -> None:
        if ctx.session_id in self.sessions:
            self.reached.set()
            await asyncio.Event().wait()


async def _until_status(handle: stead.RunHandle, status: stead.RunStatus) -> None:
    await until(lambda: _is(handle, status), 10, f"run {handle.id} to be {status.value}")


async def _is(handle: stead.RunHandle, status: stead.RunStatus) -> bool:
    return (await handle.status()) is status


async def _sqlite_journal(db: Path, ledger: Path) -> dict[str, str]:
    """A SQLite journal with a run in every status; their ids by name."""
    held = Held()
    ids: dict[str, str] = {}

    def app() -> stead.App:
        return apps.shop(fail_first=True, hold=held, ledger=str(ledger))

    async with await app().open(stead.SqliteStore(db)) as runtime:

        async def submit(name: str, prompt: str, **options: Any) -> stead.RunHandle:
            handle = await runtime.submit(
                apps.SHOP, session_id=name, request_id="1", prompt=prompt, **options
            )
            ids[name] = handle.id
            return handle

        await (await submit("completed", "refund o1 20")).result(timeout=10)
        await _until_status(await submit("waiting", "refund o2 500"), stead.RunStatus.WAITING)
        queued = await runtime.submit(
            apps.SHOP, session_id="waiting", request_id="2", prompt="hello", enqueue=True
        )
        ids["queued"] = queued.id
        with pytest.raises(stead.RunFailed):
            await (await submit("failed", "broken")).result(timeout=10)
        cancelled = await submit("cancelled", "refund o3 900")
        await _until_status(cancelled, stead.RunStatus.WAITING)
        await cancelled.cancel("customer withdrew")
        # a manual tool whose runtime stopped while it ran ...
        held.sessions.add("attention")
        await submit("attention", "ship o4")
        await asyncio.wait_for(held.reached.wait(), 10)
    held.reached.clear()
    # ... is found interrupted by the next runtime: needs_attention
    async with await app().open(stead.SqliteStore(db)) as runtime:
        await _until_status(runtime.get_run(ids["attention"]), stead.RunStatus.NEEDS_ATTENTION)
        # an idempotent tool whose runtime stopped while it ran: left running
        held.sessions.add("running")
        running = await runtime.submit(
            apps.SHOP, session_id="running", request_id="1", prompt="refund o5 30"
        )
        ids["running"] = running.id
        await asyncio.wait_for(held.reached.wait(), 10)
    # submitted with no runtime: pending
    async with stead.Client(stead.SqliteStore(db)) as client:
        pending = await client.submit(
            apps.SHOP, session_id="pending", request_id="1", prompt="hello g", version="1"
        )
        ids["pending"] = pending.id
        statuses = {name: (await client.get_run(i).status()).value for name, i in ids.items()}
    assert statuses == {
        "completed": "completed",
        "waiting": "waiting",
        "queued": "queued",
        "failed": "failed",
        "cancelled": "cancelled",
        "attention": "needs_attention",
        "running": "running",
        "pending": "pending",
    }
    return ids


def _of_runs(journal: PgJournal, run_ids: list[str]) -> tuple[Any, ...]:
    marks = ", ".join("?" for _ in run_ids)
    return (
        journal.query(f"SELECT * FROM stead_runs WHERE id IN ({marks}) ORDER BY number", *run_ids),
        journal.query(
            f"SELECT * FROM stead_operations WHERE run_id IN ({marks}) ORDER BY run_id, key",
            *run_ids,
        ),
        journal.query(
            f"SELECT * FROM stead_events WHERE run_id IN ({marks}) ORDER BY sequence", *run_ids
        ),
        journal.query(
            f"SELECT * FROM stead_interactions WHERE run_id IN ({marks}) ORDER BY number",
            *run_ids,
        ),
    )


async def test_workers_finish_the_runs_migrate_store_copied_from_sqlite(
    journal: PgJournal, tmp_path: Path
) -> None:
    db, ledger = tmp_path / "shop.db", tmp_path / "ledger"
    ledger.mkdir()
    ids = await _sqlite_journal(db, ledger)
    here = os.getpid()
    before_sqlite = executions(ledger)

    moved = await asyncio.to_thread(
        subprocess.run,
        [*STEAD, "migrate-store", str(db), journal.url, "--schema", journal.schema, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert moved.returncode == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert report["verified"] and report["rows"]["stead_runs"] == len(ids)
    finished = [ids["completed"], ids["failed"], ids["cancelled"]]
    untouched = _of_runs(journal, finished)
    first_sequence = journal.query("SELECT next_sequence FROM stead_meta")[0][0]

    env = {apps.LEDGER_ENV: str(ledger)}
    async with fleet() as workers, stead.Client(_store(journal)) as client:
        workers.extend(Worker.start(apps.SHOP, journal, tmp_path, env=env) for _ in range(2))
        for worker in workers:
            await worker.ready()
        (pending,) = await client.list_interactions(status="pending")
        assert (pending.run_id, pending.key) == (ids["waiting"], "approval:1:call_1_1")
        await client.respond(pending.interaction_id, stead.Approve())
        attention = await client.run_record(ids["attention"])
        assert attention.status is stead.RunStatus.NEEDS_ATTENTION
        assert attention.attention_key == "tool:1:call_1_1"
        await client.resolve(ids["attention"], "tool:1:call_1_1", output={"shipped": "by hand"})
        outputs = {
            name: (await client.result(ids[name], timeout=30)).output
            for name in ("waiting", "queued", "attention", "running", "pending")
        }
        codes = [await w.terminate() for w in workers]
        assert codes == [0, 0], [w.logs() for w in workers]
        pids = {w.pid for w in workers}

    ops = operations(journal)
    ran = [e for e in executions(ledger) if e not in before_sqlite]
    by_op = {e.operation_id: e for e in ran}
    assert len(by_op) == len(ran) == 2, ran  # the approved refund, the rerun of the interrupted one
    # the approved refund ran once, in a worker, and the run answered with its result
    refund = by_op[f"{ids['waiting']}/tool:1:call_1_1"]
    assert refund.pid in pids and refund.done is not None and refund.attempt == 1
    assert ops[refund.operation_id].result["output"]["nonce"] == refund.nonce
    assert outputs["waiting"].startswith("done: ") and refund.nonce in outputs["waiting"]
    # the interrupted idempotent refund ran again, as attempt 2, and its result is the worker's
    rerun = by_op[f"{ids['running']}/tool:1:call_1_1"]
    assert rerun.pid in pids and rerun.attempt == 2 and rerun.done is not None
    assert ops[rerun.operation_id].attempts == 2 and rerun.nonce in outputs["running"]
    (interrupted,) = [e for e in before_sqlite if e.operation_id == rerun.operation_id]
    assert (interrupted.pid, interrupted.attempt, interrupted.done) == (here, 1, None)
    # the interrupted manual ship never ran again: the person's answer stands
    (shipped,) = [e for e in executions(ledger) if e.tool == "ship"]
    assert (shipped.pid, shipped.done) == (here, None)
    assert ops[shipped.operation_id].result["resolved"] is True
    assert "by hand" in outputs["attention"]
    assert outputs["queued"] == "echo hello" and outputs["pending"] == "echo hello g"

    # the finished runs are as SQLite left them, and the journal goes on without a gap
    assert _of_runs(journal, finished) == untouched
    rows = run_rows(journal).values()
    assert all(row["claimed_by"] is None for row in rows)  # every claim was given up
    statuses = {row["id"]: row["status"] for row in rows}
    assert statuses == {
        **{i: "completed" for i in ids.values()},
        ids["failed"]: "failed",
        ids["cancelled"]: "cancelled",
    }
    check_store(journal)
    assert journal_events(journal)[-1].sequence >= first_sequence  # the workers' events follow
