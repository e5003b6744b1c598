from __future__ import annotations

import abc
import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Union

from .._json import canonical
from ..errors import ValidationError, shown
from ..messages import (
    ModelRequest,
    ModelResponse,
    StreamDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)

__all__ = ["FunctionModel", "ScriptedModel", "Turn"]

#: One model turn: a final answer, tool calls to make, or a full response.
Turn = Union[str, Sequence[ToolCall], ModelResponse]  # noqa: UP007 - used at runtime

#: How many of the latest requests a test model keeps by default (each holds its conversation).
KEEP_REQUESTS = 1_000


def _keep_count(keep_requests: int | None) -> int | None:
    if keep_requests is not None and (
        isinstance(keep_requests, bool) or not isinstance(keep_requests, int) or keep_requests < 0
    ):
        raise ValidationError(
            f"keep_requests must be a count >= 0 or None (keep every request), not "
            f"{shown(keep_requests)}"
        )
    return keep_requests


def _remember(requests: list[ModelRequest], request: ModelRequest, keep: int | None) -> None:
    """Add ``request`` to ``requests``, letting go of the oldest beyond ``keep``."""
    requests.append(request)
    if keep is not None and len(requests) > keep:
        del requests[: len(requests) - keep]


def _scripted(turn: Turn, turn_number: int) -> ModelResponse | str | tuple[ToolCall, ...]:
    """``turn`` checked, as :func:`_answer` takes it: a response as it is, a final answer's
    text, or the tool calls with an id each (``call_<turn>_<n>`` where one has none)."""
    if isinstance(turn, ModelResponse | str):
        return turn
    calls = list(turn)
    for call in calls:
        if not isinstance(call, ToolCall):
            raise ValidationError(
                f"a scripted turn is a str, a list of stead.ToolCall or a "
                f"ModelResponse; got an item {call!r}"
            )
    return tuple(
        c if c.id else ToolCall(name=c.name, arguments=c.arguments, id=f"call_{turn_number}_{i}")
        for i, c in enumerate(calls, start=1)
    )


def _answer(
    scripted: ModelResponse | str | tuple[ToolCall, ...], request: ModelRequest, model: str
) -> ModelResponse:
    """The response to ``request`` of a turn checked by :func:`_scripted`."""
    if isinstance(scripted, ModelResponse):
        return scripted
    # Plausible, cheap token counts: a fixed cost per message, not a tokenizer.
    input_tokens = 12 * len(request.messages) + len(request.instructions) // 4
    if isinstance(scripted, str):
        return ModelResponse(
            text=scripted,
            usage=Usage(input_tokens=input_tokens, output_tokens=max(1, len(scripted) // 4)),
            model=model,
            finish_reason="stop",
        )
    return ModelResponse(
        tool_calls=scripted,
        usage=Usage(input_tokens=input_tokens, output_tokens=8 * len(scripted)),
        model=model,
        finish_reason="tool_calls",
    )


def _response(turn: Turn, request: ModelRequest, model: str) -> ModelResponse:
    return _answer(_scripted(turn, request.turn), request, model)


class _Streams(abc.ABC):
    """``stream()`` for the test models: the answer word by word, then the response."""

    chunk_delay: float = 0.0

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        response = await self.complete(request)
        words = response.text.split(" ")
        for index, word in enumerate(words):
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            yield TextDelta(word if index == len(words) - 1 else word + " ")
        for index, call in enumerate(response.tool_calls):
            yield ToolCallDelta(
                index=index, id=call.id, name=call.name, arguments=canonical(dict(call.arguments))
            )
        yield response


class ScriptedModel(_Streams):
    """Answers turn *n* of a run (``request.turn``) with ``turns[n-1]``.

    Because it answers by turn, not by call count, one instance serves many runs and gives the
    same answer to a run resumed after a crash. The latest ``keep_requests`` requests received
    are kept in ``requests``, oldest first (``None``: every one; a long-lived model serving
    many runs would otherwise hold every conversation it was sent). The script is fixed when
    the model is made (``turns`` is a tuple), and a turn of the wrong kind is refused there.
    """

    model_id = "stead:scripted"

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        chunk_delay: float = 0.0,
        keep_requests: int | None = KEEP_REQUESTS,
    ) -> None:
        if isinstance(turns, str | bytes) or not isinstance(turns, Sequence) or not turns:
            raise ValidationError(
                "ScriptedModel needs a non-empty list of turns (each a str, a "
                "list of stead.ToolCall, or a ModelResponse)"
            )
        self.turns = tuple(turns)
        # Checked once, here: a bad turn is reported where the script is written, and a
        # request costs one response to build.
        self._scripted = [_scripted(turn, n) for n, turn in enumerate(self.turns, start=1)]
        self.chunk_delay = chunk_delay
        self.keep_requests = _keep_count(keep_requests)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        _remember(self.requests, request, self.keep_requests)
        if not 1 <= request.turn <= len(self.turns):
            raise ValidationError(
                f"ScriptedModel has {len(self.turns)} turns; it was asked for turn {request.turn}"
            )
        return _answer(self._scripted[request.turn - 1], request, self.model_id)


class FunctionModel(_Streams):
    """A model whose answer is ``fn(request)`` (sync or async), returning a str, a list of
    :class:`stead.ToolCall` or a :class:`stead.ModelResponse`. The latest ``keep_requests``
    requests are kept in ``requests``, as :class:`ScriptedModel` keeps them."""

    def __init__(
        self,
        fn: Callable[[ModelRequest], Turn | Awaitable[Turn]],
        *,
        model_id: str = "stead:function",
        chunk_delay: float = 0.0,
        keep_requests: int | None = KEEP_REQUESTS,
    ) -> None:
        if not callable(fn):
            raise ValidationError(f"FunctionModel needs a callable, got {shown(fn)}")
        self.fn = fn
        self.model_id = model_id
        self.chunk_delay = chunk_delay
        self.keep_requests = _keep_count(keep_requests)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        _remember(self.requests, request, self.keep_requests)
        answer = self.fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return _response(answer, request, self.model_id)
