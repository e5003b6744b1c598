"""Events: appended with a sequence, read after a cursor."""

from __future__ import annotations

from datetime import datetime

from ..._json import dumps, loads
from ...journal.events import Payload
from ...journal.records import Event
from ._base import SqlBase


class EventRows(SqlBase):
    """Events are appended to the transaction's list and written together, in one
    ``executemany``, before it commits (or before anything in it reads events back)."""

    #: Encoded rows of ``events`` not inserted yet.
    unwritten: list[tuple[int, str, str, str, str]]

    def append_event(self, run_id: str, payload: Payload) -> Event:
        now = self.now()
        kind, data = payload.event_kind, payload.data()
        sequence = self.next_sequence
        self.unwritten.append((sequence, run_id, kind, dumps(data), self.stamp()))
        self.next_sequence = sequence + 1
        event = Event(sequence=sequence, run_id=run_id, kind=kind, data=data, created_at=now)
        self.events.append(event)
        return event

    def write_events(self) -> None:
        """Insert the events appended since the last call."""
        if self.unwritten:
            rows, self.unwritten = self.unwritten, []
            self.executemany(
                "INSERT INTO stead_events (sequence, run_id, kind, data, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    def events_after(self, run_id: str | None, after: int, limit: int) -> list[Event]:
        self.write_events()
        if run_id is None:
            rows = self.execute(
                "SELECT sequence, run_id, kind, data, created_at FROM stead_events "
                "WHERE sequence > ? ORDER BY sequence LIMIT ?",
                (after, limit),
            ).fetchall()
        else:
            rows = self.execute(
                "SELECT sequence, run_id, kind, data, created_at FROM stead_events "
                "WHERE run_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
                (run_id, after, limit),
            ).fetchall()
        return [
            Event(
                sequence=r[0],
                run_id=r[1],
                kind=r[2],
                data=loads(r[3]),
                created_at=datetime.fromisoformat(r[4]),
            )
            for r in rows
        ]

    def last_sequence(self, run_id: str) -> int:
        self.write_events()
        row = self.execute(
            "SELECT MAX(sequence) FROM stead_events WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(row[0] or 0)
