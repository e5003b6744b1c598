"""The runtime's schedules: submit each schedule's due slots, then sleep until the next one.

Where the last slot of a schedule stands is read from the journal (its session's newest run, or
before it has one, when the schedule first ran in this database), so a restart catches up from
there by the schedule's policy; a slot's run is a submission with
the slot as its request id, so runtimes and workers that race on a slot submit it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from .._clock import Clock
from ..errors import SteadError
from ..journal.protocol import Tx
from ..tasks.schedule import Schedule, request_of, slot_of

__all__ = ["Cron"]

logger = logging.getLogger("stead")

#: Submit a schedule's slot: (schedule, request id) -> None.
Submit = Callable[[Schedule, str], Awaitable[None]]
Read = Callable[[Callable[[Tx], object]], Awaitable[object]]
Write = Callable[[Callable[[Tx], object]], Awaitable[object]]


class Cron:
    def __init__(
        self,
        schedules: Sequence[Schedule],
        clock: Clock,
        read: Read,
        write: Write,
        submit: Submit,
    ) -> None:
        self._schedules = list(schedules)
        self._clock = clock
        self._read = read
        self._write = write
        self._submit = submit
        self._last: dict[str, datetime] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._started: datetime | None = None

    def start(self) -> None:
        if self._schedules and self._task is None:
            self._started = self._clock.now()  # a schedule that never ran counts from here
            self._task = asyncio.create_task(self._loop(), name="stead-schedules")

    def wake(self) -> None:
        """The clock moved (a test clock): look again."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            now = self._clock.now()
            for schedule in self._schedules:
                try:
                    await self._fire(schedule, now)
                except SteadError as exc:  # a bad slot must not stop the others
                    logger.error("schedule %s: %s", schedule.name, exc)
            upcoming = min(s.next_slot(now) for s in self._schedules)
            delay = max(0.0, (upcoming - self._clock.now()).total_seconds()) + 0.001
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(delay, 3600.0))

    async def _fire(self, schedule: Schedule, now: datetime) -> None:
        last = self._last.get(schedule.name)
        if last is None:
            last = await self._latest(schedule) or await self._since(schedule)
        for slot in schedule.due(last, now):
            await self._submit(schedule, request_of(slot))
        self._last[schedule.name] = max(last, now)

    async def _since(self, schedule: Schedule) -> datetime:
        """When the schedule first ran in this database (slots before are not caught up)."""
        now = self._started or self._clock.now()
        found = await self._write(lambda tx: tx.schedule_since(schedule.name, now))
        assert isinstance(found, datetime)
        return found

    async def _latest(self, schedule: Schedule) -> datetime | None:
        """The slot of the schedule's newest run in the journal."""

        def read(tx: Tx) -> datetime | None:
            runs = tx.list_runs(
                session_id=schedule.session_id,
                agent_id=None,
                statuses=None,
                before_number=None,
                limit=1,
            )
            return slot_of(runs[0].request_id) if runs else None

        found = await self._read(read)
        return found if isinstance(found, datetime) else None
