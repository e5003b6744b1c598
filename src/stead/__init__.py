"""stead: durable execution for LLM agent runs.

Every model response, tool result and progress event is committed to a journal, so a run
survives a crash and continues from committed results: a completed side effect never runs again,
and an interrupted one is handled by the recovery policy its author chose.
"""

from __future__ import annotations

from .agent.agent import Agent
from .agent.checkpoint import Checkpoint
from .agent.interactions import Answer, ApprovalRequired, Approve, Deny, ask_user
from .agent.policies import Budget, RetryPolicy
from .agent.tools import ModelRetry, Tool, ToolContext, tool
from .app import App
from .client import Client
from .errors import (
    ConflictError,
    LeaseLostError,
    LimitError,
    ModelError,
    NotFoundError,
    OwnershipError,
    RunBlocked,
    RunCancelled,
    RunFailed,
    RuntimeClosedError,
    SchemaVersionError,
    SignalTimeout,
    SteadError,
    StepFailed,
    StorageError,
    ValidationError,
)
from .handle import RunHandle, RunOutcome, RunPage, Snapshot
from .journal.records import Event, Interaction, Operation, Run, RunStatus, Signal
from .messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from .models import Model
from .runner import run_agent
from .runtime.runtime import Limits, Runtime
from .store.postgres import PostgresStore
from .store.sqlite import SqliteStore
from .tasks import GraphNode, Schedule, Task, TaskContext, task

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "Answer",
    "App",
    "ApprovalRequired",
    "Approve",
    "AssistantMessage",
    "Budget",
    "Checkpoint",
    "Client",
    "ConflictError",
    "Deny",
    "Event",
    "GraphNode",
    "Interaction",
    "LeaseLostError",
    "LimitError",
    "Limits",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelRetry",
    "NotFoundError",
    "Operation",
    "OwnershipError",
    "PostgresStore",
    "RetryPolicy",
    "Run",
    "RunBlocked",
    "RunCancelled",
    "RunFailed",
    "RunHandle",
    "RunOutcome",
    "RunPage",
    "RunStatus",
    "Runtime",
    "RuntimeClosedError",
    "Schedule",
    "SchemaVersionError",
    "Signal",
    "SignalTimeout",
    "Snapshot",
    "SqliteStore",
    "SteadError",
    "StepFailed",
    "StorageError",
    "Task",
    "TaskContext",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "ValidationError",
    "ask_user",
    "run_agent",
    "task",
    "tool",
]
