"""The agent loop as a durable run (DESIGN §4).

request → ``model:<turn>`` → for each tool call (concurrently): validate, then
``tool:<turn>:<call_id>`` → append results → next turn, until a response without tool calls (the
outcome) or ``max_turns`` (failed). Every step goes through the journal, so re-executing this
function after a crash replays committed results and continues where the run stopped.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

import pydantic

from .._json import JSON, NotJSONError, canonical, digest_text, dumps, to_json
from ..messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_from_json,
    message_to_json,
)
from ..models import model_id
from ..runtime.control import Blocked, Failed, Stop
from ..runtime.journal import RunJournal, write_messages
from ..store.sqlite_tx import SqliteTx
from .agent import Agent
from .tools import ModelRetry, ToolContext

__all__ = ["AgentOutcome", "run_agent_loop"]

_EVENT_PREVIEW = 200


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    output: str
    usage: Usage


async def run_agent_loop(agent: Agent, journal: RunJournal, prompt: str) -> AgentOutcome:
    conversation = journal.conversation
    conversation.append(UserMessage(prompt))
    context_body = canonical(
        {"instructions": agent.instructions, "tools": [t.spec.to_json() for t in agent.tools]}
    )
    context_written = False
    tool_specs = tuple(t.spec for t in agent.tools)
    name = model_id(agent.model)
    turn = 0
    while True:
        turn += 1
        if turn > agent.max_turns:
            raise Failed(
                f"max_turns ({agent.max_turns}) reached without a final answer; raise "
                "the agent's max_turns (as a new version) and retry()"
            )
        request = ModelRequest(
            messages=tuple(conversation.messages),
            instructions=agent.instructions,
            tools=tool_specs,
            turn=turn,
        )
        key = f"model:{turn}"
        pending = conversation.take_pending()
        write_context = not context_written
        context_written = True

        def prepare(
            tx: SqliteTx, pending: Any = pending, write_context: bool = write_context
        ) -> None:
            if write_context:
                tx.put_blob(context_body)
            write_messages(tx, pending)

        fresh: list[AssistantMessage] = []

        async def call_model(
            attempt: int,
            request: ModelRequest = request,
            key: str = key,
            fresh: list[AssistantMessage] = fresh,
            turn: int = turn,
        ) -> JSON:
            try:
                response = await agent.model.complete(request)
            except asyncio.CancelledError:
                raise
            except Stop:
                raise
            except Exception as exc:
                raise Failed(
                    f"model call {key} failed: {type(exc).__name__}: {exc}", operation=key
                ) from exc
            if not isinstance(response, ModelResponse):
                raise Failed(
                    f"model {name!r} returned {type(response).__name__} at {key}, "
                    "not a stead.ModelResponse",
                    operation=key,
                )
            message = AssistantMessage(
                text=response.text, tool_calls=_normalize_calls(response.tool_calls, turn)
            )
            fresh.append(message)
            # The message itself is stored once, as a blob shared with the history chain.
            return {
                "message": digest_text(canonical(message_to_json(message))),
                "usage": response.usage.to_json(),
                "model": response.model,
                "finish_reason": response.finish_reason,
            }

        def result_writes(result: JSON, fresh: list[AssistantMessage] = fresh) -> Any:
            body = canonical(message_to_json(fresh[-1]))
            total = (
                journal.usage + Usage.from_json(result.get("usage")) + Usage(requests=1)
            ).to_json()

            def write(tx: SqliteTx) -> None:
                tx.put_blob(body)
                tx.update_run(journal.run.id, usage=total)

            return write

        result = await journal.operation(
            key,
            "model",
            "safe",
            {
                "model": name,
                "context": digest_text(context_body),
                "messages": conversation.reference(),
                "turn": turn,
            },
            call_model,
            started=functools.partial(_model_started, key, turn),
            completed=functools.partial(_model_event, key, turn, fresh),
            prepare=prepare,
            on_result=result_writes,
        )
        if fresh:
            assistant = fresh[-1]
        else:  # replayed: the runtime attached the stored message to the result
            stored = message_from_json(result["stored_message"])
            assert isinstance(stored, AssistantMessage)
            assistant = stored
        journal.usage = journal.usage + Usage.from_json(result.get("usage")) + Usage(requests=1)
        calls = assistant.tool_calls
        conversation.append(assistant)
        if not calls:
            return AgentOutcome(output=assistant.text, usage=journal.usage)
        outcomes = await asyncio.gather(
            *(_call_tool(agent, journal, turn, call) for call in calls), return_exceptions=True
        )
        stop: BaseException | None = None
        for call, outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                stop = stop if isinstance(stop, Blocked) else outcome
                continue
            conversation.append(
                ToolResultMessage(
                    call_id=call.id or "",
                    name=call.name,
                    content=_content(outcome["output"]),
                    is_error=bool(outcome["failed"]),
                )
            )
        if stop is not None:
            raise stop


def _model_started(key: str, turn: int, attempt: int) -> JSON:
    return {"key": key, "turn": turn, "attempt": attempt}


def _model_event(key: str, turn: int, fresh: list[AssistantMessage], result: JSON) -> JSON:
    message = fresh[-1]
    return {
        "key": key,
        "turn": turn,
        "text": message.text,
        "tool_calls": [{"id": c.id, "name": c.name} for c in message.tool_calls],
        "usage": result["usage"],
    }


def _normalize_calls(calls: tuple[ToolCall, ...], turn: int) -> tuple[ToolCall, ...]:
    """Give every call a unique id within the turn (keys are built from it)."""
    seen: set[str] = set()
    normalized = []
    for index, call in enumerate(calls, start=1):
        call_id = call.id or f"call_{turn}_{index}"
        while call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        normalized.append(
            call
            if call_id == call.id
            else ToolCall(name=call.name, arguments=call.arguments, id=call_id)
        )
    return tuple(normalized)


def _content(output: JSON) -> str:
    return output if isinstance(output, str) else dumps(output)


def _failure(error: str) -> JSON:
    return {"output": error, "failed": True, "error": error}


async def _call_tool(agent: Agent, journal: RunJournal, turn: int, call: ToolCall) -> JSON:
    call_id = call.id or ""
    key = f"tool:{turn}:{call_id}"
    run = journal.run
    tool = agent.tool(call.name)
    bad_arguments: str | None = None
    try:
        arguments = to_json(dict(call.arguments))
    except NotJSONError as exc:
        arguments, bad_arguments = {}, str(exc)
    recovery = tool.recovery if tool is not None else "safe"

    async def execute(attempt: int) -> JSON:
        if tool is None:
            known = ", ".join(t.name for t in agent.tools) or "none"
            return _failure(f"unknown tool {call.name!r}; available tools: {known}")
        if bad_arguments is not None:
            return _failure(f"invalid arguments for tool {call.name!r}: {bad_arguments}")
        try:
            validated = tool.validate(arguments)
        except pydantic.ValidationError as exc:
            return _failure(f"invalid arguments for tool {call.name!r}: {_validation_message(exc)}")
        context = ToolContext(
            run_id=run.id,
            session_id=run.session_id,
            operation_id=f"{run.id}/{key}",
            key=key,
            attempt=attempt,
        )
        try:
            value = await tool.call(validated, context)
        except ModelRetry as exc:
            return _failure(exc.message)
        except (asyncio.CancelledError, Stop):
            raise
        except Exception as exc:
            return _failure(f"{type(exc).__name__}: {exc}")
        try:
            output = to_json(value)
        except NotJSONError as exc:
            raise Blocked(
                f"tool {call.name!r} at {key} returned a value that is not JSON ({exc}); its "
                "effect may have happened, so nothing was recorded. Make the tool return JSON "
                f"values or pydantic models, then resolve({key!r}, output=...) or retry()",
                operation=key,
            ) from exc
        return {"output": output, "failed": False, "error": None}

    return await journal.operation(
        key,
        "tool",
        recovery,
        {"tool": call.name, "call_id": call_id, "arguments": arguments},
        execute,
        started=lambda attempt: {
            "key": key,
            "tool": call.name,
            "call_id": call_id,
            "attempt": attempt,
            "operation_id": f"{run.id}/{key}",
        },
        completed=lambda result: {
            "key": key,
            "tool": call.name,
            "call_id": call_id,
            "failed": result["failed"],
            "output": _preview(result["output"]),
        },
        describe=f" (tool {call.name!r})",
    )


def _preview(output: JSON) -> JSON:
    text = output if isinstance(output, str) else None
    if text is None:
        encoded = dumps(output)
        return output if len(encoded) <= _EVENT_PREVIEW else encoded[:_EVENT_PREVIEW] + "…"
    return text if len(text) <= _EVENT_PREVIEW else text[:_EVENT_PREVIEW] + "…"


def _validation_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)
