from __future__ import annotations

from pathlib import Path

import pytest

import stead


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh database path."""
    return str(tmp_path / "stead.db")


def ledger_tool(calls: list[str], *, name: str = "charge", recovery: str = "idempotent"):
    """A side-effecting tool that records its operation id in ``calls``."""

    @stead.tool(name=name, recovery=recovery)  # type: ignore[arg-type]
    async def effect(amount: int, ctx: stead.ToolContext) -> dict[str, object]:
        """Charge an amount."""
        calls.append(ctx.operation_id)
        return {"charged": amount}

    return effect
