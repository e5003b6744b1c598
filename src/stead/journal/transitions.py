"""Every state change of a run, operation or interaction, written once against :class:`Tx`.

Each transition reads what the journal holds, validates against it, then writes — rows and the
event that reports them, in one transaction. A :class:`~stead.errors.SteadError` raised before
writing is the caller's answer and nothing of the transition is kept. The runtime applies these
in-process; a store with one owner applies the commands other processes post with the same
functions (:func:`apply`), so a decision means the same thing wherever it comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._clock import iso
from .._json import JSON, digest, storable_text
from ..errors import (
    ConflictError,
    LimitError,
    NotFoundError,
    SteadError,
    StorageError,
    ValidationError,
    shown,
)
from .commands import (
    Cancel,
    Command,
    Fork,
    Resolve,
    Respond,
    Retry,
    Signal,
    Submit,
    SubmitGraph,
    SubmitTask,
    command_from_json,
    error_answer,
)
from .events import (
    EffectCompleted,
    InteractionRequested,
    InteractionResponded,
    Payload,
    SignalReceived,
    StatusChanged,
    Submitted,
    ToolCompleted,
    operation_completed,
    operation_started,
)
from .keys import child_session, operation_id
from .protocol import InboxRow, Tx
from .records import (
    RUNNABLE_STATUSES,
    Event,
    Interaction,
    Operation,
    Recovery,
    Run,
    RunStatus,
    Writes,
    outcome_history,
)

__all__ = [
    "Begun",
    "apply",
    "apply_posted",
    "begin",
    "cancel",
    "complete",
    "emit",
    "finish_operation",
    "fork",
    "park",
    "record_operation",
    "request_interaction",
    "resolve",
    "respond",
    "restart_operation",
    "retry",
    "signal",
    "start_child",
    "start_operation",
    "stop",
    "submit",
]

#: Resolves the version a new run of a definition (an agent or a task) is pinned to (``None``:
#: the latest registered); raises :class:`NotFoundError` when there is no such definition or
#: version.
VersionOf = Callable[[str, str | None], str]


def _run(tx: Tx, run_id: str) -> Run:
    run = tx.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id!r}; list_runs() or `stead runs list` shows the runs")
    return run


def _pending(tx: Tx, run_id: str, **why: JSON) -> None:
    """The run is ready to continue: the scheduler starts it when its session allows."""
    tx.update_run(
        run_id,
        status=RunStatus.PENDING,
        error=None,
        error_kind=None,
        attention_key=None,
        finished_at=None,
        next_attempt_at=None,
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


# -- commands ----------------------------------------------------------------------------------


def existing_submission(tx: Tx, session_id: str, request_id: str, submission: str) -> str | None:
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


def submit(
    tx: Tx,
    *,
    run_id: str,
    session_id: str,
    request_id: str,
    agent_id: str,
    version: str,
    input: JSON,
    submission: str,
    enqueue: bool,
    max_pending: int | None,
    kind: str = "agent",
    parent_id: str | None = None,
) -> tuple[str, bool]:
    """Insert a run of an agent or a task (or find the identical earlier submission); True
    when it is ready. ``parent_id`` makes it a child the parent run owns."""
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
        kind=kind,
        agent_id=agent_id,
        version=version,
        status=status,
        input=input,
        submission_digest=submission,
        parent_id=parent_id,
    )
    tx.append_event(
        run_id,
        Submitted(
            agent_id=agent_id,
            version=version,
            session_id=session_id,
            request_id=request_id,
            status=status.value,
            kind=kind if kind != "agent" else None,
            parent_id=parent_id,
        ),
    )
    return run_id, status == RunStatus.PENDING


def fork(tx: Tx, command: Fork, version_of: VersionOf | None) -> tuple[str, bool]:
    """A new run reusing the completed operations of ``command.run_id`` positioned before
    ``command.before``; forking the same point again with the same ids returns the same fork.
    Without ``version_of`` (no registry at hand) the fork keeps the source's version unless
    the command names one."""
    source = _run(tx, command.run_id)
    submission = digest({"kind": "fork", "source": command.run_id, "before": command.before})
    existing = existing_submission(tx, command.session_id, command.request_id, submission)
    if existing is not None:
        return existing, False
    op = tx.get_operation(command.run_id, command.before)
    if op is None:
        keys = ", ".join(o.key for o in tx.operations(command.run_id)) or "none"
        raise NotFoundError(
            f"run {command.run_id} has no operation {command.before!r}; its operations: {keys}"
        )
    if version_of is not None:
        version = version_of(source.agent_id, command.version)
    else:
        version = command.version or source.version
    busy = tx.unfinished_in_session(command.session_id)
    if busy is not None:
        raise ConflictError(
            f"session {command.session_id!r} has unfinished run {busy.id}; fork into another "
            "session"
        )
    tx.insert_run(
        run_id=command.new_run_id,
        session_id=command.session_id,
        request_id=command.request_id,
        kind=source.kind,
        agent_id=source.agent_id,
        version=version,
        status=RunStatus.PENDING,
        input=source.input,
        submission_digest=submission,
    )
    tx.update_run(
        command.new_run_id,
        history_head=source.history_head,
        history_length=source.history_length or 0,
        history_run=source.history_run,
    )
    copied = tx.copy_operations(command.run_id, command.new_run_id, op.position)
    tx.append_event(
        command.new_run_id,
        Submitted(
            agent_id=source.agent_id,
            version=version,
            session_id=command.session_id,
            request_id=command.request_id,
            status="pending",
            forked_from=command.run_id,
            before=command.before,
            copied_operations=copied,
        ),
    )
    return command.new_run_id, True


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
    tx.complete_operation(run_id, key, result)
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
    _pending(tx, run_id, retried=True)


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
    _wake_parent(tx, run)
    return cancelled


def _wake_parent(tx: Tx, run: Run) -> None:
    """A child run ended: its waiting parent goes on (and finds out how)."""
    if run.parent_id is None:
        return
    parent = tx.get_run(run.parent_id)
    if parent is not None and parent.status == RunStatus.WAITING:
        _pending(tx, parent.id, woken_by=f"child:{run.id}")


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


def apply(
    tx: Tx, command: Command, version_of: VersionOf | None, *, max_pending: int | None = None
) -> JSON:
    """Apply a command the way the runtime does in-process; returns its JSON answer.
    ``version_of`` is the owner's registry (``None`` where there is no owner at hand)."""
    if isinstance(command, Submit):
        return _submit(tx, command, version_of, max_pending)
    if isinstance(command, SubmitTask):
        return _submit_task(tx, command, version_of, max_pending)
    if isinstance(command, SubmitGraph):
        return _submit_graph(tx, command, max_pending)
    if isinstance(command, Signal):
        return signal(tx, command)
    if isinstance(command, Respond):
        respond(tx, command.interaction_id, command.response)
        return None
    if isinstance(command, Resolve):
        resolve(tx, command.run_id, command.key, command.output)
        return None
    if isinstance(command, Retry):
        retry(tx, command.run_id)
        return None
    if isinstance(command, Cancel):
        return cancel(tx, command.run_id, command.reason)
    run_id, ready = fork(tx, command, version_of)
    return {"run_id": run_id, "ready": ready}


