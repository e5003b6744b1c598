"""The event hub: who in this process waits for a run's next commit.

The store calls :meth:`EventHub.committed` with every batch of events it committed (push, not
polling); subscribers of a run are woken, and waiters for a run's end are released when its
terminal status commits. It also knows which runs execute here now (their ``running`` status
committed here, and no other status since): a run's end, whenever it commits, releases its
waiters, so a waiter for such a run has nothing to read before it waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import SteadError
from ..journal.records import Notice, RunStatus

__all__ = ["REMOTE_LOOK", "REMOTE_POLL", "EventHub", "Subscription", "wait_flag"]

T = TypeVar("T")


async def wait_flag(flag: asyncio.Event, poll: float | None) -> bool:
    """Until ``flag`` is set, or (with ``poll``) that many seconds passed; whether it is set."""
    if poll is None:
        await flag.wait()
        return True
    try:
        async with asyncio.timeout(poll):
            await flag.wait()
    except TimeoutError:
        pass
    return flag.is_set()


#: On a store other workers write to, how often at most a waiter for a run executing elsewhere
#: looks (a notification wakes it), and how often an event stream of such a run looks.
REMOTE_POLL = 0.1
#: ... and how long such a waiter goes without a notification before it looks anyway.
REMOTE_LOOK = 5.0


class EventHub:
    """``shared``: other workers write to the store as well (a run may execute elsewhere and
    commit there); ``lease_seconds``: how long a claim here outlives its last heartbeat."""

    def __init__(self, *, shared: bool = False, lease_seconds: float | None = None) -> None:
        self._changed: dict[str, set[asyncio.Event]] = {}
        self._ended: dict[str, set[asyncio.Event]] = {}
        self._running: set[str] = set()
        self._error: SteadError | None = None
        #: How often a look at a run executing elsewhere may go to the store (None: never).
        self.poll = REMOTE_POLL if shared else None
        self.lease_seconds = lease_seconds

    def committed(self, events: list[Notice]) -> None:
        for event in events:
            if isinstance(event, str):  # an event an operation's row announced: its run's id
                for flag in self._changed.get(event, ()):
                    flag.set()
                continue
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

    async def outcome(
        self,
        run_id: str,
        remembered: Callable[[], T | None],
        read: Callable[[], Awaitable[T | None]],
    ) -> T:
        """The run's outcome once it ended: what ``remembered()`` keeps of it (a run that
        completed here), else what ``read()`` finds in the journal (None: not ended yet)."""
        loop = asyncio.get_running_loop()
        look_at: float | None = None  # when to read although the run executes here
        while True:
            found = remembered()
            if found is not None:
                return found
            ended = self.end_flag(run_id)
            try:
                if self.executing(run_id):
                    # Not ended: its end sets the flag when it commits, here, so there is
                    # nothing to read before. On a shared store no other worker can take the
                    # run while this one's heartbeat extends its lease; but a heartbeat that
                    # stalled past it lets another finish the run while the execution here
                    # goes on unaware, so after a lease's time without an end, read once.
                    if self.lease_seconds is None:
                        await wait_flag(ended, None)
                        continue
                    if look_at is None:
                        look_at = loop.time() + self.lease_seconds
                    if loop.time() < look_at:
                        await wait_flag(ended, look_at - loop.time())
                        continue
                look_at = None
                read_at = loop.time()
                found = await read()
                if found is not None:
                    return found
                if self.poll is None:  # its end commits here, and sets the flag
                    await wait_flag(ended, None)
                    continue
                # Elsewhere, or parked: the shared store's notifications wake the wait (a run
                # let go by another worker or a client, or the listener's fallback), and it
                # reads again at most every poll, however busy the other workers are.
                await wait_flag(ended, REMOTE_LOOK)
                pause = read_at + self.poll - loop.time()
                if pause > 0:
                    await asyncio.sleep(pause)
            finally:
                self.forget_end(run_id, ended)

    def executing(self, run_id: str) -> bool:
        """Whether the run executes here and its end has not committed: when it does, the
        run's end flags are set. (On a store other workers write to, a run whose lease ran out
        may have been taken over meanwhile: its waiters read the journal once a lease's time
        passed without its end.)"""
        return run_id in self._running

    def noticed(self) -> None:
        """Another worker or a client let a run go (it ended, or may go on), or the shared
        store's listener came round without news: every waiter for a run's end looks again
        (one for a run executing here finds it still does, and reads nothing)."""
        for flags in self._ended.values():
            for flag in flags:
                flag.set()

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

    def awaited(self, run_id: str) -> bool:
        """Whether a ``result()`` waits for the run's end now."""
        return run_id in self._ended

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
