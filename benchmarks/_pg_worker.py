"""One worker process of ``postgres.py``'s scaling rows.

    python benchmarks/_pg_worker.py URL SCHEMA CONCURRENCY

Opens ``peers.py``'s App on the schema without taking runs, prints ``ready``, waits for a line
on stdin, then executes runs until stdin closes; exits 0.
"""

from __future__ import annotations

import asyncio
import sys

import peers
import stead


async def main(url: str, schema: str, concurrency: int) -> None:
    store = stead.PostgresStore(url, schema=schema)
    loop = asyncio.get_running_loop()
    async with await peers._stead_app().open(
        store, max_concurrent_runs=concurrency, resume=False
    ) as runtime:
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)  # "go"
        await runtime.resume()
        await loop.run_in_executor(None, sys.stdin.readline)  # closed: stop


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
