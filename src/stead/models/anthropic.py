"""Anthropic's Messages API as a stead :class:`Model`.

Built on the official ``anthropic`` SDK (``pip install 'stead[anthropic]'``). Instructions go
in ``system``; tool calls are ``tool_use`` blocks and their results ``tool_result`` blocks of a
user turn, so consecutive tool results (and a user message right after them) are grouped into
one user message, as the API expects.

As with :mod:`stead.models.openai`, the SDK's own retries are off (stead retries, journaled)
and every call carries an explicit timeout (:data:`DEFAULT_TIMEOUT` or
``settings={"timeout": ...}``). Thinking blocks are not kept in the provider-neutral history,
so extended thinking combined with tool use is not supported yet.

Credentials never reach the journal: the model id is ``anthropic:<model>`` whatever the
``base_url``, and every error text is redacted (:func:`~stead.models._redact.redact`) of the API
key or auth token (passed, or found by the SDK in the environment), of the userinfo and query
values of the base URL (which the SDK still receives whole) and of key-shaped tokens such as
``sk-ant-...`` that a provider echoes back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ModelError, ValidationError
from ..errors import shown as safe_repr
from ..messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    StreamDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from ._errors import (
    MissingExtraError,
    connection_error,
    is_transport_error,
    parse_arguments,
    status_error,
)
from ._redact import public_url, redact, url_secrets

try:
    import anthropic
    from anthropic.types import (
        InputJSONDelta,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        TextBlock,
        ToolUseBlock,
    )
    from anthropic.types import TextDelta as AnthropicTextDelta
except ImportError as exc:  # pragma: no cover - exercised by tests with the SDK hidden
    raise MissingExtraError("stead.models.anthropic", "anthropic", "anthropic") from exc

if TYPE_CHECKING:
    from anthropic.types import (
        ContentBlockParam,
        Message,
        MessageParam,
        RawMessageStreamEvent,
        ToolParam,
    )

__all__ = ["DEFAULT_TIMEOUT", "AnthropicModel"]

DEFAULT_TIMEOUT = 600.0
"""Seconds one model call may take (the SDK's own default, made explicit)."""

_KEY_ENV = "ANTHROPIC_API_KEY"
_REQUEST_OPTIONS = frozenset({"timeout", "extra_headers", "extra_query"})
_RESERVED = frozenset({"model", "messages", "system", "tools", "stream", "max_tokens"})


class AnthropicModel:
    """A Claude model served through the Messages API.

    ``settings`` go into the body of every request as given (``tool_choice``, ``metadata``,
    ``stop_sequences``...), except the per-call options ``timeout``, ``extra_headers`` and
    ``extra_query``; ``max_tokens`` is an argument of its own because the API requires it.
    The client is created on first use, so resolving a model (or replaying a finished run)
    needs no API key.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        max_tokens: int = 4096,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValidationError(f"AnthropicModel needs a model name, got {safe_repr(model)}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValidationError(
                f"AnthropicModel max_tokens must be a positive int, got {safe_repr(max_tokens)}"
            )
        settings = dict(settings or {})
        reserved = sorted(_RESERVED.intersection(settings))
        if reserved:
            raise ValidationError(
                f"AnthropicModel settings may not set {', '.join(reserved)}: stead sets them "
                "from the request (max_tokens is an argument of its own); remove them"
            )
        self.model = model
        self.model_id = f"anthropic:{model}"
        self.base_url = base_url
        self.max_tokens = max_tokens
        self.settings = settings
        self._api_key = api_key
        self._secrets: tuple[str, ...] = (*((api_key,) if api_key else ()), *url_secrets(base_url))
        self._client = client.with_options(max_retries=0) if client is not None else None
        if self._client is not None:
            self._remember(self._client)

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model_id!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Ask the model once and return its whole response."""
        client = self._get_client()
        try:
            message = await client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=_messages(request),
                **self._extra(request),
            )
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        return _response(message)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Yield text and tool-call deltas as they arrive, then the assembled response."""
        client = self._get_client()
        assembly = _StreamAssembly(self._call)
        try:
            events = await client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=_messages(request),
                stream=True,
                **self._extra(request),
            )
            async with events:
                async for event in events:
                    for delta in assembly.add(event):
                        yield delta
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            raise connection_error(
                provider=self.provider,
                model=self.model,
                detail=str(exc),
                timed_out=False,
                secrets=self._secrets,
            ) from exc
        yield assembly.response()

    def _get_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            try:
                client = anthropic.AsyncAnthropic(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    max_retries=0,
                    timeout=DEFAULT_TIMEOUT,
                )
            except anthropic.AnthropicError as exc:
                raise self._no_client(str(exc)) from exc
            except Exception as exc:  # an invalid base_url: its text may quote the URL
                raise self._no_client(
                    f"the SDK refused the settings ({type(exc).__name__}; the message is not "
                    "shown because it may quote a credential); check base_url: a user name or "
                    "password in it must be percent-encoded"
                ) from exc
            has_credentials = getattr(client, "credentials", None) is not None
            if client.api_key is None and client.auth_token is None and not has_credentials:
                raise self._no_client("no API key was given")
            self._client = client
            self._remember(client)
        return self._client

    def _remember(self, client: anthropic.AsyncAnthropic) -> None:
        """Add the client's own key, token and base URL (possibly from the environment) to
        the secrets redacted from error texts."""
        found = [
            getattr(client, "api_key", None),
            getattr(client, "auth_token", None),
            *url_secrets(str(client.base_url)),
        ]
        known = set(self._secrets)
        self._secrets += tuple(
            secret for secret in found if isinstance(secret, str) and secret not in known
        )

    def _no_client(self, reason: str) -> ModelError:
        where = f" at {public_url(self.base_url)}" if self.base_url else ""
        return ModelError(
            redact(
                f"cannot create the Anthropic client for {self.model_id}{where}: {reason}. "
                f"Set {_KEY_ENV} or pass api_key=...",
                self._secrets,
            ),
            provider=self.provider,
        )

    def _extra(self, request: ModelRequest) -> dict[str, Any]:
        extra = _call_options(self.settings)
        if request.instructions:
            extra["system"] = request.instructions
        if request.tools:
            extra["tools"] = [_tool(spec) for spec in request.tools]
        return extra

    def _call(self, call_id: str, name: str, arguments: str) -> ToolCall:
        parsed = parse_arguments(
            arguments,
            tool=name,
            provider=self.provider,
            model=self.model,
            secrets=self._secrets,
        )
        return ToolCall(name=name, arguments=parsed, id=call_id)

    def _error(self, exc: anthropic.APIError) -> ModelError:
        if isinstance(exc, anthropic.APIConnectionError):
            return connection_error(
                provider=self.provider,
                model=self.model,
                detail=exc.message,
                timed_out=isinstance(exc, anthropic.APITimeoutError),
                secrets=self._secrets,
            )
        response = exc.response if isinstance(exc, anthropic.APIStatusError) else None
        return status_error(
            provider=self.provider,
            model=self.model,
            key_env=_KEY_ENV,
            status_code=response.status_code if response is not None else None,
            body=exc.body,
            fallback_message=exc.message,
            headers=response.headers if response is not None else {},
            secrets=self._secrets,
        )


class _StreamAssembly:
    """Collects raw stream events into deltas for the caller and the final response.

    Tool calls are numbered 0, 1, ... in the order they start (Anthropic's block index also
    counts text blocks), which is the ``index`` of their :class:`ToolCallDelta`.
    """

    def __init__(self, make_call: Callable[[str, str, str], ToolCall]) -> None:
        self._make_call = make_call
        self._text: list[str] = []
        self._positions: dict[int, int] = {}  # content block index -> tool call position
        self._calls: list[tuple[str, str, list[str], dict[str, object]]] = []
        self._counts = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        self._model_name: str | None = None
        self._stop_reason: str | None = None

    def add(self, event: RawMessageStreamEvent) -> list[StreamDelta]:
        if isinstance(event, RawMessageStartEvent):
            self._model_name = event.message.model
            self._count(event.message.usage)
        elif isinstance(event, RawContentBlockStartEvent):
            block = event.content_block
            if isinstance(block, ToolUseBlock):
                position = len(self._calls)
                self._positions[event.index] = position
                self._calls.append((block.id, block.name, [], dict(block.input)))
                return [ToolCallDelta(position, id=block.id, name=block.name)]
            if isinstance(block, TextBlock) and block.text:
                self._text.append(block.text)
                return [TextDelta(block.text)]
        elif isinstance(event, RawContentBlockDeltaEvent):
            delta = event.delta
            if isinstance(delta, AnthropicTextDelta) and delta.text:
                self._text.append(delta.text)
                return [TextDelta(delta.text)]
            target = self._positions.get(event.index)
            if isinstance(delta, InputJSONDelta) and target is not None and delta.partial_json:
                self._calls[target][2].append(delta.partial_json)
                return [ToolCallDelta(target, arguments=delta.partial_json)]
        elif isinstance(event, RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason or self._stop_reason
            self._count(event.usage)
        return []

    def response(self) -> ModelResponse:
        calls = tuple(
            self._make_call(call_id, name, "".join(pieces))
            if pieces
            else ToolCall(name=name, arguments=initial, id=call_id)
            for call_id, name, pieces, initial in self._calls
        )
        counts = self._counts
        return ModelResponse(
            text="".join(self._text),
            tool_calls=calls,
            usage=_usage(
                counts["input"], counts["output"], counts["cache_read"], counts["cache_write"]
            ),
            model=self._model_name,
            finish_reason=self._stop_reason,
        )

    def _count(self, usage: object) -> None:
        """Take the counts present in a usage object; ``message_delta`` ones are cumulative."""
        fields = {
            "input": "input_tokens",
            "output": "output_tokens",
            "cache_read": "cache_read_input_tokens",
            "cache_write": "cache_creation_input_tokens",
        }
        for key, attribute in fields.items():
            value = getattr(usage, attribute, None)
            if isinstance(value, int):
                self._counts[key] = value


def _messages(request: ModelRequest) -> list[MessageParam]:
    turns: list[tuple[bool, list[ContentBlockParam]]] = []  # (is_user, blocks)
    for message in request.messages:
        blocks: list[ContentBlockParam]
        if isinstance(message, UserMessage):
            is_user, blocks = True, [{"type": "text", "text": message.content}]
        elif isinstance(message, ToolResultMessage):
            is_user, blocks = True, [_tool_result(message)]
        else:
            is_user, blocks = False, _assistant_blocks(message)
            if not blocks:
                continue  # an empty assistant turn: the API rejects empty content
        if turns and turns[-1][0] == is_user:
            turns[-1][1].extend(blocks)
        else:
            turns.append((is_user, blocks))
    params: list[MessageParam] = []
    for is_user, blocks in turns:
        content = _content(blocks)
        if is_user:
            params.append({"role": "user", "content": content})
        else:
            params.append({"role": "assistant", "content": content})
    return params


def _content(blocks: list[ContentBlockParam]) -> str | list[ContentBlockParam]:
    """A lone text block is sent as a plain string, the form the API documents for it."""
    if len(blocks) == 1:
        block = blocks[0]
        if block["type"] == "text" and "text" in block:
            return str(block["text"])
    return blocks


def _assistant_blocks(message: AssistantMessage) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        if not call.id:
            raise ModelError(
                f"the history holds a call to tool {call.name!r} without a call id; the "
                "Messages API needs one to pair the call with its result. Not retryable; give "
                "every ToolCall in the history an id.",
                provider="anthropic",
            )
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        )
    return blocks


def _tool_result(message: ToolResultMessage) -> ContentBlockParam:
    if message.is_error:
        return {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": message.content,
            "is_error": True,
        }
    return {"type": "tool_result", "tool_use_id": message.call_id, "content": message.content}


def _tool(spec: ToolSpec) -> ToolParam:
    tool: ToolParam = {"name": spec.name, "input_schema": dict(spec.parameters)}
    if spec.description:
        tool["description"] = spec.description
    return tool


def _response(message: Message) -> ModelResponse:
    text = "".join(block.text for block in message.content if isinstance(block, TextBlock))
    calls = tuple(
        ToolCall(name=block.name, arguments=dict(block.input), id=block.id)
        for block in message.content
        if isinstance(block, ToolUseBlock)
    )
    usage = message.usage
    return ModelResponse(
        text=text,
        tool_calls=calls,
        usage=_usage(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens or 0,
            usage.cache_creation_input_tokens or 0,
        ),
        model=message.model,
        finish_reason=message.stop_reason,
    )


def _usage(uncached_input: int, output: int, cache_read: int, cache_write: int) -> Usage:
    """Token counts; ``input_tokens`` includes the cache reads and writes (Anthropic reports
    the three separately, OpenAI reports the total), so the convention matches both."""
    return Usage(
        input_tokens=uncached_input + cache_read + cache_write,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        requests=1,
    )


def _call_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Per-call SDK options from ``settings``: request options as they are, every other key
    into the JSON body (so parameters newer or older than the installed SDK still work)."""
    options: dict[str, Any] = {"timeout": DEFAULT_TIMEOUT}
    body: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _REQUEST_OPTIONS:
            options[key] = value
        elif key == "extra_body":
            body.update(value)
        else:
            body[key] = value
    if body:
        options["extra_body"] = body
    return options
