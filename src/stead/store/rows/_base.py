"""Row SQL shared by the dialects, and the small hook where they differ.

Columns, row decoding and the statements every backend runs in the same words live here once;
a :class:`Dialect` names what differs (parameter marks, "insert unless present"), so a second
backend implements a connection and its transactions, not another copy of the journal's SQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..._clock import Clock, iso
from ..._json import JSON, loads
from ...journal.keys import MAX_POSITION
from ...journal.records import (
    Interaction,
    Notice,
    Operation,
    Run,
    RunStatus,
)

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SqlBase"]


@dataclass(frozen=True, slots=True)
class Dialect:
    """What one SQL dialect spells its own way."""

    name: str
    #: The parameter mark of a positional parameter (the shared SQL is written with ``?``).
    mark: str
    #: ``INSERT`` that keeps an existing row with the same key: the statement's start...
    insert_ignore: str
    #: ...and its end.
    on_conflict_ignore: str
    #: A column that orders a table's rows by insertion (SQLite's implicit rowid; a generated
    #: ``number`` column where there is none).
    insertion_order: str
    #: Assignments added to a run's ``UPDATE`` when it leaves ``running``: a store whose runs
    #: are claimed by workers drops the claim and moves the epoch on (so nothing its former
    #: worker still sends lands).
    release_claim: str = ""
    #: What a read adds to hold a row until the transaction ends against concurrent writers
    #: (where several processes write at once) — skipping a row whose write is in flight, which
    #: never waits: a transaction that holds the sequence counter must not wait for a row whose
    #: writer waits for the counter.
    share_lock: str = ""
    #: How a query names the partial index of waiting runs' timers where the planner, with no
    #: statistics, would read every waiting run through the status index instead.
    timers_index: str = ""
    #: How a query names the index of a session's runs where the planner, with no statistics,
    #: would pick the status index and read every run that has that status.
    session_index: str = ""
    #: Put before a column to keep the planner from reading through that column's index, where
    #: it would with no statistics and another index is far narrower (SQLite's unary plus).
    unindexed: str = ""
    #: What a run's ``INSERT`` adds to give back the run's ``number`` (none where the driver
    #: knows the last row's key: SQLite's ``lastrowid``).
    returning_number: str = ""
    _cache: dict[str, str] = field(default_factory=dict, compare=False)

    def sql(self, text: str) -> str:
        """``text`` with this dialect's parameter marks."""
        if self.mark == "?":
            return text
        found = self._cache.get(text)
        if found is None:
            found = self._cache[text] = text.replace("?", self.mark)
        return found


SQLITE = Dialect(
    name="sqlite",
    mark="?",
    insert_ignore="INSERT OR IGNORE INTO",
    on_conflict_ignore="",
    insertion_order="rowid",
    timers_index=" INDEXED BY stead_runs_timers",
    session_index=" INDEXED BY stead_runs_session",
    unindexed="+",
)
POSTGRES = Dialect(
    name="postgres",
    mark="%s",
    insert_ignore="INSERT INTO",
    on_conflict_ignore="ON CONFLICT DO NOTHING",
    insertion_order="number",
    release_claim=", claim_epoch = claim_epoch + 1, claimed_by = NULL, lease_until = NULL",
    share_lock=" FOR SHARE SKIP LOCKED",
    returning_number=" RETURNING number",
)


RUN_COLUMNS = (
    "id, number, session_id, request_id, kind, agent_id, version, status, input, history_head, "
    "history_length, outcome, error, attention_key, usage, created_at, updated_at, "
    "started_at, finished_at, next_attempt_at, error_kind, history_run, parent_id, interruptions"
)
OP_COLUMNS = (
    "run_id, key, position, kind, status, recovery, input_hash, input, result, attempts, rerun, "
    "created_at, updated_at, copied_from, attempt_base"
)
#: An operation row's ``id``: its run's ``number`` times this, plus its position in the run, so
#: a run's rows are one range of the table's key (migration 10 of SQLite, 7 of PostgreSQL).
OPERATIONS_PER_RUN = MAX_POSITION + 1
#: The rows of the run whose id is passed twice (as ``(run_id, run_id)``): a range of the key.
RUN_OPERATIONS_SQL = (
    f"id >= (SELECT number * {OPERATIONS_PER_RUN} FROM stead_runs WHERE id = ?) "
    f"AND id < (SELECT (number + 1) * {OPERATIONS_PER_RUN} FROM stead_runs WHERE id = ?)"
)
TERMINAL_SQL = "('completed', 'failed', 'cancelled')"
#: Statuses whose ``next_attempt_at`` makes the run runnable when it comes: a model back-off, a
#: timer (a sleep, a signal wait's timeout) of a waiting run.
TIMED_SQL = "('retry_wait', 'waiting')"
UPDATABLE_RUN_FIELDS = frozenset(
    {
        "status",
        "history_head",
        "history_length",
        "history_run",
        "outcome",
        "error",
        "attention_key",
        "usage",
        "started_at",
        "finished_at",
        "next_attempt_at",
        "error_kind",
        "version",  # a task run taken over by a newer version's migrate
        "input",
        "interruptions",  # executions interrupted in a row with nothing new committed
        "interruption_mark",
    }
)
JSON_RUN_FIELDS = frozenset({"outcome", "error", "usage", "input"})


