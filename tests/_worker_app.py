"""The apps the multi-worker tests (``tests/test_workers.py``) run in ``stead worker`` processes.

    stead worker tests._worker_app:courier --db URL --schema S --lease 1

Each attribute is a function building a :class:`stead.App` (``stead worker`` calls it). The
tools write to "the outside world": a ledger directory (``$STEAD_TEST_LEDGER``) where each
process appends fsync'd JSON lines to a file of its own (``<pid>.jsonl``), one line as a tool
execution starts and one when its effect is done::

    {"operation_id", "tool", "attempt", "pid", "phase": "start"|"done", "nonce", "t"}

``nonce`` names one execution (the same in its two lines and in the result it returns, so the
journal's result can be traced to the execution that produced it); ``t`` is
``time.monotonic()``, one clock for every process of the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import stead
from stead.testing import FunctionModel

LEDGER_ENV = "STEAD_TEST_LEDGER"
#: The fencing test's gate: a directory; the first attempt of ``hold`` waits for a file
#: ``open`` in it.
GATE_ENV = "STEAD_TEST_GATE"
#: Amounts above this need a person's approval before ``ship`` runs (courier) and ``refund``
#: (shop).
APPROVAL_ABOVE = 100


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and force it to disk: it must survive a SIGKILL right after."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


class Ledger:
    """This process's file in the ledger directory; ``None`` directory: record nothing."""

    def __init__(self, folder: str | None) -> None:
        self.path = Path(folder) / f"{os.getpid()}.jsonl" if folder else None

    def record(self, ctx: stead.ToolContext, tool: str, phase: str, nonce: str) -> None:
        if self.path is None:
            return
        append_line(
            self.path,
            {
                "operation_id": ctx.operation_id,
                "tool": tool,
                "attempt": ctx.attempt,
                "pid": os.getpid(),
                "phase": phase,
                "nonce": nonce,
                "t": time.monotonic(),
            },
        )

    def receipt(
        self, ctx: stead.ToolContext, tool: str, nonce: str, **extra: Any
    ) -> dict[str, Any]:
        return {
            "tool": tool,
            "operation_id": ctx.operation_id,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "nonce": nonce,
            **extra,
        }


def read_ledger(folder: Path) -> list[dict[str, Any]]:
    """Every complete line of every process's file, in time order (a line being written as
    it is read is left out)."""
    lines: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        complete = path.read_text(encoding="utf-8").split("\n")[:-1]
        lines.extend(json.loads(line) for line in complete if line.strip())
    return sorted(lines, key=lambda line: line["t"])


def _this_run(request: stead.ModelRequest) -> tuple[str, list[stead.ToolResultMessage]]:
    """The prompt of the run being executed and the tool results since it: a session's later
    runs see the earlier runs' conversation first."""
    last = max(i for i, m in enumerate(request.messages) if isinstance(m, stead.UserMessage))
    prompt = request.messages[last]
    assert isinstance(prompt, stead.UserMessage)
    results = [m for m in request.messages[last + 1 :] if isinstance(m, stead.ToolResultMessage)]
    return prompt.content, results


# -- the failover test: an order pipeline ----------------------------------------------------

COURIER = "courier"


def courier_prompt(order: str, amount: int) -> str:
    return f"ship {order} {amount}"


def courier_output(order: str, results: list[str]) -> str:
    return f"shipped {order}: " + " | ".join(results)


def courier() -> stead.App:
    """Each run: ``reserve`` (idempotent) and ``quote`` (safe, synchronous, in a thread) at
    once, then ``ship`` (manual; an amount above ``APPROVAL_ABOVE`` waits for approval), then
    an answer naming every result the model saw."""
    ledger = Ledger(os.environ.get(LEDGER_ENV))

    async def reserve(order: str, ctx: stead.ToolContext) -> dict[str, Any]:
        """Reserve stock for an order (the warehouse deduplicates by operation id)."""
        nonce = secrets.token_hex(6)
        ledger.record(ctx, "reserve", "start", nonce)
        await asyncio.sleep(0.02)
        ledger.record(ctx, "reserve", "done", nonce)
        return ledger.receipt(ctx, "reserve", nonce, order=order)

    def quote(order: str, ctx: stead.ToolContext) -> dict[str, Any]:
        """Quote a shipping price (a read: safe to repeat)."""
        nonce = secrets.token_hex(6)
        ledger.record(ctx, "quote", "start", nonce)
        time.sleep(0.01)
        ledger.record(ctx, "quote", "done", nonce)
        return ledger.receipt(ctx, "quote", nonce, order=order)

    async def ship(order: str, amount: int, ctx: stead.ToolContext) -> dict[str, Any]:
        """Hand the parcel to the carrier (not repeatable, nothing to deduplicate with)."""
        nonce = secrets.token_hex(6)
        ledger.record(ctx, "ship", "start", nonce)
        await asyncio.sleep(0.03)
        ledger.record(ctx, "ship", "done", nonce)
        return ledger.receipt(ctx, "ship", nonce, order=order, amount=amount)

    async def answer(request: stead.ModelRequest) -> Any:
        await asyncio.sleep(0.002)  # a provider takes a moment
        prompt, results = _this_run(request)
        _, order, amount = prompt.split()
        if not results:
            return [
                stead.ToolCall(name="reserve", arguments={"order": order}),
                stead.ToolCall(name="quote", arguments={"order": order}),
            ]
        if len(results) == 2:
            return [stead.ToolCall(name="ship", arguments={"order": order, "amount": int(amount)})]
        return courier_output(order, [m.content for m in results])

    # Kills land at random, so one call may be interrupted several times: running out of
    # attempts is never what a kill causes here (a manual tool has no retries anyway).
    tools = [
        stead.tool(recovery="idempotent", max_attempts=50)(reserve),
        stead.tool(recovery="safe", max_attempts=50)(quote),
        stead.tool(recovery="manual", approval=lambda args: args["amount"] > APPROVAL_ABOVE)(ship),
    ]
    agent = stead.Agent(
        id=COURIER,
        version="1",
        model=FunctionModel(answer),
        tools=tools,
        max_turns=5,
        model_retry=stead.RetryPolicy(max_attempts=50),
    )
    return stead.App(agents=[agent])


