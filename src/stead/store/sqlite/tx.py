"""A SQLite transaction: the shared row SQL (``..rows.SqlTx``) on the writer's connection,
with SQLite's savepoints and sequence bookkeeping. The store knows nothing of agents.

The highest event sequence handed out (:data:`MAX_SEQUENCE_SQL`), which an owner opening the
file after a crash continues from without a gap, is the highest of three things that are cheap
to read: the newest event row, the highest first-start sequence of an operation (indexed), and
``stead_meta.completed_through``. The sequence of an operation's result is not indexed (the
index cost about 4% of a step, written at every result); a transaction whose last sequence is
such a result raises ``completed_through`` to it instead (:meth:`SqliteTx.seal`), which a step
that goes on to its next operation (a later first start) never needs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._clock import Clock
from ...journal.events import RESULT_EVENT_KINDS
from ...journal.records import Claim, Notice
from ..rows import SQLITE, SqlTx

#: The highest event sequence written to the file (see the module docstring).
MAX_SEQUENCE_SQL = (
    "SELECT MAX(COALESCE((SELECT MAX(sequence) FROM stead_events), 0), "
    "COALESCE((SELECT MAX(started_seq) FROM stead_operations), 0), "
    "COALESCE((SELECT completed_through FROM stead_meta), 0))"
)


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
        #: The highest sequence this transaction gave an operation's result (0: none).
        self.completed_tail = 0
        self._mark: tuple[int, int, int] = (next_sequence, 0, 0)
        self._now: datetime | None = None
        self._stamp = ""

    def check_fence(self, claim: Claim) -> None:
        """Nothing to check per run: one runtime owns a SQLite file, and its owner token
        fences every commit."""

    # -- transaction plumbing ----------------------------------------------------------------

    def savepoint(self) -> None:
        self.write_events()
        self.conn.execute("SAVEPOINT job")
        self._mark = (self.next_sequence, len(self.events), self.completed_tail)
        self._now = None

    def rollback_savepoint(self) -> None:
        self.conn.execute("ROLLBACK TO job")
        self.unwritten = []  # written at the savepoint; what came after is undone
        self.next_sequence, count, self.completed_tail = self._mark
        del self.events[count:]

    def release_savepoint(self) -> None:
        self.write_events()
        self.conn.execute("RELEASE job")

    def seal(self) -> None:
        """Before the commit: write the events appended since the last write and, if the last
        sequence handed out is an operation's result, raise ``completed_through`` to it (see
        the module docstring)."""
        self.write_events()
        tail = self.completed_tail
        if tail and tail == self.next_sequence - 1:
            self.conn.execute("UPDATE stead_meta SET completed_through = ?", (tail,))

    def announce(self, run_id: str, kind: str) -> int:
        sequence = super().announce(run_id, kind)
        if kind in RESULT_EVENT_KINDS:  # an operation's result: see the module docstring
            self.completed_tail = sequence
        return sequence

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # The shared SQL is written with SQLite's marks already: no dialect to apply.
        return self.conn.execute(sql, params)

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        # lastrowid: no RETURNING needed (SQLite < 3.35)
        return self.inserted_number(self.execute(sql, params))

    def inserted_number(self, cursor: Any) -> int:
        return int(cursor.lastrowid)

    # The rows themselves: shared SQL, in ..rows. What SQLite does its own way is above.


__all__ = ["MAX_SEQUENCE_SQL", "SqliteTx"]
