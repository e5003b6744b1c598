"""How provider failures become :class:`stead.errors.ModelError`.

Both official SDKs (``openai``, ``anthropic``) raise the same shapes: a status error carrying
the HTTP status, the response headers and the provider's JSON error body; a connection error;
a timeout. The adapters catch their SDK's classes and hand the parts to :func:`status_error` or
:func:`connection_error` here, so the retry policy is decided in one place and this module
imports neither SDK (it must load when the extras are not installed).

Every message built here goes through :func:`stead.models._redact.redact` with the ``secrets``
the adapter passes (its API key, the parts of its base URL that hold credentials): providers
echo keys in their error bodies ("Incorrect API key provided: sk-..."), and the text of a
:class:`ModelError` is what the journal records as the run's error.

The policy mirrors the SDKs' own retry rules, because stead turns the SDK retries off and does
its own (journaled, honouring ``retry_after``): 408, 409, 429 and every 5xx (529 is Anthropic's
"overloaded") are retryable, as are connection failures and timeouts; a ``x-should-retry``
header from the provider overrides the status. Everything else (400 including context-length,
401, 403, 404, 413, 422) fails at once: trying again cannot help.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from .._clock import SystemClock
from ..errors import ModelError, SteadError
from ._redact import redact

__all__ = [
    "MissingExtraError",
    "connection_error",
    "is_transport_error",
    "parse_arguments",
    "retry_after_seconds",
    "status_error",
]

_RETRYABLE_STATUS = frozenset({408, 409, 429})
# Error types that providers send inside a 200 stream (no useful HTTP status) and that mean
# "try again later": Anthropic's overloaded/rate-limit/api errors, OpenAI's server_error.
_RETRYABLE_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "server_error"})
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
)


class MissingExtraError(SteadError, ImportError):
    """A provider adapter was imported but its SDK (an optional extra) is not installed."""

    def __init__(self, module: str, package: str, extra: str) -> None:
        super().__init__(
            f"{module} needs the {package!r} package, which is not installed: "
            f"run pip install 'stead[{extra}]'"
        )
        self.package = package
        self.extra = extra


def retry_after_seconds(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``retry-after``.

    ``retry-after`` may be a number of seconds or an HTTP date (then measured from ``now``,
    the system clock by default). Missing, malformed or negative values give ``None``/``0``.
    """
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # an HTTP date is always GMT; parsedate returns it naive for -0000
        return None
    current = now if now is not None else SystemClock().now()
    return max(0.0, (moment - current).total_seconds())


def status_error(
    *,
    provider: str,
    model: str,
    key_env: str,
    status_code: int | None,
    body: object,
    fallback_message: str,
    headers: Mapping[str, str],
    secrets: Iterable[str] = (),
) -> ModelError:
    """The :class:`ModelError` for an error response (or an error event inside a stream).

    ``body`` is the provider's decoded JSON error (the whole body or its ``error`` member);
    its ``message`` is kept in the error text, ``fallback_message`` is used when the body has
    none. The text is redacted: ``secrets`` and key-shaped tokens become ``[redacted]``.
    """
    message, error_type, error_code = _error_detail(body)
    detail = message or fallback_message
    http = f"HTTP {status_code}" if status_code and status_code >= 400 else "error in stream"
    where = f"{provider} ({model}, {http})"
    retryable = _is_retryable(status_code, error_type, headers)
    retry_after = retry_after_seconds(headers) if retryable else None

    if retryable:
        wait = f"; the provider asked to wait {retry_after:g}s" if retry_after is not None else ""
        if status_code == 429 or error_type == "rate_limit_error":
            what = f"{where} rate-limited the request: {detail}"
            todo = "if it persists, lower concurrency or raise the account's rate limit"
        else:
            what = f"{where} is overloaded or failed: {detail}"
            todo = "if it persists, check the provider's status page"
        text = f"{what}. Retryable: the agent's model_retry policy applies{wait}; {todo}."
    elif status_code == 401 or error_type == "authentication_error":
        text = f"{where} rejected the API key: {detail}. Check {key_env} or pass api_key=..."
    elif status_code == 403 or error_type == "permission_error":
        text = (
            f"{where} denied access: {detail}. Check that the key in {key_env} has access to "
            f"model {model!r}."
        )
    elif status_code == 404 or error_type == "not_found_error":
        text = (
            f"{where} found no such model or endpoint: {detail}. Check the model name and base_url."
        )
    elif _is_context_length(detail, error_code):
        text = (
            f"{where} rejected the request because it exceeds the model's context window: "
            f"{detail}. Shorten the instructions, history or tool results, or use a model with "
            "a larger context window."
        )
    else:
        text = (
            f"{where} rejected the request: {detail}. Not retryable; check the tool schemas, "
            "messages and settings sent to the model."
        )
    return ModelError(
        redact(text, secrets),
        provider=provider,
        status_code=status_code if status_code and status_code >= 400 else None,
        retryable=retryable,
        retry_after=retry_after,
    )


