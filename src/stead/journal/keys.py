"""Deterministic keys: how a run names its operations, interactions and history nodes.

A key is the same every time a run replays (DESIGN §3), so a committed result is found again by
it. Keys are built only here.
"""

from __future__ import annotations

from .._json import digest_text

__all__ = [
    "MAX_POSITION",
    "approval_key",
    "budget_key",
    "child_run_id",
    "child_session",
    "history_node",
    "interaction_id",
    "model_key",
    "model_turn",
    "numbered",
    "operation_id",
    "scoped",
    "tool_key",
]


#: The highest position an operation takes in its run (they count from 1): a store keys an
#: operation's row by its run and position in one 64-bit integer, 32 bits for the position.
MAX_POSITION = (1 << 32) - 1


def model_key(turn: int) -> str:
    return f"model:{turn}"


def model_turn(key: str) -> int:
    """The turn of a :func:`model_key`."""
    return int(key.split(":", 1)[1])


def tool_key(turn: int, call_id: str) -> str:
    return f"tool:{turn}:{call_id}"


def approval_key(turn: int, call_id: str) -> str:
    return f"approval:{turn}:{call_id}"


def budget_key(turn: int) -> str:
    return f"budget:{turn}"


def operation_id(run_id: str, key: str) -> str:
    """The id handed to external services as an idempotency key: ``"<run_id>/<key>"``."""
    return f"{run_id}/{key}"


def interaction_id(run_id: str, key: str) -> str:
    """Stable across restarts: the same gated call always has the same interaction id."""
    return "int_" + digest_text(f"{run_id}/{key}")[:24]


def history_node(previous: str | None, message_digest: str) -> str:
    """A node of the content-addressed history chain: a message after a prefix."""
    return digest_text(f"{previous or ''}:{message_digest}")


def numbered(name: str, count: int) -> str:
    """A task's step name on its ``count``-th use in one scope: ``fetch``, ``fetch#2``, ..."""
    return name if count == 1 else f"{name}#{count}"


def scoped(scope: str, key: str) -> str:
    """A key inside a concurrent branch: ``gather/1/fetch``; the top scope is ``""``."""
    return f"{scope}/{key}" if scope else key


def child_run_id(parent_run_id: str, key: str) -> str:
    """The id of the child run a parent creates at ``key``: the same on every replay."""
    return "run_" + digest_text(f"{parent_run_id}/{key}")[:28]


def child_session(parent_session: str, parent_run_id: str, key: str) -> str:
    """A child run's own session, in its parent's session tree."""
    return f"{parent_session}/{parent_run_id}/{key}"
