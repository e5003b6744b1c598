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

from .._clock import iso
from .._json import JSON, digest_text, dumps, loads
from ..journal.events import Payload
from ..journal.protocol import InboxRow
from ..journal.records import (
    RUNNABLE_STATUSES,
    Event,
    Interaction,
    Operation,
    Recovery,
    Run,
    RunStatus,
)

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SqlTx"]


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
    name="sqlite", mark="?", insert_ignore="INSERT OR IGNORE INTO", on_conflict_ignore=""
)
POSTGRES = Dialect(
    name="postgres",
    mark="%s",
    insert_ignore="INSERT INTO",
    on_conflict_ignore="ON CONFLICT DO NOTHING",
)


RUN_COLUMNS = (
    "id, number, session_id, request_id, kind, agent_id, version, status, input, history_head, "
    "history_length, outcome, error, attention_key, usage, created_at, updated_at, "
    "started_at, finished_at, next_attempt_at, error_kind"
)
OP_COLUMNS = (
    "run_id, key, position, kind, status, recovery, input_hash, input, result, attempts, rerun, "
    "created_at, updated_at, copied_from, attempt_base"
)
TERMINAL_SQL = "('completed', 'failed', 'cancelled')"
UPDATABLE_RUN_FIELDS = frozenset(
    {
        "status",
        "history_head",
        "history_length",
        "outcome",
        "error",
        "attention_key",
        "usage",
        "started_at",
        "finished_at",
        "next_attempt_at",
        "error_kind",
    }
)
JSON_RUN_FIELDS = frozenset({"outcome", "error", "usage"})


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


