from __future__ import annotations

from collections.abc import Iterable

from ..journal.records import Event

__all__ = ["fold_text"]


def fold_text(events: Iterable[Event]) -> str:
    """The assistant text a user would see after ``events``, the way a client should fold a
    stream: deltas append to their attempt; a new attempt of the same model call drops the
    partial text of the old one; ``model_completed`` replaces it with the committed text.
    Texts of successive model calls are joined by a blank line; empty ones are skipped."""
    texts: dict[str, str] = {}
    attempts: dict[str, str] = {}
    for event in events:
        data = event.data
        key = data.get("key") if isinstance(data, dict) else None
        if not isinstance(key, str) or not key.startswith("model:"):
            continue
        if event.kind == "model_attempt_started":
            texts[key] = ""
            attempts[key] = data["attempt_id"]
        elif event.kind == "model_delta":
            if attempts.get(key, data.get("attempt_id")) == data.get("attempt_id"):
                texts[key] = texts.get(key, "") + data.get("text", "")
        elif event.kind == "model_completed":
            texts[key] = data.get("text", "")
    return "\n\n".join(text for text in texts.values() if text)
