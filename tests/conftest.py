from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stead
from stead.testing import ScriptedModel

from ._journal import PgJournal, fresh_journals


def _sendable(text: str) -> str:
    """``text``, its lone surrogates written as escapes: a report that holds one (a failing
    example of odd text, say) cannot be sent from a pytest-xdist worker, which then dies with
    an internal error instead of reporting the failure."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.longrepr is not None:
        text = str(report.longrepr)
        sendable = _sendable(text)
        if sendable is not text:  # else the report keeps its own form
            report.longrepr = sendable
    report.sections = [(name, _sendable(content)) for name, content in report.sections]


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh database path."""
    return str(tmp_path / "stead.db")


@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | PgJournal]:
    """A fresh journal on each backend: a SQLite path, or a PostgreSQL schema of its own
    (skipped without STEAD_TEST_POSTGRES_URL). Open it with ``tests._journal.open_store``."""
    yield from fresh_journals(request.param, tmp_path, "t")


def ledger_tool(calls: list[str], *, name: str = "charge", recovery: str = "idempotent"):
    """A side-effecting tool that records its operation id in ``calls``."""

    @stead.tool(name=name, recovery=recovery)  # type: ignore[arg-type]
    async def effect(amount: int, ctx: stead.ToolContext) -> dict[str, object]:
        """Charge an amount."""
        calls.append(ctx.operation_id)
        return {"charged": amount}

    return effect


def paused_app(entered: asyncio.Event, gate: asyncio.Event) -> stead.App:
    """Agent ``a``: one call of a tool that sets ``entered`` and waits for ``gate``, then
    ``done``."""

    @stead.tool(recovery="safe")
    async def pause() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "resumed"

    model = ScriptedModel([[stead.ToolCall(name="pause", id="p")], "done"])
    return stead.App(agents=[stead.Agent(id="a", version="1", model=model, tools=[pause])])


async def until_tool_intent_written(run: stead.RunHandle) -> None:
    """Wait until the intent of a :func:`paused_app` run's tool is written: a ``safe`` call's
    intent is held back for a while (``stead.runtime.context.INTENT_HOLD``), and its commit
    comes that long after the tool started. A test that counts transactions waits it out."""
    for _ in range(1000):
        if any(op.key.startswith("tool:") for op in (await run.snapshot()).operations):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the intent of run {run.id}'s tool was never written")


def counted_outcome_reads(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """The run ids ``module._read_outcome`` reads a run's end for, from now on."""
    reads: list[str] = []
    original = module._read_outcome

    def counted(tx: object, run_id: str) -> object:
        reads.append(run_id)
        return original(tx, run_id)

    monkeypatch.setattr(module, "_read_outcome", counted)
    return reads