def _version(version_of: VersionOf | None, what: str, name: str, version: str | None) -> str:
    if version_of is not None:
        return version_of(name, version)
    if version is not None:
        return version
    raise ValidationError(
        f"no runtime owns this store to pick the latest version of {what} {name!r}; pass "
        "version=... or submit while a runtime runs"
    )


def _submit_task(
    tx: Tx, command: SubmitTask, version_of: VersionOf | None, max_pending: int | None
) -> JSON:
    version = _version(version_of, "task", command.task, command.version)
    payload = {"input": command.input}
    run_id, ready = submit(
        tx,
        run_id=command.run_id,
        session_id=command.session_id,
        request_id=command.request_id,
        agent_id=command.task,
        version=version,
        input=payload,
        submission=digest({"kind": "task", "task": command.task, "input": payload}),
        enqueue=command.enqueue,
        max_pending=max_pending,
        kind="task",
    )
    return {"run_id": run_id, "ready": ready}


def _submit_graph(tx: Tx, command: SubmitGraph, max_pending: int | None) -> JSON:
    payload = {"nodes": command.nodes}
    run_id, ready = submit(
        tx,
        run_id=command.run_id,
        session_id=command.session_id,
        request_id=command.request_id,
        agent_id="graph",
        version="1",
        input=payload,
        submission=digest({"kind": "graph", "input": payload}),
        enqueue=command.enqueue,
        max_pending=max_pending,
        kind="graph",
    )
    return {"run_id": run_id, "ready": ready}


