"""The transactions the runtime runs on the writer: each takes a transaction and its
arguments, validates against what the journal holds, then writes. A :class:`SteadError` raised
before writing is the caller's answer; nothing of the job is kept."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from .._clock import iso
from .._json import JSON, storable_text
from ..errors import ConflictError, LimitError, NotFoundError, ValidationError
from ..store.records import Event, Operation, Run, RunStatus
from ..store.sqlite_tx import SqliteTx

#: Events read per page when a subscriber catches up.
EVENT_PAGE = 500


def record_stop(
    tx: SqliteTx,
    run_id: str,
    status: RunStatus,
    reason: str,
    operation: str | None,
    kind: str = "error",
    next_attempt_at: datetime | None = None,
    traceback: str | None = None,
) -> None:
    """End an execution short of an outcome (not if the run already ended, or was cancelled)."""
    current = tx.get_run(run_id)
    if current is None or current.status.terminal:
        return
    reason = storable_text(reason)
    error: dict[str, JSON] = {"reason": reason, "operation": operation, "kind": kind}
    if traceback is not None:
        error["traceback"] = storable_text(traceback)
    tx.update_run(
        run_id,
        status=status,
        error=error,
        error_kind=kind,
        attention_key=operation if status == RunStatus.NEEDS_ATTENTION else None,
        finished_at=tx.now() if status.terminal else None,
        next_attempt_at=next_attempt_at,
    )
    data: dict[str, JSON] = {"status": status.value, "reason": reason, "kind": kind}
    if operation is not None:
        data["operation"] = operation
    if next_attempt_at is not None:
        data["next_attempt_at"] = iso(next_attempt_at)
    tx.append_event(run_id, "status", data)


def record_wait(tx: SqliteTx, run_id: str, reason: str) -> None:
    """The run waits for people; if every interaction was answered meanwhile, it goes on."""
    current = tx.get_run(run_id)
    if current is None or current.status != RunStatus.RUNNING:
        return
    if tx.pending_interactions(run_id):
        tx.update_run(run_id, status=RunStatus.WAITING, error=None, error_kind=None)
        tx.append_event(run_id, "status", {"status": "waiting", "reason": reason})
    else:
        tx.update_run(run_id, status=RunStatus.PENDING)
        tx.append_event(run_id, "status", {"status": "pending"})


def existing_submission(
    tx: SqliteTx, session_id: str, request_id: str, submission: str
) -> str | None:
    """The run an identical earlier submission created; a different one is a conflict."""
    found = tx.find_request(session_id, request_id)
    if found is None:
        return None
    existing, existing_digest = found
    if existing_digest != submission:
        raise ConflictError(
            f"request {request_id!r} of session {session_id!r} already belongs to run "
            f"{existing.id} with a different submission; use a new request_id for new work"
        )
    return existing.id


def schedulable(
    tx: SqliteTx, *, limit: int, exclude: set[str]
) -> tuple[list[Run], datetime | None]:
    return tx.runnable(limit, exclude), tx.next_wakeup()


def read_outcome(tx: SqliteTx, *, run_id: str) -> tuple[Run, list[str]] | None:
    run = tx.get_run(run_id)
    if run is None:
        return None
    if run.status != RunStatus.COMPLETED or run.outcome is None:
        return run, []
    reference = run.outcome["messages"]
    return run, tx.history(reference["head"], reference["length"])


def events_page(tx: SqliteTx, *, run_id: str, after: int) -> list[Event]:
    return tx.events_after(run_id, after, EVENT_PAGE)


def attach_message(tx: SqliteTx, op: Operation) -> Operation:
    """A completed model operation stores its message as a blob; attach it for replay."""
    if (
        op.kind != "model"
        or op.status != "completed"
        or not isinstance(op.result, dict)
        or "message" not in op.result
    ):
        return op
    body = tx.get_blob(op.result["message"])
    return dataclasses.replace(op, result={**op.result, "stored_body": body})


def respond_job(tx: SqliteTx, *, interaction_id: str, answer: JSON, response_type: str) -> None:
    interaction = tx.get_interaction(interaction_id)
    if interaction is None:
        raise NotFoundError(
            f"no interaction {interaction_id!r}; runtime.list_interactions() lists the pending ones"
        )
    if (answer["kind"] == "answer") != (interaction.kind == "question"):
        expected = (
            "stead.Answer" if interaction.kind == "question" else "stead.Approve or stead.Deny"
        )
        raise ValidationError(
            f"interaction {interaction_id} is a {interaction.kind}; answer it with "
            f"{expected}, not {response_type}"
        )
    if interaction.status == "responded":
        if interaction.response == answer:
            return  # the same response again
        raise ConflictError(
            f"interaction {interaction_id} ({interaction.key} of run "
            f"{interaction.run_id}) was already answered differently; a decision is "
            "recorded once"
        )
    if interaction.status == "cancelled":
        raise ConflictError(
            f"interaction {interaction_id} was cancelled with run {interaction.run_id}"
        )
    run = tx.get_run(interaction.run_id)
    assert run is not None
    if run.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
        raise ConflictError(
            f"run {run.id} already ended {run.status.value}; interaction {interaction_id} "
            "can no longer be answered"
        )
    # Whatever the approval queue shows can be answered: the decision is recorded now and
    # applies when the run continues (a needs_attention or failed run, once it is resolved
    # or retried).
    tx.respond_interaction(interaction_id, answer)
    tx.append_event(
        run.id,
        "interaction_responded",
        {"interaction_id": interaction_id, "key": interaction.key, "response": answer},
    )
    if run.status == RunStatus.WAITING and not tx.pending_interactions(run.id):
        tx.update_run(run.id, status=RunStatus.PENDING, error=None, error_kind=None)
        tx.append_event(run.id, "status", {"status": "pending"})


def resolve_job(tx: SqliteTx, *, run_id: str, key: str, result: JSON, where: str) -> None:
    run = tx.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id!r} in {where}")
    op = tx.get_operation(run_id, key)
    if op is None:
        raise NotFoundError(
            f"run {run_id} has no operation {key!r}; snapshot() lists its operations"
        )
    if op.status == "completed":
        if op.result == result:
            return  # the same resolution again
        raise ConflictError(
            f"operation {key!r} of run {run_id} already has a result; "
            "a committed result is never replaced"
        )
    if run.status != RunStatus.NEEDS_ATTENTION or run.attention_key != key:
        raise ConflictError(
            f"run {run_id} is {run.status.value}, not blocked on {key!r}"
            + (f" (it is blocked on {run.attention_key!r})" if run.attention_key else "")
            + "; only the operation a needs_attention run names can be resolved"
        )
    tx.complete_operation(run_id, key, result)
    tx.append_event(
        run_id,
        f"{op.kind}_completed",
        {
            "key": key,
            "tool": op.input.get("tool") if isinstance(op.input, dict) else None,
            "call_id": op.input.get("call_id") if isinstance(op.input, dict) else None,
            "failed": False,
            "output": result["output"],
            "resolved": True,
        },
    )
    tx.update_run(run_id, status=RunStatus.PENDING, error=None, attention_key=None)
    tx.append_event(run_id, "status", {"status": "pending", "resolved": key})


def retry_job(tx: SqliteTx, *, run_id: str, where: str) -> None:
    run = tx.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id!r} in {where}")
    if run.status not in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
        raise ConflictError(
            f"run {run_id} is {run.status.value}; only failed and "
            "needs_attention runs can be retried"
        )
    later = tx.later_started(run)
    if later is not None:
        raise ConflictError(
            f"session {run.session_id!r} has moved on: run {later.id} "
            f"started after {run_id}; submit a new request instead"
        )
    if run.status == RunStatus.FAILED:
        busy = tx.unfinished_in_session(run.session_id)
        if busy is not None and busy.id != run_id:
            raise ConflictError(
                f"session {run.session_id!r} has unfinished run "
                f"{busy.id}; retry {run_id} after it ends"
            )
    if run.attention_key is not None:
        tx.order_rerun(run_id, run.attention_key)
    tx.reset_attempts(run_id)  # a fresh back-off and crash budget
    tx.update_run(
        run_id,
        status=RunStatus.PENDING,
        error=None,
        error_kind=None,
        attention_key=None,
        finished_at=None,
        next_attempt_at=None,
    )
    tx.append_event(run_id, "status", {"status": "pending", "retried": True})


def cancel_job(tx: SqliteTx, *, run_id: str, reason: str | None, where: str) -> bool:
    run = tx.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id!r} in {where}")
    if run.status == RunStatus.CANCELLED:
        return False
    if run.status.terminal:
        raise ConflictError(
            f"run {run_id} already ended {run.status.value}; it cannot be cancelled"
        )
    tx.update_run(
        run_id,
        status=RunStatus.CANCELLED,
        error={"reason": reason or "cancelled", "operation": None, "kind": "cancelled"},
        error_kind="cancelled",
        finished_at=tx.now(),
        next_attempt_at=None,
    )
    tx.cancel_interactions(run_id)
    tx.append_event(run_id, "status", {"status": "cancelled", "reason": reason})
    return True


def submit_job(
    tx: SqliteTx,
    *,
    run_id: str,
    session_id: str,
    request_id: str,
    agent_id: str,
    version: str,
    payload: JSON,
    submission: str,
    enqueue: bool,
    max_pending: int | None,
) -> tuple[str, bool]:
    """Insert a run (or find the identical earlier submission); True when it is ready."""
    existing = existing_submission(tx, session_id, request_id, submission)
    if existing is not None:
        return existing, False
    taken = tx.get_run(run_id)
    if taken is not None:
        raise ConflictError(
            f"run id {run_id!r} is taken by session {taken.session_id!r} request "
            f"{taken.request_id!r}; choose another run_id"
        )
    busy = tx.unfinished_in_session(session_id)
    if busy is not None and not enqueue:
        raise ConflictError(
            f"session {session_id!r} has unfinished run {busy.id} ({busy.status}); "
            "wait for it, or pass enqueue=True to queue this run behind it"
        )
    if max_pending is not None:
        pending = tx.count_runs([s.value for s in RunStatus if not s.terminal])
        if pending >= max_pending:
            raise LimitError(
                f"max_pending_runs ({max_pending}) reached; request "
                f"{request_id!r} was not accepted, try again later"
            )
    status = RunStatus.QUEUED if busy is not None else RunStatus.PENDING
    tx.insert_run(
        run_id=run_id,
        session_id=session_id,
        request_id=request_id,
        kind="agent",
        agent_id=agent_id,
        version=version,
        status=status,
        input=payload,
        submission_digest=submission,
    )
    tx.append_event(
        run_id,
        "submitted",
        {
            "agent_id": agent_id,
            "version": version,
            "session_id": session_id,
            "request_id": request_id,
            "status": status.value,
        },
    )
    return run_id, status == RunStatus.PENDING
