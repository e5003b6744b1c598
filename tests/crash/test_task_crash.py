"""Crash recovery of durable tasks, with a real SIGKILL of a real child process.

Each test runs ``_task_child.py`` until it dies of SIGKILL — at a named boundary of an effect,
or killed by this process while its task waits on a timer or a signal — then relaunches it on
the same journal (the same ``(session_id, request_id)`` deduplicates to the same run) and checks
the run's outcome, the journal and the outside world: the ledger the child appends one line to
per execution of a step or effect, which a crash cannot roll back. Operators act between
launches through a :class:`stead.Client`, with no runtime running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import stead

from .._journal import PgJournal, journal_events
from ._helpers import (
    World,
    connect,
    op_by_key,
    operations,
    parse_outcome,
    query,
    run_row,
    worlds,
)

CHILD = Path(__file__).with_name("_task_child.py")
CHILD_TIMEOUT = 60.0
POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")

PREPARED = {"order": "o-17", "amount": 49}
RECEIPT = {"receipt": "receipt-o-17"}
TIMER_SECONDS = 2.0


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The journal of each test on both backends (PostgreSQL: a schema of its own)."""
    yield from worlds(request.param, tmp_path, "task_crash")


# -- launching the child ---------------------------------------------------------------------


@dataclass
class Launch:
    """One child process that ended: its pid, how it ended and what it printed."""

    pid: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def outcome(self) -> dict[str, Any] | None:
        return parse_outcome(self.stdout)

    def describe(self) -> str:
        return (
            f"child {self.pid} exited {self.returncode}\n--- stdout ---\n{self.stdout}\n"
            f"--- stderr ---\n{self.stderr}"
        )


def argv(world: World, scenario: str, *options: str) -> list[str]:
    where = ["--schema", world.db.schema] if isinstance(world.db, PgJournal) else []
    return [
        sys.executable,
        str(CHILD),
        scenario,
        str(world.db),
        str(world.ledger),
        *where,
        *options,
    ]


def start(world: World, scenario: str, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv(world, scenario, *options), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], printed: str = "") -> Launch:
    """Wait for the child to end and collect what it printed (``printed``: read already)."""
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return Launch(proc.pid, proc.returncode, printed + out, err)


def run_killed(world: World, scenario: str, *options: str) -> Launch:
    """Run a child that must die of SIGKILL (a crash point), and check that it did."""
    launch = finish(start(world, scenario, *options))
    assert launch.returncode == -signal.SIGKILL, launch.describe()
    assert launch.outcome is None, launch.describe()
    return launch


def run_finished(world: World, scenario: str, *options: str) -> tuple[Launch, dict[str, Any]]:
    """Run a child that must exit 0; return it and its outcome line."""
    launch = finish(start(world, scenario, *options))
    assert launch.returncode == 0, launch.describe()
    outcome = launch.outcome
    assert outcome is not None, launch.describe()
    return launch, outcome


def start_waiting(
    world: World, scenario: str, *options: str
) -> tuple[subprocess.Popen[str], dict[str, Any], str]:
    """Start a child and return once it reports its run ``waiting``: the process, the report
    (``run_id``, ``until``) and what it printed so far."""
    proc = start(world, scenario, *options)
    watchdog = threading.Timer(CHILD_TIMEOUT, proc.kill)
    watchdog.start()
    printed = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            printed += line
            if line.startswith("waiting "):
                return proc, json.loads(line.removeprefix("waiting ")), printed
    finally:
        watchdog.cancel()
    raise AssertionError(f"the run never waited\n{finish(proc, printed).describe()}")


def sigkill(proc: subprocess.Popen[str], printed: str) -> Launch:
    proc.send_signal(signal.SIGKILL)
    launch = finish(proc, printed)
    assert launch.returncode == -signal.SIGKILL, launch.describe()
    return launch


# -- reading the world -----------------------------------------------------------------------


def only_run_id(world: World) -> str:
    rows = query(world.db, "SELECT id FROM stead_runs")
    assert len(rows) == 1, rows
    return rows[0][0]


