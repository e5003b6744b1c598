"""SQLite store: one file, zero servers, one live owner.

WAL journal, ``BEGIN IMMEDIATE`` transactions, a busy timeout and foreign keys. All writes go
through one writer that group-commits (see ``_writer``). Commits use ``synchronous=NORMAL`` —
durable against a process crash — and a batch holding a barrier is made durable by an fsync of
the WAL on the writer's flush thread, which flushes every commit before it too
(``fsync="always"`` makes every commit a barrier). WAL checkpoints run on their own thread and
connection, off the commit path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal, TypeVar

from .._clock import Clock, SystemClock
from .._ids import boot_id, new_token
from ..errors import OwnershipError, SchemaVersionError, StorageError, ValidationError
from ._writer import Writer
from .records import Event
from .sqlite_tx import SqliteTx

__all__ = ["SqliteStore"]

T = TypeVar("T")
FsyncMode = Literal["barriers", "always"]

#: Sequences reserved durably ahead of use, so events handed out between barriers never reuse
#: a number after an OS crash loses them (DESIGN §6).
SEQUENCE_RESERVATION = 10_000


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("stead.store").joinpath("sql").joinpath("sqlite")
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    return sorted(found)


def _statements(script: str) -> list[str]:
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip() and not current.strip().startswith("--"):
        statements.append(current.strip())
    return [s for s in statements if s]


SCHEMA_VERSION = max(v for v, _ in _migrations())

#: Owner tokens held by open stores of this process: an owner row naming this pid with any
#: other token was left by a runtime of this process that failed before it could release it.
_LIVE_TOKENS: set[str] = set()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child not yet reaped is a zombie: it owns nothing any more
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


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
    """

    #: The transaction class; a test can substitute a subclass that injects faults.
    tx_class: type[SqliteTx] = SqliteTx

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncMode = "barriers",
        busy_timeout: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        if fsync not in ("barriers", "always"):
            raise ValidationError(f"fsync must be 'barriers' or 'always', not {fsync!r}")
        if not isinstance(busy_timeout, int | float) or busy_timeout < 0:
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
        self._next_sequence = 1
        self._reserved_through = 0
        self.open_info: OpenInfo | None = None

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r}, fsync={self.fsync!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
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
        on_commit: Callable[[list[Event]], None],
        on_fatal: Callable[[StorageError], None],
    ) -> OpenInfo:
        """Open the file, migrate, take ownership and start the writer (blocking)."""
        if self._writer is not None:
            raise OwnershipError(
                f"{self!r} is already open in this process; use one Runtime per store"
            )
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            raise StorageError(
                f"cannot open the stead database {self.path!r}: {exc}; check that the file and "
                "its folder are writable by this process and the disk has room"
            ) from exc
        try:
            info = self._acquire(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise StorageError(
                f"cannot take ownership of the stead database {self.path!r}: {exc}; check that "
                "the file and its folder are writable by this process and the disk has room"
            ) from exc
        except BaseException:
            conn.close()
            raise
        sync: Callable[[], None] | None = None
        if not self.memory:
            # Commits reach the WAL without an fsync (a process crash never loses them); the
            # writer makes them durable by an fsync of the WAL on its own thread.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._wal_fd = os.open(f"{self.path}-wal", os.O_RDONLY)
            sync = self._sync_wal
        self._conn = conn
        self._writer = Writer(
            self,
            loop,
            on_commit,
            on_fatal,
            sync=sync,
            always=self.fsync == "always",
            name=f"stead-fsync:{self.path}",
        )
        if not self.memory:
            self._checkpointer = _Checkpointer(self.path, self.busy_timeout)
        self.open_info = info
        return info

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
            version = self._schema_version(conn)
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"the stead database {self.path!r} has schema version {version}, newer than "
                    f"this stead reads ({SCHEMA_VERSION}); upgrade stead, or restore a backup "
                    "made by this version"
                )
            for number, script in _migrations():
                if number > version:
                    for statement in _statements(script):
                        conn.execute(statement)
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
                if host != this_host:
                    raise OwnershipError(
                        f"the stead database {self.path!r} is owned by pid {pid} on host "
                        f"{host!r}; stop that runtime first (a runtime on another host can't be "
                        "checked for liveness, so it is never replaced automatically)"
                    )
                stale_here = pid == os.getpid() and token not in _LIVE_TOKENS
                if not stale_here and (pid == os.getpid() or _pid_alive(pid)):
                    raise OwnershipError(
                        f"the stead database {self.path!r} is owned by a live runtime: pid {pid} "
                        f"on host {host!r}; close that runtime (or use its inbox commands) and "
                        "try again"
                    )
                crashed = True
            max_seq = conn.execute(
                "SELECT COALESCE(MAX(sequence), 0) FROM stead_events"
            ).fetchone()[0]
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
        _LIVE_TOKENS.add(self._token)
        return OpenInfo(previous_owner_crashed=crashed, next_sequence=next_sequence)

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stead_meta'"
        ).fetchone()
        if not exists:
            others = conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
            if others:
                raise StorageError(
                    "this SQLite file holds other tables and no stead journal; "
                    "give stead a file of its own"
                )
            return 0
        row = conn.execute("SELECT schema_version FROM stead_meta").fetchone()
        return int(row[0]) if row else 0

    def submit(
        self,
        fn: Callable[[SqliteTx], T],
        *,
        barrier: bool = False,
        read_only: bool = False,
        checked: bool = True,
        lazy: bool = False,
    ) -> asyncio.Future[T]:
        """Queue a transaction job on the writer (see ``_writer.Writer.submit``)."""
        if self._writer is None:
            raise StorageError(f"{self!r} is not open; open it with App.open(store)")
        return self._writer.submit(
            fn, barrier=barrier, read_only=read_only, checked=checked, lazy=lazy
        )

    def _sync_wal(self) -> None:
        """Flush the WAL to disk: every commit so far becomes durable (runs on a thread)."""
        if self._wal_fd is not None:
            os.fdatasync(self._wal_fd)

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
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        if self._token is not None:
            _LIVE_TOKENS.discard(self._token)
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

    # -- the writer's backend ----------------------------------------------------------------

    def begin(self) -> SqliteTx:
        conn = self._conn
        assert conn is not None
        # Sequences are reserved durably ahead of use; when fewer than half the reservation is
        # left, this commit extends it and so must reach the disk.
        extend = self._next_sequence > self._reserved_through - SEQUENCE_RESERVATION // 2
        conn.execute("BEGIN IMMEDIATE")
        token = conn.execute("SELECT owner_token FROM stead_meta").fetchone()
        if token is None or token[0] != self._token:
            conn.execute("ROLLBACK")
            raise StorageError(
                f"this runtime no longer owns {self.path!r} (another process "
                "replaced it); nothing was written. Close this runtime."
            )
        if extend:
            self._reserved_through = self._next_sequence - 1 + SEQUENCE_RESERVATION
            conn.execute(
                "UPDATE stead_meta SET sequence_reserved_through = ?", (self._reserved_through,)
            )
        return self.tx_class(conn, self.clock, self._next_sequence, extend)

    def savepoint(self, tx: SqliteTx) -> None:
        tx.savepoint()

    def rollback_savepoint(self, tx: SqliteTx) -> None:
        tx.rollback_savepoint()

    def release_savepoint(self, tx: SqliteTx) -> None:
        tx.release_savepoint()

    def commit(self, tx: SqliteTx) -> tuple[list[Event], bool]:
        """Commit; returns the events written and whether this commit must reach the disk."""
        conn = self._conn
        assert conn is not None
        conn.execute("COMMIT")
        self._next_sequence = tx.next_sequence
        if self._checkpointer is not None:
            self._checkpointer.nudge()
        return tx.events, tx.durable

    def rollback(self, tx: SqliteTx) -> None:
        assert self._conn is not None
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def read(self) -> SqliteTx:
        assert self._conn is not None
        return SqliteTx(self._conn, self.clock, self._next_sequence, False, read_only=True)


