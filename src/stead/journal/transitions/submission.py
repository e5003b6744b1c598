"""New runs (submissions, forks), and a command applied as data wherever it comes from."""

from __future__ import annotations

from ..._json import JSON, digest
from ...errors import (
    ConflictError,
    LimitError,
    NotFoundError,
    SteadError,
    StorageError,
    ValidationError,
)
from ..commands import (
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
from ..events import Submitted
from ..protocol import InboxRow, Tx
from ..records import RunStatus
from ._shared import VersionOf, _run
from .decisions import cancel, resolve, respond, retry, signal


def existing_submission(tx: Tx, session_id: str, request_id: str, submission: str) -> str | None:
    """The run an identical earlier submission created; a different one is a conflict."""
    found = tx.find_request(session_id, request_id)
    earlier = None if found is None else (found[0].id, found[1])
    return _same_submission(earlier, session_id, request_id, submission)


def _same_submission(
    earlier: tuple[str, str] | None, session_id: str, request_id: str, submission: str
) -> str | None:
    """The run of the request's ``earlier`` submission (its run id and digest) if it is the
    same as ``submission``; a different one is a conflict."""
    if earlier is None:
        return None
    run_id, digest_ = earlier
    if digest_ != submission:
        raise ConflictError(
            f"request {request_id!r} of session {session_id!r} already belongs to run "
            f"{run_id} with a different submission; use a new request_id for new work"
        )
    return run_id


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
    state = tx.submission_state(session_id, request_id, run_id)
    existing = _same_submission(state.earlier, session_id, request_id, submission)
    if existing is not None:
        return existing, False
    if state.taken is not None:
        raise ConflictError(
            f"run id {run_id!r} is taken by session {state.taken[0]!r} request "
            f"{state.taken[1]!r}; choose another run_id"
        )
    if state.busy is not None and not enqueue:
        busy, busy_status = state.busy
        raise ConflictError(
            f"session {session_id!r} has unfinished run {busy} ({busy_status}); "
            "wait for it, or pass enqueue=True to queue this run behind it"
        )
    if max_pending is not None:
        pending = tx.count_runs([s.value for s in RunStatus if not s.terminal])
        if pending >= max_pending:
            raise LimitError(
                f"max_pending_runs ({max_pending}) reached; request "
                f"{request_id!r} was not accepted, try again later"
            )
    status = RunStatus.QUEUED if state.busy is not None else RunStatus.PENDING
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
        "version=... or submit while a runtime runs",
        parameter="version",
    )


def _accept(
    tx: Tx,
    command: Submit | SubmitTask | SubmitGraph,
    *,
    kind: str,
    name: str,
    version: str,
    payload: JSON,
    submitted: dict[str, JSON],
    max_pending: int | None,
) -> JSON:
    """Insert the run a submission command asks for; ``submitted`` is what its digest (the
    idempotency check) covers."""
    run_id, ready = submit(
        tx,
        run_id=command.run_id,
        session_id=command.session_id,
        request_id=command.request_id,
        agent_id=name,
        version=version,
        input=payload,
        submission=digest({**submitted, "input": payload}),
        enqueue=command.enqueue,
        max_pending=max_pending,
        kind=kind,
    )
    return {"run_id": run_id, "ready": ready}


def _submit_task(
    tx: Tx, command: SubmitTask, version_of: VersionOf | None, max_pending: int | None
) -> JSON:
    return _accept(
        tx,
        command,
        kind="task",
        name=command.task,
        version=_version(version_of, "task", command.task, command.version),
        payload={"input": command.input},
        submitted={"kind": "task", "task": command.task},
        max_pending=max_pending,
    )


def _submit_graph(tx: Tx, command: SubmitGraph, max_pending: int | None) -> JSON:
    return _accept(
        tx,
        command,
        kind="graph",
        name="graph",
        version="1",
        payload={"nodes": command.nodes},
        submitted={"kind": "graph"},
        max_pending=max_pending,
    )


def _submit(tx: Tx, command: Submit, version_of: VersionOf | None, max_pending: int | None) -> JSON:
    return _accept(
        tx,
        command,
        kind="agent",
        name=command.agent_id,
        version=_version(version_of, "agent", command.agent_id, command.version),
        payload={"prompt": command.prompt},
        submitted={"kind": "agent", "agent_id": command.agent_id},
        max_pending=max_pending,
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
