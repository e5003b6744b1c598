"""The SQLite store wakes the disk before a barrier flushes it (``stead.store.sqlite.disk``):
when a flush is coming after a pause, the writer first has the kernel read a block of the owner's
lock file back from the disk, not waiting for it; nothing else changes, and where that is refused
barriers flush as before."""

from __future__ import annotations

import errno
import os
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
def seen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
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
    db: str, seen: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that flushed within ``wake_after`` is at work: no read is sent (beyond the one
    when the store opens)."""
    monkeypatch.setattr(Writer, "wake_after", 3600.0)
    await _one_run(stead.SqliteStore(db))
    assert seen == ["wake", "flush", "flush"]


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
    db: str, monkeypatch: pytest.MonkeyPatch
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
