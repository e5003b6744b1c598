"""Fail closed: the first storage error poisons the runtime; reopening recovers from intents."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

import stead
from stead._json import JSON
from stead.store.sqlite import SqliteTx
from stead.testing import ScriptedModel


def faulty_store(path: str, *, method: str, key: str) -> stead.SqliteStore:
    """A store whose disk is full for one write: ``method`` of operation ``key``, once."""
    fired = {"done": False}

    class FullDisk(SqliteTx):
        def start_operation(self, **kwargs: Any) -> None:
            if method == "start_operation" and kwargs["key"] == key and not fired["done"]:
                fired["done"] = True
                raise sqlite3.OperationalError("database or disk is full")
            super().start_operation(**kwargs)

        def complete_operation(
            self,
            run_id: str,
            op_key: str,
            result: JSON,
            result_text: str | None = None,
            completed_seq: int | None = None,
            **row: int,
        ) -> bool:
            if method == "complete_operation" and op_key == key and not fired["done"]:
                fired["done"] = True
                raise sqlite3.OperationalError("database or disk is full")
            return super().complete_operation(
                run_id, op_key, result, result_text, completed_seq, **row
            )

    store = stead.SqliteStore(path)
    store.tx_class = FullDisk
    return store


def _app(ledger: list[str], model_calls: list[int], recovery: str) -> stead.App:
    @stead.tool(recovery=recovery)  # type: ignore[call-overload]
    async def pay(amount: int, ctx: stead.ToolContext) -> str:
        """Pay."""
        ledger.append(ctx.operation_id)
        return "paid"

    script = ScriptedModel([[stead.ToolCall(name="pay", arguments={"amount": 5}, id="p")], "done"])

    async def counted(request: stead.ModelRequest) -> stead.ModelResponse:
        model_calls.append(request.turn)
        return await script.complete(request)

    agent = stead.Agent(
        id="a", version="1", model=stead.testing.FunctionModel(counted), tools=[pay]
    )
    return stead.App(agents=[agent])


async def _poisoned_then_reopened(
    db: str, *, method: str, key: str, recovery: str
) -> tuple[list[str], list[int], stead.RunHandle, str]:
    ledger: list[str] = []
    model_calls: list[int] = []
    fatal: list[stead.StorageError] = []
    app = _app(ledger, model_calls, recovery)
    runtime = await app.open(faulty_store(db, method=method, key=key), on_fatal_error=fatal.append)
    try:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        with pytest.raises(stead.StorageError, match="Close and reopen the runtime"):
            await asyncio.wait_for(run.result(), 5)
        # every later call raises the same error, and the callback fired once
        with pytest.raises(stead.StorageError, match="database or disk is full"):
            await runtime.list_runs()
        with pytest.raises(stead.StorageError):
            await runtime.submit("a", session_id="t", request_id="r", prompt="go")
        assert len(fatal) == 1
        assert runtime.health()["ok"] is False
    finally:
        await runtime.close()
    conn = sqlite3.connect(db)
    status = conn.execute("SELECT status FROM stead_runs").fetchone()[0]
    conn.close()
    return ledger, model_calls, run, status


async def test_disk_full_on_a_model_result_write(db: str) -> None:
    ledger, model_calls, run, status = await _poisoned_then_reopened(
        db, method="complete_operation", key="model:1", recovery="idempotent"
    )
    assert status == "running"  # not recorded as a business failure of the run
    assert ledger == []
    app = _app(ledger, model_calls, "idempotent")
    async with await app.open(stead.SqliteStore(db)) as runtime:
        assert (await runtime.get_run(run.id).result()).output == "done"
    assert model_calls == [1, 1, 2]  # the lost response was asked for again
    assert ledger == [f"{run.id}/tool:1:p"]


async def test_a_failed_write_nobody_awaits_is_reported_once_not_as_never_retrieved(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A safe tool's row is a write the run does not wait for: when the commit it rides in
    fails, the store is poisoned and that is what reports it (on_fatal_error, every later
    call); its own future is not logged as an exception never retrieved when it is dropped."""
    import gc
    import logging

    ledger: list[str] = []
    fatal: list[stead.StorageError] = []
    app = _app(ledger, [], "safe")
    store = faulty_store(db, method="start_operation", key="tool:1:p")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        async with await app.open(store, on_fatal_error=fatal.append) as runtime:
            run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
            with pytest.raises(stead.StorageError, match="database or disk is full"):
                await asyncio.wait_for(run.result(), 5)
        reported = len(fatal)
        del runtime, run, store, fatal  # the error's traceback holds the batch, and its futures
        gc.collect()
        await asyncio.sleep(0)
    assert reported == 1
    assert len(ledger) == 1  # the tool ran; the row holding its result is what failed
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()], caplog.text


async def test_disk_full_on_a_tool_intent_runs_nothing(db: str) -> None:
    ledger, _, run, status = await _poisoned_then_reopened(
        db, method="start_operation", key="tool:1:p", recovery="idempotent"
    )
    assert status == "running"
    assert ledger == []  # the effect never started without its intent on disk
    async with await _app(ledger, [], "idempotent").open(stead.SqliteStore(db)) as runtime:
        assert (await runtime.get_run(run.id).result()).output == "done"
    assert ledger == [f"{run.id}/tool:1:p"]


@pytest.mark.parametrize("recovery", ["idempotent", "manual"])
async def test_disk_full_on_a_tool_result(db: str, recovery: str) -> None:
    ledger, _, run, status = await _poisoned_then_reopened(
        db, method="complete_operation", key="tool:1:p", recovery=recovery
    )
    assert status == "running"
    assert ledger == [f"{run.id}/tool:1:p"]  # the effect happened; its result was lost
    async with await _app(ledger, [], recovery).open(stead.SqliteStore(db)) as runtime:
        handle = runtime.get_run(run.id)
        if recovery == "idempotent":
            assert (await handle.result()).output == "done"
            assert ledger == [f"{run.id}/tool:1:p"] * 2  # again, with the same operation id
        else:
            for _ in range(200):
                if await handle.status() is stead.RunStatus.NEEDS_ATTENTION:
                    break
                await asyncio.sleep(0.01)
            record = await handle.run()
            assert record.attention_key == "tool:1:p"
            assert ledger == [f"{run.id}/tool:1:p"]  # manual: nothing runs again


async def test_a_read_only_database_file_is_refused_clearly(tmp_path: Path) -> None:
    db = tmp_path / "stead.db"
    async with await stead.App(agents=[]).open(stead.SqliteStore(db)):
        pass
    if os.geteuid() == 0:  # root ignores file modes; the immutable attribute binds root too
        made = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"cannot make a file read-only for root here: {made.stderr.strip()}")
        undo = ["chattr", "-i", str(db)]
    else:
        db.chmod(0o444)
        undo = ["chmod", "644", str(db)]
    try:
        with pytest.raises(stead.StorageError, match="writable") as caught:
            await stead.App(agents=[]).open(stead.SqliteStore(db))
        assert str(db) in str(caught.value)
    finally:
        subprocess.run(undo, check=True)
