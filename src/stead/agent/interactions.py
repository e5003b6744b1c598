"""Human in the loop: approvals, questions, and the responses a person gives.

Approvals gate execution; they never replace it. A gated call writes an interaction and the run
waits (its concurrency slot freed); ``respond`` records the decision exactly once, and the run
continues: an approved tool runs under its own recovery policy, a denied one hands the model the
denial as the tool's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._json import JSON, NotJSONError, check_text, to_json
from ..errors import ValidationError, shown
from .tools import Tool, tool

__all__ = ["Answer", "ApprovalRequired", "Approve", "Deny", "Response", "ask_user"]


class ApprovalRequired(Exception):
    """Raised by a tool to ask a person for approval while it runs.

    Raise it *before doing anything*: once approved, the tool runs again from its start with
    ``ctx.approved`` true, so work done before the raise would be done twice. ``payload`` (JSON)
    is shown to the reviewer.
    """

    def __init__(self, payload: Any = None) -> None:
        super().__init__("approval required")
        try:
            self.payload: JSON = to_json(payload)
        except NotJSONError as exc:
            raise ValidationError(f"ApprovalRequired payload must be JSON: {exc}") from None


def _text(name: str, value: object, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValidationError(
            f"{name} must be a {'non-blank ' if required else ''}string, got {shown(value)}"
        )
    problem = check_text(value)
    if problem is not None:
        raise ValidationError(f"{name} cannot be stored: its {problem}")
    return value


@dataclass(frozen=True, slots=True)
class Approve:
    """Approve a gated tool call (or a budget breach): the call runs."""

    reviewer: str | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        _text("Approve.reviewer", self.reviewer)
        _text("Approve.note", self.note)

    def to_json(self) -> JSON:
        return {"kind": "approve", "reviewer": self.reviewer, "note": self.note}


@dataclass(frozen=True, slots=True)
class Deny:
    """Deny a gated tool call: the model receives ``reason`` as the tool's (failed) result."""

    reason: str = "denied by a reviewer"
    reviewer: str | None = None

    def __post_init__(self) -> None:
        _text("Deny.reason", self.reason, required=True)
        _text("Deny.reviewer", self.reviewer)

    def to_json(self) -> JSON:
        return {"kind": "deny", "reason": self.reason, "reviewer": self.reviewer}


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer a question the agent asked with ``ask_user``; ``value`` becomes the tool result."""

    value: Any
    reviewer: str | None = None

    def __post_init__(self) -> None:
        _text("Answer.reviewer", self.reviewer)
        try:
            to_json(self.value)
        except NotJSONError as exc:
            raise ValidationError(f"Answer.value must be JSON: {exc}") from None

    def to_json(self) -> JSON:
        return {"kind": "answer", "value": to_json(self.value), "reviewer": self.reviewer}


Response = Approve | Deny | Answer


def _ask_user(question: str) -> str:
    """Ask the user a question and wait for their answer. Use it when you need information
    only the user has, or a decision only they can make."""
    raise RuntimeError("ask_user is answered by a person through respond(), never called")


#: The built-in question tool: give it to an agent (``tools=[..., stead.ask_user]``); the run
#: waits until someone answers with ``respond(interaction_id, stead.Answer(value=...))``.
ask_user: Tool = tool(name="ask_user", recovery="safe")(_ask_user)
ask_user.is_question = True
