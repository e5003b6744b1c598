"""OpenAIModel against the real Chat Completions wire format, replayed through a mock transport.

The official SDK client is pointed at ``MockTransport``: nothing leaves the process, and the
tests see both the request body the SDK sent and what the adapter made of the reply.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from stead.errors import ModelError, ValidationError
from stead.messages import (
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from stead.models import StreamingModel
from stead.models._errors import retry_after_seconds

openai = pytest.importorskip("openai")

try:  # openai>=3 runs on httpx2; older releases on httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

from stead.models.openai import DEFAULT_TIMEOUT, OpenAIModel  # noqa: E402

from ._specs import TIME, WEATHER  # noqa: E402

USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 42,
    "total_tokens": 1242,
    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


class Server:
    """A scripted HTTP peer: answers requests in order and keeps what it received."""

    def __init__(self, *responses: httpx.Response | Callable[[httpx.Request], httpx.Response]):
        self._responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = self._responses.pop(0)
        return response(request) if callable(response) else response

    @property
    def body(self) -> dict[str, Any]:
        assert len(self.requests) == 1, f"expected one request, got {len(self.requests)}"
        return json.loads(self.requests[0].content)


def model_on(server: Server, **kwargs: Any) -> OpenAIModel:
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="https://api.openai.com/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
    )
    return OpenAIModel("gpt-4.1-mini", client=client, **kwargs)


def completion(message: dict[str, Any], finish_reason: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-BPJ5iEgFMHvpaIdT2EoQyZjYxCGtk",
            "object": "chat.completion",
            "created": 1745422390,
            "model": "gpt-4.1-mini-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": USAGE,
            "service_tier": "default",
            "system_fingerprint": "fp_79b79be41f",
        },
    )


def sse(*chunks: dict[str, Any]) -> httpx.Response:
    """A streamed completion: each chunk as one ``data:`` event, then ``[DONE]``."""
    base = {
        "id": "chatcmpl-BPJ7hJ1oKe2G2mS4M5f0Bb1Xw3yZq",
        "object": "chat.completion.chunk",
        "created": 1745422513,
        "model": "gpt-4.1-mini-2025-04-14",
        "service_tier": "default",
        "system_fingerprint": "fp_79b79be41f",
    }
    events = [f"data: {json.dumps({**base, **chunk})}\n\n" for chunk in chunks]
    events.append("data: [DONE]\n\n")
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content="".join(events).encode()
    )


def delta(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"choices": [choice], "usage": None}


def error(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers or {})


async def collect(model: OpenAIModel, request: ModelRequest) -> list[Any]:
    return [item async for item in model.stream(request)]


# --- complete -----------------------------------------------------------------------------------


async def test_text_answer_sends_instructions_as_system_message_and_reports_usage() -> None:
    server = Server(completion({"content": "Hello! How can I help?"}, "stop"))
    model = model_on(server)

    response = await model.complete(
        ModelRequest(messages=[UserMessage("Hi")], instructions="Be brief.")
    )

    assert response == ModelResponse(
        text="Hello! How can I help?",
        usage=Usage(input_tokens=1200, output_tokens=42, cache_read_tokens=1024, requests=1),
        model="gpt-4.1-mini-2025-04-14",
        finish_reason="stop",
    )
    body = server.body
    assert server.requests[0].url.path == "/v1/chat/completions"
    assert body["model"] == "gpt-4.1-mini"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert "tools" not in body
    assert "stream" not in body
    assert model.model_id == "openai:gpt-4.1-mini"


async def test_parallel_tool_calls_are_parsed_and_tools_sent_as_functions() -> None:
    server = Server(
        completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_Xb3kqzNkrIdSSh9WWJ3VYV3n",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_5t1mGyLgqu2uLTH3QRJjwUYY",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                    },
                ],
            },
            "tool_calls",
        )
    )

    response = await model_on(server).complete(
        ModelRequest(messages=[UserMessage("Weather and time in Paris?")], tools=[WEATHER, TIME])
    )

    assert response.text == ""
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == (
        ToolCall("get_weather", {"city": "Paris"}, id="call_Xb3kqzNkrIdSSh9WWJ3VYV3n"),
        ToolCall("get_time", {"tz": "Europe/Paris"}, id="call_5t1mGyLgqu2uLTH3QRJjwUYY"),
    )
    assert server.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather in a city.",
                "parameters": dict(WEATHER.parameters),
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "description": "Local time in a timezone.",
                "parameters": dict(TIME.parameters),
            },
        },
    ]


async def test_history_maps_tool_calls_and_results_back_to_the_wire() -> None:
    server = Server(completion({"content": "It is 18°C and 14:05 in Paris."}, "stop"))
    history = [
        UserMessage("Weather and time in Paris?"),
        AssistantMessage(
            text="",
            tool_calls=(
                ToolCall("get_weather", {"city": "Paris"}, id="call_1"),
                ToolCall("get_time", {"tz": "Europe/Paris"}, id="call_2"),
            ),
        ),
        ToolResultMessage(call_id="call_1", name="get_weather", content="18°C, cloudy"),
        ToolResultMessage(call_id="call_2", name="get_time", content="unknown tz", is_error=True),
        AssistantMessage(text="Let me retry the time."),
        UserMessage("Thanks"),
    ]

    await model_on(server).complete(ModelRequest(messages=history, tools=[WEATHER, TIME]))

    assert server.body["messages"] == [
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C, cloudy"},
        {"role": "tool", "tool_call_id": "call_2", "content": "unknown tz"},
        {"role": "assistant", "content": "Let me retry the time."},
        {"role": "user", "content": "Thanks"},
    ]


async def test_settings_and_a_fixed_timeout_go_with_every_call() -> None:
    server = Server(completion({"content": "ok"}, "stop"))
    model = model_on(server, settings={"temperature": 0.2, "parallel_tool_calls": False})

    await model.complete(ModelRequest(messages=[UserMessage("x")], tools=[WEATHER]))

    assert server.body["temperature"] == 0.2
    assert server.body["parallel_tool_calls"] is False
    assert server.requests[0].extensions["timeout"]["read"] == DEFAULT_TIMEOUT


async def test_a_timeout_setting_replaces_the_default_and_stays_out_of_the_body() -> None:
    server = Server(completion({"content": "ok"}, "stop"))

    await model_on(server, settings={"timeout": 30.0}).complete(
        ModelRequest(messages=[UserMessage("x")])
    )

    assert server.requests[0].extensions["timeout"]["read"] == 30.0
    assert "timeout" not in server.body


def test_settings_may_not_override_what_the_request_sets() -> None:
    with pytest.raises(ValidationError, match="messages"):
        OpenAIModel("gpt-4.1-mini", settings={"messages": []})


def test_the_client_it_creates_has_no_sdk_retries_and_a_fixed_timeout() -> None:
    model = OpenAIModel("gpt-4.1-mini", api_key="sk-test")

    client = model._get_client()

    assert client.max_retries == 0
    assert client.timeout == DEFAULT_TIMEOUT


def test_base_url_makes_an_openai_compatible_model_id() -> None:
    model = OpenAIModel("llama3.1:8b", api_key="x", base_url="http://localhost:11434/v1")

    assert model.model_id == "openai-compatible:llama3.1:8b@http://localhost:11434/v1"


async def test_malformed_tool_arguments_are_a_retryable_model_error() -> None:
    server = Server(
        completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Par'},
                    }
                ],
            },
            "tool_calls",
        )
    )

    with pytest.raises(ModelError, match=r"get_weather.*not valid JSON") as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")], tools=[WEATHER]))

    assert caught.value.retryable is True


async def test_a_history_tool_call_without_id_is_refused_before_sending() -> None:
    server = Server()
    history = [UserMessage("x"), AssistantMessage(tool_calls=(ToolCall("get_weather", {}),))]

    with pytest.raises(ModelError, match="without a call id"):
        await model_on(server).complete(ModelRequest(messages=history))

    assert server.requests == []


# --- stream -------------------------------------------------------------------------------------


async def test_stream_yields_text_deltas_then_the_assembled_response() -> None:
    server = Server(
        sse(
            delta({"role": "assistant", "content": "", "refusal": None}),
            delta({"content": "Hello"}),
            delta({"content": " there"}),
            delta({}, finish_reason="stop"),
            {"choices": [], "usage": USAGE},
        )
    )
    model = model_on(server)
    assert isinstance(model, StreamingModel)

    items = await collect(model, ModelRequest(messages=[UserMessage("Hi")]))

    assert items == [
        TextDelta("Hello"),
        TextDelta(" there"),
        ModelResponse(
            text="Hello there",
            usage=Usage(input_tokens=1200, output_tokens=42, cache_read_tokens=1024, requests=1),
            model="gpt-4.1-mini-2025-04-14",
            finish_reason="stop",
        ),
    ]
    assert server.body["stream"] is True
    assert server.body["stream_options"] == {"include_usage": True}


async def test_stream_assembles_parallel_tool_calls_from_argument_fragments() -> None:
    server = Server(
        sse(
            delta(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ],
                    "refusal": None,
                }
            ),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]}),
            delta(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_ABWqNJ5MrB6ObQ7NBQv6hGX1",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": ""},
                        }
                    ]
                }
            ),
            delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"tz": "CET"}'}}]}),
            delta({}, finish_reason="tool_calls"),
            {"choices": [], "usage": USAGE},
        )
    )

    items = await collect(
        model_on(server), ModelRequest(messages=[UserMessage("x")], tools=[WEATHER, TIME])
    )

    assert items[:-1] == [
        ToolCallDelta(0, id="call_DdmO9pD3xa9XTPNJ32zg2hcA", name="get_weather", arguments=""),
        ToolCallDelta(0, arguments='{"ci'),
        ToolCallDelta(0, arguments='ty": "Paris"}'),
        ToolCallDelta(1, id="call_ABWqNJ5MrB6ObQ7NBQv6hGX1", name="get_time", arguments=""),
        ToolCallDelta(1, arguments='{"tz": "CET"}'),
    ]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.finish_reason == "tool_calls"
    assert final.tool_calls == (
        ToolCall("get_weather", {"city": "Paris"}, id="call_DdmO9pD3xa9XTPNJ32zg2hcA"),
        ToolCall("get_time", {"tz": "CET"}, id="call_ABWqNJ5MrB6ObQ7NBQv6hGX1"),
    )
    assert final.usage.input_tokens == 1200
    assert len(server.body["tools"]) == 2


async def test_an_error_event_inside_the_stream_becomes_a_model_error() -> None:
    body = {
        "error": {
            "message": "The server had an error processing your request.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    server = Server(sse(delta({"content": "Hel"}), body))

    with pytest.raises(ModelError, match="server had an error") as caught:
        await collect(model_on(server), ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is True


async def test_a_connection_dropped_mid_stream_is_a_retryable_model_error() -> None:
    head = sse(delta({"content": "Hel"})).content.split(b"data: [DONE]")[0]

    class Dropped(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield head
            raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    server = Server(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Dropped())
    )
    received: list[Any] = []

    with pytest.raises(ModelError) as caught:
        async for item in model_on(server).stream(ModelRequest(messages=[UserMessage("x")])):
            received.append(item)

    assert received == [TextDelta("Hel")]
    assert caught.value.retryable is True


# --- errors -------------------------------------------------------------------------------------


async def test_rate_limit_is_retryable_with_retry_after_and_not_retried_by_the_sdk() -> None:
    message = (
        "Rate limit reached for gpt-4.1-mini in organization org-123 on tokens per min (TPM): "
        "Limit 200000, Used 199000, Requested 1500. Please try again in 450ms."
    )
    server = Server(
        error(
            429,
            {
                "error": {
                    "message": message,
                    "type": "tokens",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
            headers={"retry-after": "20"},
        )
    )

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    err = caught.value
    assert (err.retryable, err.retry_after, err.status_code, err.provider) == (
        True,
        20.0,
        429,
        "openai",
    )
    assert message in str(err)
    assert len(server.requests) == 1


async def test_retry_after_ms_wins_over_retry_after() -> None:
    body = {"error": {"message": "Slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    server = Server(error(429, body, headers={"retry-after-ms": "1500", "retry-after": "2"}))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retry_after == 1.5


async def test_retry_after_as_an_http_date() -> None:
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    body = {"error": {"message": "Slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    server = Server(error(429, body, headers={"retry-after": format_datetime(when, usegmt=True)}))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retry_after is not None
    assert 25 <= caught.value.retry_after <= 30


def test_retry_after_parsing_against_a_fixed_clock() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)

    assert retry_after_seconds({"retry-after": "Sun, 29 Nov 2026 12:00:42 GMT"}, now=now) == 42
    assert retry_after_seconds({"retry-after": "Sun, 29 Nov 2026 11:59:00 GMT"}, now=now) == 0
    assert retry_after_seconds({"retry-after": "7"}, now=now) == 7
    assert retry_after_seconds({"retry-after": "soon"}, now=now) is None
    assert retry_after_seconds({}, now=now) is None


async def test_server_errors_are_retryable() -> None:
    body = {
        "error": {
            "message": "The engine is currently overloaded, please try again later",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    server = Server(error(503, body))

    with pytest.raises(ModelError, match="overloaded") as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (True, 503)
    assert caught.value.retry_after is None


async def test_bad_api_key_is_not_retryable_and_says_which_variable_to_check() -> None:
    message = (
        "Incorrect API key provided: sk-test. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )
    server = Server(
        error(
            401,
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
        )
    )

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (False, 401)
    assert message in str(caught.value)
    assert "OPENAI_API_KEY" in str(caught.value)


async def test_context_length_error_is_not_retryable_and_keeps_the_provider_message() -> None:
    message = (
        "This model's maximum context length is 1047576 tokens. However, your messages "
        "resulted in 1100212 tokens. Please reduce the length of the messages."
    )
    server = Server(
        error(
            400,
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        )
    )

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (False, 400)
    assert message in str(caught.value)
    assert "context window" in str(caught.value)


async def test_unknown_model_is_not_retryable() -> None:
    message = "The model `gpt-9` does not exist or you do not have access to it."
    server = Server(
        error(
            404,
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "model_not_found",
                }
            },
        )
    )

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (False, 404)
    assert message in str(caught.value)


async def test_connection_failure_is_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ModelError, match="connection to openai") as caught:
        await model_on(Server(refuse)).complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is True


async def test_missing_api_key_is_a_model_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never the real API

    with pytest.raises(ModelError, match="OPENAI_API_KEY") as caught:
        await OpenAIModel("gpt-4.1-mini").complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is False
