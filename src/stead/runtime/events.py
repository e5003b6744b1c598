"""The event hub: who in this process waits for a run's next commit.

The store calls :meth:`EventHub.committed` with every batch of events it committed (push, not
polling); subscribers of a run are woken, and waiters for a run's end are released when its
terminal status commits. It also knows which runs execute here now (their ``running`` status
committed here, and no other status since): a run's end, whenever it commits, releases its
waiters, so a waiter for such a run has nothing to read before it waits.
"""

from __future__ import annotations

import asyncio

from ..errors import SteadError
from ..journal.records import Event, RunStatus

__all__ = ["EventHub", "Subscription", "wait_flag"]


async def wait_flag(flag: asyncio.Event, poll: float | None) -> None:
    """Until ``flag`` is set, or (with ``poll``) that many seconds passed."""
    if poll is None:
        await flag.wait()
        return
    try:
        async with asyncio.timeout(poll):
            await flag.wait()
    except TimeoutError:
        pass


class EventHub:
    """``poll``: on a store other workers write to as well, how often (seconds) a waiter looks
    again without a local commit — a run executing elsewhere commits there."""

    def __init__(self, poll: float | None = None) -> None:
        self._changed: dict[str, set[asyncio.Event]] = {}
        self._ended: dict[str, set[asyncio.Event]] = {}
        self._running: set[str] = set()
        self._error: SteadError | None = None
        self.poll = poll

    def committed(self, events: list[Event]) -> None:
        for event in events:
            for flag in self._changed.get(event.run_id, ()):
                flag.set()
            if event.kind != "status":
                continue
            status = RunStatus(event.data["status"])
            if status == RunStatus.RUNNING:
                self._running.add(event.run_id)
                continue
            self._running.discard(event.run_id)
            if status.terminal:
                for flag in self._ended.get(event.run_id, ()):
                    flag.set()

    def started(self, run_id: str) -> None:
        """The run's ``running`` status committed elsewhere (a submission on a shared store's
        pool), and it executes here now."""
        self._running.add(run_id)

    def stopped(self, run_id: str) -> None:
        """The run's execution here is over, whatever its status (an end committed here
        already said so; a run handed back may end elsewhere)."""
        self._running.discard(run_id)

    def executing(self, run_id: str) -> bool:
        """Whether the run executes here and its end has not committed: when it does, the
        run's end flags are set. (On a store other workers write to, a run may have been taken
        over meanwhile: its waiters look again every :attr:`poll` seconds.)"""
        return run_id in self._running

    def close(self, error: SteadError) -> None:
        """Wake everyone: the runtime closed or failed with ``error``."""
        self._error = error
        for flags in (*self._changed.values(), *self._ended.values()):
            for flag in flags:
                flag.set()

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def subscribe(self, run_id: str) -> Subscription:
        """From now on, wake the subscription whenever the run commits events."""
        flag = asyncio.Event()
        self._changed.setdefault(run_id, set()).add(flag)
        return Subscription(self, run_id, flag)

    def _unsubscribe(self, run_id: str, flag: asyncio.Event) -> None:
        flags = self._changed.get(run_id)
        if flags is not None:
            flags.discard(flag)
            if not flags:
                del self._changed[run_id]

    def end_flag(self, run_id: str) -> asyncio.Event:
        """A flag set when the run's terminal status commits; release it with
        :meth:`forget_end`."""
        flag = asyncio.Event()
        self._ended.setdefault(run_id, set()).add(flag)
        return flag

    def forget_end(self, run_id: str, flag: asyncio.Event) -> None:
        flags = self._ended.get(run_id)
        if flags is not None:
            flags.discard(flag)
            if not flags:
                del self._ended[run_id]

    @property
    def waiting(self) -> int:
        """How many result() calls wait (for tests of leaks)."""
        return sum(len(flags) for flags in self._ended.values())


class Subscription:
    """Wakes when a run may have new events; see :meth:`EventHub.subscribe`."""

    def __init__(self, hub: EventHub, run_id: str, flag: asyncio.Event) -> None:
        self._hub, self._run_id, self._flag = hub, run_id, flag

    async def wait(self) -> None:
        await wait_flag(self._flag, self._hub.poll)
        self._flag.clear()
        self._hub.check()

    def close(self) -> None:
        self._hub._unsubscribe(self._run_id, self._flag)
