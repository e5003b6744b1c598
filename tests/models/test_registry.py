"""Model names to model objects, and the install hint when a provider extra is missing."""

from __future__ import annotations

import importlib
import sys

import pytest

from stead.errors import ValidationError
from stead.messages import ModelRequest, ModelResponse
from stead.models import Model
from stead.models._errors import MissingExtraError
from stead.models.registry import LOCAL_API_KEY, resolve_model


class EchoModel:
    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="echo")


def test_a_model_object_is_returned_as_it_is() -> None:
    model = EchoModel()

    assert resolve_model(model) is model


def test_openai_names_resolve_to_openai_models() -> None:
    pytest.importorskip("openai")
    from stead.models.openai import OpenAIModel

    model = resolve_model("openai:gpt-4.1-mini")

    assert isinstance(model, OpenAIModel)
    assert model.model_id == "openai:gpt-4.1-mini"
    assert model.base_url is None


def test_anthropic_names_resolve_to_anthropic_models() -> None:
    pytest.importorskip("anthropic")
    from stead.models.anthropic import AnthropicModel

    model = resolve_model("anthropic:claude-sonnet-4-20250514")

    assert isinstance(model, AnthropicModel)
    assert model.model_id == "anthropic:claude-sonnet-4-20250514"


def test_openai_compatible_names_carry_the_base_url_and_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("openai")
    from stead.models.openai import OpenAIModel

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    spec = "openai-compatible:llama3.1:8b@http://localhost:11434/v1"

    model = resolve_model(spec)

    assert isinstance(model, OpenAIModel)
    assert (model.model, model.base_url, model.model_id) == (
        "llama3.1:8b",
        "http://localhost:11434/v1",
        spec,
    )
    assert model._get_client().api_key == LOCAL_API_KEY


def test_openai_compatible_uses_openai_api_key_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    from stead.models.openai import OpenAIModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-or-v1-test")

    model = resolve_model("openai-compatible:meta-llama/llama-3.1-8b@https://openrouter.ai/api/v1")

    assert isinstance(model, OpenAIModel)
    assert model._get_client().api_key == "sk-or-v1-test"


@pytest.mark.parametrize(
    "spec",
    ["gpt-4.1-mini", "gemini:gemini-2.5-pro", "openai:", "openai: ", "", ":gpt-4o"],
)
def test_unknown_forms_are_refused_listing_the_accepted_ones(spec: str) -> None:
    with pytest.raises(ValidationError) as caught:
        resolve_model(spec)

    message = str(caught.value)
    for form in (
        "'openai:<model>'",
        "'anthropic:<model>'",
        "'openai-compatible:<model>@<base_url>'",
    ):
        assert form in message


@pytest.mark.parametrize(
    "spec",
    [
        "openai-compatible:llama3.1",
        "openai-compatible:@http://localhost:11434/v1",
        "openai-compatible:llama3.1@localhost:11434",
    ],
)
def test_openai_compatible_needs_a_model_and_an_http_base_url(spec: str) -> None:
    with pytest.raises(ValidationError, match="base URL"):
        resolve_model(spec)


def test_objects_that_are_not_models_are_refused() -> None:
    with pytest.raises(ValidationError, match="complete"):
        resolve_model(42)  # type: ignore[arg-type]


def test_resolved_models_satisfy_the_model_protocol() -> None:
    pytest.importorskip("openai")

    assert isinstance(resolve_model("openai:gpt-4o"), Model)


@pytest.mark.parametrize(("module", "package"), [("openai", "openai"), ("anthropic", "anthropic")])
def test_a_missing_sdk_raises_an_import_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail
    monkeypatch.delitem(sys.modules, f"stead.models.{module}", raising=False)

    with pytest.raises(ImportError) as caught:
        importlib.import_module(f"stead.models.{module}")

    assert isinstance(caught.value, MissingExtraError)
    assert f"pip install 'stead[{package}]'" in str(caught.value)
    with pytest.raises(MissingExtraError):
        resolve_model(f"{module}:some-model")
