"""An execution's own changes: begin, operations, interactions, children, and how it ends
(complete, stop, park)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..._clock import iso
from ..._json import JSON, digest, storable_text
from ...errors import StorageError, ValidationError
from ..commands import Command, Submit, SubmitTask
from ..events import (
    InteractionRequested,
    Payload,
    StatusChanged,
    completed_event_kind,
    operation_started,
    started_event_kind,
)
from ..keys import child_session, operation_id
from ..protocol import Tx
from ..records import (
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
from ._shared import VersionOf, _run, _wake_parent, _write
from .submission import apply, submit


@dataclass(frozen=True, slots=True)
class Begun:
    """What an execution starts from: the run and its journal."""

    run: Run
    operations: list[Operation]
    interactions: list[Interaction]


def begin(
    tx: Tx,
    run_id: str,
    registered: Callable[[Run], bool],
    migration: Callable[[Run], tuple[str, JSON] | None] | None = None,
    *,
    fresh: bool = False,
    max_interruptions: int = 3,
) -> Begun | None:
    """Claim a runnable run for execution (``running``) and read its journal; ``None`` if it
    is not runnable. A run whose definition is not ``registered`` is re-pinned to the version
    and input ``migration`` gives it (a task's ``migrate``), or else goes to needs_attention
    (with the reason a migration refused it). ``fresh``: this transaction inserted the run and
    wrote nothing else of it (a submission, not a fork, which copies operations), so the run
    is what it wrote (not read), and it has no operations or interactions to read. A run whose
    last ``max_interruptions`` executions were interrupted with nothing new committed in
    between goes to needs_attention (:func:`_counted`)."""
    current, previous = tx.run_to_begin(run_id, fresh)
    if current is None:
        return None
    due = (
        current.status in (RunStatus.RETRY_WAIT, RunStatus.WAITING)
        and current.next_attempt_at is not None
        and current.next_attempt_at <= tx.now()
    )
    if current.status.value not in RUNNABLE_STATUSES and not due:
        return None
    fields: dict[str, object] = {"status": RunStatus.RUNNING, "next_attempt_at": None}
    migrated_from: str | None = None
    if not registered(current):
        reason = (
            f"{current.kind} {current.agent_id!r} version {current.version!r} is not "
            "registered in this runtime; register that version (App.register) and retry() "
            "the run"
        )
        moved = None
        if migration is not None:
            try:
                moved = migration(current)
            except ValidationError as refused:
                reason = (
                    f"{refused}; fix migrate (or register version {current.version!r}) and "
                    "retry() the run"
                )
        if moved is None:
            stop(tx, run_id, RunStatus.NEEDS_ATTENTION, reason, None, kind="needs_attention")
            return None
        migrated_from = current.version
        fields["version"], fields["input"] = moved
    resumed = current.status == RunStatus.RUNNING  # its last execution was interrupted
    operations: list[Operation] = []
    interactions: list[Interaction] = []
    if not fresh:
        operations, interactions = tx.run_journal(run_id)
        twice = _key_twice(operations)
        if twice is not None:
            stop(
                tx,
                run_id,
                RunStatus.NEEDS_ATTENTION,
                f"the journal of run {run_id} holds operation {twice} twice, which stead never "
                "writes (a defect, or the file was changed outside stead): its result is not "
                f"replayed either way; fork the run before {twice} to go on from what is "
                "certain, and report it",
                twice,
                kind="needs_attention",
            )
            return None
    counted: dict[str, object] = {}  # interruption_mark is not a field of the Run record
    if resumed:
        found = _counted(tx, run_id, operations, interactions, max_interruptions)
        if found is None:
            return None
        counted = found
    if current.started_at is None:
        fields["started_at"] = tx.now()
    if current.history_length is None and current.kind != "agent":
        fields["history_length"] = 0  # a task or graph run has no conversation
    elif current.history_length is None:  # a session's history is taken when the run first starts
        head, length, source = None, 0, None
        if previous is not None and previous[1] is not None:
            previous_id, previous_outcome = previous
            head, length = outcome_history(previous_outcome)
            source = previous_id if length else None
        fields["history_head"], fields["history_length"] = head, length
        fields["history_run"] = source
    tx.update_run(run_id, **fields, **counted)
    tx.append_event(
        run_id,
        StatusChanged(
            status="running",
            resumed=resumed,
            migrated_from=migrated_from,
        ),
    )
    # Not read back: this transaction read the run and changed it by ``fields`` and the count
    # alone (a migration's input is read back, as the journal holds it).
    if counted:
        fields["interruptions"] = counted["interruptions"]
    run = _as_updated(current, fields, tx.now()) if migrated_from is None else tx.get_run(run_id)
    if run is None:  # pragma: no cover - the row was just updated
        raise StorageError(f"run {run_id} vanished while it was claimed")
    return Begun(run=run, operations=operations, interactions=interactions)


def _key_twice(operations: list[Operation]) -> str | None:
    """A key the run's journal holds more than once (a run's keys are unique because a
    journaled key is replayed, not written again; the store keys rows by position alone)."""
    seen: set[str] = set()
    for op in operations:
        if op.key in seen:
            return op.key
        seen.add(op.key)
    return None


def _counted(
    tx: Tx,
    run_id: str,
    operations: list[Operation],
    interactions: list[Interaction],
    limit: int,
) -> dict[str, object] | None:
    """An execution begins where the last one was interrupted: the run's interruptions in a
    row counted with it (the fields to write), or, at ``limit``, the run sent to
    needs_attention (``None``). An operation's intent stops an operation that keeps
    killing the process (its attempts); this stops what no intent records: a crash in the
    definition's own code between operations, in replaying the journal, or in a ``safe``
    operation that ends the process before its intent is written."""
    count, mark = tx.interruptions(run_id)
    now = _journal_mark(operations, interactions)
    count = count + 1 if mark == now else 1
    if count >= limit:
        stop(
            tx,
            run_id,
            RunStatus.NEEDS_ATTENTION,
            f"run {run_id} was interrupted {count} times in a row with nothing new committed "
            "in between (its process died, or it lost the run, while executing it): something "
            "kills the process outside any operation's intent — the definition's own code, "
            "replaying its journal, or a safe operation that ends the process before its "
            "intent is written. Find the cause in the worker's log, then retry() (or raise "
            "stead.Limits(max_interruptions=...))",
            None,
            kind="interrupted",
            fields={"interruptions": count, "interruption_mark": now},
        )
        return None
    return {"interruptions": count, "interruption_mark": now}


def _journal_mark(operations: list[Operation], interactions: list[Interaction]) -> int:
    """A number that grows with every write an execution makes to its run's journal: an
    operation's intent (a new one, or another attempt of one), its result, an interaction
    and its answer. An interaction counts two, so that one that replaces an intent (a tool
    that asks for approval first gives its intent up) still moves the mark on."""
    mark = 0
    for interaction in interactions:
        mark += 2 if interaction.status == "pending" else 3
    for op in operations:
        mark += op.attempts + (op.status == "completed")
    return mark


def _as_updated(run: Run, fields: dict[str, object], now: datetime) -> Run:
    """``run`` as ``tx.update_run(run.id, **fields)`` leaves it in the journal, when ``fields``
    are a begin's (a status, timestamps, the history's head, length and run): what reading it
    back would give, timestamps at the journal's precision included (``now``: the
    transaction's time, which the update stamps)."""
    at = datetime.fromisoformat(iso(now))
    changed: dict[str, Any] = {"updated_at": at}
    for name, value in fields.items():
        if isinstance(value, datetime):
            value = at if value is now else datetime.fromisoformat(iso(value))
        changed[name] = value
    return dataclasses.replace(run, **changed)


