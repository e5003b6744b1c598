"""OpenAI Chat Completions, and any OpenAI-compatible server, as a stead :class:`Model`.

Built on the official ``openai`` SDK (``pip install 'stead[openai]'``). Passing ``base_url``
points it at vLLM, Ollama, llama.cpp, LM Studio, OpenRouter or any other server that speaks the
Chat Completions wire format; the model is then journaled as
``openai-compatible:<model>@<public base_url>``.

Credentials never reach the journal. A gateway key in the base URL's userinfo
(``http://user:KEY@gateway/v1``) or query string (``?api-key=KEY``) is given to the SDK, so the
gateway receives it, but the model id, the repr and every error text show the base URL without
userinfo, query or fragment (:func:`~stead.models._redact.public_url`; a key-shaped token in
its path, such as ``/sk-.../``, is redacted there too, so such an id no longer resolves to a
working model: pass the model object again on resume); error texts are also
redacted of the API key (passed, or found by the SDK in ``OPENAI_API_KEY``), of those URL parts
and of key-shaped tokens a provider echoes back (:func:`~stead.models._redact.redact`).

The SDK's own retries are turned off (``max_retries=0``), even on a client you pass in: stead
retries model calls itself, journaled and honouring ``retry_after``, and two retry layers would
multiply the attempts and hide them from the journal. Every call carries an explicit timeout
(:data:`DEFAULT_TIMEOUT`, or ``settings={"timeout": ...}``) so behaviour does not depend on SDK
defaults or environment variables.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._json import canonical
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
    import openai
    from openai.types.chat import ChatCompletionMessageToolCall
except ImportError as exc:  # pragma: no cover - exercised by tests with the SDK hidden
    raise MissingExtraError("stead.models.openai", "openai", "openai") from exc

if TYPE_CHECKING:
    from openai.types import CompletionUsage
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionChunk,
        ChatCompletionMessageParam,
        ChatCompletionToolParam,
    )

__all__ = ["DEFAULT_TIMEOUT", "OpenAIModel"]

DEFAULT_TIMEOUT = 600.0
"""Seconds one model call may take (the SDK's own default, made explicit)."""

_KEY_ENV = "OPENAI_API_KEY"
_REQUEST_OPTIONS = frozenset({"timeout", "extra_headers", "extra_query"})
_RESERVED = frozenset({"model", "messages", "tools", "stream", "stream_options"})


class OpenAIModel:
    """A model served through the Chat Completions API.

    ``settings`` go into the body of every request as given (``temperature``,
    ``max_completion_tokens``, ``reasoning_effort``, ``parallel_tool_calls``...), except the
    per-call options ``timeout``, ``extra_headers`` and ``extra_query``. The client is created
    on first use, so resolving a model (or replaying a finished run) needs no API key.

    ``base_url`` is kept as given (credentials included) and given to the SDK; ``model_id``,
    ``repr`` and error texts use it without userinfo, query and fragment.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: openai.AsyncOpenAI | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValidationError(f"OpenAIModel needs a model name, got {safe_repr(model)}")
        settings = dict(settings or {})
        reserved = sorted(_RESERVED.intersection(settings))
        if reserved:
            raise ValidationError(
                f"OpenAIModel settings may not set {', '.join(reserved)}: stead sets them from "
                "the request; remove them from settings="
            )
        self.model = model
        self.base_url = base_url
        self.settings = settings
        self._api_key = api_key
        self._secrets: tuple[str, ...] = (*((api_key,) if api_key else ()), *url_secrets(base_url))
        self._client = client.with_options(max_retries=0) if client is not None else None
        if self._client is not None:
            self._remember(self._client)
        if base_url:
            shown = redact(public_url(base_url), self._secrets)
            self.provider = "openai-compatible"
            self.model_id = f"openai-compatible:{model}@{shown}"
            self._label = f"{model}@{shown}"
        else:
            self.provider = "openai"
            self.model_id = f"openai:{model}"
            self._label = model

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model_id!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Ask the model once and return its whole response."""
        client = self._get_client()
        try:
            completion = await client.chat.completions.create(
                model=self.model, messages=_messages(request), **self._extra(request)
            )
        except openai.APIError as exc:
            raise self._error(exc) from exc
        return self._response(completion)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Yield text and tool-call deltas as they arrive, then the assembled response."""
        client = self._get_client()
        assembly = _StreamAssembly(self._call)
        try:
            chunks = await client.chat.completions.create(
                model=self.model,
                messages=_messages(request),
                stream=True,
                stream_options={"include_usage": True},
                **self._extra(request),
            )
            async with chunks:
                async for chunk in chunks:
                    for delta in assembly.add(chunk):
                        yield delta
        except openai.APIError as exc:
            raise self._error(exc) from exc
        except Exception as exc:
            if not is_transport_error(exc):
                raise
            raise connection_error(
                provider=self.provider,
                model=self._label,
                detail=str(exc),
                timed_out=False,
                secrets=self._secrets,
            ) from exc
        yield assembly.response()

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            try:
                self._client = openai.AsyncOpenAI(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    max_retries=0,
                    timeout=DEFAULT_TIMEOUT,
                )
            except openai.OpenAIError as exc:
                raise ModelError(
                    redact(
                        f"cannot create the OpenAI client for {self.model_id}: {exc}. "
                        f"Set {_KEY_ENV} or pass api_key=...",
                        self._secrets,
                    ),
                    provider=self.provider,
                ) from exc
            except Exception as exc:  # an invalid base_url: its text may quote the URL
                raise ModelError(
                    f"cannot create the OpenAI client for {self.model_id}: the SDK refused "
                    f"the settings ({type(exc).__name__}; the message is not shown because it "
                    "may quote a credential). Check base_url: a user name or password in it "
                    "must be percent-encoded.",
                    provider=self.provider,
                ) from exc
            self._remember(self._client)
        return self._client

    def _remember(self, client: openai.AsyncOpenAI) -> None:
        """Add the client's own key and base URL (possibly from the environment) to the
        secrets redacted from error texts."""
        found = [getattr(client, "api_key", None), *url_secrets(str(client.base_url))]
        known = set(self._secrets)
        self._secrets += tuple(
            secret for secret in found if isinstance(secret, str) and secret not in known
        )

    def _extra(self, request: ModelRequest) -> dict[str, Any]:
        extra = _call_options(self.settings)
        if request.tools:
            extra["tools"] = [_tool(spec) for spec in request.tools]
        return extra

    def _response(self, completion: ChatCompletion) -> ModelResponse:
        if not completion.choices:
            raise ModelError(
                redact(
                    f"{self.provider} ({self._label}) returned a completion without choices. "
                    "Not retryable; check that the server implements Chat Completions.",
                    self._secrets,
                ),
                provider=self.provider,
            )
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            self._call(call.id, call.function.name, call.function.arguments)
            for call in message.tool_calls or ()
            if isinstance(call, ChatCompletionMessageToolCall)
        )
        return ModelResponse(
            text=message.content or message.refusal or "",
            tool_calls=calls,
            usage=_usage(completion.usage),
            model=completion.model,
            finish_reason=choice.finish_reason,
        )

    def _call(self, call_id: str | None, name: str, arguments: str) -> ToolCall:
        parsed = parse_arguments(
            arguments,
            tool=name,
            provider=self.provider,
            model=self._label,
            secrets=self._secrets,
        )
        return ToolCall(name=name, arguments=parsed, id=call_id)

    def _error(self, exc: openai.APIError) -> ModelError:
        if isinstance(exc, openai.APIConnectionError):
            return connection_error(
                provider=self.provider,
                model=self._label,
                detail=exc.message,
                timed_out=isinstance(exc, openai.APITimeoutError),
                secrets=self._secrets,
            )
        response = exc.response if isinstance(exc, openai.APIStatusError) else None
        return status_error(
            provider=self.provider,
            model=self._label,
            key_env=_KEY_ENV,
            status_code=response.status_code if response is not None else None,
            body=exc.body,
            fallback_message=exc.message,
            headers=response.headers if response is not None else {},
            secrets=self._secrets,
        )


class _StreamAssembly:
    """Collects streamed chunks into deltas for the caller and the final response."""

    def __init__(self, make_call: Callable[[str | None, str, str], ToolCall]) -> None:
        self._make_call = make_call
        self._text: list[str] = []
        self._calls: dict[int, tuple[str | None, str, list[str]]] = {}
        self._usage = Usage(requests=1)
        self._model_name: str | None = None
        self._finish_reason: str | None = None

    def add(self, chunk: ChatCompletionChunk) -> list[StreamDelta]:
        self._model_name = chunk.model or self._model_name
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        deltas: list[StreamDelta] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if choice.finish_reason:
                self._finish_reason = choice.finish_reason
            if choice.delta.content:
                self._text.append(choice.delta.content)
                deltas.append(TextDelta(choice.delta.content))
            for part in choice.delta.tool_calls or ():
                name = part.function.name if part.function else None
                arguments = (part.function.arguments if part.function else None) or ""
                call_id, known_name, pieces = self._calls.get(part.index, (None, "", []))
                pieces.append(arguments)
                self._calls[part.index] = (call_id or part.id, known_name or name or "", pieces)
                deltas.append(ToolCallDelta(part.index, id=part.id, name=name, arguments=arguments))
        return deltas

    def response(self) -> ModelResponse:
        calls = tuple(
            self._make_call(call_id, name, "".join(pieces))
            for _, (call_id, name, pieces) in sorted(self._calls.items())
        )
        return ModelResponse(
            text="".join(self._text),
            tool_calls=calls,
            usage=self._usage,
            model=self._model_name,
            finish_reason=self._finish_reason,
        )


def _messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append({"role": "user", "content": message.content})
        elif isinstance(message, AssistantMessage):
            messages.append(_assistant(message))
        else:
            messages.append(
                {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
            )
    return messages


def _assistant(message: AssistantMessage) -> ChatCompletionAssistantMessageParam:
    param: ChatCompletionAssistantMessageParam = {
        "role": "assistant",
        "content": message.text or None,
    }
    if message.tool_calls:
        param["tool_calls"] = [
            {
                "id": _call_id(call),
                "type": "function",
                "function": {"name": call.name, "arguments": canonical(dict(call.arguments))},
            }
            for call in message.tool_calls
        ]
    return param


def _call_id(call: ToolCall) -> str:
    if call.id:
        return call.id
    raise ModelError(
        f"the history holds a call to tool {call.name!r} without a call id; the Chat "
        "Completions API needs one to pair the call with its result. Not retryable; give "
        "every ToolCall in the history an id.",
        provider="openai",
    )


def _tool(spec: ToolSpec) -> ChatCompletionToolParam:
    tool: ChatCompletionToolParam = {
        "type": "function",
        "function": {"name": spec.name, "parameters": dict(spec.parameters)},
    }
    if spec.description:
        tool["function"]["description"] = spec.description
    return tool


def _usage(usage: CompletionUsage | None) -> Usage:
    """Token counts; ``input_tokens`` includes the cached part (``cache_read_tokens``)."""
    if usage is None:
        return Usage(requests=1)
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=cached,
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
