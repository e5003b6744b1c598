"""The scheduler: which runs execute here now, and when to look again.

Runnable runs are claimed from the store (at the head of their session, up to
``max_concurrent_runs``) and execute as asyncio tasks. On a store one runtime owns, every run is
its own and a claim is only a name; on a store shared by workers, a claim is a lease the
scheduler extends by heartbeat — a run whose lease was lost (another worker took it over, or it
was cancelled) stops executing here at once. There is one wake-up time: the earliest moment a
parked run becomes due or another worker's lease runs out, kept as one timer. Between wake-ups
it costs nothing.

A run's end may make another runnable (the next run of its session, a parent waiting for it) and
frees a slot. On a shared store, where looking again is a round trip to the server, the claim is
queued right behind the transaction that ends the execution (:meth:`Scheduler.ending`), so the
two share one commit; elsewhere the scheduler looks again once the execution ended.

Draining (a worker asked to stop) claims nothing more and lets each execution run to its next
journal boundary, where it hands the run back for any worker to continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from ..errors import StorageError
from ..journal.protocol import OwnedStore
from ..journal.records import Claim
from ..journal.transitions import Begun

__all__ = ["Scheduler"]

logger = logging.getLogger("stead")


class Scheduler:
    def __init__(
        self,
        store: OwnedStore,
        execute: Callable[[Claim, Begun | None], Awaitable[bool]],
        *,
        max_concurrent_runs: int,
        lease_seconds: float | None = None,
        shared: bool = False,
    ) -> None:
        self._store = store
        self._execute = execute
        self.max_concurrent_runs = max_concurrent_runs
        self._lease_seconds = lease_seconds
        self.active: dict[str, asyncio.Task[None]] = {}
        #: Slots held for submissions that may begin their run in their own transaction
        #: (:meth:`reserve`), until they answer.
        self._reserved = 0
        #: Whether a look found no room only because of held slots: it looks again when one
        #: is given back.
        self._deferred = False
        #: The claims of the runs executing here.
        self.claims: dict[str, Claim] = {}
        #: Claims still held by executions that ended without leaving ``running``.
        self._held: list[Claim] = []
        self._shared = shared
        #: The claims queued behind an ending execution's last transaction, by run.
        self._ending: dict[str, asyncio.Future[tuple[list[Claim], datetime | None]]] = {}
        #: Whether the loop's own claim is under way.
        self._looking = False
        #: Those whose execution ended, until they answer.
        self._claiming: set[asyncio.Future[tuple[list[Claim], datetime | None]]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._stopped = False
        self._releasing: set[asyncio.Task[None]] = set()
        #: Set while draining: claim nothing more; executions hand their run back at their
        #: next journal boundary.
        self.draining = False

    async def start_loop(self) -> None:
        """Look for runnable runs once (started before this returns), then keep looking
        whenever woken."""
        if self._task is None:
            await self._look()
            self._task = asyncio.create_task(self._loop(), name="stead-scheduler")
            if self._lease_seconds is not None:
                self._heartbeat = asyncio.create_task(self._beat(), name="stead-heartbeat")

    def wake(self) -> None:
        self._wake.set()

    def alone(self) -> bool:
        """Whether at most one run executes here (nothing else to keep waiting)."""
        return len(self.active) <= 1

    def has_room(self) -> bool:
        return (
            self._task is not None
            and not self.draining
            and len(self.active) + self._reserved < self.max_concurrent_runs
        )

    def reserve(self) -> bool:
        """Hold a slot for a submission that begins its run in its own transaction if there is
        room now; False if there is none. Submissions made at once all see room before any of
        them commits: without the hold, each would begin its run (``running``), and those
        beyond the slots would be given back to be begun again later. The submission gives the
        slot back (:meth:`unreserve`) when it answers, before it starts what it began."""
        if not self.has_room():
            return False
        self._reserved += 1
        return True

    def unreserve(self) -> None:
        self._reserved -= 1
        if self._deferred:
            self._deferred = False
            self._wake.set()

    def start(self, claim: Claim, begun: Begun | None = None) -> None:
        run_id = claim.run_id
        if run_id not in self.active and not self._stopped:
            self.claims[run_id] = claim
            self.active[run_id] = asyncio.create_task(
                self._run(claim, begun), name=f"stead-run:{run_id}"
            )

    def adopt(self, claim: Claim, begun: Begun | None = None) -> None:
        """Execute a run claimed elsewhere for this runtime (with its submission, which may
        have begun its execution too: ``begun``); without room for it now, give the claim back
        for any worker to take (a begun run is ``running``: whoever claims it resumes it)."""
        if self.has_room() and not self._stopped and claim.run_id not in self.active:
            self.start(claim, begun)
            return
        self._held.append(claim)
        release = asyncio.get_running_loop().create_task(self._release())
        self._releasing.add(release)
        release.add_done_callback(self._releasing.discard)
        self._wake.set()

    def ending(self, run_id: str) -> None:
        """The transaction that ends ``run_id``'s execution was just queued: on a shared store,
        queue the claim its end calls for (its slot counted free) to share that commit."""
        if not self._shared or self._stopped or self.draining or run_id not in self.active:
            return
        if self._ending or self._claiming or self._looking:
            return  # a look is under way: the loop looks once more after it (runs end in bursts)
        free = self.max_concurrent_runs - len(self.active) - self._reserved + 1
        if free <= 0:  # more execute here than there is room for (runs adopted meanwhile)
            return
        future = self._store.claim_runs(free, set(self.active))
        self._ending[run_id] = asyncio.ensure_future(future)

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

    async def drain(self, timeout: float) -> None:
        """Claim nothing more and wait (up to ``timeout`` seconds) for every execution to
        reach a journal boundary and hand its run back."""
        self.draining = True
        tasks = list(self.active.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        await self._release()

    async def stop(self) -> None:
        """Cancel every execution (their journals are kept) and the loop; give back the claims
        that executions still held."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = list(self.active.values())
        for loop_task in (self._task, self._heartbeat):
            if loop_task is not None:
                tasks.append(loop_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._claiming:  # what they claim is given back with the rest
            await asyncio.gather(*self._claiming, return_exceptions=True)
        await self._release()

    async def _release(self) -> None:
        held, self._held = self._held, []
        with contextlib.suppress(StorageError):
            await self._store.release_claims(held)

    async def _run(self, claim: Claim, begun: Begun | None) -> None:
        held = False
        try:
            held = await self._execute(claim, begun)
        finally:
            self.active.pop(claim.run_id, None)
            self.claims.pop(claim.run_id, None)
            ending = self._ending.pop(claim.run_id, None)
            if held:
                self._held.append(claim)
            if ending is not None:
                self._claiming.add(ending)
                ending.add_done_callback(self._claimed)
            if not self._stopped and (ending is None or held):
                self._wake.set()
        if held and self.draining and not self._stopped:
            await self._release()  # another worker continues it while this one drains

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                await self._look()
            except StorageError:
                return

    async def _look(self) -> None:
        """Claim what there is room for and start it; arm the timer for what is due later."""
        free = self.max_concurrent_runs - len(self.active) - self._reserved
        if free <= 0 or self.draining or self._stopped:
            self._deferred = self._reserved > 0
            return
        self._looking = True
        try:
            claims, wakeup = await self._store.claim_runs(free, set(self.active))
        finally:
            self._looking = False
        for claim in claims:
            if len(self.active) < self.max_concurrent_runs:
                self.start(claim)
            else:  # a claim queued behind a run's end took the room meanwhile
                self.adopt(claim)  # (gives it back)
        self._arm(wakeup)

    def _claimed(self, future: asyncio.Future[tuple[list[Claim], datetime | None]]) -> None:
        """The claim queued behind an execution's end answered: start what it claimed (or give
        back what there is no room for now) and look again when it says."""
        self._claiming.discard(future)
        if future.cancelled() or future.exception() is not None:
            self._wake.set()  # the loop asks again (and ends if the store failed)
            return
        claims, wakeup = future.result()
        if self._stopped:
            self._held.extend(claims)  # given back by stop()
            return
        for claim in claims:
            self.adopt(claim)
        self._arm(wakeup)

    async def _beat(self) -> None:
        """Extend the leases of the runs executing here; stop executing those lost."""
        assert self._lease_seconds is not None
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            if not self.claims:
                continue
            sent = list(self.claims.values())
            try:
                lost = await self._store.extend_leases(sent)
            except StorageError:
                return
            for claim in sent:
                # Only the execution the heartbeat spoke for: the run may have been parked and
                # claimed here again meanwhile, under a new epoch the heartbeat did not send.
                if claim.run_id in lost and self.claims.get(claim.run_id) == claim:
                    logger.warning(
                        "run %s: this worker lost its lease; it stops here", claim.run_id
                    )
                    self.cancel(claim.run_id)

    def _arm(self, wakeup: datetime | None) -> None:
        """Wake when the earliest parked run becomes due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if wakeup is not None:
            delay = max(0.0, (wakeup - self._store.clock.now()).total_seconds())
            self._timer = asyncio.get_running_loop().call_later(delay, self._wake.set)
