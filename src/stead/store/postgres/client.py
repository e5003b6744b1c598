"""A :class:`~stead.Client`'s side of the PostgreSQL store, in any process: reads, and commands.

One runtime owns a schema at a time (it holds the schema's owner lock, a session advisory lock
that the server releases when that runtime's connection ends, crash included). A command goes to
the owner's inbox with a notification that wakes it, and the client waits for the answer; when
no runtime owns the schema, the client applies the command itself, holding the owner lock for
that one transaction, exactly as the owner would.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import SchemaVersionError, StorageError
from ...journal import transitions
from ...journal.commands import Command, answer_of, command_to_json, describe
from ...journal.protocol import InboxRow
from .tx import PostgresTx

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["PostgresClient"]

T = TypeVar("T")

#: How often a client looks whether the owner applied its command.
POLL_INTERVAL = 0.025


class PostgresClient:
    """One connection of a client (reads and commands); used from threads, one at a time."""

    def __init__(self, store: PostgresStore) -> None:
        from .store import SCHEMA_VERSION

        self._store = store
        conn = store.connect()
        try:
            found = conn.execute(
                "SELECT to_regclass(%s)", (f'"{store.schema}".stead_meta',)
            ).fetchone()[0]
            version = (
                int(conn.execute("SELECT schema_version FROM stead_meta").fetchone()[0])
                if found is not None
                else 0
            )
        except BaseException:
            conn.close()
            raise
        if version != SCHEMA_VERSION:
            conn.close()
            if version == 0:
                raise StorageError(
                    f"schema {store.schema!r} {store.where} holds no stead journal; a runtime "
                    "creates it: App.open(stead.PostgresStore(url, schema=...))"
                )
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"schema {store.schema!r} {store.where} has stead schema version {version}, "
                    f"newer than this stead reads ({SCHEMA_VERSION}); upgrade stead"
                )
            raise SchemaVersionError(
                f"schema {store.schema!r} {store.where} has stead schema version {version}, "
                f"written by an older stead; open it once with a runtime of this stead "
                f"(App.open), which migrates it to version {SCHEMA_VERSION}"
            )
        self._conn = conn
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def read(self, fn: Callable[[PostgresTx], T]) -> T:
        """``fn`` on one snapshot of the journal."""
        with self._lock:
            return self._store.guarded(lambda: self._read(fn))

    def _read(self, fn: Callable[[PostgresTx], T]) -> T:
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            return fn(PostgresTx(self._conn, self._store.clock, read_only=True))
        finally:
            self._conn.execute("ROLLBACK")

    async def command(self, command: Command, *, timeout: float) -> Any:
        state, value = await asyncio.to_thread(self._post_or_apply, command)
        if state == "applied":
            return value
        command_id = int(value)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await asyncio.sleep(POLL_INTERVAL)
            row = await asyncio.to_thread(self._answer_or_apply, command_id)
            if row is not None and row[2] != "posted":
                return answer_of(row[3])
        raise TimeoutError(
            f"the runtime that owns schema {self._store.schema!r} {self._store.where} did not "
            f"apply {describe(command)} within {timeout:g}s; the command stays in the inbox "
            f"(#{command_id}) and is applied when that runtime, or the next one to open the "
            "schema, gets to it"
        )

    def _post_or_apply(self, command: Command) -> tuple[str, Any]:
        """Apply ``command`` here if no runtime owns the schema, else post it (blocking)."""
        with self._lock:
            return self._store.guarded(lambda: self._post_or_apply_locked(command))

    def _post_or_apply_locked(self, command: Command) -> tuple[str, Any]:
        if self._store.try_owner_lock(self._conn):
            try:
                return "applied", self._write(lambda tx: transitions.apply(tx, command, None))
            finally:
                self._store.release_owner_lock(self._conn)
        posted = self._write(lambda tx: tx.post_command(command_to_json(command)), notify=True)
        return "posted", posted

    def _answer_or_apply(self, command_id: int) -> InboxRow | None:
        """The posted command's row once answered; applied here if meanwhile nobody owns the
        schema (the owner stopped), in one transaction with its answer."""
        with self._lock:
            return self._store.guarded(lambda: self._answer_or_apply_locked(command_id))

    def _answer_or_apply_locked(self, command_id: int) -> InboxRow | None:
        row = self._read(lambda tx: tx.get_command(command_id))
        if row is None or row[2] != "posted" or not self._store.try_owner_lock(self._conn):
            return row
        try:
            return self._write(lambda tx: transitions.apply_posted(tx, command_id))
        finally:
            self._store.release_owner_lock(self._conn)

    def _write(self, fn: Callable[[PostgresTx], T], *, notify: bool = False) -> T:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            tx = PostgresTx(conn, self._store.clock)
            value = fn(tx)
            tx.write_events()
            tx.write_sequence()
            if notify:
                conn.execute(f"NOTIFY {self._store.channel}")
            conn.execute("COMMIT")
            return value
        except BaseException:
            conn.execute("ROLLBACK")
            raise
