"""A stead application with durable tasks, run as a real child process by the task crash tests.

Usage::

    python tests/crash/_task_child.py <scenario> <db> <ledger> [options]

``<db>`` is a SQLite path, or a ``postgresql://`` URL with ``--schema NAME``.

Every step and effect appends one JSON line per execution to ``<ledger>`` (open, append, flush,
fsync): ``{"what": <step or effect name>, "operation_id": ..., "pid": ..., ...}``. That file is
"the outside world", which a crash of this process cannot roll back.

The child opens the store (without resuming), prints ``ready``, submits the scenario's task with
fixed ``(session_id, request_id)`` (so a relaunch after a crash deduplicates to the same run),
resumes, and waits until the run is terminal or ``needs_attention``. The first time it sees the
run ``waiting`` it prints ``waiting {...}`` (the run id and its ``next_attempt_at``) and goes on
waiting: that is when the tests SIGKILL it. At the end it prints one JSON line describing the
outcome (``seconds``: from resuming to the end) and exits 0. ``--crash BOUNDARY@KEY`` kills it
at a boundary with ``stead.testing.crash_at``.

Scenarios:

``effect``
    task ``checkout(order)``: step ``prepare``, then effect ``charge`` under ``--policy`` (it
    takes ``operation_id=``), then returns ``{"prepared": ..., "charge": ...}``.
``timer``
    task ``nap``: step ``before``, ``ctx.sleep(--sleep)`` (2 s by default, real clock), step
    ``after``; returns ``"rested"``.
``signal``
    task ``await_go``: step ``before``, ``ctx.wait_for_signal("go")``, step ``after``; returns
    ``{"got": <the signal's value>}``.
``brittle``
    task ``brittle``: step ``before``, then its own code kills the process half a second later
    (between operations, as a crash in a definition's code would), at every execution.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from _child import report_of, store_of  # this script's folder is on sys.path when it runs

import stead
from stead.testing import crash_at, kill_self

SESSION = "task-session"
REQUEST = "task-request"
ORDER = "o-17"
#: The task each scenario submits, and its input.
TASKS = {"effect": "checkout", "timer": "nap", "signal": "await_go", "brittle": "brittle"}
INPUTS: dict[str, Any] = {"effect": ORDER, "timer": None, "signal": None, "brittle": None}


def append_line(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and force it to disk: it must survive a SIGKILL right after."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def wall_clock() -> str:
    """The real time, for ledger lines that show when a step ran (not stead's clock)."""
    return datetime.now(UTC).isoformat()


def build_app(
    scenario: str, ledger: str, *, policy: str = "manual", sleep: float = 2.0
) -> stead.App:
    """The application of ``scenario``."""

    def record(what: str, operation_id: str, **extra: Any) -> None:
        append_line(
            ledger, {"what": what, "operation_id": operation_id, "pid": os.getpid(), **extra}
        )

    if scenario == "effect":

        async def prepare(order: str, operation_id: str) -> dict[str, Any]:
            record("prepare", operation_id)
            return {"order": order, "amount": 49}

        async def charge(order: str, amount: int, operation_id: str) -> dict[str, str]:
            record("charge", operation_id, policy=policy, amount=amount)
            return {"receipt": f"receipt-{order}"}

        @stead.task(name="checkout")
        async def checkout(ctx: stead.TaskContext, order: str) -> dict[str, Any]:
            prepared = await ctx.step("prepare", prepare, order)
            receipt = await ctx.effect(
                "charge",
                charge,
                order,
                prepared["amount"],
                recovery=policy,  # type: ignore[arg-type]
            )
            return {"prepared": prepared, "charge": receipt}

        return stead.App(tasks=[checkout])

    if scenario == "timer":

        def mark(what: str, operation_id: str) -> str:
            record(what, operation_id, at=wall_clock())
            return what

        @stead.task(name="nap")
        async def nap(ctx: stead.TaskContext) -> str:
            await ctx.step("before", mark, "before")
            await ctx.sleep(sleep)
            await ctx.step("after", mark, "after")
            return "rested"

        return stead.App(tasks=[nap])

    if scenario == "signal":

        def note(what: str, value: Any, operation_id: str) -> None:
            record(what, operation_id, value=value)

        @stead.task(name="await_go")
        async def await_go(ctx: stead.TaskContext) -> dict[str, Any]:
            await ctx.step("before", note, "before", None)
            value = await ctx.wait_for_signal("go")
            await ctx.step("after", note, "after", value)
            return {"got": value}

        return stead.App(tasks=[await_go])

    if scenario == "brittle":

        def before(operation_id: str) -> str:
            record("before", operation_id)
            return "done"

        @stead.task(name="brittle")
        async def brittle(ctx: stead.TaskContext) -> str:
            await ctx.step("before", before)
            await asyncio.sleep(0.5)  # the step's result is committed meanwhile
            kill_self()  # the task's own code, outside any operation
            return "never"

        return stead.App(tasks=[brittle])

    raise SystemExit(f"unknown scenario {scenario!r}")


async def settle(handle: stead.RunHandle) -> stead.Run:
    """Wait until the run is terminal or needs a person; say so the first time it waits."""
    said_waiting = False
    while True:
        run = await handle.run()
        if run.status.terminal or run.status == stead.RunStatus.NEEDS_ATTENTION:
            return run
        if run.status == stead.RunStatus.WAITING and not said_waiting:
            said_waiting = True
            until = run.next_attempt_at.isoformat() if run.next_attempt_at else None
            print("waiting " + json.dumps({"run_id": run.id, "until": until}), flush=True)
        await asyncio.sleep(0.01)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    app = build_app(args.scenario, args.ledger, policy=args.policy, sleep=args.sleep)
    if args.crash:
        boundary, _, key = args.crash.partition("@")
        crash_at(boundary, key or "*")
    store = store_of(args.db, args.schema)
    # Opened without resuming (on PostgreSQL, a killed worker's runs wait for its lease).
    async with await app.open(store, resume=False) as runtime:
        print("ready", flush=True)
        handle = await runtime.submit_task(
            TASKS[args.scenario],
            INPUTS[args.scenario],
            session_id=SESSION,
            request_id=REQUEST,
        )
        started = time.monotonic()
        await runtime.resume()
        report = await report_of(handle, await settle(handle))
        report["seconds"] = round(time.monotonic() - started, 3)
        return report


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(TASKS))
    parser.add_argument("db")
    parser.add_argument("ledger")
    parser.add_argument("--policy", default="manual", choices=["safe", "idempotent", "manual"])
    parser.add_argument("--crash", help="BOUNDARY@KEYGLOB, e.g. effect_done@charge")
    parser.add_argument("--sleep", type=float, default=2.0, help="the timer's seconds")
    parser.add_argument("--schema", default="stead", help="with a postgresql:// db")
    return parser.parse_args(argv)


if __name__ == "__main__":
    outcome = asyncio.run(main(parse(sys.argv[1:])))
    print(json.dumps(outcome, sort_keys=True), flush=True)
