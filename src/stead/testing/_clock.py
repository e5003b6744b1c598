from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ..errors import ValidationError

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told: pass it to ``SqliteStore(..., clock=clock)`` and call
    :meth:`advance` to make back-off waits and timers come due at once."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValidationError("FakeClock(start) needs a timezone-aware datetime")
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float = 0.0, **delta: float) -> None:
        """Move time forward (``advance(30)`` or ``advance(minutes=5)``) and wake the runtime."""
        step = timedelta(seconds=seconds, **delta)
        if step < timedelta(0):
            raise ValidationError("a FakeClock only moves forward")
        self._now += step
        for listener in list(self._listeners):
            listener()

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Called by the runtime so that :meth:`advance` wakes its scheduler."""
        self._listeners.append(callback)
