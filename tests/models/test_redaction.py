"""Credentials stay out of model ids, reprs and error texts ("Credentials reach the journal").

The wire-level tests drive the official SDKs through ``MockTransport`` as ``test_openai.py`` and
``test_anthropic.py`` do, but let the adapters create their own client (the SDK constructor is
wrapped to add the mock transport), so the base URL the adapter hands to the SDK is the one
under test: it must keep its credentials (gateways need them) while nothing stead builds from
it does.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from stead.errors import ModelError, ValidationError
from stead.messages import ModelRequest, UserMessage
from stead.models._redact import public_url, redact, url_secrets

from . import test_anthropic as wire_anthropic
from . import test_openai as wire_openai
from .test_openai import Server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

try:  # the SDKs run on httpx2 (current releases) or httpx (older ones), as in test_openai
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

from stead.models.anthropic import AnthropicModel  # noqa: E402
from stead.models.openai import OpenAIModel  # noqa: E402
from stead.models.registry import resolve_model  # noqa: E402

GATEWAY = "http://user:SECRETKEY123456@gateway.local/v1?api-key=QUERYSECRET999"
PUBLIC_GATEWAY = "http://gateway.local/v1"
LEAKS = ("SECRETKEY123456", "QUERYSECRET999", "user:")
OTHER_OPENAI_KEY = "sk-proj-Zq9fT2xLmB7vKd4RwP1sYh6NcJ3gAe8UoVi5Xt0Qb"
OTHER_ANTHROPIC_KEY = "sk-ant-api03-Hn4kP9sVx2QmL7bRt1WcZy6JdF3gAe8UoVi5Xt0Qb-Kq2sAA"
REQUEST = ModelRequest(messages=[UserMessage("x")])


def sdk_through(
    monkeypatch: pytest.MonkeyPatch, sdk: Any, name: str, server: Server
) -> list[dict[str, Any]]:
    """Route the clients the adapter creates itself through ``server``; returns the keyword
    arguments each creation received (so the test sees the base URL the SDK was given)."""
    real = getattr(sdk, name)
    created: list[dict[str, Any]] = []

    def make(**kwargs: Any) -> Any:
        created.append(kwargs)
        return real(http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)), **kwargs)

    monkeypatch.setattr(sdk, name, make)
    return created


def assert_clean(text: str, *secrets: str) -> None:
    for secret in (*LEAKS, *secrets):
        assert secret not in text, f"{secret!r} leaked into {text!r}"


def refuse_with_url(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError(f"cannot connect to {request.url}", request=request)


def dropped_stream(head: bytes) -> Callable[[httpx.Request], httpx.Response]:
    """A 200 stream that dies after ``head`` with an error naming the full request URL."""

    def respond(request: httpx.Request) -> httpx.Response:
        class Dropped(httpx.AsyncByteStream):
            async def __aiter__(self) -> Any:
                yield head
                raise httpx.RemoteProtocolError(f"peer closed connection to {request.url}")

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Dropped())

    return respond


async def reference_url(base_url: str) -> str:
    """The URL the SDK itself requests for ``base_url`` (queries and all), for comparison."""
    seen = Server(wire_openai.error(500, {"error": {"message": "x"}}))
    client = openai.AsyncOpenAI(
        api_key="sk-test",
        base_url=base_url,
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(seen)),
    )
    with pytest.raises(openai.APIError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    return str(seen.requests[0].url)


# --- (a) an OpenAI-compatible gateway with credentials in its base URL -------------------------


def test_gateway_credentials_stay_out_of_the_model_id_and_repr() -> None:
    model = OpenAIModel("m", api_key="x", base_url=GATEWAY)

    assert model.model_id == f"openai-compatible:m@{PUBLIC_GATEWAY}"
    assert repr(model) == f"OpenAIModel('openai-compatible:m@{PUBLIC_GATEWAY}')"
    assert model.base_url == GATEWAY  # what the SDK is given, unchanged
    assert_clean(model.model_id)
    assert_clean(repr(model))


@pytest.mark.parametrize(
    ("reply", "status", "retryable"),
    [
        pytest.param(
            wire_openai.error(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided: SECRETKEY123456 (from "
                        "http://user:SECRETKEY123456@gateway.local/v1?api-key=QUERYSECRET999)",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            ),
            401,
            False,
            id="401",
        ),
        pytest.param(
            wire_openai.error(
                500,
                {
                    "error": {
                        "message": f"upstream {GATEWAY} failed; query key QUERYSECRET999",
                        "type": "server_error",
                    }
                },
            ),
            500,
            True,
            id="500",
        ),
        pytest.param(refuse_with_url, None, True, id="connection"),
    ],
)
async def test_gateway_credentials_stay_out_of_errors_but_reach_the_gateway(
    monkeypatch: pytest.MonkeyPatch,
    reply: Any,
    status: int | None,
    retryable: bool,
) -> None:
    expected_url = await reference_url(GATEWAY)
    server = Server(reply)
    created = sdk_through(monkeypatch, openai, "AsyncOpenAI", server)
    model = OpenAIModel("m", api_key="sk-test", base_url=GATEWAY)

    with pytest.raises(ModelError) as caught:
        await model.complete(REQUEST)

    text = str(caught.value)
    assert_clean(text)
    assert (caught.value.status_code, caught.value.retryable) == (status, retryable)
    assert f"m@{PUBLIC_GATEWAY}" in text
    # The SDK was given the real base URL, and the gateway saw the credentials it derives.
    assert [kwargs["base_url"] for kwargs in created] == [GATEWAY]
    sent = server.requests[0]
    assert str(sent.url) == expected_url
    assert sent.url.userinfo == b"user:SECRETKEY123456"
    assert "api-key=QUERYSECRET999" in str(sent.url)


async def test_gateway_credentials_stay_out_of_stream_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    head = wire_openai.sse(wire_openai.delta({"content": "Hel"})).content.split(b"data: [DONE]")[0]
    error_event = {"error": {"message": f"upstream {GATEWAY} overloaded", "type": "server_error"}}
    server = Server(dropped_stream(head), wire_openai.sse(error_event))
    sdk_through(monkeypatch, openai, "AsyncOpenAI", server)
    model = OpenAIModel("m", api_key="sk-test", base_url=GATEWAY)

    for _ in range(2):  # a transport error mid-stream, then an error event in the stream
        with pytest.raises(ModelError) as caught:
            await wire_openai.collect(model, REQUEST)
        assert_clean(str(caught.value))
        assert caught.value.retryable is True


async def test_gateway_credentials_stay_out_of_the_client_creation_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(ModelError, match="OPENAI_API_KEY") as caught:
        await OpenAIModel("m", base_url=GATEWAY).complete(REQUEST)

    assert_clean(str(caught.value))
    assert PUBLIC_GATEWAY in str(caught.value)


@pytest.mark.parametrize("model_class", [OpenAIModel, AnthropicModel])
@pytest.mark.parametrize(
    "base_url",
    [
        "http://user:ab/cdSECRETKEY123456@gateway.local/v1",  # "/" in the password, unencoded
        "http://user:SECRET\x00KEY123456@gateway.local/v1",
    ],
)
async def test_a_base_url_the_sdk_refuses_is_a_model_error_that_does_not_quote_it(
    model_class: Any, base_url: str
) -> None:
    model = model_class("m", api_key="sk-test", base_url=base_url)

    with pytest.raises(ModelError, match="percent-encoded") as caught:
        await model.complete(REQUEST)

    assert_clean(str(caught.value) + model.model_id, "ab/cd", "'ab'", "SECRET")
    assert caught.value.retryable is False


@pytest.mark.parametrize(
    ("base_url", "shown"),
    [
        ("ht tp://x:SECRETKEY123456@gateway.local/v1", "ht tp://gateway.local/v1"),
        ("https://gateway.local/sk-proj-SECRETKEY123456/v1", "https://gateway.local/[redacted]/v1"),
    ],
)
def test_the_model_id_holds_no_credential_even_for_odd_base_urls(base_url: str, shown: str) -> None:
    assert OpenAIModel("m", api_key="x", base_url=base_url).model_id == (
        f"openai-compatible:m@{shown}"
    )


def test_a_model_id_with_credentials_resolves_to_the_public_id_and_round_trips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-for-the-gateway")

    model = resolve_model(f"openai-compatible:m@{GATEWAY}")

    assert isinstance(model, OpenAIModel)
    assert model.base_url == GATEWAY
    assert model.model_id == f"openai-compatible:m@{PUBLIC_GATEWAY}"
    again = resolve_model(model.model_id)
    assert isinstance(again, OpenAIModel)
    assert (again.model_id, again.base_url) == (model.model_id, PUBLIC_GATEWAY)
    assert again._get_client().api_key == "env-key-for-the-gateway"


@pytest.mark.parametrize(
    "spec",
    [
        "openai-compatible:m@user:SECRETKEY123456@gateway.local/v1?api-key=QUERYSECRET999",
        f"openai-compatibel:m@{GATEWAY}",
        f"openai-compatible:@{GATEWAY}",
    ],
)
def test_a_refused_model_name_does_not_echo_its_credentials(spec: str) -> None:
    with pytest.raises(ValidationError) as caught:
        resolve_model(spec)

    assert_clean(str(caught.value))


# --- (b) a 401 that echoes keys back ----------------------------------------------------------


async def test_openai_401_echoing_the_configured_key_and_another_key_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configured = "gw-live-7Hq2xZ9pLm4Rt8Vb"  # not key-shaped: only known because it is configured
    message = (
        f"Incorrect API key provided: {configured}. The key {OTHER_OPENAI_KEY} is not valid "
        "either. You can find your API key at https://platform.openai.com/account/api-keys."
    )
    server = Server(
        wire_openai.error(
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
    sdk_through(monkeypatch, openai, "AsyncOpenAI", server)

    with pytest.raises(ModelError) as caught:
        await OpenAIModel("gpt-4.1-mini", api_key=configured).complete(REQUEST)

    text = str(caught.value)
    assert_clean(text, configured, OTHER_OPENAI_KEY, "Zq9fT2xLmB7vKd4RwP1sYh6NcJ3gAe8UoVi5Xt0Qb")
    assert "Incorrect API key provided: [redacted]" in text
    assert "https://platform.openai.com/account/api-keys" in text
    assert text.endswith("Check OPENAI_API_KEY or pass api_key=...")
    assert (caught.value.status_code, caught.value.retryable) == (401, False)
    assert server.requests[0].headers["authorization"] == f"Bearer {configured}"


async def test_openai_401_echoing_a_key_from_the_environment_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from_env = "envkey-93Jd8sKq2LxP"
    monkeypatch.setenv("OPENAI_API_KEY", from_env)
    server = Server(
        wire_openai.error(401, {"error": {"message": f"bad key {from_env}", "type": "x"}})
    )
    sdk_through(monkeypatch, openai, "AsyncOpenAI", server)

    with pytest.raises(ModelError) as caught:
        await OpenAIModel("gpt-4.1-mini").complete(REQUEST)

    assert_clean(str(caught.value), from_env)


async def test_openai_401_echoing_the_key_of_a_client_passed_in_is_redacted() -> None:
    key = "client-key-5Rt8Vb2xZ9"
    server = Server(wire_openai.error(401, {"error": {"message": f"bad key {key}", "type": "x"}}))
    client = openai.AsyncOpenAI(
        api_key=key,
        base_url="https://api.openai.com/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
    )

    with pytest.raises(ModelError) as caught:
        await OpenAIModel("gpt-4.1-mini", client=client).complete(REQUEST)

    assert_clean(str(caught.value), key)


# --- (c) the same for Anthropic ----------------------------------------------------------------


async def test_anthropic_401_echoing_the_configured_key_and_another_key_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configured = "sk-ant-api03-Qw7Er2Ty9Ui4Op1As6Df3Gh8Jk5Lz0Xc-Vb7NmAA"
    text = f"invalid x-api-key: {configured} (also tried {OTHER_ANTHROPIC_KEY})"
    server = Server(wire_anthropic.error(401, "authentication_error", text))
    sdk_through(monkeypatch, anthropic, "AsyncAnthropic", server)

    with pytest.raises(ModelError) as caught:
        await AnthropicModel("claude-sonnet-4-20250514", api_key=configured).complete(REQUEST)

    message = str(caught.value)
    assert_clean(message, configured, OTHER_ANTHROPIC_KEY, "Qw7Er2Ty9Ui4", "Hn4kP9sVx2Qm")
    assert "invalid x-api-key" in message
    assert message.endswith("Check ANTHROPIC_API_KEY or pass api_key=...")
    assert (caught.value.status_code, caught.value.retryable) == (401, False)
    sent = server.requests[0].headers  # the key still goes out (header name varies by release)
    assert configured in (
        sent.get("x-api-key"),
        sent.get("authorization", "").removeprefix("Bearer "),
    )


async def test_anthropic_gateway_credentials_stay_out_of_errors_but_reach_the_gateway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base_url = "https://proxy:SECRETKEY123456@claude-gw.local?key=QUERYSECRET999"
    server = Server(
        wire_anthropic.error(500, "api_error", f"upstream {base_url} failed"),
        refuse_with_url,
        dropped_stream(wire_anthropic.sse(wire_anthropic.message_start()).content),
    )
    created = sdk_through(monkeypatch, anthropic, "AsyncAnthropic", server)
    model = AnthropicModel("claude-sonnet-4-20250514", api_key="sk-ant-test", base_url=base_url)

    for _ in range(2):  # a 500 echoing the base URL, then a refused connection
        with pytest.raises(ModelError) as caught:
            await model.complete(REQUEST)
        assert_clean(str(caught.value), "proxy:")
    with pytest.raises(ModelError) as caught:
        await wire_anthropic.collect(model, REQUEST)
    assert_clean(str(caught.value), "proxy:")

    assert_clean(model.model_id + repr(model), "proxy:")
    assert [kwargs["base_url"] for kwargs in created] == [base_url]
    assert server.requests[0].url.userinfo == b"proxy:SECRETKEY123456"


async def test_anthropic_client_creation_error_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(**kwargs: Any) -> Any:
        raise anthropic.AnthropicError(f"bad base_url {kwargs['base_url']}")

    monkeypatch.setattr(anthropic, "AsyncAnthropic", broken)

    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY") as caught:
        await AnthropicModel("claude-sonnet-4-20250514", api_key="x", base_url=GATEWAY).complete(
            REQUEST
        )

    assert_clean(str(caught.value))


# --- (d) public_url and redact -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "public"),
    [
        (GATEWAY, PUBLIC_GATEWAY),
        ("http://localhost:11434/v1", "http://localhost:11434/v1"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),
        ("https://KEY0123456789@gw.example.com:8443/v1/", "https://gw.example.com:8443/v1/"),
        ("https://gw.example.com/v1?api-key=x&key=y#frag", "https://gw.example.com/v1"),
        ("https://gw.example.com/v1#token=abc", "https://gw.example.com/v1"),
        ("http://[::1]:8080/v1?key=x", "http://[::1]:8080/v1"),
        ("http://user:pw@[2001:db8::1]:8080/v1", "http://[2001:db8::1]:8080/v1"),
        ("http://u:p@ss@gw.local/v1", "http://gw.local/v1"),  # an unencoded @ in the password
        ("http://user:ab/cd@gw.local/v1", "http://gw.local/v1"),  # an unencoded / too
        ("user:pass@gateway.local/v1", "gateway.local/v1"),  # no scheme
        ("gateway.local:8080/v1?token=x", "gateway.local:8080/v1"),
        ("//user:pw@host/x", "//host/x"),
        ("ht tp://x:SECRETKEY123456@gw/v1", "ht tp://gw/v1"),  # a malformed scheme
        ("://x:SECRETKEY123456@gw", "://gw"),
        ("host name/with@sign", "host name/with@sign"),  # not a URL: left alone
        ("HTTPS://User:Pw@Host.Example/V1", "HTTPS://Host.Example/V1"),
        ("", ""),
        ("?key=x", ""),
        ("the sky is blue", "the sky is blue"),
        ("not a url: really", "not a url: really"),
    ],
)
def test_public_url_keeps_scheme_host_port_and_path_only(url: str, public: str) -> None:
    assert public_url(url) == public
    assert public_url(public) == public


def test_public_url_never_raises_on_what_is_not_a_string() -> None:
    assert public_url(None) == ""  # type: ignore[arg-type]
    assert public_url(b"http://u:SECRETKEY123456@h/v1") == "http://h/v1"  # type: ignore[arg-type]
    assert public_url(httpx.URL(GATEWAY)) == PUBLIC_GATEWAY  # type: ignore[arg-type]


def test_url_secrets_are_the_userinfo_and_query_values_raw_and_decoded() -> None:
    found = set(url_secrets("http://us%40er:p%2Fss0123@h/v1?api-key=Q%3D9&plain=val#frag"))

    assert {"us%40er", "us@er", "p%2Fss0123", "p/ss0123", "Q%3D9", "Q=9", "val", "frag"} <= found
    assert "h" not in found and "v1" not in found
    assert url_secrets("http://localhost:11434/v1") == ()
    assert url_secrets("") == ()


@pytest.mark.parametrize(
    "text",
    [
        "the sky is blue",
        "task-force",
        "sk-",
        "sk-test",
        "a risk-free skim",
        "Basic authentication failed",
        "the bearer of bad news",
        "Bearer token required",
        "invalid x-api-key",
        "missing key: 'messages'",
        "max_tokens: 1024, max_tokens=1024",
        "Check OPENAI_API_KEY or pass api_key=...",
        "Set ANTHROPIC_API_KEY or pass api_key=... (or api_key=***)",
        "Error code: 401 - {'code': 'invalid_api_key'}",
        "You can find your API key at https://platform.openai.com/account/api-keys.",
        "https://docs.anthropic.com/en/api/rate-limits",
        "request req_011CSHoEeqs5C35K2UUqR7Fy, completion chatcmpl-BPJ5iEgFMHvpaIdT2EoQyZjYxCGtk",
        "model meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo or claude-sonnet-4-20250514",
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "id 123e4567-e89b-12d3-a456-426614174000",
        "This model's maximum context length is 1047576 tokens.",
        "",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text
    assert redact(text, ["short", "", "abc"]) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"key {OTHER_OPENAI_KEY}.", "key [redacted]."),
        ("sk-svcacct-Ab3dEf6hIj9lMn2pQr5tUv8x", "[redacted]"),
        ("sk-Ab3dEf6hIj9lMn2pQr5tUv8xYz1aBc4dEf7g", "[redacted]"),
        (f"({OTHER_ANTHROPIC_KEY})", "([redacted])"),
        (
            "Incorrect API key provided: sk-proj-abc...xyz.",
            "Incorrect API key provided: [redacted].",
        ),
        ("provided: sk-proj-********************abcd", "provided: [redacted]"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", "Authorization: Bearer [redacted]"),
        ("bearer abc123def456", "bearer [redacted]"),
        ("Authorization: Basic dXNlcjpTRUNSRVRLRVkxMjM0NTY=", "Authorization: Basic [redacted]"),
        ("GET /v1?api-key=QUERYSECRET999&x=1", "GET /v1?api-key=[redacted]&x=1"),
        (
            "/v1?api_key=abc&key=def&token=ghi",
            "/v1?api_key=[redacted]&key=[redacted]&token=[redacted]",
        ),
        ("/v1?apikey=abc#f", "/v1?apikey=[redacted]#f"),
        ("OPENAI_API_KEY=gw-live-key", "OPENAI_API_KEY=[redacted]"),
        ("x-api-key: abcd1234efgh", "x-api-key: [redacted]"),
        (f"to {GATEWAY}", "to http://[redacted]@gateway.local/v1?api-key=[redacted]"),
        ("https://TOKENONLY99@gw/v1", "https://[redacted]@gw/v1"),
        ("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "[redacted]"),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.sig-nat_ure", "token [redacted]"),
        ("blob Xk29fLq8ZpR3mT7vN1bW5cY0dH6jK4sA2eG9uPqR end", "blob [redacted] end"),
    ],
)
def test_key_shaped_tokens_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


def test_configured_secrets_and_their_url_encoded_forms_are_redacted() -> None:
    secret = "p@ss/w0rd+key!!"
    text = f"raw {secret}, encoded {quote(secret, safe='')}, form {quote(secret)} end"

    assert redact(text, [secret]) == "raw [redacted], encoded [redacted], form [redacted] end"
    assert redact("uses gw-live-7Hq2xZ9p twice: gw-live-7Hq2xZ9p", ["gw-live-7Hq2xZ9p"]) == (
        "uses [redacted] twice: [redacted]"
    )
    assert redact("short abc stays", ["abc", ""]) == "short abc stays"


def odd_strings(count: int, seed: int) -> list[str]:
    """Deterministic junk built from the characters URL and key parsing care about (a seeded
    fuzz rather than hypothesis, which would leave a cache directory in the repository)."""
    pieces = [
        *":/@?#&=[]%. -_+*~",
        "://",
        "sk-",
        "sk-proj-",
        "Bearer ",
        "Basic ",
        "key=",
        "api-key=",
        "http://",
        "user:",
        "[redacted]",
        "\x00",
        "\u2026",
        "é",
        "AbC123xyz",
    ]
    rng = random.Random(seed)
    return ["".join(rng.choices(pieces, k=rng.randint(0, 12))) for _ in range(count)]


@pytest.mark.parametrize("seed", range(4))
def test_public_url_and_redact_never_raise_and_are_stable(seed: int) -> None:
    for text in odd_strings(500, seed):
        public = public_url(text)
        assert "?" not in public and "#" not in public
        assert public_url(public) == public, text
        assert isinstance(redact(text, [text, None, 42]), str)  # type: ignore[list-item]
        assert redact(redact(text)) == redact(text), text


@pytest.mark.parametrize("seed", range(4))
def test_a_configured_secret_never_survives(seed: int) -> None:
    texts = odd_strings(1500, seed)
    for before, secret, after in zip(texts[::3], texts[1::3], texts[2::3], strict=True):
        if len(secret.strip()) < 8 or secret in "[redacted]":
            continue
        assert secret not in redact(before + secret + after, [secret]), (before, secret, after)
