"""Reading a journal's events as stead reads them, for tests that look at a database file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from stead._clock import SystemClock
from stead.journal.records import Event
from stead.store.sqlite.tx import SqliteTx


def journal_events(db: Path | str, run_id: str | None = None) -> list[Event]:
    """Every event of the database (of one run), in sequence order: the event rows and the
    events that operation rows announce."""
    conn = sqlite3.connect(db)
    try:
        tx = SqliteTx(conn, SystemClock(), 0, False, read_only=True)
        return tx.events_after(run_id, 0, 1 << 62)
    finally:
        conn.close()
