"""Hardening that needs real processes: a crash loop, a second owner in another pid namespace,
another process holding the database's write lock."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import stead
from stead.store.sqlite.store import WAL_PREFILL
from stead.testing import ScriptedModel

from ._helpers import World, run_child

SRC = str(Path(stead.__file__).resolve().parent.parent)


def test_a_model_call_that_kills_the_process_runs_out_of_attempts(tmp_path: Path) -> None:
    world = World.create(tmp_path)
    deaths = 0
    for _ in range(6):
        result = run_child(world, "one_tool", "--kill-model-turn-now", "1")
        if result.returncode == 0:
            break
        deaths += 1
    # Retry() allows 3 attempts: three starts died, the fourth does not send the call again.
    assert deaths == 3, result.describe()
    assert result.outcome is not None, result.describe()
    assert result.outcome["status"] == "failed"
    assert "started 3 times and never finished" in result.outcome["error"]["reason"]
    assert world.model_turns() == []  # each call died as it went out


@pytest.mark.parametrize("policy", ["safe", "idempotent"])
def test_a_tool_that_kills_the_process_runs_out_of_attempts(tmp_path: Path, policy: str) -> None:
    world = World.create(tmp_path)
    deaths = 0
    for _ in range(6):
        result = run_child(world, "one_tool", "--policy", policy, "--crash", "effect_done@tool:1:*")
        if result.returncode == 0:
            break
        deaths += 1
    assert deaths == 3, result.describe()
    assert result.outcome is not None, result.describe()
    assert result.outcome["status"] == "needs_attention"
    assert result.outcome["attention_key"].startswith("tool:1:")
    assert "attempt limit is 3" in result.outcome["error"]["reason"]
    assert len(world.effects()) == 3


_OPEN_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {src!r})
    import stead

    async def main():
        try:
            rt = await stead.App(agents=[]).open(stead.SqliteStore({db!r}))
        except stead.OwnershipError as exc:
            print("refused:", exc)
            return 3
        await rt.close()
        print("took over")
        return 0

    sys.exit(asyncio.run(main()))
    """
)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
async def test_a_live_owner_is_not_taken_over_from_another_pid_namespace(tmp_path: Path) -> None:
    db = tmp_path / "stead.db"
    probe = subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot create a pid namespace here: {probe.stderr.decode().strip()}")
    async with await stead.App(agents=[]).open(stead.SqliteStore(db)) as runtime:
        script = _OPEN_SCRIPT.format(src=SRC, db=str(db))
        other = await asyncio.to_thread(
            subprocess.run,
            ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert other.returncode == 3, other.stdout + other.stderr
        assert "owned by a live runtime" in other.stdout
        assert runtime.health()["ok"]
    # Once the owner closed, the same process in its namespace opens it.
    again = subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_crashed_owner_is_replaced_at_once(tmp_path: Path) -> None:
    world = World.create(tmp_path)
    killed = run_child(world, "one_tool", "--kill-model-turn-now", "1")
    assert killed.returncode != 0
    started = time.monotonic()
    result = run_child(world, "one_tool")
    assert result.returncode == 0, result.describe()
    assert time.monotonic() - started < 30


_RUN_AND_DIE = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    sys.path.insert(0, {src!r})
    import stead
    from stead.store.sqlite import store
    from stead.testing import ScriptedModel

    store.WAL_PREFILL = int(sys.argv[2])

    async def main():
        agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))
        runtime = await stead.App(agents=[agent]).open(stead.SqliteStore(sys.argv[1]))
        run = await runtime.submit("a", session_id=sys.argv[3], request_id="r", prompt="hi")
        await run.result(timeout=10)
        print(os.path.getsize(sys.argv[1] + "-wal"), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no checkpoint: the commits stay in the log

    asyncio.run(main())
    """
)


def _run_and_die(db: Path, prefill: int, session: str) -> int:
    """Complete one run in a child that opens ``db`` writing ``prefill`` bytes of the log
    ahead, then kills itself; the log's size when it died."""
    child = subprocess.run(
        [sys.executable, "-c", _RUN_AND_DIE.format(src=SRC), str(db), str(prefill), session],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -9, child.stdout + child.stderr
    return int(child.stdout)


def test_commits_a_killed_owner_left_in_the_log_outlive_the_log_written_ahead(
    tmp_path: Path,
) -> None:
    """A runtime writes the log ahead when it opens (zeros past its end, ``WAL_PREFILL``), and
    a killed owner's commits in it are neither overwritten nor lost: SQLite recovers every
    commit of both owners and stops at the zeros."""
    db = tmp_path / "stead.db"
    left = _run_and_die(db, 0, "s1")  # a log of frames alone, its commits never checkpointed
    assert 0 < left < WAL_PREFILL
    assert _run_and_die(db, WAL_PREFILL, "s2") == WAL_PREFILL  # frames written into the zeros
    with contextlib.closing(sqlite3.connect(db)) as conn:  # SQLite alone recovers the log
        runs = conn.execute("SELECT session_id, status FROM stead_runs ORDER BY session_id")
        assert runs.fetchall() == [("s1", "completed"), ("s2", "completed")]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


_HOLD_LOCK = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("ROLLBACK")
    """
)


async def _hold_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(db), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    line = await asyncio.to_thread(holder.stdout.readline)
    assert line.strip() == "locked"
    return holder


async def _max_loop_gap(stop: asyncio.Event) -> float:
    """The longest the event loop went without running this task (10 ms ticks)."""
    worst, last = 0.0, time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.01)
        now = time.perf_counter()
        worst, last = max(worst, now - last), now
    return worst


async def test_a_lock_held_by_another_process_is_waited_for_off_the_loop(
    tmp_path: Path,
) -> None:
    db = tmp_path / "stead.db"
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        holder = await _hold_lock(db, 1.5)
        stop = asyncio.Event()
        ticker = asyncio.create_task(_max_loop_gap(stop))
        started = time.perf_counter()
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="hi")
        waited = time.perf_counter() - started
        outcome = await run.result(timeout=10)
        stop.set()
        gap = await ticker
        holder.wait(timeout=10)
        holder.stdout.close()  # type: ignore[union-attr]
        assert runtime.health()["ok"]
    assert waited > 1.0  # the submission waited for the lock...
    assert gap < 0.25  # ...while the loop kept running
    assert outcome.output == "ok"


async def test_a_lock_held_past_busy_timeout_fails_closed(tmp_path: Path) -> None:
    db = tmp_path / "stead.db"
    agent = stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))
    store = stead.SqliteStore(db, busy_timeout=0.5)
    async with await stead.App(agents=[agent]).open(store) as runtime:
        holder = await _hold_lock(db, 3)
        with pytest.raises(stead.StorageError, match="locked"):
            await runtime.submit("a", session_id="s", request_id="r", prompt="hi")
        assert not runtime.health()["ok"]
        holder.kill()
        holder.wait(timeout=10)
        holder.stdout.close()  # type: ignore[union-attr]
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        assert (await runtime.list_runs()).runs == []  # nothing was acknowledged or kept
