"""AnthropicModel against the real Messages API wire format, replayed through a mock transport.

The official SDK client is pointed at ``MockTransport``: nothing leaves the process, and the
tests see both the request body the SDK sent and what the adapter made of the reply.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
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

anthropic = pytest.importorskip("anthropic")

try:  # anthropic>=2 runs on httpx2; older releases on httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

from stead.models.anthropic import DEFAULT_TIMEOUT, AnthropicModel  # noqa: E402

from ._specs import TIME, WEATHER  # noqa: E402


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


def model_on(server: Server, **kwargs: Any) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="https://api.anthropic.com",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
    )
    return AnthropicModel("claude-sonnet-4-20250514", client=client, **kwargs)


def message(content: list[dict[str, Any]], stop_reason: str, **usage: int) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 25,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 12,
                "service_tier": "standard",
                **usage,
            },
        },
    )


def sse(*events: dict[str, Any]) -> httpx.Response:
    """A streamed message: each event as ``event: <type>`` plus its ``data:`` JSON."""
    text = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode())


def message_start(**usage: int) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 472,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 2,
                **usage,
            },
        },
    }


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def error(
    status: int, kind: str, text: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {
        "type": "error",
        "error": {"type": kind, "message": text},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
    return httpx.Response(status, json=body, headers=headers or {})


async def collect(model: AnthropicModel, request: ModelRequest) -> list[Any]:
    return [item async for item in model.stream(request)]


# --- complete -----------------------------------------------------------------------------------


async def test_text_answer_sends_system_and_max_tokens_and_counts_cache_tokens() -> None:
    server = Server(
        message(
            [{"type": "text", "text": "Hello! How can I help?"}],
            "end_turn",
            input_tokens=25,
            cache_creation_input_tokens=1500,
            cache_read_input_tokens=3000,
        )
    )
    model = model_on(server, max_tokens=1024)

    response = await model.complete(
        ModelRequest(messages=[UserMessage("Hi")], instructions="Be brief.")
    )

    assert response == ModelResponse(
        text="Hello! How can I help?",
        usage=Usage(
            input_tokens=4525,
            output_tokens=12,
            cache_read_tokens=3000,
            cache_write_tokens=1500,
            requests=1,
        ),
        model="claude-sonnet-4-20250514",
        finish_reason="end_turn",
    )
    assert server.requests[0].url.path == "/v1/messages"
    assert server.body == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 1024,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert model.model_id == "anthropic:claude-sonnet-4-20250514"


async def test_tool_use_blocks_become_tool_calls_and_tools_carry_input_schema() -> None:
    server = Server(
        message(
            [
                {"type": "text", "text": "I'll look up both."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01PqZ5Xn3VbCRvQmE2W7zK1a",
                    "name": "get_time",
                    "input": {"tz": "Europe/Paris"},
                },
            ],
            "tool_use",
        )
    )

    response = await model_on(server).complete(
        ModelRequest(messages=[UserMessage("Weather and time in Paris?")], tools=[WEATHER, TIME])
    )

    assert response.text == "I'll look up both."
    assert response.finish_reason == "tool_use"
    assert response.tool_calls == (
        ToolCall("get_weather", {"city": "Paris"}, id="toolu_01A09q90qw90lq917835lq9"),
        ToolCall("get_time", {"tz": "Europe/Paris"}, id="toolu_01PqZ5Xn3VbCRvQmE2W7zK1a"),
    )
    assert server.body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "input_schema": dict(WEATHER.parameters),
        },
        {
            "name": "get_time",
            "description": "Local time in a timezone.",
            "input_schema": dict(TIME.parameters),
        },
    ]
    assert "system" not in server.body


async def test_tool_results_are_grouped_into_one_user_turn() -> None:
    server = Server(message([{"type": "text", "text": "18°C in Paris."}], "end_turn"))
    history = [
        UserMessage("Weather and time in Paris?"),
        AssistantMessage(
            text="I'll look up both.",
            tool_calls=(
                ToolCall("get_weather", {"city": "Paris"}, id="toolu_1"),
                ToolCall("get_time", {"tz": "Mars/Olympus"}, id="toolu_2"),
            ),
        ),
        ToolResultMessage(call_id="toolu_1", name="get_weather", content="18°C, cloudy"),
        ToolResultMessage(call_id="toolu_2", name="get_time", content="unknown tz", is_error=True),
        UserMessage("Skip the time."),
    ]

    await model_on(server).complete(ModelRequest(messages=history, tools=[WEATHER, TIME]))

    assert server.body["messages"] == [
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll look up both."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_time",
                    "input": {"tz": "Mars/Olympus"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C, cloudy"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "unknown tz",
                    "is_error": True,
                },
                {"type": "text", "text": "Skip the time."},
            ],
        },
    ]


async def test_settings_and_a_fixed_timeout_go_with_every_call() -> None:
    server = Server(message([{"type": "text", "text": "ok"}], "end_turn"))
    model = model_on(server, settings={"temperature": 0.0, "tool_choice": {"type": "any"}})

    await model.complete(ModelRequest(messages=[UserMessage("x")], tools=[WEATHER]))

    assert server.body["temperature"] == 0.0
    assert server.body["tool_choice"] == {"type": "any"}
    assert server.body["max_tokens"] == 4096
    assert server.requests[0].extensions["timeout"]["read"] == DEFAULT_TIMEOUT


def test_invalid_arguments_are_refused_at_construction() -> None:
    with pytest.raises(ValidationError, match="max_tokens"):
        AnthropicModel("claude-sonnet-4-20250514", settings={"max_tokens": 10})
    with pytest.raises(ValidationError, match="positive"):
        AnthropicModel("claude-sonnet-4-20250514", max_tokens=0)
    with pytest.raises(ValidationError, match="model name"):
        AnthropicModel("")


def test_the_client_it_creates_has_no_sdk_retries_and_a_fixed_timeout() -> None:
    client = AnthropicModel("claude-sonnet-4-20250514", api_key="sk-ant-test")._get_client()

    assert client.max_retries == 0
    assert client.timeout == DEFAULT_TIMEOUT


# --- stream -------------------------------------------------------------------------------------


async def test_stream_yields_text_and_tool_argument_deltas_then_the_response() -> None:
    server = Server(
        sse(
            message_start(cache_read_input_tokens=2048),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {"type": "ping"},
            block_delta(0, {"type": "text_delta", "text": "Let me"}),
            block_delta(0, {"type": "text_delta", "text": " check."}),
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "name": "get_weather",
                    "input": {},
                },
            },
            block_delta(1, {"type": "input_json_delta", "partial_json": ""}),
            block_delta(1, {"type": "input_json_delta", "partial_json": '{"city": "Pa'}),
            block_delta(1, {"type": "input_json_delta", "partial_json": 'ris"}'}),
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_01QxWq8YV1Mc6Wc5S3g1bNnE",
                    "name": "get_time",
                    "input": {},
                },
            },
            block_delta(2, {"type": "input_json_delta", "partial_json": '{"tz": "CET"}'}),
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 89},
            },
            {"type": "message_stop"},
        )
    )
    model = model_on(server)
    assert isinstance(model, StreamingModel)

    items = await collect(model, ModelRequest(messages=[UserMessage("x")], tools=[WEATHER, TIME]))

    assert items == [
        TextDelta("Let me"),
        TextDelta(" check."),
        ToolCallDelta(0, id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather"),
        ToolCallDelta(0, arguments='{"city": "Pa'),
        ToolCallDelta(0, arguments='ris"}'),
        ToolCallDelta(1, id="toolu_01QxWq8YV1Mc6Wc5S3g1bNnE", name="get_time"),
        ToolCallDelta(1, arguments='{"tz": "CET"}'),
        ModelResponse(
            text="Let me check.",
            tool_calls=(
                ToolCall("get_weather", {"city": "Paris"}, id="toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
                ToolCall("get_time", {"tz": "CET"}, id="toolu_01QxWq8YV1Mc6Wc5S3g1bNnE"),
            ),
            usage=Usage(input_tokens=2520, output_tokens=89, cache_read_tokens=2048, requests=1),
            model="claude-sonnet-4-20250514",
            finish_reason="tool_use",
        ),
    ]
    assert server.body["stream"] is True


async def test_stream_takes_cumulative_usage_from_message_delta() -> None:
    server = Server(
        sse(
            message_start(),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_time",
                    "input": {},
                },
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {
                    "input_tokens": 500,
                    "cache_creation_input_tokens": 100,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 30,
                },
            },
            {"type": "message_stop"},
        )
    )

    items = await collect(model_on(server), ModelRequest(messages=[UserMessage("x")]))

    final = items[-1]
    assert final.tool_calls == (ToolCall("get_time", {}, id="toolu_1"),)
    assert final.usage == Usage(
        input_tokens=600, output_tokens=30, cache_write_tokens=100, requests=1
    )


async def test_overloaded_error_event_inside_the_stream_is_retryable() -> None:
    server = Server(
        sse(
            message_start(),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
    )

    with pytest.raises(ModelError, match="Overloaded") as caught:
        await collect(model_on(server), ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is True
    assert caught.value.provider == "anthropic"


async def test_a_connection_dropped_mid_stream_is_a_retryable_model_error() -> None:
    head = sse(message_start()).content

    class Dropped(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield head
            raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    server = Server(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Dropped())
    )

    with pytest.raises(ModelError, match="peer closed connection") as caught:
        await collect(model_on(server), ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is True


# --- errors -------------------------------------------------------------------------------------


async def test_rate_limit_is_retryable_with_retry_after_and_not_retried_by_the_sdk() -> None:
    text = (
        "Number of request tokens has exceeded your per-minute rate limit "
        "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current "
        "usage. Please reduce the prompt length or the maximum tokens requested, or try again "
        "later."
    )
    server = Server(error(429, "rate_limit_error", text, headers={"retry-after": "17"}))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    err = caught.value
    assert (err.retryable, err.retry_after, err.status_code, err.provider) == (
        True,
        17.0,
        429,
        "anthropic",
    )
    assert text in str(err)
    assert len(server.requests) == 1


async def test_overloaded_529_is_retryable() -> None:
    server = Server(error(529, "overloaded_error", "Overloaded"))

    with pytest.raises(ModelError, match="Overloaded") as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (True, 529)


async def test_should_retry_header_overrides_the_status() -> None:
    server = Server(error(500, "api_error", "Internal server error", {"x-should-retry": "false"}))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is False


async def test_bad_api_key_is_not_retryable_and_says_which_variable_to_check() -> None:
    server = Server(error(401, "authentication_error", "invalid x-api-key"))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (False, 401)
    assert "invalid x-api-key" in str(caught.value)
    assert "ANTHROPIC_API_KEY" in str(caught.value)


async def test_prompt_too_long_is_not_retryable_and_keeps_the_provider_message() -> None:
    text = "prompt is too long: 208310 tokens > 200000 maximum"
    server = Server(error(400, "invalid_request_error", text))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert (caught.value.retryable, caught.value.status_code) == (False, 400)
    assert text in str(caught.value)
    assert "context window" in str(caught.value)


async def test_other_bad_requests_are_not_retryable() -> None:
    text = "tools.0.input_schema: JSON schema is invalid"
    server = Server(error(400, "invalid_request_error", text))

    with pytest.raises(ModelError) as caught:
        await model_on(server).complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is False
    assert text in str(caught.value)
    assert "context window" not in str(caught.value)


async def test_timeout_is_retryable() -> None:
    def stall(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ModelError, match="timed out") as caught:
        await model_on(Server(stall)).complete(ModelRequest(messages=[UserMessage("x")]))

    assert caught.value.retryable is True


async def test_missing_api_key_is_a_model_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))  # no profile on disk
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # never the real API

    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY") as caught:
        await AnthropicModel("claude-sonnet-4-20250514").complete(
            ModelRequest(messages=[UserMessage("x")])
        )

    assert caught.value.retryable is False
