"""Durable tasks: ``async def`` workflows over keyed durable operations (DESIGN §5)."""

from __future__ import annotations

from .context import TaskContext
from .graph import GraphNode
from .schedule import Schedule
from .task import Task, task

__all__ = ["GraphNode", "Schedule", "Task", "TaskContext", "task"]
