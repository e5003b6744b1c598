"""The SQLite store wakes the disk before a barrier flushes it (``stead.store.sqlite.disk``):
when a flush is coming after a pause, the writer first has the kernel read a block of the owner's
lock file back from the disk, not waiting for it, where its judge finds that this pays; nothing
else changes, and where that is refused barriers flush as before."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import pytest

import stead
from stead.store.sqlite import disk
from stead.store.sqlite.store import SqliteStore
from stead.store.sqlite.writer import Writer
from stead.testing import ScriptedModel

needs_fadvise = pytest.mark.skipif(
    not hasattr(os, "posix_fadvise"), reason="the platform has no posix_fadvise"
)


def _app() -> stead.App:
    return stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))])


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, float]]:
    """Every judge wakes the disk when asked (it would decide by the times it has seen); what
    the writers tell the judges: (woken, seconds) for each flush that followed a pause."""
    told: list[tuple[bool, float]] = []
    monkeypatch.setattr(disk.WakeJudge, "choose", lambda judge: True)
    monkeypatch.setattr(disk.WakeJudge, "learn", lambda judge, *time: told.append(time))
    return told


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch, judged: list[tuple[bool, float]]) -> list[str]:
    """The store's flushes and the disk's wakes, in the order they happened."""
    order: list[str] = []
    real_sync, real_wake = SqliteStore._sync_wal, disk.DiskWaker.wake

    def sync(store: SqliteStore) -> None:
        order.append("flush")
        real_sync(store)

    def wake(waker: disk.DiskWaker) -> None:
        order.append("wake")
        real_wake(waker)

    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    monkeypatch.setattr(disk.DiskWaker, "wake", wake)
    return order


async def _one_run(store: SqliteStore) -> None:
    async with await _app().open(store) as runtime:
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"


@needs_fadvise
async def test_each_barrier_after_a_pause_wakes_the_disk_before_its_flush(
    db: str, seen: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every moment a pause (``wake_after`` 0): the store wakes the disk when it opens,
    then each of the run's two barriers (its submission, its end) wakes it before it flushes;
    the commit between them (the model call's intent) neither wakes nor flushes."""
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    await _one_run(stead.SqliteStore(db))
    assert seen == ["wake", "wake", "flush", "wake", "flush"]


