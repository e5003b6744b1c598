"""Test doubles for stead users: scripted and function models, and event folding.

Use them to test agents without a provider::

    model = ScriptedModel([[stead.ToolCall(name="lookup", arguments={"id": 1})], "done"])
"""

from __future__ import annotations

from ._clock import FakeClock
from ._events import fold_text
from ._models import FunctionModel, ScriptedModel, Turn
from .crash import crash_at, kill_self

__all__ = [
    "FakeClock",
    "FunctionModel",
    "ScriptedModel",
    "Turn",
    "crash_at",
    "fold_text",
    "kill_self",
]
