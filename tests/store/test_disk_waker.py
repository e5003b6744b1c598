"""The SQLite store wakes the disk before a barrier flushes it (``stead.store.sqlite.disk``):
when a barrier is queued after a pause, the flush thread reads a block of the database file past
the page cache while the loop commits; nothing else changes, and where direct reads are refused
barriers flush as before."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

import stead
from stead.store.sqlite import disk
from stead.store.sqlite.store import SqliteStore
from stead.store.sqlite.writer import Writer
from stead.testing import ScriptedModel


def _app() -> stead.App:
    return stead.App(agents=[stead.Agent(id="a", version="1", model=ScriptedModel(["ok"]))])


def _direct_reads(path: Path) -> bool:
    """Whether the file system under ``path`` takes direct reads at all."""
    path.write_bytes(b"\0" * disk.BLOCK)
    waker = disk.open_waker(str(path))
    if waker is None:
        return False
    waker.close()
    return True


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The store's flushes and the disk's wakes, in the order they ran, each with the thread
    that ran it."""
    seen: dict[str, list[str]] = {"flush": [], "wake": []}
    real_sync, real_wake = SqliteStore._sync_wal, disk.DiskWaker.wake

    def sync(store: SqliteStore) -> None:
        seen["flush"].append(threading.current_thread().name)
        real_sync(store)

    def wake(waker: disk.DiskWaker) -> None:
        seen["wake"].append(threading.current_thread().name)
        real_wake(waker)

    monkeypatch.setattr(SqliteStore, "_sync_wal", sync)
    monkeypatch.setattr(disk.DiskWaker, "wake", wake)
    return seen


async def _one_run(db: str, fsync: str = "barriers") -> None:
    async with await _app().open(stead.SqliteStore(db, fsync=fsync)) as runtime:  # type: ignore[arg-type]
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"


@pytest.mark.parametrize("fsync", ["barriers", "always"])
async def test_every_flush_after_a_pause_is_preceded_by_a_wake_on_the_flush_thread(
    db: str,
    fsync: str,
    tmp_path: Path,
    counted: dict[str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every moment a pause (``wake_after`` 0), each flush a run waits for — with
    ``barriers`` its submission and its end, with ``always`` every commit — had a wake sent
    ahead of it, from the writer's flush thread, not the loop; the commits between barriers
    (the model call's intent) wake nothing."""
    if not _direct_reads(tmp_path / "probe"):
        pytest.skip("this file system refuses O_DIRECT reads")
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    await _one_run(db, fsync)
    if fsync == "barriers":
        assert len(counted["flush"]) == len(counted["wake"]) == 2
    else:  # the submission, the model call's intent and its result, the end; with no pause
        # at all, two jobs of one commit each send a wake
        assert len(counted["flush"]) >= 3
        assert len(counted["wake"]) >= len(counted["flush"])
    assert all(name.startswith("stead-fsync:") for name in counted["wake"])


async def test_a_flush_right_behind_another_wakes_nothing(
    db: str, tmp_path: Path, counted: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that flushed within ``wake_after`` is at work: no read is sent."""
    if not _direct_reads(tmp_path / "probe"):
        pytest.skip("this file system refuses O_DIRECT reads")
    monkeypatch.setattr(Writer, "wake_after", 3600.0)
    await _one_run(db)
    assert len(counted["flush"]) == 2
    assert counted["wake"] == []


async def test_where_direct_reads_are_refused_barriers_flush_as_before(
    db: str, counted: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system (or platform) that refuses ``O_DIRECT``: the store opens without a waker
    and its runs are durable as ever."""

    def refused(fd: int, buffers: list[object], offset: int) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(Writer, "wake_after", 0.0)
    monkeypatch.setattr(disk.os, "preadv", refused)
    store = stead.SqliteStore(db)
    async with await _app().open(store) as runtime:
        assert store._waker is None
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"
    assert len(counted["flush"]) == 2
    assert counted["wake"] == []


async def test_a_read_refused_later_turns_waking_off_and_the_run_goes_on(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A direct read that fails after the one at open (the file moved to a file system that
    refuses them, say) closes the waker: later barriers send nothing, the run completes."""
    if not _direct_reads(tmp_path / "probe"):
        pytest.skip("this file system refuses O_DIRECT reads")
    monkeypatch.setattr(Writer, "wake_after", 0.0)
    reads: list[int] = []
    real = os.preadv

    def once_then_refused(fd: int, buffers: list[object], offset: int) -> int:
        reads.append(fd)
        if len(reads) > 1:  # the read at open passes, the first wake is refused
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, buffers, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(disk.os, "preadv", once_then_refused)
    store = stead.SqliteStore(db)
    async with await _app().open(store) as runtime:
        waker = store._waker
        assert waker is not None
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"
    assert len(reads) == 2  # the end's barrier found waking off
    assert waker._fd == -1


def test_the_waker_reads_the_files_first_block_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "file"
    if not _direct_reads(path):
        pytest.skip("this file system refuses O_DIRECT reads")
    path.write_bytes(bytes(range(256)) * 64)
    before = path.read_bytes()
    waker = disk.DiskWaker(str(path))
    try:
        waker.wake()
        assert bytes(waker._buffer) == before[: disk.BLOCK]
    finally:
        waker.close()
    waker.close()  # closing twice is harmless
    waker.wake()  # and a closed waker reads nothing
    assert path.read_bytes() == before


def test_no_waker_for_a_file_that_cannot_be_opened(tmp_path: Path) -> None:
    assert disk.open_waker(str(tmp_path / "missing")) is None


async def test_an_in_memory_store_has_no_waker() -> None:
    store = stead.SqliteStore(":memory:")
    async with await _app().open(store) as runtime:
        assert store._waker is None
        run = await runtime.submit("a", session_id="s", request_id="r", prompt="go")
        assert (await run.result()).output == "ok"
