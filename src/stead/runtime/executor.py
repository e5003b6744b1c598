"""One execution of one claimed run: begin → definition.execute(ctx) → park, stop or complete.

A run is executed from its start every time; its definition replays committed operations through
the :class:`~stead.runtime.context.RunContext` and continues where the journal ends. How the
execution ends is recorded in one transaction: an outcome, a wait for people or a back-off, or a
reason it stopped — never left ``running``, which would restart it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta

from ..errors import LeaseLostError, StorageError, described
from ..journal import transitions
from ..journal.protocol import OwnedStore, Store, Tx
from ..journal.records import Claim, Recovery, RunStatus
from .context import RunContext
from .control import Failed, Handoff, NeedsAttention, RetryLater, Waiting
from .definition import Completion, Registry
from .limits import Limits

__all__ = ["Executor"]

logger = logging.getLogger("stead")


class Executor:
    def __init__(
        self,
        store: OwnedStore,
        registry: Registry,
        limits: Limits,
        *,
        on_completed: Callable[[str, Completion], None],
        on_parked: Callable[[], None],
        draining: Callable[[], bool] = lambda: False,
        on_ending: Callable[[str], None] = lambda run_id: None,
    ) -> None:
        self._owned = store
        self._registry = registry
        self._limits = limits
        self._on_completed = on_completed
        self._on_parked = on_parked
        self._draining = draining
        #: Called with the run's id as soon as the transaction that ends an execution (an
        #: outcome, a wait, a stop) is queued, before it commits: what the scheduler queues
        #: then shares its commit.
        self._on_ending = on_ending

    def begin(self, tx: Tx, run_id: str, fresh: bool = False) -> transitions.Begun | None:
        """Begin executing ``run_id`` in ``tx`` (the transition an execution starts with; a
        store may run it in the transaction that claimed the run): the run and its journal,
        or None if it is not to be executed. ``fresh``: ``tx`` inserted the run and wrote
        nothing else of it (a submission's), so its journal is empty and is not read."""
        registry = self._registry
        return transitions.begin(
            tx,
            run_id,
            registered=lambda run: registry.definition(run) is not None,
            migration=registry.migration,
            fresh=fresh,
            max_interruptions=self._limits.max_interruptions,
        )

    async def execute(self, claim: Claim, begun: transitions.Begun | None = None) -> bool:
        """Execute the claimed run until it ends, parks or stops; True if the run is still
        ``running`` under this claim (the execution was interrupted or handed the run back),
        so the claim is to be given up. ``begun``: the execution began already (with the
        claim, :meth:`begin`)."""
        run_id = claim.run_id
        store = self._owned.fenced(claim)
        in_flight: dict[str, Recovery] = {}
        try:
            await self._execute(store, run_id, in_flight, begun)
            return False
        except (asyncio.CancelledError, Handoff):
            return True  # closing, cancelled or draining: the journal is kept for the next one
        except LeaseLostError:
            logger.info("run %s: another worker holds it now; this execution stops", run_id)
            return False
        except StorageError:
            return True  # the runtime is poisoned; reopening recovers from the saved intents
        except Exception as exc:  # a defect or odd data: end this execution, never loop
            with contextlib.suppress(StorageError, asyncio.CancelledError, LeaseLostError):
                await self._record_unexpected(store, run_id, exc, in_flight)
            return False

    async def _execute(
        self,
        store: Store,
        run_id: str,
        in_flight: dict[str, Recovery],
        begun: transitions.Begun | None,
    ) -> None:
        if begun is None:
            begun = await store.transact(functools.partial(self.begin, run_id=run_id))
        if begun is None:
            return
        definition = self._registry.definition(begun.run)
        if definition is None:  # pragma: no cover - unregistered between begin and here
            return
        ctx = RunContext(
            store,
            begun.run,
            begun.operations,
            begun.interactions,
            max_payload_bytes=self._limits.max_payload_bytes,
            max_operations=self._limits.max_operations_per_run,
        )
        ctx.in_flight = in_flight
        ctx.draining = self._draining
        try:
            completion = await definition.execute(ctx)
        except NeedsAttention as stop:
            await self._stop(
                store,
                run_id,
                RunStatus.NEEDS_ATTENTION,
                stop.reason,
                stop.operation,
                "needs_attention",
            )
            return
        except Failed as stop:
            await self._stop(
                store,
                run_id,
                RunStatus.FAILED,
                stop.reason,
                stop.operation,
                stop.kind,
                traceback=stop.traceback,
            )
            return
        except Waiting as stop:
            parked = store.transact(
                functools.partial(
                    transitions.park,
                    run_id=run_id,
                    reason=stop.reason,
                    interactions=stop.interactions,
                    until=stop.until,
                    signals=stop.signals,
                    children={k: list(v) for k, v in stop.children.items()},
                ),
                durability="barrier",
            )
            self._on_ending(run_id)
            await parked
            self._on_parked()
            return
        except RetryLater as stop:
            due = store.clock.now() + timedelta(seconds=stop.delay)
            await self._stop(
                store,
                run_id,
                RunStatus.RETRY_WAIT,
                stop.reason,
                stop.operation,
                "model_retry",
                next_attempt_at=due,
            )
            self._on_parked()
            return
        completed = store.transact(
            functools.partial(
                transitions.complete,
                run_id=run_id,
                outcome=completion.outcome,
                writes=completion.writes,
            ),
            durability="barrier",
        )
        self._on_ending(run_id)
        if await completed:
            self._on_completed(run_id, completion)

    async def _stop(
        self,
        store: Store,
        run_id: str,
        status: RunStatus,
        reason: str,
        key: str | None,
        kind: str,
        *,
        next_attempt_at: datetime | None = None,
        traceback: str | None = None,
    ) -> None:
        stopped = store.transact(
            functools.partial(
                transitions.stop,
                run_id=run_id,
                status=status,
                reason=reason,
                operation=key,
                kind=kind,
                next_attempt_at=next_attempt_at,
                traceback=traceback,
            ),
            durability="barrier",
        )
        self._on_ending(run_id)
        await stopped

    async def _record_unexpected(
        self, store: Store, run_id: str, exc: Exception, in_flight: dict[str, Recovery]
    ) -> None:
        """Stop a run whose execution raised something unexpected, with the traceback kept:
        ``needs_attention`` naming the operation when a side effect may have happened (a
        non-``safe`` operation was in flight), else ``failed``. Restarting it at once would
        only raise the same exception again."""
        trace = "".join(traceback.format_exception(exc))
        uncertain = next((key for key, policy in in_flight.items() if policy != "safe"), None)
        detail = described(exc)
        if uncertain is not None:
            status = RunStatus.NEEDS_ATTENTION
            reason = (
                f"an unexpected error stopped the run while operation {uncertain} was in "
                f"progress, so its effect may have happened: {detail}. Check the outside world, "
                f"then resolve({uncertain!r}, output=...) or retry(); the traceback is in the "
                "run's error"
            )
        else:
            status = RunStatus.FAILED
            reason = (
                f"an unexpected error stopped the run: {detail}. The traceback is in the run's "
                "error and the 'stead' log; fix the cause, then retry() the run"
            )
        logger.error("run %s stopped (%s): %s", run_id, status.value, detail, exc_info=exc)
        await self._stop(store, run_id, status, reason, uncertain, "internal", traceback=trace)
