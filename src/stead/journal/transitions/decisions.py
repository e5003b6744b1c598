"""Decisions about a run from outside it: a person's response, an operator's resolve, retry or
cancel, a signal."""

from __future__ import annotations

from ..._json import JSON
from ...errors import (
    ConflictError,
    NotFoundError,
    ValidationError,
    shown,
)
from ..commands import Signal
from ..events import (
    EffectCompleted,
    InteractionResponded,
    SignalReceived,
    StatusChanged,
    ToolCompleted,
)
from ..protocol import Tx
from ..records import (
    Run,
    RunStatus,
)
from ._shared import _pending, _run, _wake_parent


def respond(tx: Tx, interaction_id: str, response: dict[str, JSON]) -> None:
    """Record a person's response, once: the same again is a no-op, a different one a conflict.
    Whatever the queue lists can be answered: for a run that is needs_attention or failed, the
    decision applies when it continues."""
    interaction = tx.get_interaction(interaction_id)
    if interaction is None:
        raise NotFoundError(
            f"no interaction {interaction_id!r}; list_interactions() or `stead interactions "
            "list` shows the pending ones"
        )
    expected = "stead.Answer" if interaction.kind == "question" else "stead.Approve or stead.Deny"
    if response.get("kind") not in ("approve", "deny", "answer"):
        raise ValidationError(
            f"a response is an approve, a deny or an answer, not {shown(response.get('kind'))}; "
            f"answer interaction {interaction_id} with {expected}"
        )
    if (response.get("kind") == "answer") != (interaction.kind == "question"):
        raise ValidationError(
            f"interaction {interaction_id} is a {interaction.kind}; answer it with {expected}, "
            f"not a response of kind {response.get('kind')!r}"
        )
    if interaction.status == "responded":
        if interaction.response == response:
            return
        raise ConflictError(
            f"interaction {interaction_id} ({interaction.key} of run {interaction.run_id}) was "
            "already answered differently; a decision is recorded once"
        )
    if interaction.status == "cancelled":
        raise ConflictError(
            f"interaction {interaction_id} was cancelled with run {interaction.run_id}"
        )
    run = _run(tx, interaction.run_id)
    if run.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
        raise ConflictError(
            f"run {run.id} already ended {run.status.value}; interaction {interaction_id} "
            "can no longer be answered"
        )
    tx.respond_interaction(interaction_id, response)
    tx.append_event(
        run.id,
        InteractionResponded(interaction_id=interaction_id, key=interaction.key, response=response),
    )
    if run.status == RunStatus.WAITING and not tx.pending_interactions(run.id):
        _pending(tx, run.id)


def resolve(tx: Tx, run_id: str, key: str, output: JSON) -> None:
    """Supply by hand the result of the operation a needs_attention run names."""
    run = _run(tx, run_id)
    op = tx.get_operation(run_id, key)
    if op is None:
        keys = ", ".join(o.key for o in tx.operations(run_id)) or "none"
        raise NotFoundError(f"run {run_id} has no operation {key!r}; its operations: {keys}")
    result = {"output": output, "failed": False, "error": None, "resolved": True}
    if op.status == "completed":
        if op.result == result:
            return  # the same resolution again
        raise ConflictError(
            f"operation {key!r} of run {run_id} already has a result; "
            "a committed result is never replaced"
        )
    if run.status != RunStatus.NEEDS_ATTENTION or run.attention_key != key:
        raise ConflictError(
            f"run {run_id} is {run.status.value}, not needing attention at {key!r}"
            + (f" (it needs attention at {run.attention_key!r})" if run.attention_key else "")
            + "; only the operation a needs_attention run names can be resolved"
        )
    tx.complete_operation(run_id, key, result, run_number=run.number, position=op.position)
    stored = op.input if isinstance(op.input, dict) else {}
    if op.kind in ("step", "effect"):
        tx.append_event(
            run_id,
            EffectCompleted(
                key=key,
                name=str(stored.get("name", key)),
                failed=False,
                output=output,
                resolved=True,
            ),
        )
    else:
        tx.append_event(
            run_id,
            ToolCompleted(
                key=key,
                tool=stored.get("tool"),
                call_id=stored.get("call_id"),
                failed=False,
                output=output,
                resolved=True,
            ),
        )
    _pending(tx, run_id, resolved=key)