def time_of(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def load(value: str | None) -> JSON | None:
    return loads(value) if value is not None else None


def run_of(row: Sequence[Any]) -> Run:
    return Run(
        id=row[0],
        number=row[1],
        session_id=row[2],
        request_id=row[3],
        kind=row[4],
        agent_id=row[5],
        version=row[6],
        status=RunStatus(row[7]),
        input=loads(row[8]),
        history_head=row[9],
        history_length=row[10],
        outcome=load(row[11]),
        error=load(row[12]),
        attention_key=row[13],
        usage=loads(row[14]),
        created_at=datetime.fromisoformat(row[15]),
        updated_at=datetime.fromisoformat(row[16]),
        started_at=time_of(row[17]),
        finished_at=time_of(row[18]),
        next_attempt_at=time_of(row[19]),
        error_kind=row[20],
        history_run=row[21],
        parent_id=row[22],
        interruptions=row[23],
    )


def operation_of(row: Sequence[Any]) -> Operation:
    return Operation(
        run_id=row[0],
        key=row[1],
        position=row[2],
        kind=row[3],
        status=row[4],
        recovery=row[5],
        input_hash=row[6],
        input=loads(row[7]),
        result=load(row[8]),
        attempts=row[9],
        rerun=bool(row[10]),
        created_at=datetime.fromisoformat(row[11]),
        updated_at=datetime.fromisoformat(row[12]),
        copied_from=row[13],
        attempt_base=row[14],
    )


INTERACTION_SELECT = (
    "SELECT i.id, i.run_id, r.session_id, i.key, i.kind, i.status, i.tool, i.arguments, "
    "i.digest, i.payload, i.response, i.requested_at, i.responded_at "
    "FROM stead_interactions AS i JOIN stead_runs AS r ON r.id = i.run_id"
)


def interaction_of(row: Sequence[Any]) -> Interaction:
    return Interaction(
        interaction_id=row[0],
        run_id=row[1],
        session_id=row[2],
        key=row[3],
        kind=row[4],
        status=row[5],
        tool=row[6],
        arguments=loads(row[7]),
        digest=row[8],
        payload=loads(row[9]),
        response=load(row[10]),
        requested_at=datetime.fromisoformat(row[11]),
        responded_at=time_of(row[12]),
    )


class SqlBase:
    """What every group of row operations stands on: a connection, a dialect, the clock of the
    transaction, and SQL written with ``?`` marks that the :class:`Dialect` translates."""

    dialect: Dialect
    conn: Any
    #: The next event sequence this transaction hands out, and the events it made.
    next_sequence: int
    events: list[Notice]
    #: Encoded rows of ``stead_events`` not inserted yet.
    unwritten: list[tuple[int, str, str, str, str]]

    clock: Clock
    #: What a read of a run's row adds to hold it until the transaction ends (a command's
    #: transaction where several processes write: ``FOR UPDATE``).
    row_lock = ""
    #: The transaction's timestamp once taken, and its storage form (a savepoint resets it).
    _now: datetime | None
    _stamp: str

    def now(self) -> datetime:
        """One timestamp per checked job (or per batch of journal writes), so the records
        written together carry the same time."""
        if self._now is None:
            self._now = self.clock.now()
            self._stamp = iso(self._now)
        return self._now

    def stamp(self) -> str:
        """:meth:`now` in its storage form."""
        if self._now is None:
            self.now()
        return self._stamp

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(self.dialect.sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        return self.conn.executemany(self.dialect.sql(sql), rows)

    def changed(self, cursor: Any) -> int:
        """How many rows the statement behind ``cursor`` changed (a pipelined transaction
        waits for its results first)."""
        return int(cursor.rowcount)

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        """Insert one row and return its integer key."""
        cursor = self.execute(f"{sql} RETURNING id", params)
        return int(cursor.fetchone()[0])

    def inserted_number(self, cursor: Any) -> int:
        """The ``number`` of the run the ``INSERT`` behind ``cursor`` wrote (its statement
        ends in the dialect's ``returning_number``)."""
        return int(cursor.fetchone()[0])
