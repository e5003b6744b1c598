"""Operations: intents, results, re-runs, and copies for a fork."""

from __future__ import annotations

from typing import Any

from ..._json import JSON, dumps, loads
from ...journal.records import Operation, Recovery
from ._base import OP_COLUMNS, OPERATIONS_PER_RUN, RUN_OPERATIONS_SQL, SqlBase, operation_of
from .events import operation_event


class OperationRows(SqlBase):
    def operations(self, run_id: str) -> list[Operation]:
        return [operation_of(row) for row in self.ask_operations(run_id).fetchall()]

    def ask_operations(self, run_id: str) -> Any:
        """The statement :meth:`operations` reads its rows from (sent, not read yet)."""
        return self.execute(
            f"SELECT {OP_COLUMNS} FROM stead_operations WHERE {RUN_OPERATIONS_SQL} ORDER BY id",
            (run_id, run_id),
        )

    def model_results(self, run_id: str) -> list[JSON]:
        """The results of a run's committed model responses, in order: what its usage counts."""
        rows = self.execute(
            f"SELECT result FROM stead_operations WHERE {RUN_OPERATIONS_SQL} "
            "AND kind = 'model' AND status = 'completed' ORDER BY id",
            (run_id, run_id),
        ).fetchall()
        return [loads(row[0]) for row in rows]

    def get_operation(self, run_id: str, key: str) -> Operation | None:
        row = self.execute(
            f"SELECT {OP_COLUMNS} FROM stead_operations WHERE {RUN_OPERATIONS_SQL} AND key = ?",
            (run_id, run_id, key),
        ).fetchone()
        return operation_of(row) if row else None

    def start_operation(
        self,
        *,
        run_id: str,
        run_number: int,
        key: str,
        position: int,
        kind: str,
        recovery: Recovery,
        input_hash: str,
        input: JSON,
        input_text: str | None = None,
        result_text: str | None = None,
        started_seq: int | None = None,
        completed_seq: int | None = None,
    ) -> None:
        """Insert an operation's intent; with ``result_text``, its result too (an operation
        whose intent had not been written yet when it finished). ``run_number`` is the run's
        ``number`` (the row's key is made of it and ``position``); ``started_seq`` and
        ``completed_seq`` are the sequences of the events the row announces."""
        now = self.stamp()
        text = input_text if input_text is not None else dumps(input)
        self.execute(
            "INSERT INTO stead_operations (id, run_id, key, position, kind, status, recovery, "
            "input_hash, input, result, attempts, created_at, updated_at, started_seq, "
            "completed_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)",
            (
                run_number * OPERATIONS_PER_RUN + position,
                run_id,
                key,
                position,
                kind,
                "started" if result_text is None else "completed",
                recovery,
                input_hash,
                text,
                result_text,
                now,
                now,
                started_seq,
                completed_seq,
            ),
        )

    def restart_operation(
        self, run_id: str, key: str, attempts: int, *, run_number: int, position: int
    ) -> None:
        """Record another attempt of an interrupted operation (and consume a re-run order); the
        row is found by its run's number and its position."""
        self.execute(
            "UPDATE stead_operations SET attempts = ?, rerun = 0, updated_at = ? "
            "WHERE id = ? AND key = ? AND status = 'started'",
            (attempts, self.stamp(), run_number * OPERATIONS_PER_RUN + position, key),
        )

    def complete_operation(
        self,
        run_id: str,
        key: str,
        result: JSON,
        result_text: str | None = None,
        completed_seq: int | None = None,
        *,
        run_number: int,
        position: int,
    ) -> bool:
        """Store the result of a started operation, found by its run's number and its position
        (``completed_seq``: the sequence of the event the row announces); False if that row is
        not ``key`` in progress."""
        cursor = self.execute(
            "UPDATE stead_operations SET status = 'completed', result = ?, updated_at = ?, "
            "completed_seq = ? WHERE id = ? AND key = ? AND status = 'started'",
            (
                result_text if result_text is not None else dumps(result),
                self.stamp(),
                completed_seq,
                run_number * OPERATIONS_PER_RUN + position,
                key,
            ),
        )
        return self.changed(cursor) == 1

    def order_rerun(self, run_id: str, key: str) -> None:
        self.execute(
            "UPDATE stead_operations SET rerun = 1, updated_at = ? "
            f"WHERE {RUN_OPERATIONS_SQL} AND key = ? AND status = 'started'",
            (self.stamp(), run_id, run_id, key),
        )

    def copy_operations(self, source_run_id: str, target_run_id: str, before: int) -> int:
        """Copy the completed operations positioned before ``before`` into another run (fork)."""
        cursor = self.execute(
            "INSERT INTO stead_operations (id, run_id, key, position, kind, status, recovery, "
            "input_hash, input, result, attempts, rerun, created_at, updated_at, copied_from) "
            f"SELECT (SELECT number * {OPERATIONS_PER_RUN} FROM stead_runs WHERE id = ?) "
            "+ position, ?, key, position, kind, status, recovery, input_hash, input, result, "
            "attempts, 0, created_at, updated_at, run_id FROM stead_operations "
            f"WHERE {RUN_OPERATIONS_SQL} AND position < ? AND status = 'completed'",
            (target_run_id, target_run_id, source_run_id, source_run_id, before),
        )
        return self.changed(cursor)

    def delete_operation(self, run_id: str, key: str) -> None:
        """Forget an intent whose work never started (a tool that asked for approval first).
        The event its row announced stays: it becomes an event row of its own."""
        row = self.execute(
            "SELECT started_seq, run_id, key, kind, input, NULL, created_at "
            f"FROM stead_operations WHERE {RUN_OPERATIONS_SQL} AND key = ? "
            "AND status = 'started' AND started_seq IS NOT NULL",
            (run_id, run_id, key),
        ).fetchone()
        if row is not None:
            event = operation_event(row, completed=False)
            self.unwritten.append((event.sequence, run_id, event.kind, dumps(event.data), row[6]))
        self.execute(
            f"DELETE FROM stead_operations WHERE {RUN_OPERATIONS_SQL} AND key = ? "
            "AND status = 'started'",
            (run_id, run_id, key),
        )

    def reset_attempts(self, run_id: str) -> None:
        """Give the interrupted operations of a run a fresh attempt budget (on retry)."""
        self.execute(
            "UPDATE stead_operations SET attempt_base = attempts "
            f"WHERE {RUN_OPERATIONS_SQL} AND status = 'started'",
            (run_id, run_id),
        )
