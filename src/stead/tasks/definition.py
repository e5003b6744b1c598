"""A task as a :class:`~stead.runtime.definition.Definition`: the run's input is
``{"input": <JSON>}``; its outcome is ``{"output": <JSON>, "usage": {}}``."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from .._json import NotJSONError
from ..errors import shown
from ..journal.records import Writes
from ..messages import Usage
from ..runtime.context import RunContext
from ..runtime.control import Failed, NeedsAttention
from ..runtime.definition import Completion
from .context import Definitions, TaskContext
from .task import Task

__all__ = ["TaskDefinition"]


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    task: Task
    definitions: Definitions

    async def execute(self, ctx: RunContext) -> Completion:
        task = self.task
        stored = ctx.run.input.get("input") if isinstance(ctx.run.input, dict) else None
        try:
            value = task.input_value(stored)
        except Exception as exc:
            raise NeedsAttention(
                f"the input of run {ctx.run.id} is not valid for task {task.name!r} version "
                f"{task.version} ({exc}). A client with no runtime at hand cannot check it when "
                "it submits: cancel the run and submit a valid input, or register the task "
                "version the input was written for and retry()"
            ) from None
        context = TaskContext(ctx, self.definitions)
        try:
            if task.takes_input:
                returned = await task.fn(context, value)
            else:
                returned = await task.fn(context)
        except Exception as exc:
            raise Failed(
                f"task {task.name!r} raised {type(exc).__name__}: {exc}",
                kind="task",
                traceback="".join(traceback.format_exception(exc)),
            ) from None
        try:
            output = task.output_json(returned)
        except (NotJSONError, ValueError) as exc:
            raise Failed(
                f"task {task.name!r} returned {shown(returned)}, which cannot be journaled "
                f"({exc}); return JSON or a pydantic model",
                kind="task",
            ) from None
        return Completion(
            outcome={"output": output, "usage": {}},
            writes=Writes(),
            output=output,
            messages=(),
            usage=Usage(),
        )
