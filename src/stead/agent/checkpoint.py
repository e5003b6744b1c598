"""The simple view of a run some users want: messages so far, turns, usage, cost, tool results,
pending interactions, final text. Built from the journal; never stored."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .._json import JSON, loads
from ..journal.protocol import Tx
from ..journal.records import Interaction, Operation, Run, RunStatus
from ..messages import Message, Usage, message_from_json
from ..models.pricing import Price, cost_usd
from .history import conversation, own_messages, session_history

__all__ = ["Checkpoint", "build_checkpoint", "counted_usage", "with_counted_usage", "with_usage"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """``messages`` include the session history the run started with. ``cost_usd`` is None
    when a model has no known price. ``possibly_billed_attempts`` counts model attempts that
    were interrupted or failed: the provider may have billed them, but no usage was committed."""

    messages: Sequence[Message]
    turns: int
    usage: Usage
    cost_usd: float | None
    tool_results: Mapping[str, JSON]
    pending_interactions: Sequence[Interaction]
    final_text: str | None
    updated_at: datetime
    possibly_billed_attempts: int


def counted_usage(operations: Iterable[Operation]) -> Usage:
    """A run's usage counted from its committed model responses, as its execution counts it
    (a response copied from the run it was forked from included)."""
    return _usage_of(
        op.result for op in operations if op.kind == "model" and op.status == "completed"
    )


def _usage_of(results: Iterable[JSON]) -> Usage:
    total = Usage()
    for result in results:
        if isinstance(result, dict):
            total = total + Usage.of_response(result)
    return total


def with_counted_usage(tx: Tx, run: Run, operations: Sequence[Operation] | None = None) -> Run:
    """``run`` as readers see it. The runtime writes a run's usage total when the run
    completes, not at each model response; until then it is counted from the journal
    (``operations``, if the caller has read them already)."""
    if run.status == RunStatus.COMPLETED:
        return run
    if operations is None:
        return with_usage(run, _usage_of(tx.model_results(run.id)))
    return with_usage(run, counted_usage(operations))


def with_usage(run: Run, counted: Usage) -> Run:
    """``run`` as readers see it, given the usage ``counted`` from its committed model
    responses (:func:`counted_usage`, or a checkpoint's, which counts the same)."""
    if run.status == RunStatus.COMPLETED or counted == Usage():
        return run  # the total written at completion; or no response (a task's run, say)
    return dataclasses.replace(run, usage=counted.to_json())


def build_checkpoint(
    tx: Tx,
    run: Run,
    operations: Sequence[Operation],
    prices: Mapping[str, Price] | None = None,
) -> Checkpoint:
    """Read the view from a transaction: the run's messages are built from its operations
    and those of the runs its session history continues."""
    if run.kind != "agent":  # a task or graph run has no conversation of its own
        bodies: list[str] = []
    elif run.status == RunStatus.COMPLETED and run.outcome is not None:
        bodies = conversation(tx, run)
    else:
        bodies = session_history(tx, run) + own_messages(tx, run, operations)
    messages: list[Message] = [message_from_json(loads(body)) for body in bodies]
    tools = {op.key: op for op in operations if op.kind == "tool" and op.status == "completed"}
    turns, billed = 0, 0
    usage = Usage()
    cost: float | None = 0.0
    for op in operations:
        if op.kind != "model":
            continue
        billed += op.attempts - (1 if op.status == "completed" else 0)
        if op.status != "completed" or not isinstance(op.result, dict):
            continue
        turns += 1
        usage = usage + Usage.of_response(op.result)
        price = cost_usd(
            str(op.input.get("model")), Usage.from_json(op.result.get("usage")), prices
        )
        cost = None if cost is None or price is None else cost + price
    tool_results = {
        str(op.input.get("call_id")): op.result
        for op in tools.values()
        if isinstance(op.input, dict)
    }
    pending = [i for i in tx.run_interactions(run.id) if i.status == "pending"]
    final = run.outcome.get("output") if isinstance(run.outcome, dict) else None
    if not isinstance(final, str):
        final = None  # a task's output is its JSON, in the run's outcome
    return Checkpoint(
        messages=messages,
        turns=turns,
        usage=usage,
        cost_usd=None if cost is None else round(cost, 8),
        tool_results=tool_results,
        pending_interactions=pending,
        final_text=final,
        updated_at=max([run.updated_at, *(op.updated_at for op in operations)]),
        possibly_billed_attempts=billed,
    )
