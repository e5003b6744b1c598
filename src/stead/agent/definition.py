"""An agent as a :class:`~stead.runtime.definition.Definition`: the run's input is
``{"prompt": ...}``; its outcome carries the conversation as a history reference, which the
session's next run starts from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..journal.records import outcome_record
from ..models.pricing import Price
from ..runtime.context import RunContext
from ..runtime.definition import Completion
from .agent import Agent
from .loop import run_agent_loop

__all__ = ["AgentDefinition"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    agent: Agent
    prices: Mapping[str, Price] | None = None

    async def execute(self, ctx: RunContext) -> Completion:
        outcome = await run_agent_loop(self.agent, ctx, ctx.run.input["prompt"], prices=self.prices)
        conversation = outcome.conversation
        return Completion(
            outcome=outcome_record(
                output=outcome.output,
                head=conversation.head,
                length=len(conversation.messages),
                history_length=len(ctx.history),
                usage=outcome.usage.to_json(),
            ),
            writes=conversation.take_pending(),
            output=outcome.output,
            messages=conversation.messages[len(ctx.history) :],
            usage=outcome.usage,
        )
