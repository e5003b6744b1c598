"""How an execution stops short of an outcome. Internal: raised through the run context and the
definition's code, caught by the executor, never seen by users.

They are ``BaseException`` subclasses, as DBOS does it, so the ``except Exception:`` that user code
(a tool, a task) writes around a durable call cannot swallow a suspension.
"""

from __future__ import annotations

from datetime import datetime


class Stop(BaseException):
    """End this execution and record why."""

    def __init__(self, reason: str, *, operation: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.operation = operation


class Waiting(Stop):
    """The run waits: for a person (``interactions``), a time (``until``), the next signal of
    a name (``signals``: how many of each it has taken) or child runs reaching one of the
    statuses given for each (``children``). It goes to ``waiting`` unless what it waits for
    came meanwhile."""

    def __init__(
        self,
        reason: str,
        *,
        operation: str | None = None,
        interactions: bool = True,
        until: datetime | None = None,
        signals: dict[str, int] | None = None,
        children: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(reason, operation=operation)
        self.interactions = interactions
        self.until = until
        self.signals = signals or {}
        self.children = children or {}


class RetryLater(Stop):
    """The model call failed retryably: the run goes to ``retry_wait`` for ``delay`` seconds."""

    def __init__(self, reason: str, *, operation: str, delay: float, attempt: int) -> None:
        super().__init__(reason, operation=operation)
        self.delay = delay
        self.attempt = attempt


class NeedsAttention(Stop):
    """The run needs a person: it goes to ``needs_attention``."""


class Failed(Stop):
    """The run fails; ``kind`` types the reason (``max_turns``, ``budget``, ``model``,
    ``task``...); ``traceback`` is kept with the run's error when given."""

    def __init__(
        self,
        reason: str,
        *,
        operation: str | None = None,
        kind: str = "error",
        traceback: str | None = None,
    ) -> None:
        super().__init__(reason, operation=operation)
        self.kind = kind
        self.traceback = traceback


class Handoff(Stop):
    """This worker is draining: the run stops at a journal boundary, still ``running``, and
    any worker continues it from its journal."""
