"""A PostgreSQL transaction: the shared row SQL (``..rows.SqlTx``) on one psycopg connection,
with PostgreSQL's savepoints and the event-sequence counter.

Event sequences come from the ``stead_meta`` row: the first event a transaction hands out locks
that row (``FOR UPDATE``) until the transaction ends, and the commit writes the next free number
back. Transactions that write events therefore commit one after another, in sequence order, so a
follower reading "after sequence N" never skips an event that commits later with a lower number,
however many workers share the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..._clock import Clock
from ...journal.records import Event
from ..rows import POSTGRES, SqlTx


class PostgresTx(SqlTx):
    """One transaction (or a read) on a connection of the store. Used on one thread."""

    dialect = POSTGRES

    def __init__(self, conn: Any, clock: Clock, *, read_only: bool = False) -> None:
        self.conn = conn
        self.clock = clock
        self.read_only = read_only
        self.events: list[Event] = []
        self.unwritten = []
        self._sequence: int | None = None  # the next free sequence, once the counter is locked
        self._mark: tuple[int | None, int] = (None, 0)
        self._now: datetime | None = None
        self._stamp = ""

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        with self.conn.cursor() as cursor:
            cursor.executemany(self.dialect.sql(sql), rows)
            return cursor

    # -- the sequence counter ----------------------------------------------------------------

    @property
    def next_sequence(self) -> int:
        if self._sequence is None:
            row = self.conn.execute(
                "SELECT next_sequence FROM stead_meta WHERE singleton = 1 FOR UPDATE"
            ).fetchone()
            self._sequence = int(row[0])
        return self._sequence

    @next_sequence.setter
    def next_sequence(self, value: int) -> None:
        self._sequence = value

    def sequence_update(self) -> str:
        """The statement (``;``-terminated, or empty) that stores the next free sequence, to
        send with the ``COMMIT``. The value is an int this transaction computed."""
        if self._sequence is None:
            return ""
        return f"UPDATE stead_meta SET next_sequence = {int(self._sequence)} WHERE singleton = 1; "

    def write_sequence(self) -> None:
        """Before commit: store the next free sequence (if this transaction handed any out)."""
        if self._sequence is not None:
            self.conn.execute(
                "UPDATE stead_meta SET next_sequence = %s WHERE singleton = 1", (self._sequence,)
            )

    # -- transaction plumbing ----------------------------------------------------------------

    def savepoint(self) -> None:
        self.write_events()
        self.conn.execute("SAVEPOINT job")
        self._mark = (self._sequence, len(self.events))
        self._now = None

    def rollback_savepoint(self) -> None:
        self.conn.execute("ROLLBACK TO SAVEPOINT job")
        self.unwritten = []
        # A counter lock first taken after the savepoint was released with it: take it again.
        self._sequence, count = self._mark
        del self.events[count:]

    def release_savepoint(self) -> None:
        self.write_events()
        self.conn.execute("RELEASE SAVEPOINT job")


__all__ = ["PostgresTx"]
