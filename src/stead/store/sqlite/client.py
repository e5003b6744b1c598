"""The client side of a SQLite store: a process that does not own the file.

It reads on its own connection (WAL: never blocking the owner) and changes runs with commands.
Whether a live runtime owns the file is the owner's lock (an exclusive ``flock``): if this
process can take it, nobody owns the file and the command is applied here, under the lock, so
no runtime starts meanwhile; if not, the command is posted to the inbox and the owner applies
it with the same transition, recording the answer the caller then reads back.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..._clock import SystemClock
from ...errors import SchemaVersionError, StorageError, ValidationError
from ...journal import transitions
from ...journal.commands import Command, answer_of, command_to_json, describe
from ..migrate import SCHEMA_VERSION, schema_version, verify_schema
from .tx import SqliteTx

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

    def read(self, fn: Callable[[SqliteTx], T]) -> T:
        with self._lock:
            return fn(SqliteTx(self._conn, self._store.clock, 0, False, read_only=True))

    async def command(self, command: Command, *, timeout: float) -> Any:
        state, value = await asyncio.to_thread(self._post_or_apply, command)
        if state == "applied":
            return value
        command_id = int(value)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await asyncio.sleep(POLL_INTERVAL)
            row = await asyncio.to_thread(self.read, lambda tx: tx.get_command(command_id))
            if row is not None and row[2] != "posted":
                return answer_of(row[3])
        raise TimeoutError(
            f"the runtime that owns {self._store.path!r} did not apply {describe(command)} "
            f"within {timeout:g}s; the command stays in the inbox (#{command_id}) and is applied "
            "when that runtime, or the next one to open the file, gets to it"
        )

    def _post_or_apply(self, command: Command) -> tuple[str, Any]:
        """Apply ``command`` here if no runtime owns the file, else post it (blocking)."""
        lock = self._store.try_lock()
        with self._lock:
            try:
                conn = self._writable()
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if lock is not None:
                    os.close(lock)
                raise StorageError(f"cannot write to {self._store.path!r}: {exc}") from exc
            try:
                if lock is None:  # a live runtime owns the file: its inbox
                    tx = SqliteTx(conn, SystemClock(), 0, False)
                    command_id = tx.post_command(command_to_json(command))
                    conn.execute("COMMIT")
                    return "posted", command_id
                tx = SqliteTx(conn, self._store.clock, self._next_sequence(conn), False)
                value = transitions.apply(tx, command, None)
                conn.execute("COMMIT")
                return "applied", value
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                if lock is not None:
                    os.close(lock)  # releases the owner's lock

    @staticmethod
    def _next_sequence(conn: sqlite3.Connection) -> int:
        """Above every event sequence that was written or may have been seen."""
        written = conn.execute("SELECT COALESCE(MAX(sequence), 0) FROM stead_events").fetchone()
        reserved = conn.execute("SELECT sequence_reserved_through FROM stead_meta").fetchone()
        return max(int(written[0]), int(reserved[0] or 0)) + 1