def connection_error(
    *, provider: str, model: str, detail: str, timed_out: bool, secrets: Iterable[str] = ()
) -> ModelError:
    """The retryable :class:`ModelError` for a request that got no response (text redacted)."""
    if timed_out:
        what = f"the request to {provider} ({model}) timed out: {detail}"
        todo = "raise the timeout in settings= if responses are legitimately slow"
    else:
        what = f"the connection to {provider} ({model}) failed: {detail}"
        todo = "check the network and base_url"
    return ModelError(
        redact(
            f"{what}. Retryable: the agent's model_retry policy applies; if it persists, {todo}.",
            secrets,
        ),
        provider=provider,
        retryable=True,
    )


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a network failure of the HTTP library under the SDK.

    Some SDK releases let such errors escape unwrapped while a stream is being read. The SDKs
    run on ``httpx2`` (current) or ``httpx`` (older); whichever is loaded is checked, and
    neither is imported here.
    """
    for name in ("httpx2", "httpx"):
        error = getattr(sys.modules.get(name), "TransportError", None)
        if isinstance(error, type) and isinstance(exc, error):
            return True
    return False


def parse_arguments(
    raw: str, *, tool: str, provider: str, model: str, secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """The JSON object a model produced as a tool call's arguments (``""`` means no arguments).

    Malformed JSON is a provider failure, raised as a retryable :class:`ModelError` (its text,
    which quotes the arguments, redacted): nothing was committed, and asking again usually
    gives well-formed arguments.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        problem = f"are not valid JSON ({exc.msg} at position {exc.pos})"
    else:
        if isinstance(value, dict):
            return value
        problem = f"are a JSON {type(value).__name__}, not an object"
    shown = raw if len(raw) <= 200 else raw[:200] + "..."
    raise ModelError(
        redact(
            f"{provider} ({model}) returned arguments for tool {tool!r} that {problem}: "
            f"{shown!r}. Retryable: the agent's model_retry policy applies; if it persists, "
            "simplify the tool's parameter schema.",
            secrets,
        ),
        provider=provider,
        retryable=True,
    )


def _is_retryable(
    status_code: int | None, error_type: str | None, headers: Mapping[str, str]
) -> bool:
    should_retry = headers.get("x-should-retry")
    if should_retry == "true":
        return True
    if should_retry == "false":
        return False
    if status_code is not None and status_code >= 400:
        return status_code in _RETRYABLE_STATUS or status_code >= 500
    return error_type in _RETRYABLE_TYPES


def _is_context_length(message: str, code: str | None) -> bool:
    text = f"{code or ''} {message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def _error_detail(body: object) -> tuple[str | None, str | None, str | None]:
    """``(message, type, code)`` from an OpenAI or Anthropic error body, whichever shape."""
    if not isinstance(body, Mapping):
        return (body.strip() or None) if isinstance(body, str) else None, None, None
    inner = body.get("error")
    error = inner if isinstance(inner, Mapping) else body
    code = error.get("code")
    details = error.get("details")
    if code is None and isinstance(details, Mapping):
        code = details.get("error_code")
    return _text(error.get("message")), _text(error.get("type")), _text(code)


def _text(value: object) -> str | None:
    if value is None or isinstance(value, Mapping | list):
        return None
    return str(value) or None


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return max(0.0, number)
