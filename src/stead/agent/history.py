"""A run's conversation, built from its operations instead of stored a second time.

Every message of an agent run is already in the journal once: the prompt in the run's input,
each model response in the result of its ``model:<turn>`` operation, each tool result in the
result of its ``tool:<turn>:<call_id>`` operation. The conversation is rebuilt from those, in
the order the loop appends them. A run's session history is the conversation of the completed
run it continues (``Run.history_run``), so a session is a chain of runs; runs started before
histories were kept this way name a chain of stored messages instead (``Run.history_head``).

The history chain hash (:func:`~stead.journal.keys.history_node` over each message's digest) is
still computed, in memory: a model request refers to the conversation by it, and a rebuilt
history is checked against the head recorded when its run started.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._json import JSON, canonical, digest_text, dumps, loads, text_json
from ..journal.keys import history_node, model_turn, tool_key
from ..journal.protocol import Tx
from ..journal.records import Operation, Run
from ..messages import (
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    message_from_json,
    message_to_json,
)

__all__ = [
    "assistant_body",
    "chain_head",
    "conversation",
    "own_messages",
    "session_history",
    "tool_result_body",
    "tool_result_message",
]


def tool_result_message(
    call: ToolCall, result: JSON, output_text: str | None = None
) -> ToolResultMessage:
    """The message the model sees for a tool call's committed result (``output_text``: its
    output's JSON, where the caller encoded it already)."""
    output = result["output"]
    if isinstance(output, str):
        content = output
    else:
        content = output_text if output_text is not None else dumps(output)
    return ToolResultMessage(
        call_id=call.id or "",
        name=call.name,
        content=content,
        is_error=bool(result["failed"]),
    )


def tool_result_body(message: ToolResultMessage) -> str:
    """``canonical(message_to_json(message))``, written around its strings (no encoder run:
    one a tool call, at every turn)."""
    return (
        f'{{"call_id":{text_json(message.call_id)},"content":{text_json(message.content)},'
        f'"is_error":{"true" if message.is_error else "false"},"kind":"tool_result",'
        f'"name":{text_json(message.name)}}}'
    )


def assistant_body(tx: Tx, result: JSON) -> str:
    """The canonical JSON of the message a committed model result holds (inline; results
    written before messages were kept inline refer to a stored blob)."""
    message = result["message"]
    if isinstance(message, str):
        return tx.get_blob(message)
    return canonical(message)


def chain_head(bodies: Sequence[str], head: str | None = None) -> str | None:
    """The history chain hash after ``bodies``, continuing from ``head``."""
    for body in bodies:
        head = history_node(head, digest_text(body))
    return head


def own_messages(tx: Tx, run: Run, operations: Sequence[Operation]) -> list[str]:
    """The canonical bodies of the messages a run added to its conversation, in order: its
    prompt (once it started), each model response and the results of its tool calls. For a run
    still going, the tool results committed so far."""
    if run.started_at is None:
        return []
    bodies = [canonical(message_to_json(UserMessage(run.input["prompt"])))]
    tools = {op.key: op for op in operations if op.kind == "tool" and op.status == "completed"}
    models = sorted(
        (op for op in operations if op.kind == "model" and op.status == "completed"),
        key=lambda op: model_turn(op.key),
    )
    for op in models:
        if not isinstance(op.result, dict):  # pragma: no cover - a damaged journal
            raise LookupError(f"operation {op.key} of run {run.id} has no model result")
        body = assistant_body(tx, op.result)
        bodies.append(body)
        message = message_from_json(loads(body))
        if not isinstance(message, AssistantMessage):  # pragma: no cover - a damaged journal
            raise LookupError(f"operation {op.key} of run {run.id} refers to a non-model message")
        turn = model_turn(op.key)
        for call in message.tool_calls:
            done = tools.get(tool_key(turn, call.id or ""))
            if done is not None and isinstance(done.result, dict):
                bodies.append(canonical(message_to_json(tool_result_message(call, done.result))))
    return bodies


def session_history(tx: Tx, run: Run) -> list[str]:
    """The canonical bodies of the history ``run`` started with, checked against the chain
    head recorded when it started."""
    length = run.history_length or 0
    if length == 0:
        return []
    if run.history_run is None:
        return tx.history(run.history_head, length)
    previous = tx.get_run(run.history_run)
    if previous is None:
        raise LookupError(f"run {run.id} continues run {run.history_run}, which is missing")
    bodies = conversation(tx, previous)
    if len(bodies) != length or chain_head(bodies) != run.history_head:
        raise LookupError(
            f"the history of run {run.id} does not match the conversation of run {previous.id}"
        )
    return bodies


def conversation(tx: Tx, run: Run) -> list[str]:
    """The canonical bodies of every message of ``run``: its session history, then its own.
    The runs of a long session are walked in a loop, not by recursion."""
    chain = [run]
    while chain[-1].history_run is not None and (chain[-1].history_length or 0) > 0:
        previous = tx.get_run(str(chain[-1].history_run))
        if previous is None:
            raise LookupError(
                f"run {chain[-1].id} continues run {chain[-1].history_run}, which is missing"
            )
        chain.append(previous)
    first = chain[-1]
    bodies = (
        tx.history(first.history_head, first.history_length or 0)
        if first.history_run is None
        else []
    )
    head = chain_head(bodies)
    for current in reversed(chain):
        if len(bodies) != (current.history_length or 0) or head != current.history_head:
            raise LookupError(
                f"the history of run {current.id} does not match the conversation it continues"
            )
        own = own_messages(tx, current, tx.operations(current.id))
        head = chain_head(own, head)
        bodies.extend(own)
    return bodies
