"""Signals, journaled on arrival and read by name in the order they arrived; and when each
schedule first ran."""

from __future__ import annotations

from datetime import datetime

from ..._clock import iso
from ..._json import JSON, dumps, loads
from ...journal.records import Signal
from ._base import SqlBase

_COLUMNS = "run_id, request_id, name, number, value, created_at"


def _signal_of(row: tuple[str, str, str, int, str, str]) -> Signal:
    return Signal(
        run_id=row[0],
        request_id=row[1],
        name=row[2],
        number=int(row[3]),
        value=loads(row[4]),
        created_at=datetime.fromisoformat(row[5]),
    )


class SignalRows(SqlBase):
    def get_signal(self, run_id: str, request_id: str) -> Signal | None:
        row = self.execute(
            f"SELECT {_COLUMNS} FROM stead_signals WHERE run_id = ? AND request_id = ?",
            (run_id, request_id),
        ).fetchone()
        return _signal_of(row) if row else None

    def insert_signal(self, run_id: str, request_id: str, name: str, value: JSON) -> Signal:
        """Journal a signal as the next of its name for the run (the caller holds the run)."""
        row = self.execute(
            "SELECT COALESCE(MAX(number), 0) FROM stead_signals WHERE run_id = ? AND name = ?",
            (run_id, name),
        ).fetchone()
        number = int(row[0]) + 1
        stamp = self.stamp()
        self.execute(
            f"INSERT INTO stead_signals ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, request_id, name, number, dumps(value), stamp),
        )
        return Signal(run_id, request_id, name, number, value, self.now())

    def signal_number(self, run_id: str, name: str, number: int) -> Signal | None:
        """The ``number``-th signal of ``name`` the run received, if it arrived."""
        row = self.execute(
            f"SELECT {_COLUMNS} FROM stead_signals WHERE run_id = ? AND name = ? AND number = ?",
            (run_id, name, number),
        ).fetchone()
        return _signal_of(row) if row else None

    def run_signals(self, run_id: str) -> list[Signal]:
        """Every signal the run received, in arrival order per name."""
        rows = self.execute(
            f"SELECT {_COLUMNS} FROM stead_signals WHERE run_id = ? ORDER BY created_at, name, "
            "number",
            (run_id,),
        ).fetchall()
        return [_signal_of(row) for row in rows]


class ScheduleRows(SqlBase):
    def schedule_since(self, name: str, now: datetime) -> datetime:
        """When schedule ``name`` first ran here (``now`` if it never did)."""
        self.execute(
            f"{self.dialect.insert_ignore} stead_schedules (name, since) VALUES (?, ?) "
            f"{self.dialect.on_conflict_ignore}",
            (name, iso(now)),
        )
        row = self.execute("SELECT since FROM stead_schedules WHERE name = ?", (name,)).fetchone()
        return datetime.fromisoformat(row[0])
