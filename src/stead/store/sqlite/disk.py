"""Waking the disk before a barrier flushes it.

On the virtual machines stead is measured on, and on disks that save power when left alone, the
requests that follow a pause in the disk's work are slow: after about a millisecond with nothing
asked of it, each of the next ones took 200-400 µs to complete instead of 15-35. A barrier's
``fdatasync`` of the write-ahead log is three such requests in a row (the log's new pages; its
inode, whose change time a write moves; the flush of the disk's cache), so a barrier that follows
a pause costs most of a millisecond more than the same flush right behind other work of the disk.
In an agent's run a pause before a barrier is the rule, not the exception: the run's own work
between two barriers (its model calls, its tools) does not touch the disk, since commits between
barriers are not flushed.

So when a barrier is queued and the store has not flushed for a while, the writer has its flush
thread read one block of the database file past the page cache (``O_DIRECT``) while the event loop
builds and commits the barrier's transaction: by the time the barrier's ``fdatasync`` starts, the
disk is at work again. The read changes nothing on disk and is not waited for. Where the platform
or the file system refuses direct reads (macOS, some file systems), nothing is read and barriers
flush as before.
"""

from __future__ import annotations

import contextlib
import mmap
import os

#: Bytes read: one block at the file's start, a multiple of any disk's logical block size up to
#: 4 KB, into a page-aligned buffer (both as ``O_DIRECT`` requires).
BLOCK = 4096


class DiskWaker:
    """Reads the first block of a file past the page cache, which sends the disk a request."""

    def __init__(self, path: str) -> None:
        """Open ``path`` for direct reads and read once: raises :class:`OSError` (or
        :class:`AttributeError` where the platform has no ``O_DIRECT``) if that is refused."""
        self._buffer = mmap.mmap(-1, BLOCK)
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
        except BaseException:
            self._buffer.close()
            raise
        try:
            os.preadv(self._fd, [self._buffer], 0)
        except BaseException:
            self.close()
            raise

    def wake(self) -> None:
        """On the flush thread: one direct read. A refusal (which the first read at open did
        not meet) turns waking off for good; barriers flush as before."""
        if self._fd < 0:
            return
        try:
            os.preadv(self._fd, [self._buffer], 0)
        except OSError:
            self.close()

    def close(self) -> None:
        """Close the file (after the flush thread has stopped)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        self._buffer.close()


def open_waker(path: str) -> DiskWaker | None:
    """A :class:`DiskWaker` for ``path``, or None where direct reads are refused."""
    with contextlib.suppress(OSError, AttributeError):
        return DiskWaker(path)
    return None