def entry(what: str, run_id: str, pid: int, **extra: Any) -> dict[str, Any]:
    """One ledger line: ``what`` ran as operation ``<run_id>/<what>`` in process ``pid``."""
    return {"what": what, "operation_id": f"{run_id}/{what}", "pid": pid, **extra}


def charged(run_id: str, pid: int, policy: str) -> dict[str, Any]:
    return entry("charge", run_id, pid, policy=policy, amount=49)


def ledger_without(world: World, *fields: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in line.items() if k not in fields} for line in world.effects()]


def checkout_output(charge: dict[str, str] = RECEIPT) -> dict[str, Any]:
    return {"prepared": PREPARED, "charge": charge}


def effect_events(world: World, run_id: str) -> list[tuple[str, str, Any]]:
    """The run's step and effect events: ``(kind, key, attempt)`` for a start, ``(kind, key,
    output)`` for a result."""
    found: list[tuple[str, str, Any]] = []
    for event in journal_events(world.db, run_id):
        if event.kind == "effect_started":
            found.append((event.kind, event.data["key"], event.data["attempt"]))
        elif event.kind == "effect_completed":
            found.append((event.kind, event.data["key"], event.data["output"]))
    return found


def check_journal(world: World) -> None:
    """What must hold in the journal after any of these tests: SQLite integrity, gap-free
    event sequences (a process crash loses no committed event, so none is skipped — also when
    a client writes before the next runtime opens the file), and each step or effect with one
    ``effect_started`` event per recorded attempt and one ``effect_completed`` event if and
    only if it is completed."""
    if not isinstance(world.db, PgJournal):
        with connect(world.db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    events = journal_events(world.db)
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(sequences) + 1)), f"sequences not gap-free: {sequences}"
    for op in operations(world.db).values():
        if op.kind not in ("step", "effect"):
            continue
        mine = [e.kind for e in events if e.run_id == op.run_id and e.data.get("key") == op.key]
        assert mine.count("effect_started") == op.attempts, (op, mine)
        assert mine.count("effect_completed") == (op.status == "completed"), (op, mine)


async def with_client(world: World, act: Any) -> Any:
    """``await act(client)`` with a :class:`stead.Client` on the journal (no runtime runs)."""
    async with stead.Client(world.store()) as client:
        return await act(client)


# -- a kill inside an effect (its intent committed, its result not) --------------------------


@pytest.mark.parametrize("policy", ["safe", "idempotent"])
def test_kill_inside_effect_runs_it_again(world: World, policy: str) -> None:
    """safe: run again; idempotent: run again with the same operation id. Either way once more,
    and the step before it, whose result was committed, is not."""
    killed = run_killed(world, "effect", "--policy", policy, "--crash", "effect_done@charge")
    run_id = only_run_id(world)
    assert world.effects() == [
        entry("prepare", run_id, killed.pid),
        charged(run_id, killed.pid, policy),
    ]
    op = op_by_key(world.db, run_id, "charge")
    assert (op.kind, op.status, op.recovery, op.attempts) == ("effect", "started", policy, 1)
    assert run_row(world.db, run_id)["status"] == "running"  # a crashed run stays running

    again, outcome = run_finished(world, "effect", "--policy", policy)

    assert (outcome["run_id"], outcome["status"]) == (run_id, "completed")
    assert outcome["output"] == checkout_output()
    # exactly one more charge, in the new process, under the same operation id
    assert world.effects() == [
        entry("prepare", run_id, killed.pid),
        charged(run_id, killed.pid, policy),
        charged(run_id, again.pid, policy),
    ]
    assert effect_events(world, run_id) == [
        ("effect_started", "prepare", 1),
        ("effect_completed", "prepare", PREPARED),
        ("effect_started", "charge", 1),
        ("effect_started", "charge", 2),
        ("effect_completed", "charge", RECEIPT),
    ]
    op = op_by_key(world.db, run_id, "charge")
    assert (op.status, op.attempts) == ("completed", 2)
    check_journal(world)