class SqlTx:
    """The row operations of the journal, in SQL both dialects speak (``?`` parameter marks,
    translated by the :class:`Dialect`). A backend's transaction class adds its connection
    plumbing: ``now``/``stamp``, ``append_event``'s sequence, savepoints."""

    dialect: Dialect
    conn: Any
    #: The next event sequence this transaction hands out, and the events it wrote.
    next_sequence: int
    events: list[Event]

    def now(self) -> datetime:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    def stamp(self) -> str:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(self.dialect.sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        return self.conn.executemany(self.dialect.sql(sql), rows)

    def insert_id(self, sql: str, params: Sequence[Any]) -> int:
        """Insert one row and return its integer key."""
        cursor = self.execute(f"{sql} RETURNING id", params)
        return int(cursor.fetchone()[0])

    # -- runs --------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> Run | None:
        row = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE id = ?", (run_id,)
        ).fetchone()
        return run_of(row) if row else None

    def find_request(self, session_id: str, request_id: str) -> tuple[Run, str] | None:
        row = self.execute(
            f"SELECT {RUN_COLUMNS}, submission_digest FROM stead_runs "
            "WHERE session_id = ? AND request_id = ?",
            (session_id, request_id),
        ).fetchone()
        return (run_of(row), row[-1]) if row else None

    def unfinished_in_session(self, session_id: str) -> Run | None:
        """The newest unfinished run of a session, if any."""
        row = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE session_id = ? "
            f"AND status NOT IN {TERMINAL_SQL} ORDER BY number DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        return run_of(row) if row else None

    def later_started(self, run: Run) -> Run | None:
        row = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE session_id = ? AND number > ? "
            "AND started_at IS NOT NULL ORDER BY number LIMIT 1",
            (run.session_id, run.number),
        ).fetchone()
        return run_of(row) if row else None

    def latest_completed(self, session_id: str, before: int) -> Run | None:
        row = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE session_id = ? AND number < ? "
            "AND status = 'completed' ORDER BY number DESC LIMIT 1",
            (session_id, before),
        ).fetchone()
        return run_of(row) if row else None

    def insert_run(
        self,
        *,
        run_id: str,
        session_id: str,
        request_id: str,
        kind: str,
        agent_id: str,
        version: str,
        status: RunStatus,
        input: JSON,
        submission_digest: str,
    ) -> Run:
        now = self.stamp()
        cursor = self.execute(
            "INSERT INTO stead_runs (id, session_id, request_id, kind, agent_id, version, status, "
            "input, submission_digest, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                session_id,
                request_id,
                kind,
                agent_id,
                version,
                status.value,
                dumps(input),
                submission_digest,
                now,
                now,
            ),
        )
        number = cursor.lastrowid
        assert number is not None
        run = self.get_run(run_id)
        assert run is not None
        return run

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set fields of a run (and ``updated_at``). JSON fields are serialized here."""
        assignments, values = ["updated_at = ?"], [self.stamp()]
        for name, value in fields.items():
            if name not in UPDATABLE_RUN_FIELDS:
                raise ValueError(f"stead_runs.{name} cannot be updated")
            if name in JSON_RUN_FIELDS and value is not None:
                value = dumps(value)
            elif isinstance(value, RunStatus):
                value = value.value
            elif isinstance(value, datetime):
                value = iso(value)
            assignments.append(f"{name} = ?")
            values.append(value)
        values.append(run_id)
        self.execute(f"UPDATE stead_runs SET {', '.join(assignments)} WHERE id = ?", values)

    def runnable(self, limit: int, exclude: Iterable[str]) -> list[Run]:
        """Runs the scheduler may start, in submission order: runnable status (or a retry_wait
        whose time has come) and at the head of their session (no earlier unfinished run)."""
        excluded = set(exclude)
        statuses = ", ".join(f"'{s}'" for s in RUNNABLE_STATUSES)
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs AS r WHERE (r.status IN ({statuses}) "
            "OR (r.status = 'retry_wait' AND r.next_attempt_at <= ?)) "
            "AND NOT EXISTS (SELECT 1 FROM stead_runs AS p WHERE p.session_id = r.session_id "
            f"AND p.number < r.number AND p.status NOT IN {TERMINAL_SQL}) "
            "ORDER BY r.number LIMIT ?",
            (self.stamp(), limit + len(excluded)),
        ).fetchall()
        return [run for run in map(run_of, rows) if run.id not in excluded][:limit]

    def next_wakeup(self) -> datetime | None:
        """The earliest time a run in retry_wait becomes runnable."""
        row = self.execute(
            "SELECT MIN(next_attempt_at) FROM stead_runs WHERE status = 'retry_wait'"
        ).fetchone()
        return time_of(row[0])

    def list_runs(
        self,
        *,
        session_id: str | None,
        agent_id: str | None,
        statuses: Sequence[str] | None,
        before_number: int | None,
        limit: int,
    ) -> list[Run]:
        clauses: list[str] = []
        values: list[object] = []
        if session_id is not None:
            clauses.append("session_id = ?")
            values.append(session_id)
        if agent_id is not None:
            clauses.append("agent_id = ?")
            values.append(agent_id)
        if statuses:
            clauses.append(f"status IN ({', '.join('?' for _ in statuses)})")
            values.extend(statuses)
        if before_number is not None:
            clauses.append("number < ?")
            values.append(before_number)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs {where} ORDER BY number DESC LIMIT ?",
            (*values, limit),
        ).fetchall()
        return [run_of(row) for row in rows]

    def count_runs(self, statuses: Sequence[str]) -> int:
        marks = ", ".join("?" for _ in statuses)
        return int(
            self.execute(
                f"SELECT COUNT(*) FROM stead_runs WHERE status IN ({marks})", tuple(statuses)
            ).fetchone()[0]
        )

    # -- operations --------------------------------------------------------------------------

    def operations(self, run_id: str) -> list[Operation]:
        rows = self.execute(
            f"SELECT {OP_COLUMNS} FROM stead_operations WHERE run_id = ? ORDER BY position",
            (run_id,),
        ).fetchall()
        return [operation_of(row) for row in rows]

    def get_operation(self, run_id: str, key: str) -> Operation | None:
        row = self.execute(
            f"SELECT {OP_COLUMNS} FROM stead_operations WHERE run_id = ? AND key = ?",
            (run_id, key),
        ).fetchone()
        return operation_of(row) if row else None

    def start_operation(
        self,
        *,
        run_id: str,
        key: str,
        position: int,
        kind: str,
        recovery: Recovery,
        input_hash: str,
        input: JSON,
    ) -> None:
        now = self.stamp()
        self.execute(
            "INSERT INTO stead_operations (run_id, key, position, kind, status, recovery, "
            "input_hash, input, attempts, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, 'started', ?, ?, ?, 1, ?, ?)",
            (run_id, key, position, kind, recovery, input_hash, dumps(input), now, now),
        )

    def restart_operation(self, run_id: str, key: str, attempts: int) -> None:
        """Record another attempt of an interrupted operation (and consume a re-run order)."""
        self.execute(
            "UPDATE stead_operations SET attempts = ?, rerun = 0, updated_at = ? "
            "WHERE run_id = ? AND key = ? AND status = 'started'",
            (attempts, self.stamp(), run_id, key),
        )

    def complete_operation(self, run_id: str, key: str, result: JSON) -> bool:
        """Store the result of a started operation; False if it was not ``started``."""
        cursor = self.execute(
            "UPDATE stead_operations SET status = 'completed', result = ?, updated_at = ? "
            "WHERE run_id = ? AND key = ? AND status = 'started'",
            (dumps(result), self.stamp(), run_id, key),
        )
        return int(cursor.rowcount) == 1

    def order_rerun(self, run_id: str, key: str) -> None:
        self.execute(
            "UPDATE stead_operations SET rerun = 1, updated_at = ? "
            "WHERE run_id = ? AND key = ? AND status = 'started'",
            (self.stamp(), run_id, key),
        )

    def copy_operations(self, source_run_id: str, target_run_id: str, before: int) -> int:
        """Copy the completed operations positioned before ``before`` into another run (fork)."""
        cursor = self.execute(
            "INSERT INTO stead_operations (run_id, key, position, kind, status, recovery, "
            "input_hash, input, result, attempts, rerun, created_at, updated_at, copied_from) "
            "SELECT ?, key, position, kind, status, recovery, input_hash, input, result, "
            "attempts, 0, created_at, updated_at, run_id FROM stead_operations "
            "WHERE run_id = ? AND position < ? AND status = 'completed'",
            (target_run_id, source_run_id, before),
        )
        return int(cursor.rowcount)

    def delete_operation(self, run_id: str, key: str) -> None:
        """Forget an intent whose work never started (a tool that asked for approval first)."""
        self.execute(
            "DELETE FROM stead_operations WHERE run_id = ? AND key = ? AND status = 'started'",
            (run_id, key),
        )

    def reset_attempts(self, run_id: str) -> None:
        """Give the interrupted operations of a run a fresh attempt budget (on retry)."""
        self.execute(
            "UPDATE stead_operations SET attempt_base = attempts "
            "WHERE run_id = ? AND status = 'started'",
            (run_id,),
        )

    # -- interactions ------------------------------------------------------------------------

    def insert_interaction(
        self,
        *,
        interaction_id: str,
        run_id: str,
        key: str,
        kind: str,
        tool: str | None,
        arguments: JSON,
        digest: str,
        payload: JSON,
    ) -> None:
        self.execute(
            "INSERT INTO stead_interactions (id, run_id, key, kind, status, tool, arguments, "
            "digest, payload, requested_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
            (
                interaction_id,
                run_id,
                key,
                kind,
                tool,
                dumps(arguments),
                digest,
                dumps(payload),
                self.stamp(),
            ),
        )

    def get_interaction(self, interaction_id: str) -> Interaction | None:
        row = self.execute(f"{INTERACTION_SELECT} WHERE i.id = ?", (interaction_id,)).fetchone()
        return interaction_of(row) if row else None

    def run_interactions(self, run_id: str) -> list[Interaction]:
        rows = self.execute(
            f"{INTERACTION_SELECT} WHERE i.run_id = ? ORDER BY i.requested_at, i.rowid", (run_id,)
        ).fetchall()
        return [interaction_of(row) for row in rows]

    def list_interactions(
        self, *, status: str | None, session_id: str | None, run_id: str | None, limit: int
    ) -> list[Interaction]:
        clauses: list[str] = []
        values: list[object] = []
        for column, value in (
            ("i.status", status),
            ("r.session_id", session_id),
            ("i.run_id", run_id),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.execute(
            f"{INTERACTION_SELECT} {where} ORDER BY i.requested_at, i.rowid LIMIT ?",
            (*values, limit),
        ).fetchall()
        return [interaction_of(row) for row in rows]

    def respond_interaction(self, interaction_id: str, response: JSON) -> None:
        self.execute(
            "UPDATE stead_interactions SET status = 'responded', response = ?, responded_at = ? "
            "WHERE id = ? AND status = 'pending'",
            (dumps(response), self.stamp(), interaction_id),
        )

    def cancel_interactions(self, run_id: str) -> None:
        self.execute(
            "UPDATE stead_interactions SET status = 'cancelled', responded_at = ? "
            "WHERE run_id = ? AND status = 'pending'",
            (self.stamp(), run_id),
        )

    def pending_interactions(self, run_id: str) -> int:
        row = self.execute(
            "SELECT COUNT(*) FROM stead_interactions WHERE run_id = ? AND status = 'pending'",
            (run_id,),
        ).fetchone()
        return int(row[0])

    # -- events ------------------------------------------------------------------------------

    def append_event(self, run_id: str, payload: Payload) -> Event:
        now = self.now()
        kind, data = payload.event_kind, payload.data()
        sequence = self.next_sequence
        self.execute(
            "INSERT INTO stead_events (sequence, run_id, kind, data, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (sequence, run_id, kind, dumps(data), self.stamp()),
        )
        self.next_sequence = sequence + 1
        event = Event(sequence=sequence, run_id=run_id, kind=kind, data=data, created_at=now)
        self.events.append(event)
        return event

    def events_after(self, run_id: str | None, after: int, limit: int) -> list[Event]:
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
        row = self.execute(
            "SELECT MAX(sequence) FROM stead_events WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(row[0] or 0)

    # -- blobs and histories -----------------------------------------------------------------

    def put_blob(self, body: str) -> str:
        digest = digest_text(body)
        self.execute(
            f"{self.dialect.insert_ignore} stead_blobs (hash, body) VALUES (?, ?) "
            f"{self.dialect.on_conflict_ignore}",
            (digest, body),
        )
        return digest

    def get_blob(self, digest: str) -> str:
        row = self.execute("SELECT body FROM stead_blobs WHERE hash = ?", (digest,)).fetchone()
        if row is None:
            raise LookupError(f"journal blob {digest} is missing")
        return str(row[0])

    def put_history(self, nodes: Sequence[tuple[str, str | None, str]]) -> None:
        """Insert (hash, previous, message_blob) nodes; existing ones are kept."""
        self.executemany(
            f"{self.dialect.insert_ignore} stead_history (hash, previous, message) "
            f"VALUES (?, ?, ?) {self.dialect.on_conflict_ignore}",
            nodes,
        )

    def history(self, head: str | None, length: int) -> list[str]:
        """The message blob bodies of a history, oldest first, verifying every link."""
        if head is None or length == 0:
            return []
        rows = self.execute(
            "WITH RECURSIVE chain(hash, previous, message, depth) AS ("
            " SELECT hash, previous, message, 1 FROM stead_history WHERE hash = ?"
            " UNION ALL SELECT h.hash, h.previous, h.message, c.depth + 1"
            " FROM stead_history AS h JOIN chain AS c ON h.hash = c.previous"
            " WHERE c.depth < ?) "
            "SELECT c.hash, c.previous, c.message, b.body FROM chain AS c "
            "JOIN stead_blobs AS b ON b.hash = c.message ORDER BY c.depth DESC",
            (head, length),
        ).fetchall()
        if len(rows) != length:
            raise LookupError(
                f"journal history {head} should hold {length} messages, found {len(rows)}"
            )
        bodies = []
        for node, previous, message, body in rows:
            if digest_text(f"{previous or ''}:{message}") != node or digest_text(body) != message:
                raise LookupError(f"journal history node {node} does not match its content")
            bodies.append(body)
        return bodies

    # -- the inbox ---------------------------------------------------------------------------

    def post_command(self, command: JSON) -> int:
        return self.insert_id(
            "INSERT INTO stead_inbox (command, status, posted_at) VALUES (?, 'posted', ?)",
            (dumps(command), self.stamp()),
        )

    def posted_commands(self, limit: int) -> list[InboxRow]:
        rows = self.execute(
            "SELECT id, command, status, answer FROM stead_inbox WHERE status = 'posted' "
            "ORDER BY id LIMIT ?",
            (limit,),
        ).fetchall()
        return [(row[0], loads(row[1]), row[2], load(row[3])) for row in rows]

    def answer_command(self, command_id: int, status: str, answer: JSON) -> None:
        self.execute(
            "UPDATE stead_inbox SET status = ?, answer = ?, applied_at = ? "
            "WHERE id = ? AND status = 'posted'",
            (status, dumps(answer), self.stamp(), command_id),
        )

    def forget_answered(self, before: datetime) -> int:
        """Delete the rows of commands answered before ``before`` (their callers have read
        the answer long since); returns how many."""
        cursor = self.execute(
            "DELETE FROM stead_inbox WHERE status != 'posted' AND applied_at < ?", (iso(before),)
        )
        return int(cursor.rowcount)

    def get_command(self, command_id: int) -> InboxRow | None:
        row = self.execute(
            "SELECT id, command, status, answer FROM stead_inbox WHERE id = ?", (command_id,)
        ).fetchone()
        return (row[0], loads(row[1]), row[2], load(row[3])) if row else None
