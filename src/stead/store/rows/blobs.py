"""Blobs and histories: content stored once by hash, and chains of message blobs."""

from __future__ import annotations

from collections.abc import Sequence

from ..._json import digest_text
from ._base import SqlBase


class BlobRows(SqlBase):
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
