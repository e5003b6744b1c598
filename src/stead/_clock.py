"""The clock every timestamp goes through, so tests control time with one object."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

#: Seconds an event loop's timer may fire before its time (the loop runs the timers due within
#: its clock's resolution): what waits on a timer counts as due this much early.
TIMER_EARLY = 0.0001


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """The storage form of a timestamp: ISO 8601 UTC with milliseconds (truncated), as
    ``isoformat(timespec="milliseconds")`` writes it; formatted here, in half its time."""
    m = moment.astimezone(UTC)
    # %-formatting: about 0.7 µs, where format() and an f-string take 1.2 and 1.6.
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03d+00:00" % (  # noqa: UP031
        m.year,
        m.month,
        m.day,
        m.hour,
        m.minute,
        m.second,
        m.microsecond // 1000,
    )
