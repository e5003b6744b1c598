"""How an execution stops short of an outcome. Internal: raised by the journal and the loop,
caught by the runtime, never seen by users."""

from __future__ import annotations


class Stop(Exception):
    """End this execution and record why."""

    def __init__(self, reason: str, *, operation: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.operation = operation


class Blocked(Stop):
    """The run needs a person: it goes to ``needs_attention``."""


class Failed(Stop):
    """The run fails."""
