"""stead and DBOS Transact on the same PostgreSQL server: the peers' agent loop, side by side.

    STEAD_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python benchmarks/postgres.py [--runs 10] [--warmup 2]

The workload is ``peers.py``'s: ten tool calls and a final answer, 21 durable steps a run, a fake
model and a trivial tool. stead runs one runtime on a fresh schema per run
(``PostgresStore(url, schema=...)``; barriers commit with ``synchronous_commit = on``); DBOS runs
its workflow with its system database on the same server (a fresh database per run, created
before the clock starts). Before each clock starts, a ``CHECKPOINT`` lets the server finish
writing out the setup (creating a database writes megabytes). Runs are interleaved. The figure
is the median of (run wall time / 21). That is a cold start: each run is the first on its
connections. A worker serves run after run, so the warm rows time ten runs one after another in
one runtime (and ten workflows in one DBOS launch) after a first that is not counted, three
series each, alternating the systems.

Last, durable steps per second: of one runtime running 50 runs at once, and of 1, 2 and 4 worker
processes (``_pg_worker.py``, each executing up to 25 runs at once) sharing one schema, all
opened before the clock starts, finishing 200 runs submitted beforehand. On a 2-core machine the
workers, the server and this process share the two cores: the scaling row says how much of them
the workers got.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from rich.table import Table

import peers
from peers import COUNTER, PROMPT, STEPS_PER_RUN, TOOL_CALLS, console

TARGET = 5.0  # stead's speed-up per durable step over DBOS on PostgreSQL
CONCURRENT_RUNS = 50
WARM_RUNS = 10  # runs counted of each warm series (one runtime, or one DBOS launch)
SCALING_RUNS = 200
WORKER_CONCURRENCY = 25
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_pg_worker.py")


def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _settle(url: str) -> None:
    """Let the server finish writing out what setting a run up left behind (DBOS's new
    database, stead's migrations) before the clock starts, so neither system is timed while
    the server flushes the other's — or its own — setup. Also collect the garbage what was
    measured before left here (see ``step_overhead.collect_garbage``)."""
    with contextlib.closing(_admin(url)) as conn:
        conn.execute("CHECKPOINT")
    gc.collect()


@contextlib.contextmanager
def _stead_schema(url: str) -> Iterator[str]:
    schema = f"bench_{secrets.token_hex(6)}"
    try:
        yield schema
    finally:
        with contextlib.closing(_admin(url)) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def stead_run(url: str) -> float:
    import stead

    app = peers._stead_app()

    async def once(schema: str) -> float:
        store = stead.PostgresStore(url, schema=schema)
        async with await app.open(store) as runtime:
            _settle(url)
            t0 = time.perf_counter()
            handle = await runtime.submit("bench", session_id="s", request_id="r", prompt=PROMPT)
            outcome = await handle.result()
            elapsed = time.perf_counter() - t0
        peers._check("stead on PostgreSQL", outcome.output, expected_steps=None)
        if COUNTER.tool != TOOL_CALLS:
            raise peers.BenchError(f"stead ran {COUNTER.tool} tool calls, expected {TOOL_CALLS}")
        return elapsed

    with _stead_schema(url) as schema:
        return asyncio.run(once(schema))


def stead_warm(url: str, runs: int) -> list[float]:
    """µs per durable step of ``runs`` runs one after another in one runtime, whose
    connections and prepared statements are warm from a first run that is not counted."""
    import stead

    app = peers._stead_app()

    async def once(schema: str) -> list[float]:
        samples = []
        store = stead.PostgresStore(url, schema=schema)
        async with await app.open(store) as runtime:
            gc.collect()  # see _settle
            for i in range(runs + 1):
                COUNTER.reset()
                t0 = time.perf_counter()
                handle = await runtime.submit(
                    "bench", session_id=f"s{i}", request_id="r", prompt=PROMPT
                )
                outcome = await handle.result()
                elapsed = time.perf_counter() - t0
                peers._check("stead on PostgreSQL", outcome.output, expected_steps=None)
                if i:
                    samples.append(elapsed * 1e6 / STEPS_PER_RUN)
        return samples

    with _stead_schema(url) as schema:
        return asyncio.run(once(schema))


def stead_concurrent(url: str, runs: int) -> float:
    """Durable steps per second of one runtime running ``runs`` runs at once."""
    import stead

    app = peers._stead_app()

    async def once(schema: str) -> float:
        store = stead.PostgresStore(url, schema=schema)
        async with await app.open(store, max_concurrent_runs=runs) as runtime:
            gc.collect()  # see _settle
            t0 = time.perf_counter()
            handles = await asyncio.gather(
                *(
                    runtime.submit("bench", session_id=f"s{i}", request_id="r", prompt=PROMPT)
                    for i in range(runs)
                )
            )
            outcomes = await asyncio.gather(*(h.result() for h in handles))
            elapsed = time.perf_counter() - t0
        if any(o.output != peers.FINAL_ANSWER for o in outcomes):
            raise peers.BenchError("stead on PostgreSQL: a concurrent run did not finish")
        return runs * STEPS_PER_RUN / elapsed

    with _stead_schema(url) as schema:
        return asyncio.run(once(schema))


def workers_rate(url: str, workers: int) -> float:
    """Durable steps per second of ``workers`` worker processes finishing ``SCALING_RUNS``."""
    import stead

    async def submit(schema: str) -> None:
        store = stead.PostgresStore(url, schema=schema)
        async with await peers._stead_app().open(store, resume=False) as runtime:
            for i in range(SCALING_RUNS):
                await runtime.submit("bench", session_id=f"s{i}", request_id="r", prompt=PROMPT)

    with _stead_schema(url) as schema:
        asyncio.run(submit(schema))
        procs = [
            subprocess.Popen(
                [sys.executable, WORKER, url, schema, str(WORKER_CONCURRENCY)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=os.path.dirname(WORKER),
            )
            for _ in range(workers)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    raise peers.BenchError("a stead worker did not start")
            with contextlib.closing(_admin(url)) as conn:
                t0 = time.perf_counter()
                for proc in procs:
                    assert proc.stdin is not None
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                while True:
                    done = conn.execute(
                        f'SELECT COUNT(*) FROM "{schema}".stead_runs WHERE status = %s',
                        ("completed",),
                    ).fetchone()[0]
                    if done == SCALING_RUNS:
                        break
                    if time.perf_counter() - t0 > 300:
                        raise peers.BenchError(f"{workers} workers finished {done} runs in 300s")
                    time.sleep(0.01)
                elapsed = time.perf_counter() - t0
        finally:
            for proc in procs:
                with contextlib.suppress(Exception):
                    assert proc.stdin is not None
                    proc.stdin.close()
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return SCALING_RUNS * STEPS_PER_RUN / elapsed


def dbos_run(url: str) -> Callable[[int], list[float]] | str:
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError as exc:
        return f"dbos is not installed ({exc}); pip install -e '.[bench]'"
    workflow = peers._dbos_workflow()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    extra: dict[str, Any] = {}
    if "run_admin_server" in DBOSConfig.__annotations__:
        extra["run_admin_server"] = False

    def series(runs: int) -> list[float]:
        """Seconds of each of ``runs`` workflows, one after another, on one fresh database."""
        name = f"dbos_bench_{secrets.token_hex(6)}"
        with contextlib.closing(_admin(url)) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        target = urlsplit(url)._replace(path=f"/{name}").geturl()
        try:
            config: dict[str, Any] = {
                "name": "stead-postgres-bench",
                "system_database_url": target,
                "enable_otlp": False,
                "log_level": "WARNING",
                **extra,
            }
            DBOS(config=config)  # type: ignore[arg-type]
            samples = []
            try:
                DBOS.launch()
                _settle(url)
                for _ in range(runs):
                    COUNTER.reset()
                    t0 = time.perf_counter()
                    output = workflow(PROMPT)
                    samples.append(time.perf_counter() - t0)
                    peers._check("DBOS on PostgreSQL", output)
            finally:
                DBOS.destroy()
            return samples
        finally:
            with contextlib.closing(_admin(url)) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return series


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")
    url = os.environ.get("STEAD_POSTGRES_URL") or os.environ.get("STEAD_TEST_POSTGRES_URL")
    if not url:
        console.print("set STEAD_POSTGRES_URL to a PostgreSQL server to run this benchmark")
        return 0
    dbos = dbos_run(url)
    samples: dict[str, list[float]] = {"stead": [], "DBOS": []}
    for rnd in range(args.warmup + args.runs):
        COUNTER.reset()
        stead_s = stead_run(url)
        dbos_s = dbos(1)[0] if callable(dbos) else None
        if rnd >= args.warmup:
            samples["stead"].append(stead_s * 1e6 / STEPS_PER_RUN)
            if dbos_s is not None:
                samples["DBOS"].append(dbos_s * 1e6 / STEPS_PER_RUN)
    stead_us = statistics.median(samples["stead"])
    table = Table("figure", "value", "target", "")
    table.add_row("stead, PostgresStore (one runtime)", f"{stead_us:,.1f} µs/step", "", "")
    if samples["DBOS"]:
        dbos_us = statistics.median(samples["DBOS"])
        speedup = dbos_us / stead_us
        table.add_row(
            "DBOS Transact, PostgreSQL system database", f"{dbos_us:,.1f} µs/step", "", ""
        )
        table.add_row(
            "speed-up over DBOS",
            f"{speedup:.2f}x",
            f"≥ {TARGET:g}x",
            "PASS" if speedup >= TARGET else "MISS",
        )
    else:
        table.add_row("DBOS Transact", str(dbos), "", "")
    # Warm: a worker serves run after run on the same connections. Three series of WARM_RUNS
    # each, alternating the systems; the median of every run after each series' first.
    warm: dict[str, list[float]] = {"stead": [], "DBOS": []}
    for _ in range(3):
        warm["stead"] += stead_warm(url, WARM_RUNS)
        if callable(dbos):
            warm["DBOS"] += [s * 1e6 / STEPS_PER_RUN for s in dbos(WARM_RUNS + 1)[1:]]
    stead_warm_us = statistics.median(warm["stead"])
    table.add_row(
        f"stead, one runtime, warm ({WARM_RUNS} runs after a first)",
        f"{stead_warm_us:,.1f} µs/step",
        "",
        "",
    )
    if warm["DBOS"]:
        dbos_warm_us = statistics.median(warm["DBOS"])
        table.add_row(
            f"DBOS Transact, warm ({WARM_RUNS} workflows after a first)",
            f"{dbos_warm_us:,.1f} µs/step",
            "",
            "",
        )
        table.add_row(
            "speed-up over DBOS, warm",
            f"{dbos_warm_us / stead_warm_us:.2f}x",
            f"≥ {TARGET:g}x",
            "PASS" if dbos_warm_us / stead_warm_us >= TARGET else "MISS",
        )
    rate = stead_concurrent(url, CONCURRENT_RUNS)
    table.add_row(
        f"durable steps/s, 1 runtime, {CONCURRENT_RUNS} runs at once", f"{rate:,.0f}", "", ""
    )
    rates = {workers: workers_rate(url, workers) for workers in (1, 2, 4)}
    for workers, worker_rate in rates.items():
        scaling = f"{worker_rate / rates[1]:.2f}x of 1 worker" if workers > 1 else ""
        table.add_row(
            f"durable steps/s, {workers} worker process(es), {SCALING_RUNS} runs",
            f"{worker_rate:,.0f}",
            "",
            scaling,
        )
    console.print(table)
    console.print(
        f"[dim]{args.runs} runs after {args.warmup} warm-up, {STEPS_PER_RUN} steps a run, "
        f"python {sys.version.split()[0]}[/]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
