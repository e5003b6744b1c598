"""The agent loop as a durable run (DESIGN §4).

request → ``model:<turn>`` → for each tool call (concurrently): validate, pass the approval gate,
then ``tool:<turn>:<call_id>`` → append results → next turn, until a response without tool calls
(the outcome) or ``max_turns`` (failed). Every step goes through the journal, so re-executing
this function after a crash replays committed results and continues where the run stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import traceback
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from .._json import (
    JSON,
    NotJSONError,
    canonical,
    check,
    digest_text,
    dumps,
    loads,
    storable_pairs,
    storable_text,
    text_json,
    to_json,
)
from ..errors import LeaseLostError, ModelError, described, shown
from ..journal.keys import approval_key, budget_key, model_key, tool_key
from ..journal.records import Interaction, Recovery, Writes
from ..messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
    UserMessage,
    message_from_json,
    message_to_json,
)
from ..models import model_id
from ..models._redact import redact
from ..models.pricing import Price, cost_usd
from ..runtime.context import RunContext
from ..runtime.control import Failed, Handoff, NeedsAttention, RetryLater, Stop, Waiting
from .agent import Agent
from .conversation import Conversation
from .history import tool_result_body, tool_result_message
from .interactions import ApprovalRequired
from .policies import RetryPolicy
from .streaming import stream_response
from .tools import ModelRetry, Tool, ToolContext

__all__ = ["AgentOutcome", "run_agent_loop"]

logger = logging.getLogger("stead")

#: Which stop wins when the calls of one turn stop differently.
#: Which of several tool calls' stops ends the execution: a lost claim first (nothing more
#: lands anyway), a hand-back to another worker last.
_PRECEDENCE: tuple[type[BaseException], ...] = (
    LeaseLostError,
    NeedsAttention,
    Failed,
    RetryLater,
    Waiting,
    Handoff,
)


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    output: str
    usage: Usage
    conversation: Conversation


async def run_agent_loop(
    agent: Agent,
    ctx: RunContext,
    prompt: str,
    *,
    history: Sequence[str],
    prices: Mapping[str, Price] | None,
) -> AgentOutcome:
    conversation = Conversation()
    for body in history:
        conversation.append(message_from_json(loads(body)), body=body)
    conversation.append(UserMessage(prompt))
    state = _State(conversation=conversation, prices=prices)
    tool_specs, context_body, context_digest = _context(agent)
    context_written = False
    name = model_id(agent.model)
    # The same at every turn: built once.
    model_attempts = (agent.model_retry or RetryPolicy()).max_attempts
    count_usage = functools.partial(_count_usage, state)
    turn = 0
    while True:
        turn += 1
        key = model_key(turn)
        if turn > agent.max_turns:
            raise Failed(
                f"max_turns ({agent.max_turns}) reached without a final answer; raise "
                "the agent's max_turns (as a new version) and retry()",
                kind="max_turns",
            )
        if key not in ctx.operations:
            _check_budget(agent, ctx, state, turn, name)
        request = ModelRequest(
            messages=tuple(conversation.messages),
            instructions=agent.instructions,
            tools=tool_specs,
            turn=turn,
        )
        # The messages themselves are not written again: each is in the journal already (the
        # prompt in the run, responses and tool results in their operations' results).
        before = None
        if not context_written:
            before = Writes(blobs=(context_body,))
            context_written = True
        fresh: list[AssistantMessage] = []
        bodies: list[str] = []
        reference = conversation.reference()
        result = await ctx.operation(
            key,
            "model",
            "safe",
            {"model": name, "context": context_digest, "messages": reference, "turn": turn},
            functools.partial(
                _call_model,
                agent,
                name,
                request,
                key,
                fresh,
                bodies,
                _attempt_base(ctx, key),
                ctx,
                state,
            ),
            input_text=model_input(name, context_digest, reference, turn),
            before=before,
            after=count_usage,
            max_attempts=model_attempts,
            encode=functools.partial(_result_text, bodies),
        )
        if fresh:
            assistant = fresh[-1]
            body = bodies[-1]
        else:  # replayed: the message is in the result (or, written by older versions, a blob)
            message = result["message"]
            body = canonical(message) if isinstance(message, dict) else await ctx.load_blob(message)
            stored = message_from_json(loads(body))
            if not isinstance(stored, AssistantMessage):  # pragma: no cover - damaged journal
                raise NeedsAttention(
                    f"operation {key} refers to a message that is not the model's", operation=key
                )
            assistant = stored
        if not fresh:  # replayed: its usage is counted here (a fresh one's with its write)
            state.usage = state.usage + Usage.of_response(result)
        calls = assistant.tool_calls
        conversation.append(assistant, body=body)
        if not calls:
            return AgentOutcome(output=assistant.text, usage=state.usage, conversation=conversation)
        outcomes = await _call_tools(agent, ctx, turn, calls)
        stops: list[BaseException] = []
        for call, outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                stops.append(outcome)
                continue
            message = tool_result_message(call, *outcome)
            conversation.append(message, body=tool_result_body(message))
        if stops:
            raise _first_stop(stops)


#: Each agent's tool specs, and its instructions and tool specs as the journal keeps them with
#: their digest, which every model call's input refers to: built once per agent (an agent is
#: frozen, and its tools too), not at the start of every run. With ten tools that was about
#: 130 µs a run.
_contexts: weakref.WeakKeyDictionary[Agent, tuple[tuple[ToolSpec, ...], str, str]] = (
    weakref.WeakKeyDictionary()
)


def _context(agent: Agent) -> tuple[tuple[ToolSpec, ...], str, str]:
    """``agent``'s tool specs; its instructions and tools in canonical JSON; that text's
    digest."""
    found = _contexts.get(agent)
    if found is None:
        specs = tuple(t.spec for t in agent.tools)
        body = canonical(
            {"instructions": agent.instructions, "tools": [spec.to_json() for spec in specs]}
        )
        found = _contexts[agent] = (specs, body, digest_text(body))
    return found


@dataclass(slots=True)
class _State:
    """What one execution of the loop accumulates."""

    conversation: Conversation
    prices: Mapping[str, Price] | None
    usage: Usage = dataclasses.field(default_factory=Usage)
    #: What the fresh model response counts (:func:`_call_model`), until it is added to
    #: ``usage`` as its result is written (:func:`_count_usage`).
    response_usage: Usage | None = None


async def _call_tools(
    agent: Agent, ctx: RunContext, turn: int, calls: Sequence[ToolCall]
) -> list[tuple[JSON, str | None] | BaseException]:
    """The results of one turn's tool calls (each with its output's JSON where it was encoded
    already, see :func:`_journal_tool`), run concurrently; a call that stopped the run gives
    its stop. A single call runs in this task (no task to create and gather)."""
    if len(calls) == 1:
        try:
            return [await _call_tool(agent, ctx, turn, calls[0])]
        except (Exception, Stop) as exc:
            return [exc]
    return await asyncio.gather(
        *(_call_tool(agent, ctx, turn, call) for call in calls), return_exceptions=True
    )


def _first_stop(stops: list[BaseException]) -> BaseException:
    for kind in _PRECEDENCE:
        for stop in stops:
            if isinstance(stop, kind):
                return stop
    return stops[0]


# -- model calls -------------------------------------------------------------------------------


async def _call_model(
    agent: Agent,
    name: str,
    request: ModelRequest,
    key: str,
    fresh: list[AssistantMessage],
    bodies: list[str],
    attempt_base: int,
    ctx: RunContext,
    state: _State,
    attempt: int,
) -> JSON:
    model: Any = agent.model
    try:
        if agent.stream and callable(getattr(model, "stream", None)):
            response = await stream_response(model, request, ctx, key, attempt)
        else:
            response = await model.complete(request)
    except Exception as exc:  # a Stop or a cancellation is a BaseException: it passes
        raise _model_failure(agent, key, attempt - attempt_base, exc) from exc
    if not isinstance(response, ModelResponse):
        raise Failed(
            f"model {name!r} returned {type(response).__name__} at {key}, not a "
            "stead.ModelResponse",
            operation=key,
            kind="model",
        )
    try:
        message, body, result = _journalable(response, request.turn)
    except ModelError as exc:
        raise _model_failure(
            agent, key, attempt - attempt_base, ModelError(f"model {name!r} at {key}: {exc}")
        ) from exc
    except NotJSONError as exc:
        # Text that cannot be stored (half of an emoji, say) or numbers JSON has no form for:
        # the answer is unusable, and another attempt may well give a good one.
        problem = ModelError(
            f"model {name!r} answered {key} with content that cannot be journaled ({exc})",
            retryable=True,
        )
        raise _model_failure(agent, key, attempt - attempt_base, problem) from exc
    # The cost at today's prices is kept with the response: its event reports it. What it
    # counts is Usage.of_response(result), taken from the response's checked counts.
    usage = response.usage
    state.response_usage = Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        1,
    )
    result["cost_usd"] = cost_usd(name, state.response_usage, state.prices)
    fresh.append(message)
    bodies.append(body)
    return result


def _journalable(response: ModelResponse, turn: int) -> tuple[AssistantMessage, str, JSON]:
    """The message and result a response is journaled as; raises :class:`ModelError` for a
    response of the wrong shape and :class:`NotJSONError` for content JSON cannot hold."""
    if not isinstance(response.text, str):
        raise ModelError(f"ModelResponse.text must be a string, not {shown(response.text)}")
    if not isinstance(response.tool_calls, tuple | list):
        raise ModelError(
            f"ModelResponse.tool_calls must be a tuple of stead.ToolCall, not "
            f"{shown(response.tool_calls)}"
        )
    for call in response.tool_calls:
        if not isinstance(call, ToolCall):
            raise ModelError(f"a tool call must be a stead.ToolCall, not {shown(call)}")
        if not isinstance(call.name, str) or not call.name:
            raise ModelError(f"tool call {shown(call)} has no name")
        if call.id is not None and not isinstance(call.id, str):
            raise ModelError(f"tool call {call.name!r} has id {shown(call.id)}; ids are strings")
        if not isinstance(call.arguments, Mapping):
            raise ModelError(
                f"tool call {call.name!r} has arguments {shown(call.arguments)}; arguments are a "
                "dict of JSON values (an empty dict when there are none)"
            )
        # Text that is ASCII is storable: only other text is looked at (and refused with the
        # reason) by check().
        if not call.name.isascii():
            check(call.name)
        if call.id is not None and not call.id.isascii():
            check(call.id)
    usage = response.usage
    usage_json = usage.to_json() if isinstance(usage, Usage) else None
    if usage_json is None or not _counts(usage_json.values()):
        raise ModelError(f"ModelResponse.usage must hold counts >= 0, not {shown(usage)}")
    for name in ("model", "finish_reason"):
        value = getattr(response, name)
        if value is not None and not isinstance(value, str):
            raise ModelError(f"ModelResponse.{name} must be a string or None, not {shown(value)}")
        if value is not None and not value.isascii():
            check(value)
    text = storable_pairs(response.text)
    if not text.isascii():
        check(text)
    message = AssistantMessage(
        text=text, tool_calls=_normalize_calls(tuple(response.tool_calls), turn)
    )
    # Everything in it was checked: the message is kept once, in the operation's result; the
    # conversation is rebuilt from the results (agent/history.py).
    message_json = message_to_json(message)
    body = canonical(message_json)
    result = {
        "message": message_json,
        "usage": usage_json,
        "model": response.model,
        "finish_reason": response.finish_reason,
    }
    return message, body, result


def _result_text(bodies: list[str], result: JSON) -> str:
    """The JSON a fresh model result is stored as: its message written as the canonical text
    the loop encoded already (``bodies[-1]``, the attempt's), not encoded again. Key order
    aside, what ``dumps(result)`` writes; a response's text is encoded once, however long."""
    return _led_by("message", bodies[-1], result)


def _led_by(first: str, text: str, result: JSON) -> str:
    """``dumps(result)`` where ``result[first]``, its first item, is encoded as ``text``
    already: the rest is encoded after it."""
    rest = dumps({name: value for name, value in result.items() if name != first})
    head = f'{{"{first}":{text}'
    return f"{head},{rest[1:]}" if len(rest) > 2 else f"{head}}}"


def _counts(values: Iterable[object]) -> bool:
    """Whether every value is a count: an int (not a bool) >= 0."""
    for value in values:
        if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        if value < 0:
            return False
    return True


def _attempt_base(ctx: RunContext, key: str) -> int:
    op = ctx.operations.get(key)
    return op.attempt_base if op is not None else 0


def _model_failure(agent: Agent, key: str, attempt: int, exc: Exception) -> Stop:
    # Provider adapters redact their own errors; this catches key-shaped text from any model.
    detail = redact(described(exc))
    retryable = (
        exc.retryable if isinstance(exc, ModelError) else isinstance(exc, OSError | TimeoutError)
    )
    policy = agent.model_retry
    if not retryable or policy is None:
        return Failed(f"model call {key} failed: {detail}", operation=key, kind="model")
    if attempt >= policy.max_attempts:
        return Failed(
            f"model call {key} failed after {attempt} attempts: {detail}; retry() the run to "
            "try again (committed results are kept)",
            operation=key,
            kind="model",
        )
    retry_after = exc.retry_after if isinstance(exc, ModelError) else None
    return RetryLater(
        f"model call {key} attempt {attempt} failed: {detail}",
        operation=key,
        delay=policy.delay(attempt, retry_after),
        attempt=attempt,
    )


def _count_usage(state: _State, result: JSON) -> None:
    """With a fresh model result, as it is written: the run's usage total counts it. The
    total is not written at every turn: readers count it from the committed responses while
    the run has not completed (:func:`stead.agent.checkpoint.counted_usage`), and its
    completion writes it."""
    counted, state.response_usage = state.response_usage, None
    state.usage = state.usage + (counted if counted is not None else Usage.of_response(result))


def _check_budget(agent: Agent, ctx: RunContext, state: _State, turn: int, name: str) -> None:
    """Before a new model call: stop if a committed total reached the agent's budget."""
    budget = agent.budget
    if budget is None:
        return
    used = state.usage
    breach: tuple[str, float, float] | None = None
    if budget.max_turns is not None and turn - 1 >= budget.max_turns:
        breach = ("max_turns", budget.max_turns, turn - 1)
    elif budget.max_tokens is not None and used.total_tokens >= budget.max_tokens:
        breach = ("max_tokens", budget.max_tokens, used.total_tokens)
    elif budget.max_cost_usd is not None:
        cost = cost_usd(name, used, state.prices)
        if cost is None:
            raise Failed(
                f"the budget sets max_cost_usd but there is no price for model {name!r}; add "
                "one to stead.models.pricing or budget by max_tokens",
                kind="budget",
            )
        if cost >= budget.max_cost_usd:
            breach = ("max_cost_usd", budget.max_cost_usd, round(cost, 6))
    if breach is None:
        return
    limit, bound, value = breach
    reason = f"budget {limit} ({bound}) reached: {value} used before model:{turn}"
    if budget.on_breach == "fail":
        raise Failed(reason, kind="budget")
    key = budget_key(turn)
    interaction = ctx.interactions.get(key)
    if interaction is None:
        ctx.request_interaction(
            key, "budget", payload={"limit": limit, "bound": bound, "used": value, "turn": turn}
        )
        raise Waiting(f"{reason}; waiting for a person to approve going on")
    if interaction.status != "responded":
        raise Waiting(f"{reason}; waiting for a person to approve going on")
    response = interaction.response or {}
    if response.get("kind") != "approve":
        raise Failed(
            f"{reason}; a reviewer declined to go on: {response.get('reason')}", kind="budget"
        )


# -- tool calls --------------------------------------------------------------------------------


def _normalize_calls(calls: tuple[ToolCall, ...], turn: int) -> tuple[ToolCall, ...]:
    """Give every call a unique id within the turn (keys are built from it)."""
    seen: set[str] = set()
    normalized = []
    for index, call in enumerate(calls, start=1):
        call_id = call.id or f"call_{turn}_{index}"
        while call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        arguments = dict(call.arguments)
        try:
            check(arguments)  # plain JSON already, as a provider's parsed arguments are
        except NotJSONError:
            arguments = to_json(arguments)  # tuples, pydantic models...; NaN still refused
        same = call_id == call.id and arguments == call.arguments
        normalized.append(
            call if same else ToolCall(name=call.name, arguments=arguments, id=call_id)
        )
    return tuple(normalized)


#: Characters of a tool's traceback kept in its failed result.
_TRACEBACK_LIMIT = 8000


def _raised(tool_name: str, key: str, exc: Exception) -> JSON:
    """A tool raised: a committed failed result keeping the exception's type, message and
    traceback (also logged); the model receives the error as the tool's result."""
    detail = described(exc)
    logger.warning("tool %r at %s raised %s", tool_name, key, detail, exc_info=exc)
    trace = "".join(traceback.format_exception(exc))
    if len(trace) > _TRACEBACK_LIMIT:
        trace = "…" + trace[-_TRACEBACK_LIMIT:]
    return _failure(
        detail,
        exception=type(exc).__name__,
        traceback=storable_text(trace),
    )


def _failure(error: object, **extra: JSON) -> JSON:
    error = storable_text(error if isinstance(error, str) else shown(error))
    return {"output": error, "failed": True, "error": error, **extra}


def _success(output: JSON, **extra: JSON) -> JSON:
    return {"output": output, "failed": False, "error": None, **extra}


async def _call_tool(
    agent: Agent, ctx: RunContext, turn: int, call: ToolCall
) -> tuple[JSON, str | None]:
    call_id = call.id or ""
    key = tool_key(turn, call_id)
    gate_key = approval_key(turn, call_id)
    run = ctx.run
    tool = agent.tool(call.name)
    problem: str | None = None
    validated: dict[str, Any] = {}
    try:
        # JSON already: a fresh response's calls were checked when it was journaled
        # (_normalize_calls), and a replayed one's were read back from JSON.
        arguments = dict(call.arguments)
    except (TypeError, ValueError) as exc:
        arguments, problem = {}, f"invalid arguments for tool {call.name!r}: {exc}"
    if tool is None:
        known = ", ".join(t.name for t in agent.tools) or "none"
        problem = f"unknown tool {call.name!r}; available tools: {known}"
    elif problem is None:
        try:
            validated = tool.validate(arguments)
        except pydantic.ValidationError as exc:
            problem = f"invalid arguments for tool {call.name!r}: {_validation_message(exc)}"

    recovery: Recovery = tool.recovery if tool is not None and problem is None else "safe"
    interaction = ctx.interactions.get(gate_key)
    approved = False
    done = ctx.operations.get(key)
    if done is not None and done.status == "completed":
        # A committed result stands (a fork copies them): no gate is asked again.
        return await _journal_tool(ctx, key, call, recovery, arguments, _constant(None))
    if tool is not None and problem is None:
        if tool.is_question:
            answer = _decision(
                ctx,
                interaction,
                gate_key,
                "question",
                tool,
                arguments,
                {"question": arguments.get("question")},
            )
            return await _journal_tool(
                ctx,
                key,
                call,
                "safe",
                arguments,
                _constant(_success(answer.get("value"), answered=True)),
            )
        if interaction is not None or _needs_approval(tool, validated, call):
            decision = _decision(ctx, interaction, gate_key, "approval", tool, arguments, None)
            if decision.get("kind") == "deny":
                reason = decision.get("reason") or "denied"
                return await _journal_tool(
                    ctx,
                    key,
                    call,
                    "safe",
                    arguments,
                    _constant(_failure(f"a reviewer denied this call: {reason}", denied=True)),
                )
            approved = True

    async def execute(attempt: int) -> JSON:
        if problem is not None:
            return _failure(problem)
        assert tool is not None
        context = (
            ToolContext(
                run_id=run.id,
                session_id=run.session_id,
                operation_id=ctx.operation_id(key),
                key=key,
                attempt=attempt,
                approved=approved,
            )
            if tool.takes_context
            else None
        )
        try:
            value = await tool.call(validated, context)
        except ModelRetry as exc:
            return _failure(exc.message)
        except ApprovalRequired as exc:
            if approved:
                return _failure(
                    f"tool {call.name!r} asked for approval again after it was "
                    "approved; check ToolContext.approved before raising"
                )
            ctx.request_interaction(
                gate_key,
                "approval",
                tool=call.name,
                arguments=arguments,
                payload=exc.payload,
                abandon=key,
            )
            raise Waiting(f"tool {call.name!r} at {key} asked for approval") from None
        except Exception as exc:  # a Stop or a cancellation is a BaseException: it passes
            return _raised(call.name, key, exc)
        try:
            output = to_json(value)
        except NotJSONError as exc:
            if recovery == "safe":  # running it again is harmless: tell the model instead
                return _failure(
                    f"tool {call.name!r} returned a value that cannot be journaled ({exc}); "
                    "a tool returns JSON values or pydantic models"
                )
            raise NeedsAttention(
                f"tool {call.name!r} at {key} returned a value that is not JSON ({exc}); its "
                "effect may have happened, so nothing was recorded. Make the tool return JSON "
                f"values or pydantic models, then resolve({key!r}, output=...) or retry()",
                operation=key,
            ) from exc
        return _success(output)

    return await _journal_tool(
        ctx,
        key,
        call,
        recovery,
        arguments,
        execute,
        max_attempts=tool.max_attempts if tool is not None else 3,
    )


def _needs_approval(tool: Tool, validated: dict[str, Any], call: ToolCall) -> bool:
    try:
        return tool.needs_approval(validated)
    except Exception as exc:
        raise Failed(
            f"the approval predicate of tool {call.name!r} raised {type(exc).__name__}: {exc}",
            kind="approval",
        ) from exc


def _decision(
    ctx: RunContext,
    interaction: Interaction | None,
    key: str,
    kind: str,
    tool: Tool,
    arguments: JSON,
    payload: JSON,
) -> dict[str, Any]:
    """The recorded response to a gate, or stop the run to wait for one."""
    if interaction is None:
        ctx.request_interaction(key, kind, tool=tool.name, arguments=arguments, payload=payload)
        raise Waiting(f"{kind} {key} requested")
    if interaction.status != "responded" or not isinstance(interaction.response, dict):
        raise Waiting(f"{kind} {key} is pending")
    return interaction.response


def _constant(result: JSON) -> Any:
    async def execute(attempt: int) -> JSON:
        return result

    return execute


async def _journal_tool(
    ctx: RunContext,
    key: str,
    call: ToolCall,
    recovery: Recovery,
    arguments: JSON,
    execute: Any,
    *,
    max_attempts: int = 3,
) -> tuple[JSON, str | None]:
    """The tool call's result, and its output's JSON where a fresh result was encoded for the
    journal (the message the model sees shows that text: the output is encoded once)."""
    call_id = call.id or ""
    outputs: list[str] = []
    result: JSON = await ctx.operation(
        key,
        "tool",
        recovery,
        {"tool": call.name, "call_id": call_id, "arguments": arguments},
        execute,
        # The arguments are in the model's message already: the journal keeps them there once
        # (the input hash still covers them).
        stored={"tool": call.name, "call_id": call_id},
        stored_text=stored_tool_input(call.name, call_id),
        describe=f" (tool {call.name!r})",
        max_attempts=max_attempts,
        # What the loop does next outside memory is its next model call, whose intent shares
        # the commit of this result and waits for its disk flush (RunContext.operation).
        settle=False,
        encode=functools.partial(_tool_result_text, outputs),
    )
    return result, outputs[-1] if outputs else None


#: The keys of a successful tool result, in the order :func:`_success` writes them.
_SUCCESS_KEYS = ("output", "failed", "error")


def _tool_result_text(outputs: list[str], result: JSON) -> str:
    """``dumps(result)`` of a tool's result, its output encoded once: the text is kept in
    ``outputs`` for the message the model sees (text output is shown as it is)."""
    output = result.get("output") if type(result) is dict else None
    if output is None or isinstance(output, str):
        return dumps(result)
    text = dumps(output)
    outputs.append(text)
    if tuple(result) == _SUCCESS_KEYS and result["failed"] is False and result["error"] is None:
        return f'{{"output":{text},"failed":false,"error":null}}'  # a success, as _success has it
    return _led_by("output", text, result)


def model_input(name: str, context: str, messages: dict[str, Any], turn: int) -> str:
    """``canonical`` of a model call's input (``{"model", "context", "messages", "turn"}``,
    ``messages`` a conversation's reference), written around its strings and numbers: it is
    hashed for replay, so it must be byte for byte the encoder's."""
    head = messages["head"]
    return (
        f'{{"context":{text_json(context)},"messages":{{"head":'
        f'{"null" if head is None else text_json(head)},"length":{int(messages["length"])}}},'
        f'"model":{text_json(name)},"turn":{int(turn)}}}'
    )


def stored_tool_input(name: str, call_id: str) -> str:
    """``canonical({"tool": name, "call_id": call_id})``, what a tool operation keeps of its
    input, written around its two strings (no encoder run: one a tool call)."""
    return f'{{"call_id":{text_json(call_id)},"tool":{text_json(name)}}}'


def _validation_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)
