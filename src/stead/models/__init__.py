"""The model seam: one required method, ``complete``.

Provider adapters live in submodules (``stead.models.openai``, ``stead.models.anthropic``) and
need their extras; this module imports none of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from ..messages import ModelRequest, ModelResponse, StreamDelta

__all__ = ["Model", "StreamingModel", "model_id"]


@runtime_checkable
class Model(Protocol):
    """Anything with ``async complete(request) -> ModelResponse`` is a model.

    An optional ``model_id`` attribute (for example ``"openai:gpt-4.1-mini"``) names it in the
    journal; it is part of each model operation's input, so changing the model of a run that is
    in progress is detected at replay.
    """

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream: ``stream`` yields deltas, then exactly one final
    :class:`ModelResponse` (the only thing the journal commits)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]: ...


def model_id(model: object) -> str:
    """The name a model is journaled under."""
    name = getattr(model, "model_id", None)
    return name if isinstance(name, str) and name else type(model).__name__
