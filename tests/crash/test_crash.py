"""Crash recovery at named boundaries, with a real SIGKILL of a real child process.

Each test runs ``_child.py`` until it kills itself at a boundary of the journal protocol, checks
that it died of SIGKILL, then reopens the same database (in a second child, or in this process
through the public API) and checks the journal, the outside world (the effect ledger) and the
model's call log against DESIGN §3.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import stead

from .._journal import PgJournal, journal_events
from . import _child
from ._helpers import (
    World,
    check_ledger_against_journal,
    check_store,
    event_types,
    op_by_key,
    operations,
    query,
    run_finished,
    run_killed,
    run_row,
    worlds,
)

TOOL_KEY = "tool:1:call_1_1"
RECEIPT = {"item": "a", "receipt": "receipt-a"}


POSTGRES_URL = os.environ.get("STEAD_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The journal of each test on both backends (PostgreSQL: a schema of its own)."""
    yield from worlds(request.param, tmp_path, "crash")


def open_app(world: World, *, policy: str) -> stead.App:
    return _child.build_app("one_tool", str(world.ledger), str(world.models), policy=policy)


def only_run_id(world: World) -> str:
    rows = query(world.db, "SELECT id FROM stead_runs")
    assert len(rows) == 1, rows
    return rows[0][0]


def done_output(*results: dict[str, str]) -> str:
    return "done: " + " | ".join(json.dumps(r, separators=(",", ":")) for r in results)


async def wait_settled(handle: stead.RunHandle) -> stead.Run:
    for _ in range(1000):
        run = await handle.run()
        if run.status.terminal or run.status == stead.RunStatus.NEEDS_ATTENTION:
            return run
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {handle.id} did not settle: {run.status}")


def test_uninterrupted_run_baseline(world: World) -> None:
    """The baseline the other tests compare with: an uninterrupted run."""
    outcome = run_finished(world, "one_tool", "--policy", "manual")
    assert outcome["status"] == "completed"
    assert outcome["output"] == done_output(RECEIPT)
    assert [e["tool"] for e in world.effects()] == ["act"]
    assert world.model_turns() == [1, 2]


# -- a kill inside the second model call -----------------------------------------------------


@pytest.mark.parametrize("policy", ["safe", "idempotent", "manual"])
def test_kill_inside_second_model_call(world: World, policy: str) -> None:
    run_killed(world, "one_tool", "--policy", policy, "--kill-model-turn", "2")
    run_id = only_run_id(world)
    check_store(world.db)
    assert world.model_turns() == [1, 2]
    assert len(world.effects()) == 1
    assert op_by_key(world.db, run_id, TOOL_KEY).status == "completed"
    assert run_row(world.db, run_id)["status"] == "running"  # a crashed run stays running

    outcome = run_finished(world, "one_tool", "--policy", policy)

    assert outcome["run_id"] == run_id  # the same (session, request) deduplicated to the run
    assert outcome["status"] == "completed"
    assert outcome["output"] == done_output(RECEIPT)
    # the committed tool result was replayed, not executed again, whatever its policy
    effects = world.effects()
    assert len(effects) == 1, effects
    # turn 1 was answered from the journal; turn 2 was asked again
    assert world.model_turns() == [1, 2, 2]
    tool_op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (tool_op.status, tool_op.attempts) == ("completed", 1)
    assert op_by_key(world.db, run_id, "model:1").attempts == 1
    check_store(world.db)
    check_ledger_against_journal(world.db, world.effects())


