"""A journal written by stead 0.1 (tests/fixtures/journal-v1.sqlite) still reads and resumes."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import stead

from ._journal import journal_events
from .fixtures import journal_v1_app
from .fixtures.journal_v1_app import build_app

FIXTURE = Path(__file__).parent / "fixtures" / "journal-v1.sqlite"


async def test_a_version_1_journal_resumes(tmp_path: Path) -> None:
    db = tmp_path / "journal.sqlite"
    shutil.copy(FIXTURE, db)
    journal_v1_app.LEDGER.clear()
    app = build_app()
    async with await app.open(stead.SqliteStore(db)) as runtime:
        done = (await runtime.list_runs(session_id="fixture-done")).runs[0]
        crashed = (await runtime.list_runs(session_id="fixture-crash")).runs[0]
        # the interrupted idempotent refund runs again with its original operation id
        outcome = await runtime.get_run(crashed.id).result()
        assert outcome.output == "Refunded 49.00 for order 17."
        refunds = list(journal_v1_app.LEDGER)
        assert refunds == [f"{crashed.id}/tool:2:pay"]
        ops = {op.key: op for op in (await runtime.get_run(crashed.id).snapshot()).operations}
        assert ops["tool:2:pay"].attempts == 2 and ops["tool:2:pay"].status == "completed"
        assert ops["model:2"].attempts == 1  # committed results were replayed, not redone
        # the completed run still answers from its stored outcome
        stored = await runtime.get_run(done.id).result()
        assert stored.output == "Refunded 49.00 for order 17."
        assert [m.kind for m in stored.messages] == [
            "user",
            "assistant",
            "tool_result",
            "assistant",
            "tool_result",
            "assistant",
        ]
        again = await runtime.submit(
            "support",
            session_id="fixture-done",
            request_id="msg-1",
            prompt="Please refund order 17.",
        )
        assert again.id == done.id
    sequences = [e.sequence for e in journal_events(db)]
    assert sequences == list(range(1, len(sequences) + 1))


FIXTURE_V3 = Path(__file__).parent / "fixtures" / "journal-v3.sqlite"


async def test_a_version_3_journal_resumes_and_applies_its_posted_command(tmp_path: Path) -> None:
    from .fixtures import journal_v3_app

    db = tmp_path / "journal.sqlite"
    shutil.copy(FIXTURE_V3, db)
    journal_v3_app.LEDGER.clear()
    async with await journal_v3_app.build_app().open(stead.SqliteStore(db)) as runtime:

        async def only(session: str) -> stead.RunHandle:
            (run,) = (await runtime.list_runs(session_id=session)).runs
            return runtime.get_run(run.id)

        done, crashed = await only("fixture-done"), await only("fixture-crash")
        waiting, wired = await only("fixture-wait"), await only("fixture-wire")
        # the approval posted to the inbox while no owner applied it is applied now, once
        assert (await waiting.result(timeout=10)).output == "Account c9 is closed."
        (interaction,) = await waiting.interactions()
        assert interaction.status == "responded" and interaction.response["reviewer"] == "ana"
        # the interrupted idempotent refund runs again with its original operation id
        assert (await crashed.result(timeout=10)).output == "Refunded 49.00 for order 17."
        # the interrupted manual wire waits for a person, who resolves it
        record = await wired.run()
        assert record.status is stead.RunStatus.NEEDS_ATTENTION
        assert record.attention_key == "tool:1:w1"
        await wired.resolve("tool:1:w1", output="wired 500 (checked by hand)")
        assert (await wired.result(timeout=10)).output == "Wired 500."
        assert sorted(journal_v3_app.LEDGER) == sorted([f"{crashed.id}/tool:2:pay", "close c9"])
        assert (await done.result()).output == "Refunded 49.00 for order 17."
    sequences = [e.sequence for e in journal_events(db)]
    conn = sqlite3.connect(db)
    inbox = conn.execute("SELECT status FROM stead_inbox").fetchall()
    conn.close()
    assert sequences == list(range(1, len(sequences) + 1))
    assert inbox == [("applied",)]
