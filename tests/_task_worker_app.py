"""The app the task failover test (``tests/test_task_failover.py``) runs in ``stead worker``
processes::

    stead worker tests._task_worker_app:app --db URL --schema S --lease 1

``app`` builds a :class:`stead.App` of two tasks. ``fulfil(order)`` (the parent) does a step
``check`` (safe), an effect ``reserve`` (idempotent) and an effect ``ship`` (manual), sleeps
``SLEEP`` seconds (a durable timer, real clock), waits for the signal ``go``, then runs two
``pack`` tasks (children) in ``ctx.gather`` and returns a summary naming every result it
built on. ``pack({"order", "part"})`` does one effect ``pack`` (idempotent).

Steps and effects write "the outside world": a ledger directory (``$STEAD_TEST_LEDGER``)
where each process appends fsync'd JSON lines to a file of its own (``<pid>.jsonl``), one line
as an execution starts and one when it is done::

    {"run_id", "operation_id", "what", "recovery", "pid", "phase": "start"|"done", "nonce", "t"}

The task bodies write a line as they are entered and one as they are left (returning, or
raising to wait), ``"phase": "enter"|"leave"`` with ``operation_id`` null, so the test sees
when each process executed each run. ``nonce`` names one execution or one visit (the same in
its two lines, and in the receipt an effect returns, so the journal's result can be traced to
the execution that produced it); ``t`` is ``time.monotonic()``, one clock for every process of
the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import stead

LEDGER_ENV = "STEAD_TEST_LEDGER"
PARENT = "fulfil"
CHILD = "pack"
#: Children each parent runs in ``ctx.gather``.
PARTS = 2
#: The parent's durable timer (seconds, real clock).
SLEEP = 1.0
#: How long a step or an effect takes (seconds, uniform): short, but long enough that a kill
#: lands inside one now and then.
EFFECT_SECONDS = (0.004, 0.02)


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and force it to disk: it must survive a SIGKILL right after."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_ledger(folder: Path) -> list[dict[str, Any]]:
    """Every complete line of every process's file, in time order (a line being written as
    it is read, or cut short by a kill, is left out)."""
    lines: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        complete = path.read_text(encoding="utf-8").split("\n")[:-1]
        lines.extend(json.loads(line) for line in complete if line.strip())
    return sorted(lines, key=lambda line: line["t"])


class Ledger:
    """This process's file in the ledger directory; ``None`` directory: record nothing."""

    def __init__(self, folder: str | None) -> None:
        self.path = Path(folder) / f"{os.getpid()}.jsonl" if folder else None

    def record(
        self,
        run_id: str,
        operation_id: str | None,
        what: str,
        recovery: str | None,
        phase: str,
        nonce: str,
    ) -> None:
        if self.path is None:
            return
        append_line(
            self.path,
            {
                "run_id": run_id,
                "operation_id": operation_id,
                "what": what,
                "recovery": recovery,
                "pid": os.getpid(),
                "phase": phase,
                "nonce": nonce,
                "t": time.monotonic(),
            },
        )

    async def execute(self, what: str, recovery: str, operation_id: str) -> dict[str, Any]:
        """One execution of a step or an effect: a start line, a few milliseconds of work, a
        done line; returns the receipt naming it."""
        run_id = operation_id.partition("/")[0]
        nonce = secrets.token_hex(6)
        self.record(run_id, operation_id, what, recovery, "start", nonce)
        await asyncio.sleep(random.uniform(*EFFECT_SECONDS))
        self.record(run_id, operation_id, what, recovery, "done", nonce)
        return {"what": what, "operation_id": operation_id, "pid": os.getpid(), "nonce": nonce}

    @contextlib.contextmanager
    def visit(self, ctx: stead.TaskContext, what: str) -> Iterator[None]:
        """A line as a task body is entered and one as it is left (a kill leaves none)."""
        nonce = secrets.token_hex(6)
        self.record(ctx.run_id, None, what, None, "enter", nonce)
        try:
            yield
        finally:
            self.record(ctx.run_id, None, what, None, "leave", nonce)


def go_value(order: str) -> dict[str, str]:
    """The value of the ``go`` signal the test sends to the run of ``order``."""
    return {"go": order}


def shipped_by_hand(order: str) -> dict[str, Any]:
    """The output a person resolves an interrupted ``ship`` with."""
    return {"what": "ship", "order": order, "resolved_by": "a person"}


def app() -> stead.App:
    """The failover test's tasks (see the module docstring)."""
    ledger = Ledger(os.environ.get(LEDGER_ENV))

    async def check(order: str, operation_id: str) -> dict[str, Any]:
        """Check the order (a read: safe to repeat)."""
        return {**await ledger.execute("check", "safe", operation_id), "order": order}

    async def reserve(order: str, operation_id: str) -> dict[str, Any]:
        """Reserve stock (the warehouse deduplicates by operation id)."""
        return {**await ledger.execute("reserve", "idempotent", operation_id), "order": order}

    async def ship(order: str, operation_id: str) -> dict[str, Any]:
        """Hand the parcel to the carrier (not repeatable, nothing to deduplicate with)."""
        return {**await ledger.execute("ship", "manual", operation_id), "order": order}

    async def pack_part(order: str, part: int, operation_id: str) -> dict[str, Any]:
        """Pack one part of the order (the packing line deduplicates by operation id)."""
        receipt = await ledger.execute("pack", "idempotent", operation_id)
        return {**receipt, "order": order, "part": part}

    @stead.task(name=CHILD, version=1)
    async def pack(ctx: stead.TaskContext, item: dict[str, Any]) -> dict[str, Any]:
        with ledger.visit(ctx, CHILD):
            packed = await ctx.effect(
                "pack", pack_part, item["order"], item["part"], recovery="idempotent"
            )
            return {"order": item["order"], "part": item["part"], "pack": packed}

    @stead.task(name=PARENT, version=1)
    async def fulfil(ctx: stead.TaskContext, order: str) -> dict[str, Any]:
        with ledger.visit(ctx, PARENT):
            checked = await ctx.step("check", check, order)
            reserved = await ctx.effect("reserve", reserve, order, recovery="idempotent")
            shipped = await ctx.effect("ship", ship, order, recovery="manual")
            await ctx.sleep(SLEEP)
            go = await ctx.wait_for_signal("go")
            parts = await ctx.gather(
                *(ctx.run_task(CHILD, {"order": order, "part": p}) for p in range(1, PARTS + 1))
            )
            return {
                "order": order,
                "check": checked,
                "reserve": reserved,
                "ship": shipped,
                "go": go,
                "parts": [{"run_id": part.run_id, "output": part.output} for part in parts],
            }

    return stead.App(tasks=[fulfil, pack])
