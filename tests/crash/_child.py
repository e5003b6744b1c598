"""A stead application run as a real child process by the crash tests.

Usage::

    python tests/crash/_child.py <scenario> <db> <ledger> <model-ledger> [options]

``<db>`` is a SQLite path, or a ``postgresql://`` URL with ``--schema NAME``.

Its side-effecting tools append one JSON line per execution to ``<ledger>`` (open, append, flush,
fsync): that file is "the outside world", which a crash of this process cannot roll back. The
model appends one line per call (``{"turn": n}``) to ``<model-ledger>``.

The child opens the store (without resuming), prints ``ready``, submits with fixed
``(session_id, request_id)`` (so a re-launch after a crash deduplicates to the same run), resumes,
waits until the run is terminal or ``needs_attention``, prints one JSON line describing the
outcome and exits 0. Scenarios crash it with ``stead.testing.crash_at`` (``--crash``) or by the
model killing its own process (``--kill-model-turn``: 0.2 s into the call, as if the provider
were still answering; ``--kill-model-turn-now``: the moment the call starts), or by the tool
killing it (``--kill-tool-after SECONDS``: that long after it recorded its effect, as a tool
that crashes the process would). ``--intent-hold SECONDS`` holds a ``safe`` call's intent back
that long (``stead.runtime.context.INTENT_HOLD``).

Scenarios:

``one_tool``
    turn 1 calls ``act(item="a")`` (recovery from ``--policy``); turn 2 answers
    ``"done: <tool results as the model saw them>"``.
``multi``
    the kill harness agent: 12 turns of 1-3 calls to ``charge`` (idempotent, async) and
    ``fetch`` (safe, sync), then a final answer summing every tool result the model saw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import stead
from stead.testing import FunctionModel, crash_at, kill_self

AGENT_ID = "assistant"
PROMPT = "do the work"
MULTI_TURNS = 12


def append_line(path: str, record: dict[str, Any]) -> None:
    """Append one JSON line and force it to disk: it must survive a SIGKILL right after."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def tool_results(request: stead.ModelRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, stead.ToolResultMessage)]


def multi_calls(turn: int) -> list[stead.ToolCall]:
    """The deterministic tool calls of turn ``turn`` of the ``multi`` scenario (1-3 calls)."""
    count = 1 + (turn * 7) % 3
    return [
        stead.ToolCall(
            name="charge" if (turn + i) % 2 else "fetch",
            arguments={"n": turn * 10 + i},
        )
        for i in range(count)
    ]


def multi_expected_tool_calls() -> int:
    return sum(len(multi_calls(turn)) for turn in range(1, MULTI_TURNS + 1))


def build_app(
    scenario: str,
    ledger: str,
    models: str,
    *,
    policy: str = "manual",
    kill_model_turn: int | None = None,
    kill_model_turn_now: int | None = None,
    kill_tool_after: float | None = None,
) -> stead.App:
    """The application of ``scenario``; the test process builds the same one to reopen a store."""

    def record_model_call(request: stead.ModelRequest) -> None:
        if kill_model_turn_now == request.turn:
            # dies as the request goes out to the provider; the SIGKILL is the call's record
            kill_self()
        append_line(models, {"turn": request.turn, "pid": os.getpid()})
        if kill_model_turn == request.turn:
            time.sleep(0.2)  # the provider is still answering when the process dies
            kill_self()

    if scenario == "one_tool":

        async def act(item: str, ctx: stead.ToolContext) -> dict[str, str]:
            """Do something to the outside world."""
            append_line(
                ledger,
                {
                    "operation_id": ctx.operation_id,
                    "tool": "act",
                    "recovery": policy,
                    "args": {"item": item},
                    "attempt": ctx.attempt,
                    "pid": os.getpid(),
                },
            )
            if kill_tool_after is not None:
                await asyncio.sleep(kill_tool_after)  # the loop goes on meanwhile
                kill_self()
            return {"item": item, "receipt": f"receipt-{item}"}

        def answer(request: stead.ModelRequest) -> Any:
            record_model_call(request)
            if request.turn == 1:
                return [stead.ToolCall(name="act", arguments={"item": "a"})]
            return "done: " + " | ".join(tool_results(request))

        tools = [stead.tool(recovery=policy)(act)]
        agent = stead.Agent(
            id=AGENT_ID, version="1", model=FunctionModel(answer), tools=tools, max_turns=5
        )
        return stead.App(agents=[agent])

    if scenario == "multi":

        async def charge(n: int, ctx: stead.ToolContext) -> dict[str, int]:
            """Charge n (the service deduplicates by operation id)."""
            await asyncio.sleep(0.004)
            append_line(
                ledger,
                {
                    "operation_id": ctx.operation_id,
                    "tool": "charge",
                    "recovery": "idempotent",
                    "args": {"n": n},
                    "attempt": ctx.attempt,
                    "pid": os.getpid(),
                },
            )
            await asyncio.sleep(0.004)
            return {"n": n, "value": n * n}

        def fetch(n: int, ctx: stead.ToolContext) -> dict[str, int]:
            """Fetch n (safe to repeat)."""
            time.sleep(0.004)
            append_line(
                ledger,
                {
                    "operation_id": ctx.operation_id,
                    "tool": "fetch",
                    "recovery": "safe",
                    "args": {"n": n},
                    "attempt": ctx.attempt,
                    "pid": os.getpid(),
                },
            )
            time.sleep(0.004)
            return {"n": n, "value": n + 1}

        async def answer(request: stead.ModelRequest) -> Any:
            record_model_call(request)
            await asyncio.sleep(0.012)
            if request.turn <= MULTI_TURNS:
                return multi_calls(request.turn)
            values = [json.loads(content)["value"] for content in tool_results(request)]
            return f"calls={len(values)} total={sum(values)} last={values[-1]}"

        # Kills land at random, so the same call may be interrupted several launches in a
        # row: the attempt limits are set above what the harness can reach (it relaunches a
        # run at most 40 times), so running out of attempts is never the crash's policy here.
        tools = [
            stead.tool(recovery="idempotent", max_attempts=50)(charge),
            stead.tool(recovery="safe", max_attempts=50)(fetch),
        ]
        agent = stead.Agent(
            id=AGENT_ID,
            version="1",
            model=FunctionModel(answer),
            tools=tools,
            max_turns=MULTI_TURNS + 2,
            model_retry=stead.RetryPolicy(max_attempts=50),
        )
        return stead.App(agents=[agent])

    raise SystemExit(f"unknown scenario {scenario!r}")