def apply_and_begin(
    tx: Tx,
    command: Command,
    version_of: VersionOf,
    max_pending: int | None,
    begin: Callable[[Tx, str, bool], Begun | None] | None,
) -> tuple[JSON, Begun | None]:
    """Apply ``command``; with ``begin``, a run it inserted ready to start (at its session's
    head) begins its execution in the same transaction: one commit takes a new run from its
    submission to its first step, as a shared store's claim does. A submitted run's journal
    is empty and is not read; a fork's holds the operations it copied."""
    answer = apply(tx, command, version_of, max_pending=max_pending)
    if begin is None or not isinstance(answer, dict) or not answer["ready"]:
        return answer, None
    return answer, begin(tx, str(answer["run_id"]), inserts_fresh(command))


def inserts_fresh(command: Command) -> bool:
    """Whether a run ``command`` creates is inserted with nothing else of it written (a
    submission's), so beginning it in the same transaction has no journal to read; a fork's
    holds the operations it copied."""
    return isinstance(command, Submit | SubmitTask)


def complete(tx: Tx, run_id: str, outcome: JSON, writes: Writes) -> bool:
    """The run completed with ``outcome``; False if it was cancelled meanwhile."""
    current = tx.run_standing(run_id)  # not the whole row: its status and owner are used
    if current is None or current[0] != RunStatus.RUNNING.value:
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
    _wake_parent(tx, run_id, current[1])
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
    fields: Mapping[str, object] | None = None,
) -> None:
    """End an execution short of an outcome (not if the run already ended, or was cancelled).
    ``fields`` are more of the run's fields to write in the same update."""
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
        **(fields or {}),
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
        _wake_parent(tx, current.id, current.parent_id)


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
    run_number: int,
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
    """The intent of a new operation (and the rows its input refers to) at ``position`` in the
    run whose ``number`` is ``run_number``; ``input`` is what the journal keeps of it,
    ``input_text`` its JSON when the caller encoded it already. With
    ``result_text`` (and ``result``) the row is written completed (see
    :func:`record_operation`). The row announces its events (``journal.events``)."""
    if writes is not None:
        _write(tx, writes, run_id)
    started = started_event_kind(kind, 1)
    started_seq = tx.announce(run_id, started) if started is not None else None
    completed_seq = None
    if result_text is not None:
        completed = completed_event_kind(kind)
        completed_seq = tx.announce(run_id, completed) if completed is not None else None
    tx.start_operation(
        run_id=run_id,
        run_number=run_number,
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
    run_number: int,
    key: str,
    position: int,
    kind: str,
    input: JSON,
    attempt: int,
    writes: Writes | None,
) -> None:
    """Another attempt of an interrupted operation at ``position`` in the run whose ``number``
    is ``run_number`` (consumes a re-run order); its event is a row of its own (the operation
    row announces the first attempt only)."""
    _write(tx, writes, run_id)
    tx.restart_operation(run_id, key, attempt, run_number=run_number, position=position)
    started = operation_started(kind, key, input, attempt, operation_id(run_id, key))
    if started is not None:
        tx.append_event(run_id, started)


