"""A SQLite transaction: the shared row SQL (``..rows.SqlTx``) on the writer's connection,
with SQLite's savepoints and sequence bookkeeping. The store knows nothing of agents."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._clock import Clock
from ...journal.records import Claim, Notice
from ..rows import SQLITE, SqlTx


class SqliteTx(SqlTx):
    """One transaction (or a read) on the writer's connection. Used only on the writer thread."""

    dialect = SQLITE

    def __init__(
        self,
        conn: sqlite3.Connection,
        clock: Clock,
        next_sequence: int,
        durable: bool,
        *,
        read_only: bool = False,
    ) -> None:
        self.conn = conn
        self.clock = clock
        self.next_sequence = next_sequence
        self.durable = durable
        self.read_only = read_only
        self.events: list[Notice] = []
        self.unwritten = []
        self._mark: tuple[int, int] = (next_sequence, 0)
        self._now: datetime | None = None
        self._stamp = ""

    def check_fence(self, claim: Claim) -> None:
        """Nothing to check per run: one runtime owns a SQLite file, and its owner token
        fences every commit."""

    # -- transaction plumbing ----------------------------------------------------------------

    def savepoint(self) -> None:
        self.write_events()
        self.conn.execute("SAVEPOINT job")
        self._mark = (self.next_sequence, len(self.events))
        self._now = None

    def rollback_savepoint(self) -> None:
        self.conn.execute("ROLLBACK TO job")
        self.unwritten = []  # written at the savepoint; what came after is undone
        self.next_sequence, count = self._mark
        del self.events[count:]

    def release_savepoint(self) -> None:
        self.write_events()
        self.conn.execute("RELEASE job")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # The shared SQL is written with SQLite's marks already: no dialect to apply.
        return self.conn.execute(sql, params)

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        # lastrowid: no RETURNING needed (SQLite < 3.35)
        return self.inserted_number(self.execute(sql, params))

    def inserted_number(self, cursor: Any) -> int:
        return int(cursor.lastrowid)

    # The rows themselves: shared SQL, in ..rows. What SQLite does its own way is above.


__all__ = ["SqliteTx"]
