"""Schedules: one run per slot, catch-up after downtime by policy, bad definitions refused —
on SQLite and on PostgreSQL, on a fake clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import stead
from stead.testing import FakeClock

from ._journal import open_store

START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # a Monday


@pytest.fixture
def db(any_db: object) -> object:
    return any_db


@stead.task(name="report")
async def report(ctx: stead.TaskContext, region: str) -> str:
    return f"report for {region}"


def app_with(catch_up: str, cron: str = "0 9 * * *") -> stead.App:
    return stead.App(
        tasks=[report],
        schedules=[
            stead.Schedule(
                "daily",
                cron=cron,
                task="report",
                input="emea",
                catch_up=catch_up,  # type: ignore[arg-type]
            )
        ],
    )


async def slots(runtime: stead.Runtime, count: int, timeout: float = 10.0) -> list[str]:
    """The request ids (slots) of the schedule's runs once there are ``count``, oldest first;
    each run completed."""
    async with asyncio.timeout(timeout):
        while True:
            runs = (await runtime.list_runs(session_id="schedule:daily")).runs
            if len(runs) >= count:
                for run in runs:
                    await runtime.get_run(run.id).result(timeout=timeout)
                return [run.request_id for run in reversed(runs)]
            await asyncio.sleep(0.02)


async def test_a_schedule_submits_one_run_per_slot(db: object) -> None:
    clock = FakeClock(START)
    app = app_with("latest")
    async with await app.open(open_store(db, clock=clock)) as runtime:
        await asyncio.sleep(0.1)
        assert (await runtime.list_runs()).runs == []  # 08:00: nothing due yet
        clock.advance(hours=1)
        assert await slots(runtime, 1) == ["slot:2026-11-30T09:00:00.000+00:00"]
        outcome = await runtime.get_run(
            (await runtime.list_runs(session_id="schedule:daily")).runs[0].id
        ).result()
        assert outcome.output == "report for emea"
        clock.advance(minutes=30)
        await asyncio.sleep(0.1)
        assert len((await runtime.list_runs()).runs) == 1
    # Restarted within the same day: the slot is not submitted again.
    async with await app.open(open_store(db, clock=clock)) as runtime:
        await asyncio.sleep(0.2)
        assert len((await runtime.list_runs()).runs) == 1


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("latest", ["2026-11-30T09", "2026-12-02T09"]),
        ("all", ["2026-11-30T09", "2026-12-01T09", "2026-12-02T09"]),
        ("skip", ["2026-11-30T09", "2026-12-03T09"]),
    ],
)
async def test_missed_slots_after_downtime_follow_the_catch_up_policy(
    db: object, policy: str, expected: list[str]
) -> None:
    clock = FakeClock(START)
    app = app_with(policy)
    async with await app.open(open_store(db, clock=clock)) as runtime:
        clock.advance(hours=1)
        await slots(runtime, 1)
    clock.advance(days=2, hours=1)  # down from Monday 09:00 until Wednesday 10:00
    async with await app.open(open_store(db, clock=clock)) as runtime:
        if policy == "skip":
            await asyncio.sleep(0.2)
            assert len((await runtime.list_runs()).runs) == 1
            clock.advance(hours=23)  # Thursday 09:00: on time again
        found = await slots(runtime, len(expected))
        await asyncio.sleep(0.1)
        assert len((await runtime.list_runs()).runs) == len(expected)
    assert [s.removeprefix("slot:")[:13] for s in found] == expected


async def test_a_schedule_follows_its_time_zone() -> None:
    schedule = stead.Schedule(
        "lisbon", cron="0 9 * * MON-FRI", task="report", timezone="Europe/Lisbon"
    )
    friday = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    assert schedule.next_slot(friday) == datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # Monday
    summer = datetime(2026, 7, 1, 0, 0, tzinfo=UTC)
    assert schedule.next_slot(summer).astimezone(UTC) == datetime(2026, 7, 1, 8, 0, tzinfo=UTC)


def test_bad_schedules_are_refused_when_the_app_is_made() -> None:
    with pytest.raises(stead.ValidationError, match="not a valid cron expression"):
        stead.App(tasks=[report], schedules=[stead.Schedule("x", cron="0 9 * *", task="report")])
    with pytest.raises(stead.ValidationError, match="unknown time zone 'Mars/Olympus'"):
        stead.App(
            tasks=[report],
            schedules=[
                stead.Schedule("x", cron="0 9 * * *", task="report", timezone="Mars/Olympus")
            ],
        )
    with pytest.raises(stead.ValidationError, match="catch_up must be one of"):
        stead.Schedule("x", cron="0 9 * * *", task="report", catch_up="some")  # type: ignore[arg-type]
    with pytest.raises(stead.NotFoundError, match="unknown task 'nope'"):
        stead.App(tasks=[report], schedules=[stead.Schedule("x", cron="0 9 * * *", task="nope")])
    with pytest.raises(stead.ValidationError, match="schedule 'x': the input of task 'report'"):
        stead.App(
            tasks=[report],
            schedules=[stead.Schedule("x", cron="0 9 * * *", task="report", input={"a": 1})],
        )
    with pytest.raises(stead.ValidationError, match="two schedules are named 'x'"):
        stead.App(
            tasks=[report],
            schedules=[
                stead.Schedule("x", cron="0 9 * * *", task="report", input="a"),
                stead.Schedule("x", cron="0 10 * * *", task="report", input="b"),
            ],
        )


def test_slot_requests_round_trip() -> None:
    from stead.tasks.schedule import request_of, slot_of

    slot = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert slot_of(request_of(slot)) == slot
    assert slot_of("r1") is None
    assert timedelta(0) == slot - slot


async def test_workers_racing_on_a_slot_submit_it_once(db: object) -> None:
    from ._journal import PgJournal

    if not isinstance(db, PgJournal):
        pytest.skip("one SQLite file has one owner; workers share PostgreSQL")
    clock = FakeClock(START)
    app = app_with("all")
    async with (
        await app.open(open_store(db, clock=clock)) as one,
        await app.open(open_store(db, clock=clock)) as two,
    ):
        await asyncio.sleep(0.1)
        clock.advance(hours=1)
        assert await slots(one, 1) == ["slot:2026-11-30T09:00:00.000+00:00"]
        await asyncio.sleep(0.3)
        assert len((await two.list_runs()).runs) == 1


async def test_a_schedule_that_never_ran_a_slot_catches_up_from_its_first_start(
    db: object,
) -> None:
    clock = FakeClock(START)  # Monday 08:00
    app = app_with("all")
    async with await app.open(open_store(db, clock=clock)) as runtime:
        await asyncio.sleep(0.1)  # the schedule starts counting here
    clock.advance(minutes=30)
    async with await app.open(open_store(db, clock=clock)) as runtime:
        await asyncio.sleep(0.1)  # a restart before its first slot
    clock.advance(days=1, hours=2)  # down across Monday's and Tuesday's 09:00
    async with await app.open(open_store(db, clock=clock)) as runtime:
        found = await slots(runtime, 2)
    assert [s.removeprefix("slot:")[:13] for s in found] == ["2026-11-30T09", "2026-12-01T09"]
