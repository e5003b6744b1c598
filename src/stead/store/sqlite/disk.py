"""Waking the disk before a barrier flushes it, where that pays.

On some of the virtual machines stead is measured on, the requests that follow a pause in the
disk's work are slow: after about a millisecond with nothing asked of it, each of the next ones
took 200-400 µs to complete instead of 15-35. A barrier's ``fdatasync`` of the write-ahead log was
three such requests in a row there (the log's new pages; its inode, whose modification time a
write moves, on a file system without a journal; the flush of the disk's cache), so a barrier that
follows a pause costs most of a millisecond more than the same flush right behind other work of
the disk. In an agent's run a pause before a barrier is the rule, not the exception: the run's own
work between two barriers (its model calls, its tools) does not touch the disk, since the commits
between barriers are not flushed.

So when a barrier is queued and the store has not flushed for a while, the writer may first ask
the kernel to read one block of the owner's lock file from the disk: the block is dropped from the
page cache and read back ahead (``posix_fadvise``), which returns at once and sends the disk a
read while the event loop builds and commits the barrier's transaction. By the time the barrier's
``fdatasync`` starts, the disk is at work again. The lock file holds nothing else (its ``flock`` is
what counts), so the read costs SQLite nothing. Where the platform has no ``posix_fadvise``
(macOS), or refuses it, nothing is read and barriers flush as before.

Whether to send it is measured, not assumed (:class:`WakeJudge`). On another machine the disk
barely slept (an fdatasync after a 2 ms pause 328 µs, right behind another 278), sending the read
took 34 µs on the loop (a request to a virtual disk is an exit to the hypervisor), and 21-step runs
with the wake took 3% longer than without it, alternating in one process (161.4 against 155.9 µs
a step, 168.5 against 163.1), 58 µs a barrier. So the writer times each flush that follows a
pause, woken or not, with the wake's own time on the loop, and each device's judge keeps the
recent times of both ways and wakes the disk where waking has been clearly the faster. Only
clearly (:attr:`WakeJudge.MARGIN`): most of what a wake cost there is not in that time (the
disk's interrupts, the caches of the CPU), while where the disk sleeps a wake saves most of a
millisecond a barrier. The flush, not the barrier's whole way from its queueing: the work of the
transaction between differs from barrier to barrier (a submission's, a run's end) by more than
what is judged.
"""

from __future__ import annotations

import os
import threading
from collections import deque

#: Bytes of the lock file read: one block, written (and flushed) once when a runtime first opens
#: the database, so that there is something on the disk to read.
BLOCK = 4096


class WakeJudge:
    """Decides, barrier by barrier, whether waking a disk before its flush pays, from the time
    flushes after a pause took, woken (with the wake's own time) and not.

    Until each way has :attr:`FIRST` times, the two take turns, two by two (woken, not, not,
    woken, woken, ...: where barriers of two kinds alternate, each way sees both); then waking
    if the median of its recent times (the last :attr:`WINDOW`) is lower than that of not
    waking by :attr:`MARGIN` of it, else not, with every :attr:`EXPLORE`-th decision taking the
    other way, so that a disk whose behaviour changes is noticed. One judge per device in a
    process (:func:`judge_for`): what one store learns, the next store on the same disk starts
    from. Thread-safe: stores on several event loops may share one."""

    FIRST = 6
    WINDOW = 15
    EXPLORE = 32
    #: The share of an unwoken flush's time a wake must save: what it costs the loop beyond
    #: its own time and the flush's (the disk's interrupts, the CPU's caches).
    MARGIN = 0.1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Seconds a flush after a pause took (with the wake's): [not woken, woken].
        self._times: tuple[deque[float], deque[float]] = (
            deque(maxlen=self.WINDOW),
            deque(maxlen=self.WINDOW),
        )
        self._decisions = 0
        #: Whether waking has been clearly the faster: known once each way has FIRST times.
        self._wake: bool | None = None

    def choose(self) -> bool:
        """Whether to wake the disk before the flush that comes next."""
        with self._lock:
            n = self._decisions
            self._decisions += 1
            best = self._wake
            if best is None:
                return (n + n // 2) % 2 == 0
            return not best if self._decisions % self.EXPLORE == 0 else best

    def learn(self, woken: bool, seconds: float) -> None:
        """A flush after a pause, ``woken`` or not, took ``seconds`` (with the wake's own)."""
        with self._lock:
            self._times[woken].append(seconds)
            skipped, waking = self._times
            if len(skipped) >= self.FIRST and len(waking) >= self.FIRST:
                self._wake = _median(waking) < _median(skipped) * (1 - self.MARGIN)


def _median(times: deque[float]) -> float:
    """The middle time (the upper of the two middle ones of an even count)."""
    return sorted(times)[len(times) // 2]


_judges: dict[int, WakeJudge] = {}
_judges_lock = threading.Lock()


def _forget_judges() -> None:
    """In a forked child, judges of its own: a lock another thread of the parent held at the
    fork would stay held in the child."""
    global _judges_lock
    _judges.clear()
    _judges_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_judges)


def judge_for(fd: int) -> WakeJudge:
    """The process's judge for the device that holds the file at ``fd``."""
    device = os.fstat(fd).st_dev
    with _judges_lock:
        judge = _judges.get(device)
        if judge is None:
            judge = _judges[device] = WakeJudge()
        return judge


class DiskWaker:
    """Sends the disk a read of the first block of a file the store owns, when its judge says
    that pays."""

    def __init__(self, fd: int) -> None:
        """Give the file at ``fd`` (the owner's lock file, open for writing) one block on disk
        and wake once: raises :class:`OSError` if that is refused."""
        self._fd = fd
        self._judge = judge_for(fd)
        if os.fstat(fd).st_size < BLOCK:
            os.pwrite(fd, bytes(BLOCK), 0)
            os.fdatasync(fd)  # a block still to be written has nothing on disk to read
        self.wake()

    def wake(self) -> None:
        """Drop the block from the page cache and have the kernel read it back: one read sent to
        the disk, not waited for (16 µs on the event loop on one machine measured, 34 on
        another)."""
        os.posix_fadvise(self._fd, 0, BLOCK, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(self._fd, 0, BLOCK, os.POSIX_FADV_WILLNEED)

    def before_flush(self) -> bool:
        """A flush follows a pause: wake the disk if the judge says so; whether it was woken
        (for :meth:`flushed`). Raises :class:`OSError` if the kernel refuses the read."""
        woken = self._judge.choose()
        if woken:
            self.wake()
        return woken

    def flushed(self, woken: bool, seconds: float) -> None:
        """The flush after :meth:`before_flush` is done: it and the wake took ``seconds``."""
        self._judge.learn(woken, seconds)


def open_waker(fd: int) -> DiskWaker | None:
    """A :class:`DiskWaker` for the lock file at ``fd``, or None where that is refused."""
    if not hasattr(os, "posix_fadvise"):
        return None
    try:
        return DiskWaker(fd)
    except OSError:
        return None
