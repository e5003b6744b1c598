"""SQLite store: one file, zero servers, one live owner.

WAL journal, ``BEGIN IMMEDIATE`` transactions, a busy timeout and foreign keys. All writes go
through one writer that group-commits (see ``_writer``). Commits use ``synchronous=NORMAL`` —
durable against a process crash — and a batch holding a barrier is made durable by an fsync of
the WAL on the writer's flush thread, which flushes every commit before it too
(``fsync="always"`` makes every commit a barrier). WAL checkpoints run on their own thread and
connection, off the commit path.

Ownership is an exclusive ``flock`` on ``<path>-lock``, held for the runtime's life: the kernel
releases it when the process dies, however it dies, so a live owner is never taken over (not
from another pid namespace either) and a crashed one never blocks the next. It is a file of its
own because SQLite's locks on the database are POSIX locks, which the process loses on *every*
descriptor of that file as soon as any one of them is closed. At every barrier the path must
still name the database and write-ahead log this store writes, so a database that was deleted or
replaced under a running runtime fails closed instead of acknowledging work that no reopening
would find. On open, the schema must be exactly what stead's migrations create (no
foreign triggers or views), and ``trusted_schema`` is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import shlex
import socket
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..._clock import Clock, SystemClock
from ..._ids import boot_id, new_token
from ...errors import OwnershipError, SchemaVersionError, StorageError, ValidationError
from ...journal.commands import Command
from ...journal.protocol import Durability
from ...journal.records import Claim, Notice
from ..migrate import SCHEMA_VERSION, migrate, schema_version, verify_schema
from .client import ClientSide as _ClientSide
from .disk import DiskWaker, open_waker
from .tx import MAX_SEQUENCE_SQL, SqliteTx
from .writer import Writer

__all__ = ["SqliteStore"]

T = TypeVar("T")
FsyncMode = Literal["barriers", "always"]

#: Page size of a new database file (an existing one keeps its own). Journal rows are mostly
#: half a kilobyte to a few kilobytes (a response, a tool's result). A B-tree leaf holds only
#: whole rows, so with 4 KB pages rows of 1.3-2.5 KB leave a quarter to a half of each page
#: empty; with 1 KB pages a large row spills into overflow pages that are filled completely, so
#: the file follows the content (a 100-turn conversation with 1 KB payloads: 1.8x its content
#: instead of 2.7x), and a commit writes smaller index pages. SQLite's default until 3.12.
PAGE_SIZE = 1024

#: Bytes of the write-ahead log written ahead when a runtime opens the file: zeros past its end,
#: flushed once (:func:`_prefill_wal`). On ext4 an fdatasync after commits that grew the file
#: also commits the file system's journal (the new size, the blocks just allocated); after
#: commits that overwrote blocks written before, it flushes the data alone, which took about
#: two thirds of the time per barrier on the development machine. A file open for a while gets
#: this from SQLite itself, which starts the WAL over from its beginning after a checkpoint and
#: keeps its size; this gives it to a file just opened, for its first 256 KB of commits (about
#: 70 durable steps of an agent), at the cost of about half a millisecond when the file opens
#: (a megabyte cost 1.4 ms: more than the flushes of a short-lived process's few runs save).
WAL_PREFILL = 1 << 18

#: Flushes a file's data (and what reading it back needs) to disk. Where the platform has no
#: ``fdatasync`` (macOS), ``fsync``, which flushes its timestamps too.
_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)

#: Sequences reserved durably ahead of use, so events handed out between barriers never reuse
#: a number after an OS crash loses them (DESIGN §6).
SEQUENCE_RESERVATION = 10_000


#: Seconds an opening runtime tries the owner's lock before it refuses to be a second owner,
#: and how often. A client applying a command holds the lock for milliseconds, and clients
#: applying one command after another leave it free only for moments between them: tried
#: often, the lock is found free in one of them.
_LOCK_WAIT = 1.0
_LOCK_POLL = 0.005

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_NOTADB = 26


def _error_code(exc: sqlite3.Error) -> int:
    return int(getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF


def _is_busy(exc: BaseException) -> bool:
    """The database is locked by another connection: wait and try again."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = _error_code(exc)
    if code:
        return code in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "database is locked" in str(exc)


