"""Agent: the data half of an agent (its code half is its tools and model)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ValidationError, shown
from ..models import Model
from .policies import Budget, RetryPolicy
from .tools import Tool

__all__ = ["Agent"]


@dataclass(frozen=True, eq=False)
class Agent:
    """An agent definition, registered with an :class:`~stead.App` under ``(id, version)``.

    A run is pinned to the version it was submitted with: bump ``version`` whenever the model,
    instructions or tools change, and keep the old version registered while runs recorded under
    it are unfinished.
    """

    id: str
    version: str
    model: Model | str
    instructions: str = ""
    tools: Sequence[Tool] = field(default_factory=tuple)
    max_turns: int = 20
    model_retry: RetryPolicy | None = field(default_factory=RetryPolicy)
    budget: Budget | None = None
    stream: bool = False

    def __post_init__(self) -> None:
        for name in ("id", "version"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValidationError(
                    f"Agent {name} must be a non-blank string, got {shown(value)}"
                )
        if isinstance(self.model, str):
            from ..models.registry import resolve_model

            object.__setattr__(self, "model", resolve_model(self.model))
        if not callable(getattr(self.model, "complete", None)):
            raise ValidationError(
                f"agent {self.id!r}: model {self.model!r} has no complete(request) method; pass "
                "a stead Model (e.g. stead.testing.ScriptedModel or "
                "stead.models.openai.OpenAIModel)"
            )
        if not isinstance(self.instructions, str):
            raise ValidationError(f"agent {self.id!r}: instructions must be a string")
        if (
            isinstance(self.max_turns, bool)
            or not isinstance(self.max_turns, int)
            or self.max_turns < 1
        ):
            raise ValidationError(
                f"agent {self.id!r}: max_turns must be a positive integer, got "
                f"{shown(self.max_turns)}"
            )
        if self.model_retry is not None and not isinstance(self.model_retry, RetryPolicy):
            raise ValidationError(
                f"agent {self.id!r}: model_retry must be a stead.RetryPolicy or None"
            )
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise ValidationError(f"agent {self.id!r}: budget must be a stead.Budget or None")
        tools = tuple(self.tools)
        seen: set[str] = set()
        for item in tools:
            if not isinstance(item, Tool):
                raise ValidationError(
                    f"agent {self.id!r}: {item!r} is not a tool; decorate it with @stead.tool"
                )
            if item.name in seen:
                raise ValidationError(f"agent {self.id!r}: two tools are named {item.name!r}")
            seen.add(item.name)
        object.__setattr__(self, "tools", tools)

    def tool(self, name: str) -> Tool | None:
        for item in self.tools:
            if item.name == name:
                return item
        return None