def open_reader(path: str | os.PathLike[str]) -> SqliteTx:
    """A read-only view of a stead database for inspection (CLI), without taking ownership.

    Raises :class:`ValidationError` when there is no such file and
    :class:`SchemaVersionError` when it is newer than this stead.
    """
    text = os.fspath(path)
    if not Path(text).is_file():
        raise ValidationError(
            f"no stead database at {text!r}; pass the path of an existing "
            "file (stead demo creates stead-demo.db)"
        )
    conn = sqlite3.connect(
        f"file:{Path(text).resolve()}?mode=ro",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
    )
    conn.execute("PRAGMA busy_timeout = 5000")
    try:
        version = SqliteStore._schema_version(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ValidationError(f"{text!r} is not a stead database ({exc})") from exc
    if version == 0:
        conn.close()
        raise ValidationError(f"{text!r} holds no stead journal")
    if version > SCHEMA_VERSION:
        conn.close()
        raise SchemaVersionError(
            f"{text!r} has schema version {version}, newer than this stead "
            f"reads ({SCHEMA_VERSION}); upgrade stead"
        )
    return SqliteTx(conn, SystemClock(), 0, False, read_only=True)


class _Checkpointer:
    """Copies the WAL into the database on its own connection, off the commit path."""

    interval = 0.5

    def __init__(self, path: str, busy_timeout: float) -> None:
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"stead-checkpoint:{path}", daemon=True
        )
        self._thread.start()

    def nudge(self) -> None:
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
