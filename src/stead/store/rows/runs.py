"""Runs: insert, read, update, list, and which may run next."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..._clock import iso
from ..._json import JSON, dumps, loads
from ...journal.records import RUNNABLE_STATUSES, Run, RunStatus, SubmissionState
from ._base import (
    JSON_RUN_FIELDS,
    RUN_COLUMNS,
    TERMINAL_SQL,
    UPDATABLE_RUN_FIELDS,
    SqlBase,
    load,
    run_of,
    time_of,
)


class RunRows(SqlBase):
    #: The run this transaction inserted last, as written, until anything else changes a run:
    #: the ``INSERT``'s cursor (its number) and the other fields (:meth:`run_to_begin`).
    _inserted: tuple[Any, dict[str, Any]] | None = None

    def get_run(self, run_id: str) -> Run | None:
        row = self.ask_run(run_id).fetchone()
        return run_of(row) if row else None

    def ask_run(self, run_id: str) -> Any:
        """The statement :meth:`get_run` reads its row from (sent, not read yet)."""
        return self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE id = ?{self.row_lock}", (run_id,)
        )

    def run_standing(self, run_id: str) -> tuple[str, str | None] | None:
        """A run's status and the run that owns it (``None`` if there is no such run), held
        as :meth:`get_run` holds the whole row: for a transition that decides on no more."""
        row = self.execute(
            f"SELECT status, parent_id FROM stead_runs WHERE id = ?{self.row_lock}", (run_id,)
        ).fetchone()
        return (str(row[0]), row[1]) if row else None

    def find_request(self, session_id: str, request_id: str) -> tuple[Run, str] | None:
        row = self.ask_find_request(session_id, request_id).fetchone()
        return (run_of(row), row[-1]) if row else None

    def ask_find_request(self, session_id: str, request_id: str) -> Any:
        """The statement :meth:`find_request` reads its row from (sent, not read yet)."""
        return self.execute(
            f"SELECT {RUN_COLUMNS}, submission_digest FROM stead_runs "
            "WHERE session_id = ? AND request_id = ?",
            (session_id, request_id),
        )

    def unfinished_in_session(self, session_id: str) -> Run | None:
        """The newest unfinished run of a session, if any."""
        row = self.ask_unfinished_in_session(session_id).fetchone()
        return run_of(row) if row else None

    def ask_unfinished_in_session(self, session_id: str) -> Any:
        """The statement :meth:`unfinished_in_session` reads its row from (sent, not read)."""
        return self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE session_id = ? "
            f"AND status NOT IN {TERMINAL_SQL} ORDER BY number DESC LIMIT 1",
            (session_id,),
        )

    def submission_state(self, session_id: str, request_id: str, run_id: str) -> SubmissionState:
        """What a submission decides on, asked for before any is read (a pipelined
        transaction waits for the server once): the earlier submission of the request with
        its digest, the run that has ``run_id``, and the session's newest unfinished run —
        only the columns a submission uses. A new store prepares each statement the first
        time it runs, and a whole run row's is several times dearer to prepare."""
        self.lock_session(session_id)
        earlier = self.execute(
            "SELECT id, submission_digest FROM stead_runs WHERE session_id = ? AND request_id = ?",
            (session_id, request_id),
        )
        taken = self.execute(
            "SELECT session_id, request_id FROM stead_runs WHERE id = ?", (run_id,)
        )
        busy = self.execute(
            f"SELECT id, status FROM stead_runs WHERE session_id = ? "
            f"AND status NOT IN {TERMINAL_SQL} ORDER BY number DESC LIMIT 1",
            (session_id,),
        )
        self.asked_submission()
        rows = earlier.fetchone(), taken.fetchone(), busy.fetchone()
        return SubmissionState(*(tuple(row) if row else None for row in rows))

    def lock_session(self, session_id: str) -> None:
        """Called before a command reads what it decides on about a session's runs: a store
        where several processes write at once holds the session until the commit."""

    def asked_submission(self) -> None:
        """Called once :meth:`submission_state` has asked what it decides on, before it reads
        the answers: a store may ask for more along (what a submission needs next)."""

    def later_started(self, run: Run) -> Run | None:
        row = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE session_id = ? AND number > ? "
            "AND started_at IS NOT NULL ORDER BY number LIMIT 1",
            (run.session_id, run.number),
        ).fetchone()
        return run_of(row) if row else None

    def run_to_begin(
        self, run_id: str, fresh: bool = False
    ) -> tuple[Run | None, tuple[str, JSON] | None]:
        """A run, and the id and outcome of its session's newest completed agent run before
        it (whose conversation is the session's history; task and graph runs have none),
        asked for together: a pipelined transaction waits for the server once for both.
        ``fresh``: this transaction inserted the run (:meth:`insert_run`) and changed nothing
        of it since, so the run is what it wrote, and is not read back."""
        inserted, self._inserted = self._inserted, None
        if not fresh or inserted is None or inserted[1]["id"] != run_id:
            inserted = None
        asked = self.ask_run(run_id) if inserted is None else None
        # Through the session's index: a store's completed runs are most of its runs. A run
        # just inserted is its session's newest (and not completed): its session is known,
        # and every completed run of it came before.
        where, params = (
            ("session_id = ?", (inserted[1]["session_id"],))
            if inserted is not None
            else (
                "session_id = (SELECT session_id FROM stead_runs WHERE id = ?) "
                "AND number < (SELECT number FROM stead_runs WHERE id = ?)",
                (run_id, run_id),
            )
        )
        previous = self.execute(
            f"SELECT id, outcome FROM stead_runs{self.dialect.session_index} WHERE {where} "
            "AND status = 'completed' AND kind = 'agent' ORDER BY number DESC LIMIT 1",
            params,
        )
        if asked is None:
            assert inserted is not None
            cursor, fields = inserted
            current: Run | None = Run(number=self.inserted_number(cursor), **fields)
        else:
            found = asked.fetchone()
            current = run_of(found) if found else None
        before = previous.fetchone()
        return current, (before[0], load(before[1])) if before else None

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
        parent_id: str | None = None,
    ) -> None:
        now = self.stamp()
        text = dumps(input)
        cursor = self.execute(
            "INSERT INTO stead_runs (id, session_id, request_id, kind, agent_id, version, status, "
            "input, submission_digest, created_at, updated_at, parent_id) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){self.dialect.returning_number}",
            (
                run_id,
                session_id,
                request_id,
                kind,
                agent_id,
                version,
                status.value,
                text,
                submission_digest,
                now,
                now,
                parent_id,
            ),
        )
        # The row as reading it back would give it (but its number), for a run begun in the
        # same transaction (run_to_begin): every other column holds its default.
        stamp = datetime.fromisoformat(now)
        self._inserted = (
            cursor,
            {
                "id": run_id,
                "session_id": session_id,
                "request_id": request_id,
                "kind": kind,
                "agent_id": agent_id,
                "version": version,
                "status": status,
                "input": loads(text),
                "history_head": None,
                "history_length": None,
                "outcome": None,
                "error": None,
                "attention_key": None,
                "usage": {},
                "created_at": stamp,
                "updated_at": stamp,
                "started_at": None,
                "finished_at": None,
                "parent_id": parent_id,
            },
        )

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set fields of a run (and ``updated_at``). JSON fields are serialized here."""
        self._inserted = None  # a run inserted before is no longer as it was written
        assignments, values = ["updated_at = ?"], [self.stamp()]
        for name, value in fields.items():
            if name not in UPDATABLE_RUN_FIELDS:
                raise ValueError(f"stead_runs.{name} cannot be updated")
            if name in JSON_RUN_FIELDS and (value is not None or name == "input"):
                value = dumps(value)  # an input is JSON even when it is null
            elif isinstance(value, RunStatus):
                value = value.value
            elif isinstance(value, datetime):  # most often the transaction's own time
                value = self._stamp if value is self._now else iso(value)
            assignments.append(f"{name} = ?")
            values.append(value)
        values.append(run_id)
        released = ""
        status = fields.get("status", "running")
        if self.dialect.release_claim and status != "running":
            released = self.dialect.release_claim
            self.claim_released(run_id, str(status))
        self.execute(
            f"UPDATE stead_runs SET {', '.join(assignments)}{released} WHERE id = ?", values
        )

    def interruptions(self, run_id: str) -> tuple[int, int | None]:
        """How many executions of the run in a row were interrupted with nothing new
        committed, and the mark of its journal when the last of them began (read only when an
        execution begins where another was interrupted)."""
        row = self.execute(
            "SELECT interruptions, interruption_mark FROM stead_runs WHERE id = ?", (run_id,)
        ).fetchone()
        return (0, None) if row is None else (int(row[0]), row[1])

    def given_back(self, run_ids: Sequence[str]) -> None:
        """Runs stopped in good order while ``running`` (their runtime closed or drained): their
        count of executions interrupted in a row starts again."""
        self.executemany(
            "UPDATE stead_runs SET interruptions = 0 WHERE id = ? AND status = 'running'",
            [(run_id,) for run_id in run_ids],
        )

    def claim_released(self, run_id: str, status: str) -> None:
        """Called when an update drops the run's claim, the run going to ``status`` (a store
        with claims keeps track)."""

    def runnable(self, limit: int, exclude: Iterable[str]) -> list[str]:
        """The ids of the runs the scheduler may start, in submission order: runnable status
        (or a retry_wait or a timer whose time has come) and at the head of their session (no
        earlier unfinished run). Only the ids: beginning a run reads it again, in the
        transaction that claims it."""
        excluded = set(exclude)
        statuses = ", ".join(f"'{s}'" for s in RUNNABLE_STATUSES)
        rows = self.execute(
            # Each kind of candidate is found through its index (the last in the words of the
            # timers' partial index): however many runs ended, only candidates are read.
            "SELECT r.id FROM stead_runs AS r WHERE r.number IN ("
            f"SELECT number FROM stead_runs WHERE status IN ({statuses}) "
            "UNION ALL SELECT number FROM stead_runs "
            "WHERE status = 'retry_wait' AND next_attempt_at <= ? "
            f"UNION ALL SELECT number FROM stead_runs{self.dialect.timers_index} "
            "WHERE status = 'waiting' AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?) "
            "AND NOT EXISTS (SELECT 1 FROM stead_runs AS p WHERE p.session_id = r.session_id "
            f"AND p.number < r.number AND p.status NOT IN {TERMINAL_SQL}) "
            "ORDER BY r.number LIMIT ?",
            (self.stamp(), self.stamp(), limit + len(excluded)),
        ).fetchall()
        return [run_id for (run_id,) in rows if run_id not in excluded][:limit]

    def next_wakeup(self) -> datetime | None:
        """The earliest time a run in retry_wait, or waiting on a timer, becomes runnable."""
        row = self.execute(
            "SELECT MIN(t) FROM (SELECT MIN(next_attempt_at) AS t FROM stead_runs "
            "WHERE status = 'retry_wait' UNION ALL SELECT MIN(next_attempt_at) FROM "
            f"stead_runs{self.dialect.timers_index} "
            "WHERE status = 'waiting' AND next_attempt_at IS NOT NULL) AS due"
        ).fetchone()
        return time_of(row[0])

    def run_status(self, run_id: str) -> str | None:
        """A run's status, held until this transaction ends so that a write to the run that
        starts meanwhile comes after it; ``None`` if there is no such run, or (where several
        processes write) a write to it is in flight — its status may be changing."""
        row = self.execute(
            f"SELECT status FROM stead_runs WHERE id = ?{self.dialect.share_lock}", (run_id,)
        ).fetchone()
        return str(row[0]) if row else None

    def child_runs(self, parent_id: str) -> list[Run]:
        """The runs ``parent_id`` owns, in the order they were created."""
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs WHERE parent_id = ? ORDER BY number",
            (parent_id,),
        ).fetchall()
        return [run_of(row) for row in rows]

    def list_runs(
        self,
        *,
        session_id: str | None,
        agent_id: str | None,
        statuses: Sequence[str] | None,
        before_number: int | None,
        limit: int,
        kind: str | None = None,
        parent_id: str | None = None,
    ) -> list[Run]:
        clauses: list[str] = []
        values: list[object] = []
        if kind is not None:
            clauses.append("kind = ?")
            values.append(kind)
        if parent_id is not None:
            clauses.append("parent_id = ?")
            values.append(parent_id)
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
        # A session's runs are few: asked for with a status too, they are read through the
        # session's index, not through the status index (every run that has the status).
        index = self.dialect.session_index if session_id is not None else ""
        rows = self.execute(
            f"SELECT {RUN_COLUMNS} FROM stead_runs{index} {where} ORDER BY number DESC LIMIT ?",
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
