"""Interactions: what a person must answer, and their responses."""

from __future__ import annotations

from typing import Any

from ..._json import JSON, dumps
from ...journal.records import Interaction
from ._base import INTERACTION_SELECT, SqlBase, interaction_of


class InteractionRows(SqlBase):
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
        return [interaction_of(row) for row in self.ask_run_interactions(run_id).fetchall()]

    def ask_run_interactions(self, run_id: str) -> Any:
        """The statement :meth:`run_interactions` reads its rows from (sent, not read yet)."""
        order = f"i.requested_at, i.{self.dialect.insertion_order}"
        return self.execute(f"{INTERACTION_SELECT} WHERE i.run_id = ? ORDER BY {order}", (run_id,))

    def list_interactions(
        self, *, status: str | None, session_id: str | None, run_id: str | None, limit: int
    ) -> list[Interaction]:
        clauses: list[str] = []
        values: list[object] = []
        # With a run or a session named, its own interactions are read (through the run's, or
        # the session's runs), not every one in the status.
        narrow = run_id is not None or session_id is not None
        unindexed = self.dialect.unindexed if narrow else ""
        for column, value in (
            (f"{unindexed}i.status", status),
            ("r.session_id", session_id),
            ("i.run_id", run_id),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = f"i.requested_at, i.{self.dialect.insertion_order}"
        rows = self.execute(
            f"{INTERACTION_SELECT} {where} ORDER BY {order} LIMIT ?",
            (*values, limit),
        ).fetchall()
        return [interaction_of(row) for row in rows]

    def respond_interaction(self, interaction_id: str, response: JSON) -> None:
        self.execute(
            "UPDATE stead_interactions SET status = 'responded', response = ?, responded_at = ? "
            "WHERE id = ? AND status = 'pending'",
            (dumps(response), self.stamp(), interaction_id),
        )

    # A run's interactions are found through (run_id, key), not through the status index,
    # which holds every run's pending ones (thousands, where thousands of runs wait).

    def cancel_interactions(self, run_id: str) -> None:
        self.execute(
            "UPDATE stead_interactions SET status = 'cancelled', responded_at = ? "
            f"WHERE run_id = ? AND {self.dialect.unindexed}status = 'pending'",
            (self.stamp(), run_id),
        )

    def pending_interactions(self, run_id: str) -> int:
        row = self.execute(
            "SELECT COUNT(*) FROM stead_interactions "
            f"WHERE run_id = ? AND {self.dialect.unindexed}status = 'pending'",
            (run_id,),
        ).fetchone()
        return int(row[0])
