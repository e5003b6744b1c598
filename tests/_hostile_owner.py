"""Child processes for ``tests/test_client_hostile.py``: an owner, and clients that hammer it.

``python tests/_hostile_owner.py MODE DB [ARG]``:

* ``owner`` opens DB with :func:`build_app` and owns it, printing ``{"ready": pid}`` once open,
  until stdin closes (then it closes the runtime cleanly and prints ``{"closed": health}``), it is
  killed, or ``DEADLINE`` passes;
* ``clients`` runs the commands of the JSON list ARG concurrently, each through its own
  :class:`stead.Client`, and prints one JSON line: each command's outcome, in order;
* ``hammer`` runs LANES loops at once, each with its own client, each applying its share of the
  commands of the JSON list ARG one after the other, over and over (a repeat is a no-op), for
  SECONDS; it prints ``{"started": true}`` once its clients are open, then one JSON line of
  outcomes.

``python tests/_hostile_owner.py clients|hammer DB COMMANDS TIMEOUT [SECONDS LANES]``.

A command is ``[verb, target, extra]``: ``approve``/``deny`` an interaction, ``cancel``/``retry``
a run. An outcome is ``{"ok": true}`` or ``{"error": class name, "message": ..., "seconds": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

import stead
from stead.testing import FunctionModel, ScriptedModel

DEADLINE = 60.0
#: The streaming agent: turns that call a tool, each answer streamed word by word.
STREAM_TURNS = 25
STREAM_WORDS = 30


def build_app() -> stead.App:
    """``gated``: one tool call that needs approval, then "done"; ``streamer``: STREAM_TURNS
    streamed turns (each a tool call), then a streamed final answer."""

    @stead.tool(recovery="idempotent", approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    @stead.tool(recovery="safe")
    def step(n: int) -> int:
        """One step."""
        return n

    gated = stead.Agent(
        id="gated",
        version="1",
        model=ScriptedModel(
            [[stead.ToolCall(name="pay", arguments={"amount": 5}, id="c1")], "done"]
        ),
        tools=[pay],
    )

    def turn(request: stead.ModelRequest) -> stead.ModelResponse:
        words = " ".join(f"w{request.turn}.{i}" for i in range(STREAM_WORDS))
        if request.turn > STREAM_TURNS:
            return stead.ModelResponse(text=words)
        call = stead.ToolCall(name="step", arguments={"n": request.turn}, id=f"t{request.turn}")
        return stead.ModelResponse(text=words, tool_calls=(call,))

    streamer = stead.Agent(
        id="streamer",
        version="1",
        model=FunctionModel(turn, chunk_delay=0.004),
        tools=[step],
        stream=True,
        max_turns=STREAM_TURNS + 5,
    )
    return stead.App(agents=[gated, streamer])


def say(**data: object) -> None:
    print(json.dumps(data), flush=True)


async def own(db: str) -> None:
    async with await build_app().open(stead.SqliteStore(db)) as runtime:
        say(ready=os.getpid())
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stdin_closed, DEADLINE)
        health = runtime.health()
    say(closed=health)


async def outcome(client: stead.Client, verb: str, target: str, extra: Any) -> dict[str, Any]:
    start = time.monotonic()
    try:
        if verb == "approve":
            await client.respond(target, stead.Approve(reviewer=extra))
        elif verb == "deny":
            await client.respond(target, stead.Deny(reason=extra or "no"))
        elif verb == "cancel":
            await client.cancel(target, extra)
        elif verb == "retry":
            await client.retry(target)
        else:
            raise SystemExit(f"unknown verb {verb!r}")
    except (stead.SteadError, TimeoutError) as exc:
        return {
            "error": type(exc).__name__,
            "message": str(exc),
            "seconds": time.monotonic() - start,
        }
    return {"ok": True, "seconds": time.monotonic() - start}


async def clients(db: str, commands: list[list[Any]], timeout: float) -> None:
    async def one(verb: str, target: str, extra: Any = None) -> dict[str, Any]:
        async with stead.Client(stead.SqliteStore(db), command_timeout=timeout) as client:
            return await outcome(client, verb, target, extra)

    say(results=await asyncio.gather(*(one(*command) for command in commands)))


async def hammer(
    db: str, commands: list[list[Any]], timeout: float, seconds: float, lanes: int
) -> None:
    results: list[dict[str, Any]] = []
    opened = [stead.Client(stead.SqliteStore(db), command_timeout=timeout) for _ in range(lanes)]
    for client in opened:
        await client.list_runs(limit=1)  # open now, not when the first command goes
    say(started=True)
    stop = time.monotonic() + seconds

    async def lane(client: stead.Client, share: list[list[Any]]) -> None:
        while True:
            for command in share:
                results.append({"command": command, **await outcome(client, *command)})
            if time.monotonic() >= stop:
                return

    await asyncio.gather(*(lane(c, commands[n::lanes]) for n, c in enumerate(opened)))
    for client in opened:
        await client.close()
    say(results=results)


def main(
    mode: str,
    db: str,
    arg: str = "[]",
    timeout: str = "5",
    seconds: str = "0",
    lanes: str = "1",
) -> None:
    if mode == "owner":
        asyncio.run(own(db))
    elif mode == "clients":
        asyncio.run(clients(db, json.loads(arg), float(timeout)))
    elif mode == "hammer":
        asyncio.run(hammer(db, json.loads(arg), float(timeout), float(seconds), int(lanes)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