@needs_fadvise
async def test_the_judge_hears_how_long_each_barrier_after_a_pause_took_to_flush(
    db: str, seen: list[str], judged: list[tuple[bool, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of the two barriers that followed a pause is reported to the device's judge: woken,
    and the time its flush took, with the wake's own."""
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    await _one_run(stead.SqliteStore(db))
    assert [woken for woken, _ in judged] == [True, True]
    assert all(0 < seconds < 5 for _, seconds in judged)


@needs_fadvise
async def test_a_judge_that_finds_waking_slower_sends_no_read_before_a_barrier(
    db: str, seen: list[str], judged: list[tuple[bool, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where waking has not paid, the barriers flush without it (the store still wakes the disk
    once as it opens, which shows the kernel takes the read), and the judge hears of both."""
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    monkeypatch.setattr(disk.WakeJudge, "choose", lambda judge: False)
    await _one_run(stead.SqliteStore(db))
    assert seen == ["wake", "flush", "flush"]
    assert [woken for woken, _ in judged] == [False, False]


@needs_fadvise
async def test_with_fsync_always_every_commit_after_a_pause_wakes_the_disk_first(
    db: str, seen: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    await _one_run(stead.SqliteStore(db, fsync="always"))
    flushes = [i for i, what in enumerate(seen) if what == "flush"]
    assert len(flushes) >= 3  # the submission, the model call's intent and result, the end
    assert all(seen[i - 1] == "wake" for i in flushes)


@needs_fadvise
async def test_a_flush_right_behind_another_wakes_nothing(
    db: str, seen: list[str], judged: list[tuple[bool, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that flushed within ``wake_after`` is at work: no read is sent (beyond the one
    when the store opens)."""
    monkeypatch.setattr(Writer, "wake_after", 3600.0)
    await _one_run(stead.SqliteStore(db))
    assert seen == ["wake", "flush", "flush"]
    assert judged == []  # no pause, nothing decided


@needs_fadvise
async def test_the_lock_file_gets_one_block_of_zeros_and_keeps_it(db: str) -> None:
    """What the wake reads: one block of the lock file, written once; an existing lock file of
    an older stead (empty) gets it when a runtime first opens the database."""
    lock = Path(f"{db}-lock")
    await _one_run(stead.SqliteStore(db))
    assert lock.read_bytes() == bytes(disk.BLOCK)
    lock.write_bytes(b"")
    async with await _app().open(stead.SqliteStore(db)):
        assert lock.read_bytes() == bytes(disk.BLOCK)


async def test_where_the_kernel_refuses_barriers_flush_as_before(
    db: str, seen: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A platform or file system that refuses ``posix_fadvise``: the store opens without a
    waker, and its runs are durable as ever."""

    def refused(fd: int, offset: int, length: int, advice: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(Writer, "wake_after", 0.0)
    monkeypatch.setattr(disk.os, "posix_fadvise", refused, raising=False)
    store = stead.SqliteStore(db)
    async with await _app().open(store) as runtime:
        assert store._waker is None
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"
    assert seen == ["wake", "flush", "flush"]  # the one tried at open, refused


@needs_fadvise
async def test_a_wake_refused_later_turns_waking_off_and_the_run_goes_on(
    db: str, judged: list[tuple[bool, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wake the kernel refuses after the one at open: later barriers send nothing, and the
    run completes."""
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    calls: list[int] = []
    real = os.posix_fadvise

    def once_then_refused(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append(advice)
        if len(calls) > 2:  # the wake at open (two calls) passes, the next is refused
            raise OSError(errno.EIO, "Input/output error")
        real(fd, offset, length, advice)

    monkeypatch.setattr(disk.os, "posix_fadvise", once_then_refused)
    await _one_run(stead.SqliteStore(db))
    assert len(calls) == 3  # the end's barrier found waking off


async def test_an_in_memory_store_has_no_waker() -> None:
    store = stead.SqliteStore(":memory:")
    async with await _app().open(store) as runtime:
        assert store._waker is None
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"


@needs_fadvise
@pytest.mark.parametrize(
    ("woken_s", "unwoken_s", "wakes"),
    [(0.0002, 0.002, True), (0.002, 0.0002, False)],
    ids=["a-disk-that-sleeps", "a-disk-the-wake-slows"],
)
async def test_the_store_learns_whether_waking_its_disk_pays(
    db: str, monkeypatch: pytest.MonkeyPatch, woken_s: float, unwoken_s: float, wakes: bool
) -> None:
    """Through the writer, end to end: flushes that take 2 ms unwoken and 0.2 ms woken (or the
    other way round) are judged after the first turns, and from then on every barrier after a
    pause is woken (or not) but the one each EXPLORE decisions that tries the other way."""
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    judge = disk.WakeJudge()
    monkeypatch.setattr(disk, "judge_for", lambda fd: judge)
    decisions: list[bool] = []
    real_choose, real_sync = disk.WakeJudge.choose, SqliteStore._sync_wal

    def choose(self: disk.WakeJudge) -> bool:
        decisions.append(real_choose(self))
        return decisions[-1]

    def sync(store: SqliteStore) -> None:
        time.sleep(woken_s if decisions and decisions[-1] else unwoken_s)
        real_sync(store)

    monkeypatch.setattr(disk.WakeJudge, "choose", choose)
    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    async with await _app().open(stead.SqliteStore(db)) as runtime:
        for n in range(20):  # two barriers a run
            run = await runtime.submit("a", session_id=f"s{n}", request_id="r", prompt="go")
            assert (await run.result()).output == "ok"
    judged = decisions[2 * disk.WakeJudge.FIRST :]
    other = [n for n, woken in enumerate(decisions, start=1) if n > 12 and woken != wakes]
    assert len(decisions) == 40 and len(judged) == 28
    assert other == [disk.WakeJudge.EXPLORE]


# -- the judge ---------------------------------------------------------------------------------


def _taught(woken_s: float, skipped_s: float) -> disk.WakeJudge:
    judge = disk.WakeJudge()
    for _ in range(disk.WakeJudge.FIRST):
        judge.learn(True, woken_s)
        judge.learn(False, skipped_s)
    return judge


def _choices(judge: disk.WakeJudge, n: int) -> list[bool]:
    return [judge.choose() for _ in range(n)]


def test_the_judge_takes_both_ways_in_turn_until_it_has_times_for_each() -> None:
    """Two by two, so that barriers of two kinds taking turns (a submission, a run's end) are
    each seen both ways; one way's times alone decide nothing."""
    judge = disk.WakeJudge()
    for _ in range(disk.WakeJudge.FIRST):
        judge.learn(True, 0.0003)
    assert _choices(judge, 8) == [True, False, False, True, True, False, False, True]


def test_the_judge_wakes_a_disk_that_flushes_faster_woken() -> None:
    """A disk that sleeps (0.9 ms a flush unwoken, 0.3 woken): woken, but for every
    EXPLORE-th decision, which tries the other way."""
    judge = _taught(woken_s=0.0003, skipped_s=0.0009)
    choices = _choices(judge, 2 * disk.WakeJudge.EXPLORE)
    skipped = [n + 1 for n, woken in enumerate(choices) if not woken]
    assert skipped == [disk.WakeJudge.EXPLORE, 2 * disk.WakeJudge.EXPLORE]


@pytest.mark.parametrize("woken_s", [0.00065, 0.0006])
def test_the_judge_leaves_a_disk_alone_where_waking_is_not_clearly_faster(woken_s: float) -> None:
    """No faster, or faster by less than MARGIN of a flush's time (which is less than a wake
    costs the loop beyond it): not woken, but for every EXPLORE-th decision."""
    judge = _taught(woken_s=woken_s, skipped_s=0.00064)
    choices = _choices(judge, 2 * disk.WakeJudge.EXPLORE)
    woken = [n + 1 for n, woke in enumerate(choices) if woke]
    assert woken == [disk.WakeJudge.EXPLORE, 2 * disk.WakeJudge.EXPLORE]


def test_the_judge_changes_its_mind_when_the_disk_changes() -> None:
    """Only the last WINDOW times of each way count: a disk that stops sleeping (its flushes
    now take less unwoken) is left alone once the new times outnumber the old."""
    judge = _taught(woken_s=0.0003, skipped_s=0.0009)
    assert judge.choose()
    for _ in range(disk.WakeJudge.WINDOW):
        judge.learn(True, 0.0004)
        judge.learn(False, 0.0003)
    assert _choices(judge, 3) == [False, False, False]


def test_one_judge_per_device_in_a_process(tmp_path: Path) -> None:
    """What one store learned about a disk, the next store opened on it starts from."""
    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT) for name in ("a", "b")]
    try:
        assert disk.judge_for(fds[0]) is disk.judge_for(fds[1])
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the platform has no fork")
def test_a_forked_child_judges_afresh(tmp_path: Path) -> None:
    """A child forked while another thread of the parent holds a judge's lock still decides
    (its judges are its own, their locks free)."""
    fd = os.open(tmp_path / "a", os.O_RDWR | os.O_CREAT)
    try:
        judge = disk.judge_for(fd)
        with judge._lock:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                fresh = disk.judge_for(fd)
                os._exit(0 if fresh is not judge and fresh.choose() in (True, False) else 1)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the parent's judge's lock")
        assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        os.close(fd)