def test_a_safe_tool_that_kills_its_process_within_its_intents_hold_does_not_loop(
    world: World,
) -> None:
    """A ``safe`` tool's intent is held back for a while, to be written with its result (see
    ``RunContext._hold``); a tool that kills the process within that while leaves no attempt
    of its own to count, after its model call's result was committed (the writers commit what
    waits for company within milliseconds), so every start would replay the model call and die
    in the tool again. The run counts its executions interrupted in a row with nothing new
    committed: the fourth start finds three and sends the run to needs_attention instead. (The
    hold is set to 5 s here and the tool dies 0.5 s in, so that neither a slow disk nor a busy
    machine decides which comes first.)"""
    options = ("--policy", "safe", "--intent-hold", "5", "--kill-tool-after", "0.5")
    for launch in range(3):
        run_killed(world, "one_tool", *options)
        assert len(world.effects()) == launch + 1
    run_id = only_run_id(world)
    assert TOOL_KEY not in operations(world.db, run_id)  # no intent: nothing counted there
    assert op_by_key(world.db, run_id, "model:1").status == "completed"
    outcome = run_finished(world, "one_tool", *options)
    assert outcome["run_id"] == run_id
    assert outcome["status"] == "needs_attention"
    assert outcome["error"]["kind"] == "interrupted"
    assert "interrupted 3 times in a row" in outcome["error"]["reason"]
    assert len(world.effects()) == 3  # not run a fourth time
    assert world.model_turns() == [1]  # its model call was committed once and replayed
    check_store(world.db)


def test_model_request_sent_is_journaled_before_a_kill(world: World) -> None:
    """A model request that went out is an attempt the journal must know about.

    DESIGN §3: interrupted model requests are sent again (the provider may bill twice) and the
    interrupted attempts are counted ("possibly billed"); §1.3: intent before, result after. The
    model here kills its process the moment its turn-2 request starts (the SIGKILL is the proof
    that the request was made), so after the relaunch asks again, ``model:2`` must record two
    attempts.
    """
    run_killed(world, "one_tool", "--policy", "safe", "--kill-model-turn-now", "2")
    run_id = only_run_id(world)
    assert world.model_turns() == [1]  # turn 2 died before logging; its SIGKILL is its record

    outcome = run_finished(world, "one_tool", "--policy", "safe")

    assert outcome["status"] == "completed"
    assert outcome["output"] == done_output(RECEIPT)
    assert world.model_turns() == [1, 2]
    model_2 = operations(world.db, run_id).get(f"{run_id}/model:2")
    assert model_2 is not None
    assert model_2.attempts == 2, (
        "model:2 was requested twice (once in the killed process), but the journal records "
        f"{model_2.attempts} attempt(s): the first request went out before its intent committed"
    )


def test_manual_result_is_durable_before_the_model_sees_it(world: World) -> None:
    """A manual tool that returned, and whose result went out in the next model request, must
    not be "uncertain" after a crash: DESIGN §3 flushes a manual operation's result (a barrier)
    and §1.3 commits results after the work, before the run builds on them. The model kills its
    process the moment the turn-2 request (which carries the tool's result) starts."""
    run_killed(world, "one_tool", "--policy", "manual", "--kill-model-turn-now", "2")
    run_id = only_run_id(world)
    assert len(world.effects()) == 1

    outcome = run_finished(world, "one_tool", "--policy", "manual")

    assert (outcome["status"], outcome["attention_key"]) == ("completed", None), (
        f"the run blocked on {outcome['attention_key']}: the tool's result had been sent to "
        "the model but was not committed when the process died"
    )
    assert outcome["output"] == done_output(RECEIPT)
    assert len(world.effects()) == 1
    assert op_by_key(world.db, run_id, TOOL_KEY).attempts == 1


# -- a kill inside a tool, after its effect ---------------------------------------------------


def test_effect_done_safe_runs_again(world: World) -> None:
    run_killed(world, "one_tool", "--policy", "safe", "--crash", f"effect_done@{TOOL_KEY}")
    run_id = only_run_id(world)
    assert len(world.effects()) == 1
    assert op_by_key(world.db, run_id, TOOL_KEY).status == "started"

    outcome = run_finished(world, "one_tool", "--policy", "safe")

    assert outcome["status"] == "completed"
    assert outcome["output"] == done_output(RECEIPT)
    effects = world.effects()
    assert len(effects) == 2, effects  # run again, exactly once
    assert [e["attempt"] for e in effects] == [1, 2]
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (op.status, op.attempts, op.recovery) == ("completed", 2, "safe")
    assert world.model_turns() == [1, 2]  # model:1 was committed before the crash
    check_store(world.db)
    check_ledger_against_journal(world.db, effects)


