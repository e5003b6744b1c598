"""Randomized kill harness: SIGKILL a multi-turn agent run at random moments, relaunch until it
completes, and check after every relaunch that the journal and the outside world agree.

The child (``_child.py multi``) runs 12 turns of 1-3 tool calls each (``charge`` is idempotent,
``fetch`` is safe; both append to the ledger and sleep a few ms so kills land inside them). The
parent starts a child, waits for its ``ready`` (store open), sleeps a random delay and kills it
with SIGKILL unless it finished first. It relaunches the same (session, request) until the run
completes, then starts a new request, until at least ``MIN_KILLS`` kills happened.

Set ``STEAD_KILL_SEED`` to replay a seed (the kill moments still depend on timing).
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

import stead

from .._journal import PgJournal
from . import _child
from ._helpers import (
    CHILD_TIMEOUT,
    World,
    check_ledger_against_journal,
    check_store,
    operations,
    parse_outcome,
    query,
    start_child,
)

MIN_KILLS = 50
KILL_WINDOW = 0.45  # seconds after "ready"; the agent takes about 0.4 s on its own
#: On PostgreSQL a launch takes longer (a round trip per commit, and about 0.2 s to report a
#: finished run and close): a wider window, and fewer kills so the suite stays short.
POSTGRES_KILLS, POSTGRES_WINDOW = 30, 0.8
MAX_LAUNCHES_PER_RUN = 40


async def baseline_output(folder: Path) -> str:
    """The same agent run in this process without crashes."""
    app = _child.build_app("multi", str(folder / "ledger.jsonl"), str(folder / "models.jsonl"))
    async with await app.open(stead.SqliteStore(folder / "baseline.db")) as runtime:
        handle = await runtime.submit(
            _child.AGENT_ID, session_id="baseline", request_id="baseline", prompt=_child.PROMPT
        )
        return (await handle.result()).output


def check_after_launch(world: World) -> None:
    check_store(world.db)
    check_ledger_against_journal(world.db, world.effects())
    stuck = query(
        world.db,
        "SELECT id, status, error FROM stead_runs WHERE status IN ('failed', "
        "'needs_attention', 'cancelled')",
    )
    assert not stuck, f"runs stopped without a crash being their policy: {stuck}"


def check_completed(world: World, run_id: str) -> None:
    ops = operations(world.db, run_id).values()
    tools = [op for op in ops if op.kind == "tool"]
    models = [op for op in ops if op.kind == "model"]
    assert len(tools) == _child.multi_expected_tool_calls()
    assert len(models) == _child.MULTI_TURNS + 1
    assert all(op.status == "completed" for op in ops)
    effects = [e for e in world.effects() if e["operation_id"].startswith(f"{run_id}/")]
    assert {e["operation_id"] for e in effects} == {op.operation_id for op in tools}


def run_harness(
    world: World,
    rng: random.Random,
    expected: str,
    *,
    min_kills: int = MIN_KILLS,
    window: float = KILL_WINDOW,
) -> tuple[int, int, int]:
    kills = launches = runs = 0
    while kills < min_kills:
        runs += 1
        session, request = f"session-{runs}", f"request-{runs}"
        for attempt in range(1, MAX_LAUNCHES_PER_RUN + 1):
            launches += 1
            proc = start_child(world, "multi", "--session", session, "--request", request)
            delay = rng.uniform(0.0, window)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
            stdout, stderr = proc.communicate(timeout=CHILD_TIMEOUT)
            where = f"run {runs} launch {attempt} (kill after {delay:.3f} s)"
            if proc.returncode == -signal.SIGKILL:
                kills += 1
            else:
                assert proc.returncode == 0, f"{where}: exit {proc.returncode}\n{stderr}"
            check_after_launch(world)
            if proc.returncode == 0:
                outcome = parse_outcome(stdout)
                assert outcome is not None, f"{where}: no outcome\n{stdout}"
                assert outcome["status"] == "completed", f"{where}: {outcome}"
                assert outcome["output"] == expected, f"{where}: {outcome['output']!r}"
                check_completed(world, outcome["run_id"])
                break
        else:
            raise AssertionError(f"run {runs} did not complete in {MAX_LAUNCHES_PER_RUN} launches")
    return kills, launches, runs


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_random_sigkills_never_lose_or_repeat_committed_work(tmp_path: Path, backend: str) -> None:
    journal: PgJournal | None = None
    if backend == "postgres":
        url = os.environ.get("STEAD_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("STEAD_TEST_POSTGRES_URL is not set")
        journal = PgJournal(url, f"kills_{secrets.token_hex(6)}")
    try:
        _harness(tmp_path, journal)
    finally:
        if journal is not None:
            journal.drop()


def _harness(tmp_path: Path, journal: PgJournal | None) -> None:
    seed = int(os.environ.get("STEAD_KILL_SEED") or time.time_ns() % 2**32)
    print(f"kill harness seed: {seed} (replay with STEAD_KILL_SEED={seed})")
    rng = random.Random(seed)
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    expected = asyncio.run(baseline_output(baseline))
    assert expected.startswith(f"calls={_child.multi_expected_tool_calls()} ")

    world = World.create(tmp_path, journal)
    min_kills, window = (
        (MIN_KILLS, KILL_WINDOW)
        if journal is None
        else (
            POSTGRES_KILLS,
            POSTGRES_WINDOW,
        )
    )
    started = time.monotonic()
    try:
        kills, launches, runs = run_harness(
            world, rng, expected, min_kills=min_kills, window=window
        )
    except AssertionError as exc:
        raise AssertionError(f"kill harness failed (STEAD_KILL_SEED={seed}): {exc}") from exc
    elapsed = time.monotonic() - started
    print(f"{kills} kills over {launches} launches and {runs} runs in {elapsed:.1f} s")
    assert kills >= min_kills
    completed = query(world.db, "SELECT COUNT(*) FROM stead_runs WHERE status = 'completed'")
    assert completed == [(runs,)]
    # kills landed inside tools: some operations needed more than one attempt
    retried = [op for op in operations(world.db).values() if op.attempts > 1]
    repeated = len(world.effects()) - len({e["operation_id"] for e in world.effects()})
    print(f"{len(retried)} operations retried, {repeated} effects repeated")
    assert retried, "no kill interrupted an operation; the harness is not testing anything"
