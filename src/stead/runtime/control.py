"""How an execution stops short of an outcome. Internal: raised through the run context and the
definition's code, caught by the executor, never seen by users.

They are ``BaseException`` subclasses, as DBOS does it, so the ``except Exception:`` that user code
(a tool, a task) writes around a durable call cannot swallow a suspension.
"""

from __future__ import annotations


class Stop(BaseException):
    """End this execution and record why."""

    def __init__(self, reason: str, *, operation: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.operation = operation


class Waiting(Stop):
    """The run waits for a person (interactions): it goes to ``waiting``."""


class RetryLater(Stop):
    """The model call failed retryably: the run goes to ``retry_wait`` for ``delay`` seconds."""

    def __init__(self, reason: str, *, operation: str, delay: float, attempt: int) -> None:
        super().__init__(reason, operation=operation)
        self.delay = delay
        self.attempt = attempt


class NeedsAttention(Stop):
    """The run needs a person: it goes to ``needs_attention``."""


class Failed(Stop):
    """The run fails; ``kind`` types the reason (``max_turns``, ``budget``, ``model``...)."""

    def __init__(self, reason: str, *, operation: str | None = None, kind: str = "error") -> None:
        super().__init__(reason, operation=operation)
        self.kind = kind


class Handoff(Stop):
    """This worker is draining: the run stops at a journal boundary, still ``running``, and
    any worker continues it from its journal."""
