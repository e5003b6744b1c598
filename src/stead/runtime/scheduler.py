"""The scheduler: which runs execute now, and when to look again.

Runnable runs start (at the head of their session, up to ``max_concurrent_runs``) as asyncio
tasks. There is one wake-up time: the earliest moment a parked run becomes due (a back-off
today; timers and signal deadlines later), kept as one timer. Between wake-ups it costs nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime

from ..errors import StorageError
from ..journal.protocol import Store, Tx
from ..journal.records import Run

__all__ = ["Scheduler"]


def _schedulable(tx: Tx, *, limit: int, exclude: set[str]) -> tuple[list[Run], datetime | None]:
    return tx.runnable(limit, exclude), tx.next_wakeup()


class Scheduler:
    def __init__(
        self,
        store: Store,
        execute: Callable[[str], Awaitable[None]],
        *,
        max_concurrent_runs: int,
    ) -> None:
        self._store = store
        self._execute = execute
        self.max_concurrent_runs = max_concurrent_runs
        self.active: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def start_loop(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="stead-scheduler")
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def has_room(self) -> bool:
        return self._task is not None and len(self.active) < self.max_concurrent_runs

    def start(self, run_id: str) -> None:
        if run_id not in self.active and not self._stopped:
            task = asyncio.create_task(self._run(run_id), name=f"stead-run:{run_id}")
            self.active[run_id] = task

    def cancel(self, run_id: str) -> None:
        task = self.active.get(run_id)
        if task is not None:
            task.cancel()

    def halt(self) -> None:
        """Start nothing more (the store failed): cancel every execution, wake the loop to end."""
        self._stopped = True
        for task in list(self.active.values()):
            task.cancel()
        self._wake.set()

    async def stop(self) -> None:
        """Cancel every execution (their journals are kept) and the loop."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = list(self.active.values())
        if self._task is not None:
            tasks.append(self._task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, run_id: str) -> None:
        try:
            await self._execute(run_id)
        finally:
            self.active.pop(run_id, None)
            if not self._stopped:
                self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            free = self.max_concurrent_runs - len(self.active)
            if free <= 0:
                continue
            try:
                runs, wakeup = await self._store.read(
                    functools.partial(_schedulable, limit=free, exclude=set(self.active))
                )
            except StorageError:
                return
            for run in runs:
                self.start(run.id)
            self._arm(wakeup)

    def _arm(self, wakeup: datetime | None) -> None:
        """Wake when the earliest parked run becomes due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if wakeup is not None:
            delay = max(0.0, (wakeup - self._store.clock.now()).total_seconds())
            self._timer = asyncio.get_running_loop().call_later(delay, self._wake.set)
