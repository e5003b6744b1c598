"""The same app on PostgreSQL: two workers share a schema, a client approves.

``stead.PostgresStore(url, schema=...)`` keeps the journal in a schema of a PostgreSQL
database (created and migrated on open). Any number of workers — runtimes in any processes, or
``stead worker examples.postgres:app --db URL`` — open the same schema and claim its runs; a
``stead.Client`` on the same URL and schema, in any process, submits runs and answers them. Here
two workers run in one process to keep the example short.

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
from stead.testing import FunctionModel


@stead.tool(recovery="idempotent", approval=lambda args: args["amount"] > 100)
async def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount:.2f} on order {order_id}"


def _answer(request: stead.ModelRequest) -> object:
    last = request.messages[-1]
    if isinstance(last, stead.ToolResultMessage):
        return f"Done: {last.content}."
    order, amount = str(last.content).split()[1:3]
    return [stead.ToolCall(name="refund", arguments={"order_id": order, "amount": float(amount)})]


app = stead.App(
    agents=[stead.Agent(id="support", version="1", model=FunctionModel(_answer), tools=[refund])]
)


async def main(url: str) -> None:
    schema = f"example_{secrets.token_hex(4)}"
    try:
        async with (
            await app.open(stead.PostgresStore(url, schema=schema)),  # worker A
            await app.open(stead.PostgresStore(url, schema=schema)),  # worker B
            stead.Client(stead.PostgresStore(url, schema=schema)) as client,
        ):
            amounts = [20, 35, 250, 15, 60, 40]  # the 250 refund waits for a person
            runs = [
                await client.submit(
                    "support", session_id=f"order-{n}", request_id="m-1", prompt=f"refund {n} {a}"
                )
                for n, a in enumerate(amounts, start=17)
            ]
            while not (pending := await client.list_interactions(status="pending")):
                await asyncio.sleep(0.02)
            for item in pending:
                print(f"pending {item.kind} {item.key}: {item.tool} {item.arguments}")
                await client.respond(item.interaction_id, stead.Approve(reviewer="ana"))
            for run in runs:
                print((await client.result(run.id, timeout=30)).output)
    finally:
        store = stead.PostgresStore(url, schema=schema)
        conn = store.connect()
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("STEAD_POSTGRES_URL", "postgresql://127.0.0.1:5432/test")))
