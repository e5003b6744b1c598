"""Waking the disk before a barrier flushes it.

On the virtual machines stead is measured on, the requests that follow a pause in the disk's work
are slow: after about a millisecond with nothing asked of it, each of the next ones took 200-400 µs
to complete instead of 15-35. A barrier's ``fdatasync`` of the write-ahead log was three such
requests in a row there (the log's new pages; its inode, whose modification time a write moves, on
a file system without a journal; the flush of the disk's cache), so a barrier that follows a pause
costs most of a millisecond more than the same flush right behind other work of the disk. In an
agent's run a pause before a barrier is the rule, not the exception: the run's own work between two
barriers (its model calls, its tools) does not touch the disk, since the commits between barriers
are not flushed.

So when a barrier is queued and the store has not flushed for a while, the writer first asks the
kernel to read one block of the owner's lock file from the disk: the block is dropped from the
page cache and read back ahead (``posix_fadvise``), which returns at once and sends the disk a
read while the event loop builds and commits the barrier's transaction. By the time the barrier's
``fdatasync`` starts, the disk is at work again. The lock file holds nothing else (its ``flock`` is
what counts), so the read costs SQLite nothing. Where the platform has no ``posix_fadvise``
(macOS), or refuses it, nothing is read and barriers flush as before.
"""

from __future__ import annotations

import os

#: Bytes of the lock file read: one block, written (and flushed) once when a runtime first opens
#: the database, so that there is something on the disk to read.
BLOCK = 4096


class DiskWaker:
    """Sends the disk a read of the first block of a file the store owns."""

    def __init__(self, fd: int) -> None:
        """Give the file at ``fd`` (the owner's lock file, open for writing) one block on disk
        and wake once: raises :class:`OSError` if that is refused."""
        self._fd = fd
        if os.fstat(fd).st_size < BLOCK:
            os.pwrite(fd, bytes(BLOCK), 0)
            os.fdatasync(fd)  # a block still to be written has nothing on disk to read
        self.wake()

    def wake(self) -> None:
        """Drop the block from the page cache and have the kernel read it back: one read sent to
        the disk, not waited for (about 16 µs on the event loop, on the machine measured)."""
        os.posix_fadvise(self._fd, 0, BLOCK, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(self._fd, 0, BLOCK, os.POSIX_FADV_WILLNEED)


def open_waker(fd: int) -> DiskWaker | None:
    """A :class:`DiskWaker` for the lock file at ``fd``, or None where that is refused."""
    if not hasattr(os, "posix_fadvise"):
        return None
    try:
        return DiskWaker(fd)
    except OSError:
        return None