# -- the fencing test: a tool that waits at a gate -------------------------------------------

HOLDER = "holder"


def holder(recovery: Literal["idempotent", "manual"] = "idempotent") -> stead.App:
    """One call of ``hold`` (its first attempt waits, in a thread, until the gate file exists),
    then an answer quoting its result."""
    ledger = Ledger(os.environ.get(LEDGER_ENV))
    gate = Path(os.environ.get(GATE_ENV, "/nonexistent")) / "open"

    def hold(item: str, ctx: stead.ToolContext) -> dict[str, Any]:
        """Do something slow to the outside world."""
        nonce = secrets.token_hex(6)
        ledger.record(ctx, "hold", "start", nonce)
        while ctx.attempt == 1 and not gate.exists():
            time.sleep(0.01)
        ledger.record(ctx, "hold", "done", nonce)
        return ledger.receipt(ctx, "hold", nonce, item=item)

    def answer(request: stead.ModelRequest) -> Any:
        prompt, results = _this_run(request)
        if not results:
            return [stead.ToolCall(name="hold", arguments={"item": prompt})]
        return f"held: {results[0].content}"

    tools = [stead.tool(recovery=recovery, max_attempts=5)(hold)]
    agent = stead.Agent(id=HOLDER, version="1", model=FunctionModel(answer), tools=tools)
    return stead.App(agents=[agent])


def manual_holder() -> stead.App:
    return holder("manual")


#: Set (to anything) in a worker's environment: it SIGSTOPs itself as soon as a tool's intent
#: is committed, before the tool starts (a worker frozen at the worst moment).
STOP_ENV = "STEAD_TEST_STOP_AT_INTENT"


def frozen_manual_holder() -> stead.App:
    """:func:`manual_holder`, in a worker that freezes between an intent and its effect."""
    if os.environ.get(STOP_ENV):
        from stead.runtime import boundaries

        def freeze(boundary: str, key: str) -> None:
            if boundary == "intent_committed" and key.startswith("tool:"):
                os.kill(os.getpid(), signal.SIGSTOP)

        boundaries.install(freeze)
    return holder("manual")


# -- the migrate-store test: a shop with runs in every status --------------------------------

SHOP = "shop"


def shop(
    *,
    fail_first: bool = False,
    hold: Callable[[stead.ToolContext], Awaitable[None]] | None = None,
    ledger: str | None = None,
) -> stead.App:
    """``refund`` (idempotent; above ``APPROVAL_ABOVE`` it waits for approval) and ``ship``
    (manual); a prompt ``broken`` makes the model fail for good when ``fail_first``. ``hold``
    (the SQLite phase, in the test process) is awaited inside a tool once its effect started,
    to interrupt the run there; ``ledger`` is the ledger directory (default
    ``$STEAD_TEST_LEDGER``)."""
    outside = Ledger(ledger or os.environ.get(LEDGER_ENV))

    async def refund(order: str, amount: int, ctx: stead.ToolContext) -> dict[str, Any]:
        """Refund an order."""
        nonce = secrets.token_hex(6)
        outside.record(ctx, "refund", "start", nonce)
        if hold is not None:
            await hold(ctx)
        outside.record(ctx, "refund", "done", nonce)
        return outside.receipt(ctx, "refund", nonce, order=order, amount=amount)

    async def ship(order: str, ctx: stead.ToolContext) -> dict[str, Any]:
        """Ship an order."""
        nonce = secrets.token_hex(6)
        outside.record(ctx, "ship", "start", nonce)
        if hold is not None:
            await hold(ctx)
        outside.record(ctx, "ship", "done", nonce)
        return outside.receipt(ctx, "ship", nonce, order=order)

    def answer(request: stead.ModelRequest) -> Any:
        prompt, results = _this_run(request)
        if prompt == "broken" and fail_first:
            raise stead.ModelError("bad request", retryable=False)
        if results:
            return f"done: {results[-1].content}"
        words = prompt.split()
        if words[0] == "refund":
            return [
                stead.ToolCall(
                    name="refund", arguments={"order": words[1], "amount": int(words[2])}
                )
            ]
        if words[0] == "ship":
            return [stead.ToolCall(name="ship", arguments={"order": words[1]})]
        return f"echo {prompt}"

    tools = [
        stead.tool(recovery="idempotent", approval=lambda args: args["amount"] > APPROVAL_ABOVE)(
            refund
        ),
        stead.tool(recovery="manual")(ship),
    ]
    agent = stead.Agent(id=SHOP, version="1", model=FunctionModel(answer), tools=tools)
    return stead.App(agents=[agent])