@dataclass(frozen=True, slots=True)
class OpenInfo:
    """What ownership acquisition found: whether the previous owner stopped uncleanly."""

    previous_owner_crashed: bool
    next_sequence: int


class SqliteStore:
    """A stead journal in one SQLite file (``":memory:"`` for tests).

    ``fsync="barriers"`` (default) flushes the disk before a ``manual`` or ``idempotent``
    operation runs, after its result, and before anything is acknowledged to a caller;
    ``fsync="always"`` flushes every commit.

    ``busy_timeout`` is how long (seconds) a write waits for a lock held by another process
    (the event loop keeps running meanwhile); past it the store fails with
    :class:`StorageError`.
    """

    #: The transaction class; a test can substitute a subclass that injects faults.
    tx_class: type[SqliteTx] = SqliteTx
    #: What the writer treats as a failure of the storage itself (it poisons the runtime).
    storage_errors: tuple[type[BaseException], ...] = (sqlite3.Error, OSError, MemoryError)
    #: One runtime owns the file: its runs need no claims (the owner token fences every commit).
    shared = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncMode = "barriers",
        busy_timeout: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        if fsync not in ("barriers", "always"):
            raise ValidationError(f"fsync must be 'barriers' or 'always', not {fsync!r}")
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, int | float)
            or not 0 <= busy_timeout < float("inf")
        ):
            raise ValidationError(
                f"busy_timeout must be a number of seconds >= 0, not {busy_timeout!r}"
            )
        text = os.fspath(path)
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("SqliteStore needs a file path (or ':memory:'), got a blank one")
        self.path = text
        self.memory = text == ":memory:"
        if not self.memory:
            parent = Path(text).expanduser().resolve().parent
            if not parent.is_dir():
                raise ValidationError(
                    f"cannot create the stead database {text!r}: folder "
                    f"{str(parent)!r} does not exist"
                )
        self.fsync: FsyncMode = fsync
        self.busy_timeout = float(busy_timeout)
        self.clock: Clock = clock or SystemClock()
        self._conn: sqlite3.Connection | None = None
        self._writer: Writer | None = None
        self._token: str | None = None
        self._checkpointer: _Checkpointer | None = None
        self._wal_fd: int | None = None
        self._waker: DiskWaker | None = None
        self._lock_fd: int | None = None
        self._identity: tuple[int, int] | None = None
        #: The WAL's, as opened for flushing (the file keeps its inode while the store is open:
        #: a checkpoint truncates it in place).
        self._wal_identity: tuple[int, int] | None = None
        self._next_sequence = 1
        self._reserved_through = 0
        self._reserving: int | None = None
        self._data_version = -1
        self._client: _ClientSide | None = None
        self.open_info: OpenInfo | None = None

    @property
    def cli_args(self) -> str:
        """The ``stead`` command's options that name this store (none for ``:memory:``)."""
        return "" if self.memory else f"--db {shlex.quote(self.path)}"

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r}, fsync={self.fsync!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # a new file only; see PAGE_SIZE
            mode = "wal" if self.memory else conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except BaseException:
            conn.close()
            raise
        if mode.lower() != "wal":
            conn.close()
            raise StorageError(
                f"could not switch {self.path!r} to WAL journal mode (got {mode!r}); is it "
                "read-only, or on a filesystem without shared memory support such as a network "
                "share?"
            )
        return conn

    def acquire(
        self,
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[Notice]], None],
        on_fatal: Callable[[StorageError], None],
    ) -> OpenInfo:
        """Open the file, migrate, take ownership and start the writer (blocking)."""
        if self._writer is not None:
            raise OwnershipError(
                f"{self!r} is already open in this process; use one Runtime per store"
            )
        lock_fd = None if self.memory else self._lock()
        try:
            try:
                conn = self._connect()
            except sqlite3.Error as exc:
                raise self._open_error("cannot open", exc) from exc
            try:
                info = self._acquire(conn)
            except sqlite3.Error as exc:
                conn.close()
                raise self._open_error("cannot take ownership of", exc) from exc
            except BaseException:
                conn.close()
                raise
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        self._lock_fd = lock_fd
        if not self.memory:
            found = os.stat(self.path)
            self._identity = (found.st_dev, found.st_ino)
            _prefill_wal(conn, f"{self.path}-wal")
        # Writes never wait inside SQLite for another process's lock (that would block the
        # event loop): the writer retries a busy database itself, up to busy_timeout.
        conn.execute("PRAGMA busy_timeout = 0")
        sync: Callable[[], None] | None = None
        if not self.memory:
            # Commits reach the WAL without an fsync (a process crash never loses them); the
            # writer makes them durable by an fsync of the WAL on its own thread.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._wal_fd = os.open(f"{self.path}-wal", os.O_RDONLY)
            wal = os.fstat(self._wal_fd)
            self._wal_identity = (wal.st_dev, wal.st_ino)
            sync = self._sync_wal
            if lock_fd is not None:
                self._waker = open_waker(lock_fd)
        self._conn = conn
        self._writer = Writer(
            self,
            loop,
            on_commit,
            on_fatal,
            sync=sync,
            always=self.fsync == "always",
            name=f"stead-fsync:{self.path}",
            waker=self._waker,
        )
        if not self.memory:
            self._checkpointer = _Checkpointer(self.path, self.busy_timeout)
        self.open_info = info
        return info

    def _open_error(self, what: str, exc: sqlite3.Error) -> StorageError:
        if _error_code(exc) == _SQLITE_NOTADB or "not a database" in str(exc):
            return StorageError(
                f"{self.path!r} is not a SQLite database (or is encrypted or damaged): {exc}; "
                "give stead a path of its own for a new database, or restore a backup"
            )
        if _is_busy(exc):
            return StorageError(
                f"{what} the stead database {self.path!r}: another process held it locked for "
                f"more than busy_timeout ({self.busy_timeout:g}s); stop it or raise busy_timeout"
            )
        return StorageError(
            f"{what} the stead database {self.path!r}: {exc}; check that the file and its "
            "folder are writable by this process and the disk has room"
        )

    @property
    def lock_path(self) -> str:
        """The file whose exclusive ``flock`` is the owner's lock (SQLite never opens it)."""
        return f"{self.path}-lock"

    def _open_lock(self) -> int:
        try:
            return os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(
                f"cannot open the lock file {self.lock_path!r} of the stead database "
                f"{self.path!r}: {exc.strerror}; the folder must be writable by this process "
                "(SQLite keeps its write-ahead log there too)"
            ) from exc

    def _lock(self) -> int:
        """Take the owner's lock: an exclusive ``flock`` on ``<path>-lock``, released by the
        kernel when this process dies. Returns its file descriptor."""
        fd = self._open_lock()
        try:
            deadline = time.monotonic() + _LOCK_WAIT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(_LOCK_POLL)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StorageError(
                    f"cannot lock the stead database {self.path!r}: {exc.strerror}; the "
                    "filesystem must support flock (a local disk does)"
                ) from exc
            raise OwnershipError(
                f"the stead database {self.path!r} is owned by a live runtime{self._owner()}; "
                "close that runtime (or use its inbox commands) and try again"
            ) from None
        return fd

    def _owner(self) -> str:
        """Who the owner row names (best effort, for the error message)."""
        with contextlib.suppress(sqlite3.Error, TypeError):
            conn = sqlite3.connect(
                f"{Path(self.path).resolve().as_uri()}?mode=ro", uri=True, timeout=1.0
            )
            try:
                row = conn.execute("SELECT owner_pid, owner_host FROM stead_meta").fetchone()
            finally:
                conn.close()
            if row is not None and row[0] is not None:
                return f": pid {row[0]} on host {row[1]!r}"
        return ""

    def _acquire(self, conn: sqlite3.Connection) -> OpenInfo:
        try:
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            raise OwnershipError(
                f"the stead database {self.path!r} is locked by another "
                f"process ({exc}); stop it and try again"
            ) from exc
        try:
            version = schema_version(conn)
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"the stead database {self.path!r} has schema version {version}, newer than "
                    f"this stead reads ({SCHEMA_VERSION}); upgrade stead, or restore a backup "
                    "made by this version"
                )
            migrate(conn, version)
            verify_schema(conn, self.path)
            if version == 0:
                conn.execute(
                    "INSERT INTO stead_meta (singleton, schema_version) VALUES (1, ?)",
                    (SCHEMA_VERSION,),
                )
            else:
                conn.execute("UPDATE stead_meta SET schema_version = ?", (SCHEMA_VERSION,))
            row = conn.execute(
                "SELECT owner_token, owner_pid, owner_host, owner_boot_id, "
                "sequence_reserved_through FROM stead_meta"
            ).fetchone()
            token, pid, host, previous_boot, reserved = row
            this_host, this_boot = socket.gethostname(), boot_id()
            crashed = False
            if token is not None:
                if host != this_host and not self.memory:
                    # A lock taken over a network filesystem may not reach the other host.
                    raise OwnershipError(
                        f"the stead database {self.path!r} is owned by pid {pid} on host "
                        f"{host!r}; stop that runtime first (a runtime on another host can't be "
                        "checked for liveness, so it is never replaced automatically)"
                    )
                # We hold the owner's lock, so whoever the row names is gone.
                crashed = True
            max_seq = conn.execute(MAX_SEQUENCE_SQL).fetchone()[0]
            if crashed and previous_boot != this_boot:
                # The machine rebooted since the crashed owner ran: events it handed out after
                # its last flush may be lost, so continue above everything it could have shown.
                next_sequence = max(max_seq, reserved) + 1
            else:
                next_sequence = max_seq + 1
            self._token = new_token()
            self._next_sequence = next_sequence
            self._reserved_through = next_sequence - 1 + SEQUENCE_RESERVATION
            conn.execute(
                "UPDATE stead_meta SET owner_token = ?, owner_pid = ?, owner_host = ?, "
                "owner_boot_id = ?, owner_since = ?, sequence_reserved_through = ?",
                (
                    self._token,
                    os.getpid(),
                    this_host,
                    this_boot,
                    self.clock.now().isoformat(),
                    self._reserved_through,
                ),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return OpenInfo(previous_owner_crashed=crashed, next_sequence=next_sequence)

    def flush_here_when(self, alone: Callable[[], bool]) -> None:
        """Let the writer flush a barrier on the event loop while ``alone()`` says nothing else
        would wait meanwhile (the owner executes at most one run); see ``Writer.alone``."""
        if self._writer is not None:
            self._writer.alone = alone

    def transact(
        self,
        fn: Callable[[SqliteTx], T],
        *,
        durability: Durability = "commit",
        isolated: bool = True,
    ) -> asyncio.Future[T]:
        """Queue ``fn(tx)`` on the writer; the future resolves once it is committed (and, for a
        ``barrier``, on disk). A ``lazy`` transaction is one nobody waits for: it shares the next
        commit; a ``lazy_barrier`` likewise, and that commit is on disk before anything in it is
        answered. An ``isolated`` one runs inside a savepoint, so a refusal undoes its writes
        alone; otherwise (and for the lazy ones) its failure poisons the store."""
        if self._writer is None:
            raise StorageError(f"{self!r} is not open; open it with App.open(store)")
        lazy = durability == "lazy" or durability == "lazy_barrier"
        return self._writer.submit(
            fn,
            barrier=durability == "barrier" or durability == "lazy_barrier",
            checked=isolated and not lazy,
            lazy=lazy,
        )

    def read(self, fn: Callable[[SqliteTx], T]) -> asyncio.Future[T]:
        """Queue a read on the owner's connection (it sees every commit before it)."""
        if self._writer is None:
            raise StorageError(f"{self!r} is not open; open it with App.open(store)")
        return self._writer.submit(fn, read_only=True)

    def amend(self, queued: Awaitable[Any], fn: Callable[[SqliteTx], Any]) -> bool:
        """See :meth:`stead.journal.protocol.Store.amend`."""
        if self._writer is None or not isinstance(queued, asyncio.Future):
            return False
        return self._writer.amend(queued, fn)

    # -- claims: the one owner holds every run ----------------------------------------------

    def claim_runs(
        self, limit: int, exclude: Iterable[str]
    ) -> Awaitable[tuple[list[Claim], datetime | None]]:
        """The runnable runs to start (the owner claims nothing: it holds them all), and when
        a parked one becomes due."""
        skip = set(exclude)
        return self.read(
            lambda tx: (
                [Claim(run_id) for run_id in tx.runnable(limit, skip)],
                tx.next_wakeup(),
            )
        )

    async def extend_leases(self, claims: Sequence[Claim]) -> set[str]:
        return set()

    async def hold(self) -> None:
        """The owner holds every run: nothing to check."""

    async def release_claims(self, claims: Sequence[Claim]) -> None:
        """The runs this runtime gives back while they are ``running`` (it closes, or drains):
        stopped in good order, not interrupted, so their count of executions interrupted in a
        row starts again (``transitions.begin``)."""
        if claims:
            run_ids = [claim.run_id for claim in claims]
            await self.transact(lambda tx: tx.given_back(run_ids))

    def fenced(self, claim: Claim) -> SqliteStore:
        return self

    def changed_elsewhere(self) -> bool:
        """Whether another process committed to the file since the last call (a command
        posted to the inbox, say): ``PRAGMA data_version``, which costs no disk access. Called
        on the event loop between the writer's batches, when the connection is idle."""
        conn = self._conn
        if conn is None or self._writer is None or self._writer.poisoned is not None:
            return False
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        moved, self._data_version = version != self._data_version, version
        return moved

    def _sync_wal(self) -> None:
        """Flush the WAL to disk: every commit so far becomes durable (runs on a thread); then
        check that the path still names the files written to."""
        if self._wal_fd is not None:
            _fdatasync(self._wal_fd)
            self.check_identity()

    def check_identity(self) -> None:
        """Raise :class:`StorageError` if the database or its WAL at ``path`` is no longer the
        file this store writes (deleted, or replaced by another file)."""
        for expected, path in (
            (self._identity, self.path),
            (self._wal_identity, f"{self.path}-wal"),
        ):
            if expected is None:
                continue
            try:
                now = os.stat(path)
            except FileNotFoundError:
                what = "was deleted"
            else:
                if (now.st_dev, now.st_ino) == expected:
                    continue
                what = "was replaced by another file"
            raise StorageError(
                f"the stead database file {path!r} {what} while this runtime was writing it; "
                "work since then is not in the file at that path and nothing more is "
                "acknowledged. Close this runtime, find out what moved the file, and reopen "
                "(restore the right file first if needed)"
            )

    async def aclose(self) -> None:
        """Commit and flush what is queued, give up ownership and close."""
        writer = self._writer
        if writer is None:
            return
        await writer.aclose()
        await asyncio.to_thread(self.release)

    def release(self) -> None:
        """Give up ownership and close (blocking); the writer must be closed first."""
        writer, conn = self._writer, self._conn
        if writer is None or conn is None:
            return
        self._writer = None
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        try:
            # Give up ownership even after a failure: the update is fenced by our token, and if
            # the disk still refuses it, the next owner sees a crashed owner and recovers.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE stead_meta SET owner_token = NULL, owner_pid = NULL, "
                "sequence_reserved_through = ? WHERE owner_token = ?",
                (self._next_sequence - 1, self._token),
            )
            conn.execute("COMMIT")
            if not self.memory:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass  # the next owner sees a crashed owner and recovers from the journal
        finally:
            conn.close()
            self._conn = None
            if self._wal_fd is not None:
                os.close(self._wal_fd)  # SQLite holds no locks on the WAL file itself
                self._wal_fd = self._wal_identity = None
            self._waker = None  # it reads the lock file, closed next
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # closing the descriptor releases the owner's lock
                self._lock_fd = None

    # -- the client side: a process that does not own the file ------------------------------

    def client_open(self) -> None:
        """Open this store for a :class:`~stead.Client` (blocking): a connection that reads,
        posts commands to the owner, or applies them when no runtime owns the file."""
        if self._client is None:
            if self.memory:
                raise ValidationError(
                    "a stead.Client cannot open ':memory:': an in-memory database belongs to "
                    "its runtime; use the runtime's own methods"
                )
            self._client = _ClientSide(self)

    def client_close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def client_read(self, fn: Callable[[SqliteTx], T]) -> T:
        self.client_open()
        assert self._client is not None
        return self._client.read(fn)

    async def client_command(self, command: Command, *, timeout: float) -> object:
        self.client_open()
        assert self._client is not None
        return await self._client.command(command, timeout=timeout)

    def try_lock(self) -> int | None:
        """The owner's lock if nobody holds it (its descriptor; closing it releases the lock),
        else ``None``."""
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    # -- the writer's backend ----------------------------------------------------------------

    def begin(self) -> SqliteTx:
        conn = self._conn
        assert conn is not None
        # Sequences are reserved durably ahead of use; when fewer than half the reservation is
        # left, this commit extends it and so must reach the disk.
        extend = self._next_sequence > self._reserved_through - SEQUENCE_RESERVATION // 2
        conn.execute("BEGIN IMMEDIATE")  # busy: raised at once, the writer tries again later
        token = conn.execute("SELECT owner_token FROM stead_meta").fetchone()
        if token is None or token[0] != self._token:
            conn.execute("ROLLBACK")
            raise StorageError(
                f"this runtime no longer owns {self.path!r} (another process "
                "replaced it); nothing was written. Close this runtime."
            )
        self._reserving = None
        if extend:
            self._reserving = self._next_sequence - 1 + SEQUENCE_RESERVATION
            conn.execute("UPDATE stead_meta SET sequence_reserved_through = ?", (self._reserving,))
        return self.tx_class(conn, self.clock, self._next_sequence, extend)

    def busy(self, exc: BaseException) -> bool:
        """Whether ``exc`` means another process holds the database locked."""
        return _is_busy(exc)

    def commit(self, tx: SqliteTx) -> tuple[list[Notice], bool]:
        """Commit; returns the events written and whether this commit must reach the disk."""
        conn = self._conn
        assert conn is not None
        tx.seal()
        conn.execute("COMMIT")
        self._next_sequence = tx.next_sequence
        if self._reserving is not None:
            self._reserved_through, self._reserving = self._reserving, None
        if self._checkpointer is not None:
            self._checkpointer.nudge()
        return tx.events, tx.durable

    def rollback(self, tx: SqliteTx) -> None:
        assert self._conn is not None
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def reader(self) -> SqliteTx:
        assert self._conn is not None
        return SqliteTx(self._conn, self.clock, self._next_sequence, False, read_only=True)


