"""``stead worker APP``: run an App's agents, tasks and schedules as one worker of a store.

On PostgreSQL any number of workers, on any number of hosts, share a schema: each claims runnable
runs, and a run whose worker died is taken over once its lease runs out. On a SQLite file the
worker is the file's one runtime.

SIGTERM (or a first Ctrl-C) drains: the worker claims nothing more, lets every operation in
progress finish and reach the journal, hands its runs back for other workers and exits 0. A
second Ctrl-C exits at once (the journal is kept; the runs' leases run out). If the store fails
(the PostgreSQL server restarted, say), the worker reopens it with a growing pause instead of
exiting.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
import signal
import sys
from typing import Any

import click

from ..app import App
from ..errors import SteadError, StorageError
from ..runtime.runtime import Runtime
from ..store.postgres import PostgresStore
from ._common import db_option, fail, open_store

__all__ = ["load_app", "worker"]

logger = logging.getLogger("stead.worker")

#: Pauses (seconds) before reopening a store that failed, growing up to the last.
_REOPEN_PAUSES = (0.5, 1.0, 2.0, 5.0, 10.0)


def load_app(spec: str) -> App:
    """The :class:`stead.App` that ``module:attribute`` names (the current directory is
    importable, as for ``python -m``); a function is called to build it."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise fail(f"APP is module:attribute (myproject.agents:app), not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise fail(f"cannot import {module_name!r} for APP {spec!r}: {exc}") from None
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise fail(f"module {module_name!r} has no {attribute!r} (APP {spec!r})") from None
    if inspect.isfunction(found):  # a factory
        try:
            found = found()
        except Exception as exc:
            raise fail(f"APP {spec!r} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(found, App):
        raise fail(f"APP {spec!r} is a {type(found).__name__}, not a stead.App")
    return found


@click.command("worker")
@click.argument("app_spec", metavar="APP")
@db_option
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1, max=10_000),
    help="Runs this worker executes at once.",
)
@click.option(
    "--lease",
    "lease_seconds",
    default=15.0,
    show_default=True,
    metavar="SECONDS",
    type=click.FloatRange(min=0.2, max=3600),
    help="PostgreSQL: how long a claim outlives this worker's last heartbeat; a killed "
    "worker's runs continue elsewhere this long after it died.",
)
@click.option(
    "--drain-timeout",
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    type=click.FloatRange(min=0, max=86_400),
    help="On SIGTERM, how long operations in progress may take to finish before the worker "
    "stops them (their journal is kept; each continues by its recovery policy).",
)
def worker(
    app_spec: str, db: str, concurrency: int, lease_seconds: float, drain_timeout: float
) -> None:
    """Run the agents, tasks and schedules of APP (module:attribute naming a stead.App) as a
    worker of --db.

    \b
    stead worker myproject.agents:app --db postgresql://user@host/db --concurrency 8

    SIGTERM drains and exits 0; a second Ctrl-C exits at once."""
    app = load_app(app_spec)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    def store() -> Any:
        found = open_store(db)
        if isinstance(found, PostgresStore):
            return PostgresStore(found.url, schema=found.schema, lease_seconds=lease_seconds)
        return found

    try:
        asyncio.run(_serve(app, store, concurrency=concurrency, drain_timeout=drain_timeout))
    except SteadError as exc:
        raise fail(str(exc)) from None


async def _serve(app: App, store: Any, *, concurrency: int, drain_timeout: float) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    failed = asyncio.Event()
    interrupts = 0

    def on_signal(signum: int) -> None:
        nonlocal interrupts
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1:
                os._exit(130)  # asked twice: at once; the journal is kept, the leases run out
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    pauses = iter(_REOPEN_PAUSES)
    first = True
    while not stopping.is_set():
        failed.clear()
        try:
            runtime = await Runtime.open(
                app,
                store(),
                max_concurrent_runs=concurrency,
                on_fatal_error=lambda error: failed.set(),
            )
        except StorageError as exc:
            if first:
                raise
            pause = next(pauses, _REOPEN_PAUSES[-1])
            logger.warning("cannot reopen the store (%s); trying again in %gs", exc, pause)
            await _either(stopping, asyncio.sleep(pause))
            continue
        pauses = iter(_REOPEN_PAUSES)
        if first:
            _announce(runtime, concurrency)
            first = False
        await _either(stopping, failed.wait())
        if failed.is_set() and not stopping.is_set():
            logger.warning("the store failed (%s); reopening it", runtime.health()["storage_error"])
            await runtime.close()
            continue
        active = runtime.health()["active_runs"]
        logger.info("draining: %d run(s) in progress finish their operation", active)
        await runtime.drain(drain_timeout)
        logger.info("drained; exiting")


def _announce(runtime: Runtime, concurrency: int) -> None:
    name = getattr(runtime.store, "worker", "") or f"pid {os.getpid()}"
    print(
        f"stead worker {name} ready on {runtime.store!r}, up to {concurrency} runs at once",
        flush=True,
    )


async def _either(event: asyncio.Event, other: Any) -> None:
    """Until ``event`` is set or ``other`` (an awaitable) finishes."""
    waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(other)]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
