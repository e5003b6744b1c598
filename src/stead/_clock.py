"""The clock every timestamp goes through, so tests control time with one object."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """The storage form of a timestamp: ISO 8601 UTC with milliseconds."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")