def _submit(tx: Tx, command: Submit, version_of: VersionOf | None, max_pending: int | None) -> JSON:
    version = _version(version_of, "agent", command.agent_id, command.version)
    payload = {"prompt": command.prompt}
    run_id, ready = submit(
        tx,
        run_id=command.run_id,
        session_id=command.session_id,
        request_id=command.request_id,
        agent_id=command.agent_id,
        version=version,
        input=payload,
        submission=digest({"kind": "agent", "agent_id": command.agent_id, "input": payload}),
        enqueue=command.enqueue,
        max_pending=max_pending,
    )
    return {"run_id": run_id, "ready": ready}


# -- execution ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Begun:
    """What an execution starts from: the run and its journal."""

    run: Run
    operations: list[Operation]
    interactions: list[Interaction]


def begin(tx: Tx, run_id: str, registered: Callable[[Run], bool]) -> Begun | None:
    """Claim a runnable run for execution (``running``) and read its journal; ``None`` if it
    is not runnable. A run whose definition is not ``registered`` goes to needs_attention."""
    current = tx.get_run(run_id)
    if current is None:
        return None
    due = (
        current.status in (RunStatus.RETRY_WAIT, RunStatus.WAITING)
        and current.next_attempt_at is not None
        and current.next_attempt_at <= tx.now()
    )
    if current.status.value not in RUNNABLE_STATUSES and not due:
        return None
    if not registered(current):
        stop(
            tx,
            run_id,
            RunStatus.NEEDS_ATTENTION,
            f"{current.kind} {current.agent_id!r} version {current.version!r} is not "
            "registered in this runtime; register that version (App.register) and retry() "
            "the run",
            None,
            kind="needs_attention",
        )
        return None
    fields: dict[str, object] = {"status": RunStatus.RUNNING, "next_attempt_at": None}
    if current.started_at is None:
        fields["started_at"] = tx.now()
    if current.history_length is None and current.kind != "agent":
        fields["history_length"] = 0  # a task or graph run has no conversation
    elif current.history_length is None:  # a session's history is taken when the run first starts
        previous = tx.latest_completed(current.session_id, current.number)
        head, length, source = None, 0, None
        if previous is not None and previous.outcome is not None:
            head, length = outcome_history(previous.outcome)
            source = previous.id if length else None
        fields["history_head"], fields["history_length"] = head, length
        fields["history_run"] = source
    tx.update_run(run_id, **fields)
    tx.append_event(
        run_id,
        StatusChanged(status="running", resumed=current.status == RunStatus.RUNNING),
    )
    run = tx.get_run(run_id)
    if run is None:  # pragma: no cover - the row was just updated
        raise StorageError(f"run {run_id} vanished while it was claimed")
    return Begun(
        run=run,
        operations=tx.operations(run_id),
        interactions=tx.run_interactions(run_id),
    )


def complete(tx: Tx, run_id: str, outcome: JSON, writes: Writes) -> bool:
    """The run completed with ``outcome``; False if it was cancelled meanwhile."""
    current = tx.get_run(run_id)
    if current is None or current.status != RunStatus.RUNNING:
        return False
    _write(tx, writes, run_id)
    tx.update_run(
        run_id,
        status=RunStatus.COMPLETED,
        outcome=outcome,
        finished_at=tx.now(),
        usage=outcome["usage"],
    )
    tx.append_event(run_id, StatusChanged(status="completed"))
    _wake_parent(tx, current)
    return True


