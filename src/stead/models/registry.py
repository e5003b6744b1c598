"""Model names to model objects: ``"openai:gpt-4.1-mini"`` -> :class:`OpenAIModel`.

An agent may name its model with a string; the string is also what the journal records
(``model_id``), so :func:`resolve_model` of a model's ``model_id`` gives an equivalent model.
Provider modules are imported only when named, so a missing extra fails with its install hint
(:class:`~stead.models._errors.MissingExtraError`) only for the provider actually used.

A credential in the base URL of ``openai-compatible:<model>@<base_url>`` (userinfo such as
``http://user:KEY@gateway/v1``, or a query such as ``?api-key=KEY``) is used for the requests
but never recorded: the model's ``model_id`` is ``openai-compatible:<model>@<base_url>`` with
the userinfo, query and fragment removed, and that public id resolves to a working model when
the key comes from ``OPENAI_API_KEY`` (gateways that need the URL credential must be given the
full name, or an :class:`OpenAIModel`, again on resume). Error messages about a refused name
do not repeat its credentials either.
"""

from __future__ import annotations

import os

from ..errors import ValidationError
from . import Model
from ._redact import public_url, redact, url_secrets

__all__ = ["LOCAL_API_KEY", "resolve_model"]

LOCAL_API_KEY = "not-needed"
"""The API key sent to an OpenAI-compatible server when ``OPENAI_API_KEY`` is not set: local
servers (Ollama, vLLM, llama.cpp, LM Studio) ignore it, but the SDK requires one."""

_FORMS = (
    "'openai:<model>' (for example 'openai:gpt-4.1-mini'), "
    "'anthropic:<model>' (for example 'anthropic:claude-sonnet-4-20250514') or "
    "'openai-compatible:<model>@<base_url>' (for example "
    "'openai-compatible:llama3.1@http://localhost:11434/v1')"
)


def resolve_model(spec: str | Model) -> Model:
    """The model named by ``spec``; a :class:`Model` object is returned as it is.

    Raises :class:`~stead.errors.ValidationError` for a name of no known form.
    ``openai-compatible`` models use ``OPENAI_API_KEY`` when it is set, else
    :data:`LOCAL_API_KEY`; pass an :class:`OpenAIModel` yourself for any other key, or put it
    in the base URL's userinfo or query (it is sent, but not part of the ``model_id``).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Model):
            return spec
        raise ValidationError(
            f"a model must be a name or have an async complete(request) method, got "
            f"{type(spec).__name__}; use {_FORMS}"
        )
    provider, colon, rest = spec.partition(":")
    if not colon or not rest.strip():
        raise ValidationError(f"unknown model {_shown(spec)!r}: use {_FORMS}")
    if provider == "openai":
        from .openai import OpenAIModel

        return OpenAIModel(rest)
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(rest)
    if provider == "openai-compatible":
        return _openai_compatible(spec, rest)
    raise ValidationError(
        f"unknown model provider {_shown(provider)!r} in {_shown(spec)!r}: use {_FORMS}"
    )


def _openai_compatible(spec: str, rest: str) -> Model:
    model, at, base_url = rest.partition("@")
    if not at or not model.strip() or not base_url.startswith(("http://", "https://")):
        raise ValidationError(
            f"{_shown(spec)!r} needs a model and an http(s) base URL: "
            "'openai-compatible:<model>@<base_url>', for example "
            "'openai-compatible:llama3.1@http://localhost:11434/v1'"
        )
    from .openai import OpenAIModel

    api_key = os.environ.get("OPENAI_API_KEY") or LOCAL_API_KEY
    return OpenAIModel(model, api_key=api_key, base_url=base_url)


def _shown(spec: str) -> str:
    """``spec`` as an error message may quote it: the part after the first ``@`` (the base
    URL, if any) without credentials, and the whole redacted of them."""
    head, at, url = spec.partition("@")
    shown = f"{head}@{public_url(url)}" if at else spec
    return redact(shown, url_secrets(url) if at else ())