async def test_kill_inside_manual_effect_then_resolve(world: World) -> None:
    """manual: the relaunch runs nothing and stops for a person naming the effect; resolving
    it through a Client makes the resolved output the effect's result, never running it."""
    killed = run_killed(world, "effect", "--policy", "manual", "--crash", "effect_done@charge")
    run_id = only_run_id(world)
    before = [entry("prepare", run_id, killed.pid), charged(run_id, killed.pid, "manual")]
    assert world.effects() == before

    _, outcome = run_finished(world, "effect", "--policy", "manual")
    assert (outcome["run_id"], outcome["status"]) == (run_id, "needs_attention")
    assert outcome["attention_key"] == "charge"
    assert world.effects() == before  # nothing ran again
    op = op_by_key(world.db, run_id, "charge")
    assert (op.status, op.recovery, op.attempts) == ("started", "manual", 1)

    resolved = {"receipt": "checked-by-a-person"}

    async def resolve(client: stead.Client) -> stead.Run:
        handle = client.get_run(run_id)
        run = await handle.run()
        assert (run.status, run.attention_key) == (stead.RunStatus.NEEDS_ATTENTION, "charge")
        await handle.resolve("charge", output=resolved)
        return await handle.run()

    run = await with_client(world, resolve)
    assert (run.status, run.attention_key) == (stead.RunStatus.PENDING, None)
    assert world.effects() == before  # resolving ran nothing

    _, outcome = run_finished(world, "effect", "--policy", "manual")

    assert (outcome["run_id"], outcome["status"]) == (run_id, "completed")
    assert outcome["output"] == checkout_output(resolved)
    assert world.effects() == before  # the effect never ran again
    op = op_by_key(world.db, run_id, "charge")
    assert (op.status, op.attempts) == ("completed", 1)
    assert op.result["output"] == resolved
    assert op.result["resolved"] is True
    assert effect_events(world, run_id) == [
        ("effect_started", "prepare", 1),
        ("effect_completed", "prepare", PREPARED),
        ("effect_started", "charge", 1),
        ("effect_completed", "charge", resolved),
    ]
    check_journal(world)


async def test_kill_inside_manual_effect_then_retry(world: World) -> None:
    """manual, then a person's retry(): the effect runs again exactly once."""
    killed = run_killed(world, "effect", "--policy", "manual", "--crash", "effect_done@charge")
    run_id = only_run_id(world)
    before = [entry("prepare", run_id, killed.pid), charged(run_id, killed.pid, "manual")]

    _, outcome = run_finished(world, "effect", "--policy", "manual")
    assert (outcome["status"], outcome["attention_key"]) == ("needs_attention", "charge")
    assert world.effects() == before

    await with_client(world, lambda client: client.retry(run_id))
    assert world.effects() == before  # a retry from a client runs nothing itself

    retried, outcome = run_finished(world, "effect", "--policy", "manual")

    assert (outcome["run_id"], outcome["status"]) == (run_id, "completed")
    assert outcome["output"] == checkout_output()
    assert world.effects() == [*before, charged(run_id, retried.pid, "manual")]
    op = op_by_key(world.db, run_id, "charge")
    assert (op.status, op.attempts) == ("completed", 2)
    assert effect_events(world, run_id)[-2:] == [
        ("effect_started", "charge", 2),
        ("effect_completed", "charge", RECEIPT),
    ]
    check_journal(world)


# -- a kill after an effect's result committed -----------------------------------------------


@pytest.mark.parametrize("policy", ["safe", "idempotent", "manual"])
def test_kill_after_effect_result_committed(world: World, policy: str) -> None:
    """A committed result is never run again, whatever the policy."""
    killed = run_killed(world, "effect", "--policy", policy, "--crash", "result_committed@charge")
    run_id = only_run_id(world)
    done = [entry("prepare", run_id, killed.pid), charged(run_id, killed.pid, policy)]
    assert world.effects() == done
    op = op_by_key(world.db, run_id, "charge")
    assert (op.status, op.attempts) == ("completed", 1)
    assert op.result["output"] == RECEIPT

    _, outcome = run_finished(world, "effect", "--policy", policy)

    assert (outcome["run_id"], outcome["status"]) == (run_id, "completed")
    assert outcome["output"] == checkout_output()
    assert world.effects() == done  # replayed from the journal, ran exactly once
    assert op_by_key(world.db, run_id, "charge").attempts == 1
    assert effect_events(world, run_id) == [
        ("effect_started", "prepare", 1),
        ("effect_completed", "prepare", PREPARED),
        ("effect_started", "charge", 1),
        ("effect_completed", "charge", RECEIPT),
    ]
    check_journal(world)