def test_effect_done_idempotent_runs_again_with_same_operation_id(world: World) -> None:
    run_killed(world, "one_tool", "--policy", "idempotent", "--crash", f"effect_done@{TOOL_KEY}")
    run_id = only_run_id(world)
    assert len(world.effects()) == 1

    outcome = run_finished(world, "one_tool", "--policy", "idempotent")

    assert outcome["status"] == "completed"
    assert outcome["output"] == done_output(RECEIPT)
    effects = world.effects()
    assert len(effects) == 2, effects
    assert effects[0]["operation_id"] == effects[1]["operation_id"] == f"{run_id}/{TOOL_KEY}"
    assert effects[0]["pid"] != effects[1]["pid"]  # really two processes
    assert [e["attempt"] for e in effects] == [1, 2]
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (op.status, op.attempts, op.recovery) == ("completed", 2, "idempotent")
    check_store(world.db)
    check_ledger_against_journal(world.db, effects)


async def test_effect_done_manual_needs_attention_then_resolve(world: World) -> None:
    run_killed(world, "one_tool", "--policy", "manual", "--crash", f"effect_done@{TOOL_KEY}")
    run_id = only_run_id(world)
    assert len(world.effects()) == 1

    # a second process reopens: it must not run the tool, and stops for a person
    outcome = run_finished(world, "one_tool", "--policy", "manual")
    assert outcome["run_id"] == run_id
    assert outcome["status"] == "needs_attention"
    assert outcome["attention_key"] == TOOL_KEY
    assert len(world.effects()) == 1
    assert world.model_turns() == [1]
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (op.status, op.recovery, op.attempts) == ("started", "manual", 1)

    # this process (a third one) reopens, a person resolves with what the outside world shows
    resolved = {"item": "a", "receipt": "checked-by-a-person"}
    app = open_app(world, policy="manual")
    async with await app.open(world.store()) as runtime:
        handle = runtime.get_run(run_id)
        snapshot = await handle.snapshot()
        assert snapshot.run.status == stead.RunStatus.NEEDS_ATTENTION
        assert snapshot.run.attention_key == TOOL_KEY
        await handle.resolve(TOOL_KEY, output=resolved)
        result = await handle.result()

    assert result.output == done_output(resolved)  # the model saw the resolved output
    tool_results = [m for m in result.messages if isinstance(m, stead.ToolResultMessage)]
    assert [json.loads(m.content) for m in tool_results] == [resolved]
    assert len(world.effects()) == 1  # resolving ran nothing
    assert world.model_turns() == [1, 2]
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert op.status == "completed"
    assert op.result["resolved"] is True
    check_store(world.db)
    check_ledger_against_journal(world.db, world.effects())


async def test_manual_intent_reopened_as_safe_stays_blocked(world: World) -> None:
    """The policy saved with the intent wins: later code cannot relax it (DESIGN §1.3)."""
    run_killed(world, "one_tool", "--policy", "manual", "--crash", f"effect_done@{TOOL_KEY}")
    run_id = only_run_id(world)

    app = open_app(world, policy="safe")  # the tool is now registered as safe
    async with await app.open(world.store()) as runtime:
        run = await wait_settled(runtime.get_run(run_id))
        assert run.status == stead.RunStatus.NEEDS_ATTENTION
        assert run.attention_key == TOOL_KEY

    assert len(world.effects()) == 1
    assert world.model_turns() == [1]
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (op.status, op.recovery, op.attempts) == ("started", "manual", 1)

    # a second child with the relaxed registration does not run it either
    outcome = run_finished(world, "one_tool", "--policy", "safe")
    assert outcome["status"] == "needs_attention"
    assert outcome["attention_key"] == TOOL_KEY
    assert len(world.effects()) == 1
    check_store(world.db)