def finish_operation(
    tx: Tx,
    *,
    run_id: str,
    run_number: int,
    key: str,
    position: int,
    kind: str,
    input: JSON,
    result: JSON,
    writes: Writes | None,
    result_text: str | None = None,
) -> None:
    """The result of an operation in progress at ``position`` in the run whose ``number`` is
    ``run_number`` (``input``: what the journal keeps of its input; ``result_text``: the
    result's JSON, if encoded already). The row announces the event."""
    completed = completed_event_kind(kind)
    completed_seq = tx.announce(run_id, completed) if completed is not None else None
    if not tx.complete_operation(
        run_id,
        key,
        result,
        result_text,
        completed_seq,
        run_number=run_number,
        position=position,
    ):
        raise StorageError(
            f"operation {key} of run {run_id} was not in progress when its result was "
            "written; the journal was changed under this runtime"
        )
    if writes is not None:
        _write(tx, writes, run_id)


def record_operation(tx: Tx, *, after: Writes | None, **operation: Any) -> None:
    """:func:`start_operation` with its ``result`` and ``result_text``, and the ``after``
    writes of :func:`finish_operation`, in one: a ``safe`` operation that finished before its
    intent was written is inserted with its result (one row, one write)."""
    start_operation(tx, **operation)
    if after is not None:
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


def emit(tx: Tx, run_id: str, payload: Payload) -> Event:
    """A progress event with no state change (streamed deltas, attempts)."""
    return tx.append_event(run_id, payload)