# -- a durable timer across a restart (real clock) -------------------------------------------


@pytest.mark.parametrize("relaunch", ["after_deadline", "before_deadline"])
async def test_timer_across_restart(world: World, relaunch: str) -> None:
    """Killed while its task sleeps, relaunched after the deadline: the run continues at once;
    relaunched before it: the run continues at the deadline. Either way the deadline is the
    journaled one (a relaunch does not start the sleep again) and the step before the sleep is
    not redone."""
    proc, waiting, printed = start_waiting(world, "timer", "--sleep", str(TIMER_SECONDS))
    killed = sigkill(proc, printed)
    run_id = waiting["run_id"]
    until = datetime.fromisoformat(waiting["until"])

    assert ledger_without(world, "at") == [entry("before", run_id, killed.pid)]
    slept_from = datetime.fromisoformat(world.effects()[0]["at"])
    # the deadline is the sleep's start + TIMER_SECONDS (stead's clock keeps milliseconds)
    assert -0.002 < (until - slept_from).total_seconds() - TIMER_SECONDS < 0.5, (
        slept_from,
        until,
    )
    # the journal, with no process running, says what the run waits for and until when
    run = await with_client(world, lambda client: client.run_record(run_id))
    assert (run.status, run.next_attempt_at) == (stead.RunStatus.WAITING, until)
    op = op_by_key(world.db, run_id, "sleep")
    assert (op.kind, op.status) == ("timer", "started")

    if relaunch == "after_deadline":
        await asyncio.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()) + 0.1)
    else:
        # halfway: a sleep started again by the relaunch would end a second after the deadline
        await asyncio.sleep(max(0.0, (slept_from - datetime.now(UTC)).total_seconds() + 1.0))
    relaunched_at = datetime.now(UTC)
    relaunched, outcome = run_finished(world, "timer", "--sleep", str(TIMER_SECONDS))

    assert (outcome["run_id"], outcome["status"], outcome["output"]) == (
        run_id,
        "completed",
        "rested",
    )
    assert ledger_without(world, "at") == [
        entry("before", run_id, killed.pid),
        entry("after", run_id, relaunched.pid),
    ]
    woke = datetime.fromisoformat(world.effects()[1]["at"])
    assert woke >= until  # never early
    if relaunch == "after_deadline":
        # promptly: not another TIMER_SECONDS from the relaunch (nor a lease to wait out)
        assert outcome["seconds"] < 0.9, outcome
    else:
        assert relaunched_at < until - timedelta(seconds=0.5), (relaunched_at, until)
        # on time: at the journaled deadline, not a second or more after it
        assert (woke - until).total_seconds() < 0.6, (woke, until)
    assert op_by_key(world.db, run_id, "sleep").status == "completed"
    check_journal(world)


# -- a signal across a restart ---------------------------------------------------------------


async def test_signal_across_restart(world: World) -> None:
    """Killed while its task waits for a signal; a Client delivers it (twice, deduplicated)
    with no runtime running; the relaunch completes with its value."""
    proc, waiting, printed = start_waiting(world, "signal")
    killed = sigkill(proc, printed)
    run_id = waiting["run_id"]
    assert waiting["until"] is None  # a signal without a timeout has no deadline
    assert world.effects() == [entry("before", run_id, killed.pid, value=None)]
    assert run_row(world.db, run_id)["status"] == "waiting"

    value = {"approved": True, "by": "ana"}

    async def deliver(client: stead.Client) -> list[bool]:
        first = await client.signal(run_id, "go", value, request_id="go-1")
        second = await client.signal(run_id, "go", value, request_id="go-1")
        with pytest.raises(stead.ConflictError):
            await client.signal(run_id, "go", {"approved": False}, request_id="go-1")
        return [first, second]

    assert await with_client(world, deliver) == [True, False]
    received = [
        dict(e.data) for e in journal_events(world.db, run_id) if e.kind == "signal_received"
    ]
    assert received == [{"name": "go", "request_id": "go-1", "number": 1}]  # journaled once

    relaunched, outcome = run_finished(world, "signal")

    assert (outcome["run_id"], outcome["status"]) == (run_id, "completed")
    assert outcome["output"] == {"got": value}
    assert world.effects() == [
        entry("before", run_id, killed.pid, value=None),
        entry("after", run_id, relaunched.pid, value=value),
    ]
    op = op_by_key(world.db, run_id, "signal:go")
    assert (op.kind, op.status) == ("signal", "completed")
    check_journal(world)


