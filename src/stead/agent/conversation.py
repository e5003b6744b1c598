"""The messages of a run, each linked into the content-addressed history chain.

Nothing here is written: every message is in the journal once already (agent/history.py builds
the conversation back from the operations). The chain head is what a model request refers to,
so a model operation's input names the whole conversation so far in a few bytes.
"""

from __future__ import annotations

from .._json import JSON, canonical, digest_text
from ..journal.keys import history_node
from ..messages import Message, message_to_json

__all__ = ["Conversation"]


class Conversation:
    """Messages in order, with the chain head after each."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.heads: list[str] = []

    @property
    def head(self) -> str | None:
        return self.heads[-1] if self.heads else None

    def append(self, message: Message, *, body: str | None = None) -> None:
        """Add a message; ``body`` is its canonical JSON when the caller has it already."""
        if body is None:
            body = canonical(message_to_json(message))
        self.messages.append(message)
        self.heads.append(history_node(self.head, digest_text(body)))

    def reference(self) -> JSON:
        return {"head": self.head, "length": len(self.messages)}