async def settle(handle: stead.RunHandle) -> stead.Run:
    """Wait until the run is terminal or needs a person."""
    while True:
        run = await handle.run()
        if run.status.terminal or run.status == stead.RunStatus.NEEDS_ATTENTION:
            return run
        await asyncio.sleep(0.01)


async def report_of(handle: stead.RunHandle, run: stead.Run) -> dict[str, Any]:
    """The outcome line a child prints: the run's id, status, attention key, output, error."""
    report: dict[str, Any] = {
        "run_id": handle.id,
        "status": run.status.value,
        "attention_key": run.attention_key,
        "output": None,
        "error": run.error,
    }
    if run.status == stead.RunStatus.COMPLETED:
        report["output"] = (await handle.result()).output
    return report


def store_of(db: str, schema: str | None, *, fsync: str = "barriers") -> Any:
    """The store a child opens: SQLite at a path, or a PostgreSQL schema at a URL."""
    if db.startswith("postgresql://"):
        from stead.store.postgres import PostgresStore

        # The lease of tests._journal.PG_LEASE: the next worker takes a run over 1 s after
        # this one died.
        return PostgresStore(db, schema=schema, lease_seconds=1.0)
    return stead.SqliteStore(db, fsync=fsync)  # type: ignore[arg-type]


async def _open(app: stead.App, store: Any, scenario: str) -> stead.Runtime:
    """Open without resuming (on PostgreSQL, a killed worker's runs wait for its lease). The
    kill harness may kill a run several launches in a row before it commits anything new: its
    limit of such interruptions is set above what the harness can reach, as its attempt
    limits are (see ``build_app``)."""
    limits = stead.Limits(max_interruptions=50) if scenario == "multi" else None
    return await app.open(store, resume=False, limits=limits)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    app = build_app(
        args.scenario,
        args.ledger,
        args.models,
        policy=args.policy,
        kill_model_turn=args.kill_model_turn,
        kill_model_turn_now=args.kill_model_turn_now,
        kill_tool_after=args.kill_tool_after,
    )
    if args.crash:
        boundary, _, key = args.crash.partition("@")
        crash_at(boundary, key or "*")
    if args.intent_hold is not None:
        from stead.runtime import context

        context.INTENT_HOLD = args.intent_hold
    store = store_of(args.db, args.schema, fsync=args.fsync)
    async with await _open(app, store, args.scenario) as runtime:
        print("ready", flush=True)
        handle = await runtime.submit(
            AGENT_ID, session_id=args.session, request_id=args.request, prompt=PROMPT
        )
        await runtime.resume()
        return await report_of(handle, await settle(handle))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    parser.add_argument("db")
    parser.add_argument("ledger")
    parser.add_argument("models")
    parser.add_argument("--policy", default="manual", choices=["safe", "idempotent", "manual"])
    parser.add_argument("--crash", help="BOUNDARY@KEYGLOB, e.g. effect_done@tool:1:*")
    parser.add_argument("--kill-model-turn", type=int, help="die 0.2 s into this model call")
    parser.add_argument("--kill-model-turn-now", type=int, help="die as this model call starts")
    parser.add_argument(
        "--kill-tool-after", type=float, help="the tool dies this long after its effect"
    )
    parser.add_argument("--intent-hold", type=float, help="a safe call's intent held this long")
    parser.add_argument("--fsync", default="barriers", choices=["barriers", "always"])
    parser.add_argument("--schema", default="stead", help="with a postgresql:// db")
    parser.add_argument("--session", default="session-1")
    parser.add_argument("--request", default="request-1")
    return parser.parse_args(argv)


if __name__ == "__main__":
    outcome = asyncio.run(main(parse(sys.argv[1:])))
    print(json.dumps(outcome, sort_keys=True), flush=True)
