"""SIGKILL in the middle of a streamed model call: the resumed run starts a new attempt, the
final answer is the second attempt's, and a reconnecting subscriber folds to exactly it."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import stead
from stead.testing import fold_text

CHILD = r"""
import asyncio, sys
from pathlib import Path
import stead
from stead.testing import FunctionModel

db, marker = sys.argv[1], Path(sys.argv[2])

def answer(request):
    if not marker.exists():
        marker.write_text("first attempt started")
        return "this first attempt is cut off by a kill and must never be shown " * 4
    return "the second attempt is the answer"

model = FunctionModel(answer, chunk_delay=0.03)
agent = stead.Agent(id="talker", version="1", model=model, stream=True)

async def main():
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        run = await runtime.submit("talker", session_id="s", request_id="r", prompt="talk")
        print((await run.result()).output, flush=True)

asyncio.run(main())
"""


def _deltas(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT COUNT(*) FROM stead_events WHERE kind = 'model_delta'"
        ).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


async def test_sigkill_mid_stream_then_resume(tmp_path: Path) -> None:
    db, marker = tmp_path / "stead.db", tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(marker)])
    deadline = time.monotonic() + 30
    while _deltas(db) < 2:  # some partial text is committed and visible
        assert child.poll() is None, "the child ended before it was killed"
        assert time.monotonic() < deadline, "no deltas were committed"
        await asyncio.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL

    resumed = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "the second attempt is the answer"

    agent = stead.Agent(id="talker", version="1", model=stead.testing.ScriptedModel(["x"]))
    async with await stead.App(agents=[agent]).open(stead.SqliteStore(db)) as runtime:
        (record,) = (await runtime.list_runs()).runs
        run = runtime.get_run(record.id)
        events = [e async for e in run.events()]
        # a subscriber that saw part of the first attempt, lost its connection, and came back
        cut = next(i for i, e in enumerate(events) if e.kind == "model_delta") + 1
        seen = events[:cut]
        assert fold_text(seen).startswith("this first")
        rest = [e async for e in run.events(after=seen[-1].sequence)]
        (op,) = (await run.snapshot()).operations
    starts = [e for e in events if e.kind == "model_attempt_started"]
    assert len(starts) == 2 and starts[0].data["attempt_id"] != starts[1].data["attempt_id"]
    assert fold_text(events) == "the second attempt is the answer"
    assert fold_text(seen + rest) == "the second attempt is the answer"
    assert [e.sequence for e in seen + rest] == [e.sequence for e in events]
    assert op.attempts == 2 and op.status == "completed"
