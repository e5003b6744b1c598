"""Events: appended with a sequence, read after a cursor.

Most events are rows of ``stead_events``. The first start and the result of a model call or a
tool are announced by the operation row instead (its ``started_seq`` and ``completed_seq``):
their data is built from the row when read (:mod:`stead.journal.events`), so a response or a
tool's output is not stored twice. A read merges both, in sequence order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..._json import dumps, loads
from ...journal.events import Payload, operation_completed, operation_started
from ...journal.keys import operation_id
from ...journal.records import Event
from ._base import RUN_OPERATIONS_SQL, SqlBase

#: The columns an operation's events are built from: sequence, run, key, kind, input, result,
#: time.
_STARTED = "started_seq, run_id, key, kind, input, NULL, created_at"
_COMPLETED = "completed_seq, run_id, key, kind, input, result, updated_at"


def operation_event(row: Sequence[Any], completed: bool) -> Event:
    """The event an operation row announces (see the module docstring)."""
    sequence, run_id, key, kind, input_text, result_text, stamp = row
    stored = loads(input_text)
    payload = (
        operation_completed(kind, key, stored, loads(result_text))
        if completed
        else operation_started(kind, key, stored, 1, operation_id(run_id, key))
    )
    assert payload is not None  # a sequence is only given to an operation that has the event
    return Event(
        sequence=sequence,
        run_id=run_id,
        kind=payload.event_kind,
        data=payload.data(),
        created_at=datetime.fromisoformat(stamp),
    )


class EventRows(SqlBase):
    """Events are appended to the transaction's list and written together, in one
    ``executemany``, before it commits (or before anything in it reads events back)."""

    def append_event(self, run_id: str, payload: Payload) -> Event:
        sequence = self.next_sequence
        self.next_sequence = sequence + 1
        event = Event(
            sequence=sequence,
            run_id=run_id,
            kind=payload.event_kind,
            data=payload.data(),
            created_at=self.now(),
        )
        self.events.append(event)
        self.unwritten.append((sequence, run_id, event.kind, dumps(event.data), self.stamp()))
        return event

    def announce(self, run_id: str, kind: str) -> int:
        """Hand out the next sequence for an event of ``kind`` that the caller's row will hold
        (an operation's); at commit its run's id is delivered in its place (a
        :data:`~stead.journal.records.Notice`): its data is built from the row when the event
        is read. No event row is written."""
        sequence = self.next_sequence
        self.next_sequence = sequence + 1
        self.events.append(run_id)
        return sequence

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
        where = "" if run_id is None else "run_id = ? AND "
        params: tuple[Any, ...] = (after, limit) if run_id is None else (run_id, after, limit)
        rows = self.execute(
            f"SELECT sequence, run_id, kind, data, created_at FROM stead_events "
            f"WHERE {where}sequence > ? ORDER BY sequence LIMIT ?",
            params,
        ).fetchall()
        stored = (
            Event(
                sequence=r[0],
                run_id=r[1],
                kind=r[2],
                data=loads(r[3]),
                created_at=datetime.fromisoformat(r[4]),
            )
            for r in rows
        )
        # A run's operation rows are a range of the table's key (``RUN_OPERATIONS_SQL``), read
        # as that: the unary + keeps SQLite from walking the index of every run's start
        # sequences instead.
        where, seq = ("", "") if run_id is None else (f"{RUN_OPERATIONS_SQL} AND ", "+")
        params = params if run_id is None else (run_id, *params)
        started = self.execute(
            f"SELECT {_STARTED} FROM stead_operations "
            f"WHERE {where}{seq}started_seq > ? ORDER BY started_seq LIMIT ?",
            params,
        ).fetchall()
        completed = self.execute(
            f"SELECT {_COMPLETED} FROM stead_operations "
            f"WHERE {where}completed_seq > ? ORDER BY completed_seq LIMIT ?",
            params,
        ).fetchall()
        merged: Iterable[Event] = heapq.merge(
            stored,
            (operation_event(r, False) for r in started),
            (operation_event(r, True) for r in completed),
            key=lambda e: e.sequence,
        )
        return [event for event, _ in zip(merged, range(limit), strict=False)]

    def last_sequence(self, run_id: str) -> int:
        self.write_events()
        row = self.execute(
            "SELECT MAX(s) FROM ("
            "SELECT MAX(sequence) AS s FROM stead_events WHERE run_id = ? "
            f"UNION ALL SELECT MAX(started_seq) FROM stead_operations WHERE {RUN_OPERATIONS_SQL} "
            "UNION ALL SELECT MAX(completed_seq) FROM stead_operations "
            f"WHERE {RUN_OPERATIONS_SQL}) AS seqs",
            (run_id, run_id, run_id, run_id, run_id),
        ).fetchone()
        return int(row[0] or 0)
