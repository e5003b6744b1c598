"""Manual recovery: a side effect interrupted mid-call, settled by a person.

``wire`` is a ``manual`` tool: if the process stops while it runs, stead cannot know whether
the money left, so it runs nothing again. The run goes ``needs_attention`` naming the
operation; someone checks the outside world (here, the bank's books) and then either
``run.resolve(key, output=...)`` with what the call did, or ``run.retry()`` to run it again.

The agent wires money twice. Each time the bank stalls, and the runtime is closed while the
call is in flight (as a deploy or a crash would). The first wire was booked before the connection
died, so it is resolved by hand; the second never reached the bank, so it is retried.

Run it:  .venv/bin/python examples/manual_recovery.py
It writes its files to a fresh directory (inside $STEAD_EXAMPLE_DIR when set).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import stead
from stead.testing import ScriptedModel


class Bank:
    """The outside world: books transfers by idempotency key, and can stall the next one."""

    def __init__(self) -> None:
        self.books: dict[str, dict[str, object]] = {}
        self.stall: str | None = None  # "after_booking", "before_booking" or None
        self.stalled = asyncio.Event()

    def stall_next(self, when: str) -> None:
        """Make the next transfer hang, ``before_booking`` or ``after_booking`` it."""
        self.stall, self.stalled = when, asyncio.Event()

    async def transfer(self, key: str, to: str, amount: float) -> str:
        stall, self.stall = self.stall, None
        if stall == "before_booking":
            await self._hang()
        self.books[key] = {"to": to, "amount": amount}
        if stall == "after_booking":
            await self._hang()  # booked, but the reply never comes back
        return f"wire-{len(self.books)}"

    async def _hang(self) -> None:
        self.stalled.set()
        await asyncio.Event().wait()  # until the runtime closes and cancels the call


bank = Bank()


@stead.tool(recovery="manual")  # the default policy, spelled out
async def wire(to: str, amount: float, ctx: stead.ToolContext) -> str:
    """Wire money."""
    return await bank.transfer(ctx.operation_id, to, amount)


model = ScriptedModel(
    [
        [stead.ToolCall(name="wire", arguments={"to": "alice", "amount": 300.0}, id="alice")],
        [stead.ToolCall(name="wire", arguments={"to": "bob", "amount": 120.0}, id="bob")],
        "Paid alice and bob.",
    ]
)
payouts = stead.Agent(id="payouts", version="1", model=model, tools=[wire])
app = stead.App(agents=[payouts])


async def attention_key(run: stead.RunHandle) -> str:
    """Wait until the run needs attention; returns the operation it names."""
    while True:
        record = await run.run()
        if record.status is stead.RunStatus.NEEDS_ATTENTION and record.attention_key:
            return record.attention_key
        if record.status.terminal:
            raise RuntimeError(f"run {run.id} ended {record.status} without needing attention")
        await asyncio.sleep(0.01)


async def close_when_stalled(runtime: stead.Runtime) -> None:
    """Close the runtime while the bank holds a wire in flight (as a deploy or a crash would)."""
    await bank.stalled.wait()
    await runtime.close()
    print("runtime closed while a wire was in flight")


def example_dir() -> Path:
    """A fresh directory for this example's files, inside $STEAD_EXAMPLE_DIR when it is set."""
    parent = os.environ.get("STEAD_EXAMPLE_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="stead-example-", dir=parent))


async def main() -> None:
    db = example_dir() / "manual_recovery.db"

    # 1. The wire to alice is booked, then the runtime closes before its result is recorded.
    bank.stall_next("after_booking")
    runtime = await app.open(stead.SqliteStore(db))
    run = await runtime.submit("payouts", session_id="payroll", request_id="may", prompt="Pay")
    await close_when_stalled(runtime)

    # 2. A new runtime resumes the run, which stops: nothing is run again on its own.
    runtime = await app.open(stead.SqliteStore(db))
    run = runtime.get_run(run.id)
    key = await attention_key(run)
    print(f"{run.id} needs attention at {key}")
    print(f"the bank has booked it: {bank.books.get(f'{run.id}/{key}')}; resolve it")
    bank.stall_next("before_booking")  # the run goes on to bob's wire, which never arrives
    await run.resolve(key, output="wire-1 (confirmed with the bank)")
    await close_when_stalled(runtime)

    # 3. Again it needs attention; this time the wire never happened, so run it again.
    async with await app.open(stead.SqliteStore(db)) as runtime:
        run = runtime.get_run(run.id)
        key = await attention_key(run)
        print(f"{run.id} needs attention at {key}")
        print(f"the bank has no such wire: {bank.books.get(f'{run.id}/{key}')}; retry it")
        await run.retry()
        outcome = await run.result()
        results = (await run.snapshot()).checkpoint.tool_results

    print(f"outcome: {outcome.output}")
    for call_id, result in results.items():
        print(f"  {call_id}: {result['output']}")
    print(f"bank books: {len(bank.books)} transfers, each booked once")


if __name__ == "__main__":
    asyncio.run(main())
