"""The jobs a store's writer runs in one transaction, and how one batch of them is applied.

Shared by both writers (``sqlite/writer.py`` commits on the event loop, ``postgres/writer.py``
on a thread): a *checked* job runs inside a savepoint, so a :class:`~stead.errors.SteadError`
it raises undoes its writes alone and is its answer; an unchecked job's failure is a storage
failure of the whole batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..errors import LeaseLostError, SteadError, StorageError
from ..journal.records import Claim

__all__ = ["Job", "answer", "call_job", "run_jobs"]

T = TypeVar("T")


@dataclass(slots=True)
class Job(Generic[T]):
    fn: Callable[[Any], T]
    future: asyncio.Future[T]
    barrier: bool
    read_only: bool
    checked: bool
    #: The claim a worker's write is fenced by (a store shared by workers), checked before the
    #: job runs: a lost claim is the job's answer, and nothing of it is written.
    fence: Claim | None = None
    result: Any = None
    error: BaseException | None = None
    #: Nobody waits for it: it rides along with the next commit someone waits for.
    lazy: bool = False


def answer(job: Job[Any], error: BaseException | None) -> None:
    """Settle ``job``'s future: ``error`` if there is one, else the job's result. The failure
    of a job nobody checks (an execution's own write: its failure poisons the store, and is
    reported there) is marked retrieved, so that one nobody awaits (a lazy write) is not
    logged as an exception never retrieved."""
    future = job.future
    if future.done():
        return
    if error is None:
        future.set_result(job.result)
        return
    future.set_exception(error)
    if not job.checked:
        future.exception()


class _Savepoints(Protocol):
    def check_fence(self, claim: Claim) -> None: ...
    def savepoint(self) -> None: ...
    def rollback_savepoint(self) -> None: ...
    def release_savepoint(self) -> None: ...


def call_job(tx: Any, job: Job[Any], storage_errors: tuple[type[BaseException], ...]) -> bool:
    """Run one job; a SteadError it raises is its answer (its writes are rolled back), and so
    is any other exception of a checked or read-only job that is not a storage failure (a value
    the database cannot take, say): one caller's bad input never poisons the store. An unchecked
    job has no savepoint, so its failure poisons."""
    try:
        job.result = job.fn(tx)
        return True
    except SteadError as exc:
        if isinstance(exc, StorageError):
            raise
        job.error = exc
        return False
    except Exception as exc:
        if isinstance(exc, storage_errors) or not (job.checked or job.read_only):
            raise
        job.error = exc
        return False


def run_jobs(
    tx: _Savepoints, batch: Sequence[Job[Any]], storage_errors: tuple[type[BaseException], ...]
) -> None:
    """Every job of a batch in the open transaction ``tx``, each checked one in a savepoint,
    each fenced one only while its claim holds."""
    for job in batch:
        if job.fence is not None:
            try:
                tx.check_fence(job.fence)
            except LeaseLostError as lost:
                job.error = lost
                continue
        if job.read_only or not job.checked:
            if not call_job(tx, job, storage_errors) and not job.read_only:
                raise StorageError(f"an internal write failed: {job.error}")
            continue
        tx.savepoint()
        if call_job(tx, job, storage_errors):
            tx.release_savepoint()
        else:
            tx.rollback_savepoint()
            tx.release_savepoint()
