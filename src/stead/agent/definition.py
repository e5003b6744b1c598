"""An agent as a :class:`~stead.runtime.definition.Definition`: the run's input is
``{"prompt": ...}``; its outcome carries the conversation as a history reference, which the
session's next run starts from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..journal.records import Writes, outcome_record
from ..models.pricing import Price
from ..runtime.context import RunContext
from ..runtime.definition import Completion
from .agent import Agent
from .history import session_history
from .loop import run_agent_loop

__all__ = ["AgentDefinition"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    agent: Agent
    prices: Mapping[str, Price] | None = None

    async def execute(self, ctx: RunContext) -> Completion:
        run = ctx.run
        # A session's first run (or one after a fresh start) has no history to read.
        history = await ctx.read(lambda tx: session_history(tx, run)) if run.history_length else []
        outcome = await run_agent_loop(
            self.agent, ctx, run.input["prompt"], history=history, prices=self.prices
        )
        conversation = outcome.conversation
        return Completion(
            outcome=outcome_record(
                output=outcome.output,
                head=conversation.head,
                length=len(conversation.messages),
                history_length=len(history),
                usage=outcome.usage.to_json(),
            ),
            writes=Writes(),
            output=outcome.output,
            messages=conversation.messages[len(history) :],
            usage=outcome.usage,
        )
