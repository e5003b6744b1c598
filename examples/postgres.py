"""The same app on PostgreSQL: a runtime owns a schema, a client on another connection approves.

``stead.PostgresStore(url, schema=...)`` keeps the journal in a schema of a PostgreSQL
database (created and migrated on open). One runtime owns a schema at a time; a
``stead.Client`` on the same URL and schema, in any process, reads the runs and answers them.

Run it:  STEAD_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
         .venv/bin/python examples/postgres.py
It needs the ``postgres`` extra (``pip install 'stead[postgres]'``) and a server; it works in a
schema of its own and drops it at the end.
"""

from __future__ import annotations

import asyncio
import os
import secrets

import stead
from stead.testing import ScriptedModel


@stead.tool(recovery="idempotent", approval=True)
async def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount:.2f} on order {order_id}"


async def main(url: str) -> None:
    schema = f"example_{secrets.token_hex(4)}"
    model = ScriptedModel(
        [
            [stead.ToolCall(name="refund", arguments={"order_id": "17", "amount": 250.0})],
            "Refund approved and issued.",
        ]
    )
    app = stead.App(agents=[stead.Agent(id="support", version="1", model=model, tools=[refund])])
    try:
        async with await app.open(stead.PostgresStore(url, schema=schema)) as runtime:
            run = await runtime.submit(
                "support", session_id="c-17", request_id="m-1", prompt="refund 17"
            )
            while await run.status() is not stead.RunStatus.WAITING:
                await asyncio.sleep(0.02)
            # Another connection (it could be another process): the approval queue.
            async with stead.Client(stead.PostgresStore(url, schema=schema)) as client:
                for item in await client.list_interactions(status="pending"):
                    print(f"pending {item.kind} {item.key}: {item.tool}")
                    await client.respond(item.interaction_id, stead.Approve(reviewer="ana"))
            print("outcome:", (await run.result(timeout=30)).output)
    finally:
        store = stead.PostgresStore(url, schema=schema)
        conn = store.connect()
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("STEAD_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")))
