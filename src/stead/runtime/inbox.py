"""The inbox: commands other processes post to a store that this runtime owns.

A :class:`~stead.Client` in another process cannot write a run's state under the owner, so it
posts the command; the owner notices (a diskless check of the file, a few times a second) and
applies each posted command with the same transition it uses in-process, recording the answer in
the same transaction — so a command is applied exactly once, by this owner or, if it dies first,
by the next.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from .._json import JSON
from ..errors import SteadError, StorageError, ValidationError, described
from ..journal import transitions
from ..journal.commands import Command, command_from_json, error_answer
from ..journal.protocol import InboxRow, OwnedStore, Tx

__all__ = ["INTERVAL", "Inbox"]

logger = logging.getLogger("stead")

#: How often the owner looks for posted commands.
INTERVAL = 0.2
#: Commands read per round.
_BATCH = 100
#: How long an answered command's row is kept for its caller to read the answer.
KEEP_ANSWERS = timedelta(hours=1)
#: How often the owner deletes the answers kept that long. Finding them reads every answered
#: row (the inbox keeps an hour of them), which each round of commands from busy clients
#: would otherwise pay.
FORGET_EVERY = timedelta(minutes=1)


class Inbox:
    def __init__(
        self,
        store: OwnedStore,
        *,
        version_of: transitions.VersionOf,
        max_pending: int | None,
        applied: Callable[[Command, JSON], None],
    ) -> None:
        self._store = store
        self._version_of = version_of
        self._max_pending = max_pending
        self._applied = applied
        self._task: asyncio.Task[None] | None = None
        self._forgot_at: datetime | None = None  # when answers were last forgotten

    def watch(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="stead-inbox")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def halt(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                if self._store.changed_elsewhere():
                    await self.drain()
            except StorageError:
                return  # the runtime is poisoned and says so itself
            except Exception:  # never let one bad round stop the owner listening
                logger.exception("applying commands from the inbox failed; trying again")

    async def drain(self) -> None:
        """Apply every posted command, oldest first; forget answers read long ago (at most
        every :data:`FORGET_EVERY`)."""
        now = self._store.clock.now()
        if self._forgot_at is None or now - self._forgot_at >= FORGET_EVERY:
            self._forgot_at = now
            horizon = now - KEEP_ANSWERS
            # Lazy, and not waited for on its own: it commits with the read queued after it (a
            # read sees every write queued before it) instead of on the lazy timer, which would
            # keep opening a runtime waiting for nothing.
            forgotten = self._store.transact(
                lambda tx: tx.forget_answered(horizon), durability="lazy"
            )
            posted, _ = await asyncio.gather(self._store.read(_posted), forgotten)
        else:
            posted = await self._store.read(_posted)
        while True:
            for command_id, data, _status, _answer in posted:
                try:
                    applied = await self._store.transact(
                        functools.partial(self._apply, command_id=command_id, data=data),
                        durability="barrier",
                    )
                except StorageError:
                    raise
                except Exception as exc:  # a command no transition could take: answer it
                    logger.error("inbox command #%s failed: %s", command_id, described(exc))
                    refusal = ValidationError(
                        f"the command could not be applied ({described(exc)}); nothing changed"
                    )
                    await self._store.transact(
                        functools.partial(_refuse, command_id=command_id, error=refusal),
                        durability="barrier",
                    )
                    continue
                if applied is not None:
                    self._applied(*applied)
            if len(posted) < _BATCH:
                return
            posted = await self._store.read(_posted)

    def _apply(self, tx: Tx, *, command_id: int, data: JSON) -> tuple[Command, JSON] | None:
        """Apply one posted command and record its answer, in one transaction. Transitions
        raise before they write, so a refused command leaves only its answer. A command
        answered meanwhile (where workers share the store, another may have got to it first)
        is left alone."""
        if not tx.hold_command(command_id):
            return None
        try:
            command = command_from_json(data)
            answer = transitions.apply(tx, command, self._version_of, max_pending=self._max_pending)
        except StorageError:
            raise
        except SteadError as exc:
            tx.answer_command(command_id, "failed", error_answer(exc))
            return None
        tx.answer_command(command_id, "applied", {"value": answer})
        return command, answer


def _posted(tx: Tx) -> list[InboxRow]:
    return tx.posted_commands(_BATCH)


def _refuse(tx: Tx, *, command_id: int, error: SteadError) -> None:
    tx.answer_command(command_id, "failed", error_answer(error))