def _prefill_wal(conn: sqlite3.Connection, path: str) -> None:
    """Extend the write-ahead log at ``path`` with zeros to :data:`WAL_PREFILL` bytes and flush
    them, so that the first commits overwrite blocks already on disk (see ``WAL_PREFILL``).

    Only past the file's end, and while holding SQLite's write lock, so that no connection (a
    client in another process) appends a frame meanwhile: every frame SQLite wrote lies before
    the zeros, and every frame it writes later overwrites them. SQLite reads the log up to the
    first frame that is not valid, and a zeroed frame is not (nor is a zeroed header: a log
    that holds none yet counts as empty). An optimization only: if the lock is not to be had
    within the busy timeout or the disk refuses, the file stays as it is (a disk that is full
    says so at the first commit)."""
    with contextlib.suppress(OSError, sqlite3.Error):
        conn.execute("BEGIN IMMEDIATE")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                if size < WAL_PREFILL:
                    os.pwrite(fd, bytes(WAL_PREFILL - size), size)
                    _fdatasync(fd)
            finally:
                os.close(fd)
        finally:
            conn.execute("ROLLBACK")


class _Checkpointer:
    """Copies the WAL into the database on its own connection, off the commit path."""

    interval = 0.5

    def __init__(self, path: str, busy_timeout: float) -> None:
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
        self._conn.execute("PRAGMA trusted_schema = OFF")
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"stead-checkpoint:{path}", daemon=True
        )
        self._thread.start()

    def nudge(self) -> None:
        if not self._dirty.is_set():  # set() takes a lock: most commits find it set already
            self._dirty.set()

    def stop(self) -> None:
        self._stopping.set()
        self._dirty.set()
        self._thread.join()
        self._conn.close()

    def _main(self) -> None:
        while not self._stopping.is_set():
            self._dirty.wait()
            if self._stopping.wait(self.interval):
                return
            self._dirty.clear()
            # Busy or failing: the next nudge tries again; commits are unaffected.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
