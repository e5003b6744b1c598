"""The messages of a run, each linked into the content-addressed history chain.

A message is stored once (a blob plus one chain node); a model request refers to the whole
conversation so far by its chain head, so storage grows linearly with the conversation, not with
the number of model requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._json import JSON, canonical, digest_text
from ..journal.keys import history_node
from ..journal.records import HistoryNode, Writes
from ..messages import Message, message_to_json

__all__ = ["Conversation"]


@dataclass(frozen=True, slots=True)
class _Unwritten:
    body: str
    node: HistoryNode


class Conversation:
    """Messages in order; those appended since :meth:`take_pending` are not yet journaled."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.heads: list[str] = []
        self._pending: list[_Unwritten] = []

    @property
    def head(self) -> str | None:
        return self.heads[-1] if self.heads else None

    def append(self, message: Message, *, stored: bool = False, body: str | None = None) -> None:
        """Add a message; ``body`` is its canonical JSON when the caller has it already;
        ``stored`` when the journal holds it already (history, replay)."""
        if body is None:
            body = canonical(message_to_json(message))
        blob = digest_text(body)
        node = history_node(self.head, blob)
        if not stored:
            self._pending.append(_Unwritten(body, (node, self.head, blob)))
        self.messages.append(message)
        self.heads.append(node)

    def take_pending(self) -> Writes:
        """The writes of the messages appended since the last call (blobs and chain nodes)."""
        pending, self._pending = self._pending, []
        return Writes(blobs=tuple(p.body for p in pending), history=tuple(p.node for p in pending))

    def reference(self) -> JSON:
        return {"head": self.head, "length": len(self.messages)}