def stop(
    tx: Tx,
    run_id: str,
    status: RunStatus,
    reason: str,
    operation: str | None,
    *,
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
    tx.append_event(
        run_id,
        StatusChanged(
            status=status.value,
            reason=reason,
            kind=kind,
            operation=operation,
            next_attempt_at=iso(next_attempt_at) if next_attempt_at is not None else None,
        ),
    )
    if status.terminal:
        _wake_parent(tx, current)


def park(
    tx: Tx,
    run_id: str,
    reason: str,
    *,
    interactions: bool = True,
    until: datetime | None = None,
    signals: dict[str, int] | None = None,
    children: dict[str, list[str]] | None = None,
) -> None:
    """The run waits — for people (``interactions``), a time (``until``), the next signal of a
    name (``signals``: how many of each it has taken) or a child run reaching one of the
    statuses given for it (``children``) — and goes on at once if what it waits for came
    meanwhile (or it waits for nothing)."""
    current = tx.get_run(run_id)
    if current is None or current.status != RunStatus.RUNNING:
        return
    awaited = interactions or until is not None or bool(signals) or bool(children)
    come = (
        (interactions and not tx.pending_interactions(run_id))
        or (until is not None and until <= tx.now())
        or any(
            tx.signal_number(run_id, name, taken + 1) is not None
            for name, taken in (signals or {}).items()
        )
        or any(_settled(tx, child, statuses) for child, statuses in (children or {}).items())
    )
    if awaited and not come:
        tx.update_run(
            run_id, status=RunStatus.WAITING, error=None, error_kind=None, next_attempt_at=until
        )
        tx.append_event(
            run_id,
            StatusChanged(
                status="waiting",
                reason=reason,
                next_attempt_at=iso(until) if until is not None else None,
            ),
        )
    else:
        tx.update_run(run_id, status=RunStatus.PENDING)
        tx.append_event(run_id, StatusChanged(status="pending"))


def _settled(tx: Tx, run_id: str, statuses: list[str]) -> bool:
    # A child ending on another worker and this park must not both miss each other: the child's
    # row is held until this commits (its end, starting later, sees this run waiting and wakes
    # it), and a write to it in flight (no status) counts as settled: the run looks again.
    status = tx.run_status(run_id)
    return status is None or status in statuses


def start_operation(
    tx: Tx,
    *,
    run_id: str,
    key: str,
    position: int,
    kind: str,
    recovery: Recovery,
    input_hash: str,
    input: JSON,
    writes: Writes | None,
    input_text: str | None = None,
    result: JSON = None,
    result_text: str | None = None,
) -> None:
    """The intent of a new operation (and the rows its input refers to); ``input`` is what the
    journal keeps of it, ``input_text`` its JSON when the caller encoded it already. With
    ``result_text`` (and ``result``) the row is written completed (see
    :func:`record_operation`). The row announces its events (``journal.events``)."""
    _write(tx, writes, run_id)
    started = operation_started(kind, key, input, 1, operation_id(run_id, key))
    started_seq = tx.announce(run_id, started).sequence if started is not None else None
    completed_seq = None
    if result_text is not None:
        completed = operation_completed(kind, key, input, result)
        completed_seq = tx.announce(run_id, completed).sequence if completed is not None else None
    tx.start_operation(
        run_id=run_id,
        key=key,
        position=position,
        kind=kind,
        recovery=recovery,
        input_hash=input_hash,
        input=input,
        input_text=input_text,
        result_text=result_text,
        started_seq=started_seq,
        completed_seq=completed_seq,
    )


def restart_operation(
    tx: Tx,
    *,
    run_id: str,
    key: str,
    kind: str,
    input: JSON,
    attempt: int,
    writes: Writes | None,
) -> None:
    """Another attempt of an interrupted operation (consumes a re-run order); its event is a
    row of its own (the operation row announces the first attempt only)."""
    _write(tx, writes, run_id)
    tx.restart_operation(run_id, key, attempt)
    started = operation_started(kind, key, input, attempt, operation_id(run_id, key))
    if started is not None:
        tx.append_event(run_id, started)


def finish_operation(
    tx: Tx,
    *,
    run_id: str,
    key: str,
    kind: str,
    input: JSON,
    result: JSON,
    writes: Writes | None,
    result_text: str | None = None,
) -> None:
    """The result of an operation in progress (``input``: what the journal keeps of its input;
    ``result_text``: the result's JSON, if encoded already). The row announces the event."""
    completed = operation_completed(kind, key, input, result)
    completed_seq = tx.announce(run_id, completed).sequence if completed is not None else None
    if not tx.complete_operation(run_id, key, result, result_text, completed_seq):
        raise StorageError(
            f"operation {key} of run {run_id} was not in progress when its result was "
            "written; the journal was changed under this runtime"
        )
    _write(tx, writes, run_id)


def record_operation(tx: Tx, *, after: Writes | None, **operation: Any) -> None:
    """:func:`start_operation` with its ``result`` and ``result_text``, and the ``after``
    writes of :func:`finish_operation`, in one: a ``safe`` operation that finished before its
    intent was written is inserted with its result (one row, one write)."""
    start_operation(tx, **operation)
    _write(tx, after, operation["run_id"])


def request_interaction(
    tx: Tx,
    *,
    run_id: str,
    interaction_id: str,
    key: str,
    kind: str,
    tool: str | None,
    arguments: JSON,
    digest: str,
    payload: JSON,
    abandon: str | None,
) -> None:
    """A pending interaction; ``abandon`` forgets an intent whose work never started (a tool
    that asked for approval first)."""
    if abandon is not None:
        tx.delete_operation(run_id, abandon)
    tx.insert_interaction(
        interaction_id=interaction_id,
        run_id=run_id,
        key=key,
        kind=kind,
        tool=tool,
        arguments=arguments,
        digest=digest,
        payload=payload,
    )
    tx.append_event(
        run_id,
        InteractionRequested(
            interaction_id=interaction_id,
            key=key,
            kind=kind,
            tool=tool,
            arguments=arguments,
            payload=payload,
        ),
    )


def start_child(
    tx: Tx,
    *,
    operation: dict[str, Any],
    child_id: str,
    kind: str,
    definition: str,
    version: str,
    input: JSON,
) -> None:
    """The intent of a child operation and the child run it creates, in one transaction: the
    child is owned by the run (cancelled with it; its end wakes it) and has a session of its
    own in its parent's session tree. A replay finds both."""
    parent = _run(tx, operation["run_id"])
    start_operation(tx, **operation)
    if tx.get_run(child_id) is not None:
        return
    session = child_session(parent.session_id, parent.id, operation["key"])
    submit(
        tx,
        run_id=child_id,
        session_id=session,
        request_id=operation["key"],
        agent_id=definition,
        version=version,
        input=input,
        submission=digest({"kind": kind, "definition": definition, "input": input}),
        enqueue=False,
        max_pending=None,
        kind=kind,
        parent_id=parent.id,
    )


def apply_posted(tx: Tx, command_id: int) -> InboxRow | None:
    """Apply a command posted to the inbox here, as its owner would (see ``runtime.inbox``),
    when no runtime owns the store: the command and its answer in one transaction, so it is
    applied once. Returns the answered row (``None`` if there is no such command)."""
    row = tx.get_command(command_id)
    if row is None or row[2] != "posted":
        return row
    try:
        answer = apply(tx, command_from_json(row[1]), None)
    except StorageError:
        raise
    except SteadError as exc:
        tx.answer_command(command_id, "failed", error_answer(exc))
    else:
        tx.answer_command(command_id, "applied", {"value": answer})
    return tx.get_command(command_id)


def emit(tx: Tx, run_id: str, payload: Payload) -> Event:
    """A progress event with no state change (streamed deltas, attempts)."""
    return tx.append_event(run_id, payload)