async def test_signal_to_a_live_child(world: World) -> None:
    """A Client in this process signals the run while another process owns the journal."""
    proc, waiting, printed = start_waiting(world, "signal")
    run_id = waiting["run_id"]
    try:
        delivered = await with_client(
            world, lambda client: client.signal(run_id, "go", "now", request_id="go-live")
        )
    finally:
        launch = finish(proc, printed)
    assert delivered is True
    assert launch.returncode == 0, launch.describe()
    outcome = launch.outcome
    assert outcome is not None, launch.describe()
    assert (outcome["run_id"], outcome["status"], outcome["output"]) == (
        run_id,
        "completed",
        {"got": "now"},
    )
    assert world.effects() == [
        entry("before", run_id, launch.pid, value=None),
        entry("after", run_id, launch.pid, value="now"),
    ]
    check_journal(world)


async def test_signal_delivered_before_the_wait(world: World) -> None:
    """Killed before its task reached the wait (inside the safe step before it); a Client
    delivers the signal meanwhile; the relaunch runs the interrupted step again and its wait
    takes the signal that came first."""
    killed = run_killed(world, "signal", "--crash", "effect_done@before")
    run_id = only_run_id(world)
    assert world.effects() == [entry("before", run_id, killed.pid, value=None)]
    assert "signal:go" not in {op.key for op in operations(world.db, run_id).values()}

    delivered = await with_client(
        world, lambda client: client.signal(run_id, "go", 7, request_id="go-early")
    )
    assert delivered is True

    relaunched, outcome = run_finished(world, "signal")

    assert (outcome["run_id"], outcome["status"], outcome["output"]) == (
        run_id,
        "completed",
        {"got": 7},
    )
    assert world.effects() == [
        entry("before", run_id, killed.pid, value=None),  # safe: interrupted, so run again
        entry("before", run_id, relaunched.pid, value=None),
        entry("after", run_id, relaunched.pid, value=7),
    ]
    check_journal(world)


# -- a crash in a task's own code ------------------------------------------------------------


def test_a_task_whose_own_code_kills_the_process_does_not_loop(world: World) -> None:
    """A task whose code kills the process between its operations leaves no intent to count
    attempts by (its step completed; nothing was in flight): every start would replay the
    step and die again. The run counts its executions cut off with nothing new committed: the
    fourth start finds three and sends it to needs_attention instead of executing it again;
    ``stead runs show`` shows the count before that."""
    for _ in range(3):
        run_killed(world, "brittle")
    run_id = only_run_id(world)
    assert op_by_key(world.db, run_id, "before").status == "completed"
    shown = _runs_show(world, run_id)
    assert "resumed 2 times in a row after a crash cut an execution off" in shown
    assert json.loads(_runs_show(world, run_id, "--json"))["run"]["interruptions"] == 2
    _, outcome = run_finished(world, "brittle")
    assert outcome["run_id"] == run_id
    assert outcome["status"] == "needs_attention"
    assert outcome["error"]["kind"] == "interrupted"
    assert "interrupted 3 times in a row" in outcome["error"]["reason"]
    assert [line["what"] for line in world.effects()] == ["before"]  # replayed, not run again
    assert json.loads(_runs_show(world, run_id, "--json"))["run"]["interruptions"] == 3
    check_journal(world)


def _runs_show(world: World, run_id: str, *options: str) -> str:
    """``stead runs show`` of ``run_id``, as an operator runs it."""
    where = (
        ["--db", str(world.db)]
        if isinstance(world.db, Path)
        else ["--db", world.db.url, "--schema", world.db.schema]
    )
    done = subprocess.run(
        [sys.executable, "-m", "stead", "runs", "show", run_id, *where, *options],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "300"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
