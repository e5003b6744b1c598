"""The inbox: commands other processes post to the owner, and their answers."""

from __future__ import annotations

from datetime import datetime

from ..._clock import iso
from ..._json import JSON, dumps, loads
from ...journal.protocol import InboxRow
from ._base import SqlBase, load


class InboxRows(SqlBase):
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

    def hold_command(self, command_id: int) -> bool:
        """Lock a posted command's row until the transaction ends (a no-op update); False if
        it was answered meanwhile — by another worker that got to it first, say."""
        cursor = self.execute(
            "UPDATE stead_inbox SET status = 'posted' WHERE id = ? AND status = 'posted'",
            (command_id,),
        )
        return self.changed(cursor) == 1

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
        return self.changed(cursor)

    def get_command(self, command_id: int) -> InboxRow | None:
        row = self.execute(
            "SELECT id, command, status, answer FROM stead_inbox WHERE id = ?", (command_id,)
        ).fetchone()
        return (row[0], loads(row[1]), row[2], load(row[3])) if row else None