def retry(tx: Tx, run_id: str) -> None:
    """Continue a failed or needs_attention run; an interrupted operation is run again and
    every interrupted operation gets a fresh attempt budget."""
    run = _run(tx, run_id)
    if run.status not in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
        raise ConflictError(
            f"run {run_id} is {run.status.value}; only failed and needs_attention runs can be "
            "retried"
        )
    later = tx.later_started(run)
    if later is not None:
        raise ConflictError(
            f"session {run.session_id!r} has moved on: run {later.id} started after {run_id}; "
            "submit a new request instead"
        )
    if run.status == RunStatus.FAILED:
        busy = tx.unfinished_in_session(run.session_id)
        if busy is not None and busy.id != run_id:
            raise ConflictError(
                f"session {run.session_id!r} has unfinished run {busy.id}; retry {run_id} "
                "after it ends"
            )
    if run.attention_key is not None:
        tx.order_rerun(run_id, run.attention_key)
    tx.reset_attempts(run_id)
    fresh_count = {"interruptions": 0, "interruption_mark": None}  # a fresh count too
    _pending(tx, run_id, fresh_count, retried=True)


def cancel(tx: Tx, run_id: str, reason: str | None) -> list[str]:
    """End a run for good (never restarted), and every unfinished run it owns; returns the ids
    of the runs cancelled (none if it was cancelled already)."""
    run = _run(tx, run_id)
    if run.status == RunStatus.CANCELLED:
        return []
    if run.status.terminal:
        raise ConflictError(
            f"run {run_id} already ended {run.status.value}; it cannot be cancelled"
        )
    return _cancel(tx, run, reason)


def _cancel(tx: Tx, run: Run, reason: str | None) -> list[str]:
    tx.update_run(
        run.id,
        status=RunStatus.CANCELLED,
        error={"reason": reason or "cancelled", "operation": None, "kind": "cancelled"},
        error_kind="cancelled",
        finished_at=tx.now(),
        next_attempt_at=None,
    )
    tx.cancel_interactions(run.id)
    tx.append_event(run.id, StatusChanged(status="cancelled", reason=reason))
    cancelled = [run.id]
    for child in tx.child_runs(run.id):
        if not child.status.terminal:
            cancelled += _cancel(tx, child, f"its parent run {run.id} was cancelled")
    _wake_parent(tx, run.id, run.parent_id)
    return cancelled


def signal(tx: Tx, command: Signal) -> JSON:
    """Journal a signal for a task run, once per ``(run, request_id)``: the same signal again
    is a no-op, a different one a conflict. A waiting run goes on to look at it."""
    run = _run(tx, command.run_id)
    if run.kind == "agent":
        raise ValidationError(
            f"run {run.id} is a run of agent {run.agent_id!r}; signals go to task runs "
            "(steer an agent run with a new submission instead)"
        )
    existing = tx.get_signal(run.id, command.request_id)
    if existing is not None:
        if existing.name == command.signal and existing.value == command.value:
            return {"number": existing.number, "duplicate": True}
        raise ConflictError(
            f"request {command.request_id!r} already delivered signal {existing.name!r} to run "
            f"{run.id} with a different value; use a new request_id for a new signal"
        )
    if run.status.terminal:
        raise ConflictError(
            f"run {run.id} already ended {run.status.value}; signal {command.signal!r} can no "
            "longer be delivered"
        )
    added = tx.insert_signal(run.id, command.request_id, command.signal, command.value)
    tx.append_event(
        run.id,
        SignalReceived(name=added.name, request_id=added.request_id, number=added.number),
    )
    if run.status == RunStatus.WAITING:
        _pending(tx, run.id, woken_by=f"signal:{command.signal}")
    return {"number": added.number, "duplicate": False}
