"""What the transitions share: reading a run, letting one go on, the rows written beside a
transition, and waking the parent of a run that ended."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..._json import JSON
from ...errors import NotFoundError
from ..events import StatusChanged
from ..protocol import Tx
from ..records import (
    Run,
    RunStatus,
    Writes,
)

#: Resolves the version a new run of a definition (an agent or a task) is pinned to (``None``:
#: the latest registered); raises :class:`NotFoundError` when there is no such definition or
#: version.
VersionOf = Callable[[str, str | None], str]


def _run(tx: Tx, run_id: str) -> Run:
    run = tx.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id!r}; list_runs() or `stead runs list` shows the runs")
    return run


def _pending(tx: Tx, run_id: str, fields: Mapping[str, object] | None = None, **why: JSON) -> None:
    """The run is ready to continue: the scheduler starts it when its session allows.
    ``fields`` are more of the run's fields to write in the same update."""
    tx.update_run(
        run_id,
        status=RunStatus.PENDING,
        error=None,
        error_kind=None,
        attention_key=None,
        finished_at=None,
        next_attempt_at=None,
        **(fields or {}),
    )
    tx.append_event(run_id, StatusChanged(status="pending", **why))


def _write(tx: Tx, writes: Writes | None, run_id: str) -> None:
    if writes is None:
        return
    for body in writes.blobs:
        tx.put_blob(body)
    if writes.history:
        tx.put_history(writes.history)
    if writes.usage is not None:
        tx.update_run(run_id, usage=writes.usage)


def _wake_parent(tx: Tx, run_id: str, parent_id: str | None) -> None:
    """Run ``run_id`` (owned by ``parent_id``, if any) ended: its waiting parent goes on (and
    finds out how)."""
    if parent_id is None:
        return
    parent = tx.get_run(parent_id)
    if parent is not None and parent.status == RunStatus.WAITING:
        _pending(tx, parent.id, woken_by=f"child:{run_id}")
