"""The client side of a SQLite store: a process that does not own the file.

It reads on its own connection (WAL: never blocking the owner) and changes runs with commands.
Whether a live runtime owns the file is the owner's lock (an exclusive ``flock`` on
``<path>-lock``): if this process can take it, nobody owns the file and the command is applied
here, under the lock, so no runtime starts meanwhile; if not, the command is posted to the inbox
and the owner applies it with the same transition, recording the answer the caller then reads
back. A poster that later finds the lock free (the owner died, or the holder was another client
applying its own command) applies its posted command itself, exactly as the owner would.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..._ids import boot_id
from ..._threads import run_store_call
from ...errors import SchemaVersionError, StorageError, ValidationError
from ...journal import transitions
from ...journal.commands import (
    Command,
    answer_of,
    command_to_json,
    describe,
)
from ...journal.protocol import InboxRow
from ..migrate import SCHEMA_VERSION, schema_version, verify_schema
from .tx import MAX_SEQUENCE_SQL, SqliteTx

if TYPE_CHECKING:
    from .store import SqliteStore

__all__ = ["ClientSide"]

T = TypeVar("T")

#: How often a client looks whether the owner applied its command.
POLL_INTERVAL = 0.025


class ClientSide:
    """One connection to a stead SQLite file that this process does not own."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        path = store.path
        if not os.path.isfile(path):
            raise ValidationError(
                f"no stead database at {path!r}; pass the path of an existing file (a runtime "
                "creates it: App.open(stead.SqliteStore(path)))"
            )
        try:
            # Reads go through a read-only connection: looking never changes the file (closing
            # a writable one could fold a dead owner's write-ahead log into it).
            conn = sqlite3.connect(
                f"{Path(path).resolve().as_uri()}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=store.busy_timeout,
            )
            conn.execute("PRAGMA trusted_schema = OFF")
            version = schema_version(conn)
        except sqlite3.DatabaseError as exc:
            if "unable to open" in str(exc):
                raise StorageError(
                    f"cannot read the stead database {path!r}: {exc}. SQLite reads a "
                    "write-ahead log through a shared-memory file beside the database "
                    f"({path}-shm); the folder must let this process create it"
                ) from exc
            raise ValidationError(f"{path!r} is not a stead database ({exc})") from exc
        if version == 0:
            conn.close()
            raise ValidationError(f"{path!r} holds no stead journal")
        if version > SCHEMA_VERSION:
            conn.close()
            raise SchemaVersionError(
                f"{path!r} has schema version {version}, newer than this stead reads "
                f"({SCHEMA_VERSION}); upgrade stead"
            )
        if version < SCHEMA_VERSION:
            conn.close()
            raise SchemaVersionError(
                f"{path!r} has schema version {version}, written by an older stead; open it "
                f"once with a runtime of this stead (App.open), which migrates it to version "
                f"{SCHEMA_VERSION}, then try again. Nothing was changed"
            )
        try:
            verify_schema(conn, path)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        found = os.stat(path)
        self._identity = (found.st_dev, found.st_ino)
        self._writer: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._writer is not None:
                self._writer.close()

    def _writable(self) -> sqlite3.Connection:
        """The connection commands are written on, opened on first use."""
        if self._writer is None:
            conn = sqlite3.connect(
                self._store.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._store.busy_timeout,
            )
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA synchronous = FULL")  # a command applied here is acknowledged
            self._writer = conn
        return self._writer

    def _check_identity(self) -> None:
        """The path must still name the file this client opened: a database deleted or
        replaced (a backup restored over it) since is refused, never read or written stale."""
        try:
            now = os.stat(self._store.path)
        except FileNotFoundError:
            what = "was deleted"
        else:
            if (now.st_dev, now.st_ino) == self._identity:
                return
            what = "was replaced by another file"
        raise StorageError(
            f"the stead database {self._store.path!r} {what} after this client opened it; "
            "nothing was read or written. Open a new stead.Client on it"
        )

    def read(self, fn: Callable[[SqliteTx], T]) -> T:
        with self._lock:
            self._check_identity()
            try:
                # One snapshot for the whole read: the owner may commit between two of its
                # queries (events are read from two tables, a snapshot from several).
                self._conn.execute("BEGIN")
                try:
                    return fn(SqliteTx(self._conn, self._store.clock, 0, False, read_only=True))
                finally:
                    self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StorageError(f"cannot read {self._store.path!r}: {exc}") from exc

    async def command(self, command: Command, *, timeout: float) -> Any:
        state, value = await run_store_call(self._post_or_apply, command)
        if state == "applied":
            return value
        command_id = int(value)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await asyncio.sleep(POLL_INTERVAL)
            row = await run_store_call(self._answer_or_apply, command_id)
            if row is not None and row[2] != "posted":
                return answer_of(row[3])
        raise TimeoutError(
            f"the runtime that owns {self._store.path!r} did not apply {describe(command)} "
            f"within {timeout:g}s; the command stays in the inbox (#{command_id}) and is applied "
            "when that runtime, or the next one to open the file, gets to it"
        )

    def _answer_or_apply(self, command_id: int) -> InboxRow | None:
        """The posted command's row once answered. If meanwhile nobody holds the owner's lock
        (the owner died, or it was another client applying a command), apply it here, as the
        owner would: the command and its answer in one transaction, so it is applied once."""
        row = self.read(lambda tx: tx.get_command(command_id))
        if row is None or row[2] != "posted":
            return row
        lock = self._store.try_lock()
        if lock is None:
            return row
        try:
            return self._write(lambda tx: transitions.apply_posted(tx, command_id), lock)
        finally:
            os.close(lock)

    def _post_or_apply(self, command: Command) -> tuple[str, Any]:
        """Apply ``command`` here if no runtime owns the file, else post it (blocking)."""
        lock = self._store.try_lock()
        try:
            if lock is None:  # someone holds the owner's lock: the inbox
                command_id = self._write(lambda tx: tx.post_command(command_to_json(command)))
                return "posted", command_id
            return "applied", self._write(lambda tx: transitions.apply(tx, command, None), lock)
        finally:
            if lock is not None:
                os.close(lock)  # releases the owner's lock

    def _write(self, fn: Callable[[SqliteTx], T], lock: int | None = None) -> T:
        """One write transaction on this client's connection (applying a command needs the
        owner's lock, held by the caller)."""
        with self._lock:
            self._check_identity()
            conn: sqlite3.Connection | None = None
            try:
                conn = self._writable()
                conn.execute("BEGIN IMMEDIATE")
                sequence = self._next_sequence(conn) if lock is not None else 0
                tx = SqliteTx(conn, self._store.clock, sequence, False)
                value = fn(tx)
                tx.seal()
                conn.execute("COMMIT")
                return value
            except sqlite3.Error as exc:
                raise StorageError(
                    f"cannot write to the stead database {self._store.path!r}: {exc}; check "
                    "that the file and its folder are writable by this process"
                ) from exc
            finally:
                if conn is not None and conn.in_transaction:
                    conn.execute("ROLLBACK")

    @staticmethod
    def _next_sequence(conn: sqlite3.Connection) -> int:
        """Above every event sequence that was written or may have been seen, as an owner
        opening the file would count: the next after the highest written, unless the machine
        rebooted since an owner crashed (events it handed out after its last flush may be
        lost), then above its whole reservation."""
        written = int(conn.execute(MAX_SEQUENCE_SQL).fetchone()[0])
        token, previous_boot, reserved = conn.execute(
            "SELECT owner_token, owner_boot_id, sequence_reserved_through FROM stead_meta"
        ).fetchone()
        if token is not None and previous_boot != boot_id():
            return max(written, int(reserved or 0)) + 1
        return written + 1
