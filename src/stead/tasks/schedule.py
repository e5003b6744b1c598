"""Schedules: a task submitted on a cron expression, exactly one run per slot.

A slot is a moment the expression names in the schedule's time zone (``0 9 * * MON-FRI`` in
``Europe/Lisbon``: 09:00 local time on weekdays, across daylight-saving changes). Its run is
submitted into the session ``schedule:<name>`` with the request id ``slot:<UTC time>``, so a
slot is submitted once however many times, runtimes or workers try: the same submission again
returns the same run. Slots missed while no runtime ran — since the schedule's newest run, or
since the schedule first ran in the database — follow ``catch_up``: ``latest`` submits the most
recent one, ``all`` every one in order, ``skip`` none (only slots less than a minute late still
run).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .._checks import require_id
from .._clock import iso
from ..errors import ValidationError, shown

__all__ = ["CATCH_UP", "Schedule", "slot_of"]

CatchUp = Literal["latest", "all", "skip"]
CATCH_UP: tuple[CatchUp, ...] = ("latest", "all", "skip")
#: How late a slot may be and still run under ``catch_up="skip"``.
ON_TIME = timedelta(seconds=60)
#: Missed slots looked at after downtime, at most (older ones are not submitted).
MAX_CATCH_UP = 1000


@dataclass(frozen=True, slots=True)
class Schedule:
    """Submit task ``task`` with ``input`` at every slot of ``cron`` in ``timezone``."""

    name: str
    cron: str
    task: str
    input: Any = None
    timezone: str = "UTC"
    catch_up: CatchUp = "latest"

    def __post_init__(self) -> None:
        require_id("schedule name", self.name)
        where = f"schedule {self.name!r}"
        require_id(f"{where} task", self.task)
        if not isinstance(self.cron, str) or not self.cron.strip():
            raise ValidationError(
                f"{where}: cron must be a cron expression, got {shown(self.cron)}"
            )
        try:
            zone = ZoneInfo(self.timezone) if isinstance(self.timezone, str) else None
        except (ZoneInfoNotFoundError, ValueError):
            zone = None
        if zone is None:
            raise ValidationError(
                f"{where}: unknown time zone {shown(self.timezone)}; use an IANA name such as "
                "'Europe/Lisbon' or 'UTC'"
            )
        try:
            CronSim(self.cron, datetime(2000, 1, 1, tzinfo=zone))
        except CronSimError as exc:
            raise ValidationError(
                f"{where}: {self.cron!r} is not a valid cron expression ({exc}); write five "
                "fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * MON-FRI'"
            ) from None
        if self.catch_up not in CATCH_UP:
            raise ValidationError(
                f"{where}: catch_up must be one of {', '.join(CATCH_UP)}, got "
                f"{shown(self.catch_up)}"
            )

    @property
    def session_id(self) -> str:
        return f"schedule:{self.name}"

    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def slots(self, after: datetime) -> Iterator[datetime]:
        """The slots strictly after ``after``, in order (timezone-aware)."""
        return iter(CronSim(self.cron, after.astimezone(self._zone())))

    def next_slot(self, after: datetime) -> datetime:
        return next(self.slots(after))

    def due(self, last: datetime, now: datetime) -> list[datetime]:
        """The slots after ``last`` up to ``now`` to submit, by ``catch_up``."""
        missed: list[datetime] = []
        for slot in self.slots(last):
            if slot > now:
                break
            missed.append(slot)
            if len(missed) > MAX_CATCH_UP:
                missed.pop(0)
        if not missed or self.catch_up == "all":
            return missed
        if self.catch_up == "latest":
            return missed[-1:]
        return [slot for slot in missed if now - slot <= ON_TIME]


def request_of(slot: datetime) -> str:
    """The request id of a slot's run."""
    return f"slot:{iso(slot)}"


def slot_of(request_id: str) -> datetime | None:
    """The slot of a schedule run's request id (``None``: not a slot's)."""
    if not request_id.startswith("slot:"):
        return None
    try:
        return datetime.fromisoformat(request_id.removeprefix("slot:"))
    except ValueError:
        return None