async def test_manual_intent_committed_then_retry_runs_once(world: World) -> None:
    """Killed after the intent was committed, before the effect ran: the outcome is unknown to
    stead, so it blocks; retry() runs the tool exactly once more."""
    run_killed(world, "one_tool", "--policy", "manual", "--crash", f"intent_committed@{TOOL_KEY}")
    run_id = only_run_id(world)
    assert world.effects() == []
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (op.status, op.recovery) == ("started", "manual")

    app = open_app(world, policy="manual")
    async with await app.open(world.store()) as runtime:
        handle = runtime.get_run(run_id)
        run = await wait_settled(handle)
        assert run.status == stead.RunStatus.NEEDS_ATTENTION
        assert run.attention_key == TOOL_KEY
        assert world.effects() == []
        await handle.retry()
        result = await handle.result()

    assert result.output == done_output(RECEIPT)
    effects = world.effects()
    assert len(effects) == 1, effects
    assert effects[0]["operation_id"] == f"{run_id}/{TOOL_KEY}"
    assert effects[0]["attempt"] == 2
    op = op_by_key(world.db, run_id, TOOL_KEY)
    assert (op.status, op.attempts) == ("completed", 2)
    assert world.model_turns() == [1, 2]
    check_store(world.db)
    check_ledger_against_journal(world.db, effects)


# -- a completed run resumed -----------------------------------------------------------------


async def test_completed_run_returns_stored_outcome(world: World) -> None:
    first = run_finished(world, "one_tool", "--policy", "idempotent")
    assert first["status"] == "completed"
    run_id = first["run_id"]
    events_before = len(journal_events(world.db))
    assert world.model_turns() == [1, 2]

    # another process submits the same (session, request): the stored outcome, no model call
    again = run_finished(world, "one_tool", "--policy", "idempotent")
    assert again == first
    assert world.model_turns() == [1, 2]
    assert len(world.effects()) == 1

    # and this process reads it through get_run
    app = open_app(world, policy="idempotent")
    async with await app.open(world.store()) as runtime:
        result = await runtime.get_run(run_id).result()
    assert result.output == first["output"] == done_output(RECEIPT)
    assert world.model_turns() == [1, 2]
    assert len(world.effects()) == 1
    assert len(journal_events(world.db)) == events_before
    check_store(world.db)


# -- fsync modes: a kill right after a commit loses nothing committed ------------------------


@pytest.mark.parametrize("fsync", ["always", "barriers"])
def test_result_committed_survives_kill(world: World, fsync: str) -> None:
    if isinstance(world.db, PgJournal) and fsync == "always":
        pytest.skip("fsync modes are SQLite's; PostgreSQL runs this once")
    # safe: its result commit is not a barrier, so in "barriers" mode it is not flushed
    run_killed(
        world,
        "one_tool",
        "--policy",
        "safe",
        "--fsync",
        fsync,
        "--crash",
        f"result_committed@{TOOL_KEY}",
    )
    run_id = only_run_id(world)
    check_store(world.db)
    ops = operations(world.db, run_id)
    statuses = {op.key: op.status for op in ops.values()}
    assert statuses == {"model:1": "completed", TOOL_KEY: "completed"}
    assert ops[f"{run_id}/{TOOL_KEY}"].result == {
        "output": RECEIPT,
        "failed": False,
        "error": None,
    }
    types = [t for t, _ in event_types(world.db, run_id)]
    assert types == [
        "submitted",
        "status",
        "model_started",
        "model_completed",
        "tool_started",
        "tool_completed",
    ]
    assert len(world.effects()) == 1

    outcome = run_finished(world, "one_tool", "--policy", "safe", "--fsync", fsync)

    assert outcome["status"] == "completed"
    assert outcome["output"] == done_output(RECEIPT)
    assert len(world.effects()) == 1  # the committed result was not redone
    assert world.model_turns() == [1, 2]
    assert op_by_key(world.db, run_id, TOOL_KEY).attempts == 1
    check_store(world.db)
    check_ledger_against_journal(world.db, world.effects())
