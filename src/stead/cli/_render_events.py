"""How a run's events reach a terminal: a line a person can read for each, in a table or as a
live stream. Journal values go through :func:`safe_text`, as everywhere in the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Column, Table
from rich.text import Text

from ..journal.records import Event
from ._render import (
    clock_time,
    line,
    listing,
    plain_text,
    response_words,
    safe_text,
    short,
    status_text,
    zone_name,
)

__all__ = ["describe", "event_line", "events_table"]


def describe(event: Event) -> Text:
    """One line a person can read for an event (journal values made safe by ``safe_text``)."""
    data = event.data if isinstance(event.data, dict) else {}
    key = line(data.get("key", ""))
    attempt = line(" (attempt ", data["attempt"], ")") if data.get("attempt", 1) != 1 else ""
    if event.kind == "submitted":
        forked = (
            line(" forked from ", data["forked_from"], " before ", data.get("before", ""))
            if data.get("forked_from")
            else ""
        )
        return line(
            data.get("agent_id"),
            "@",
            data.get("version"),
            " request ",
            data.get("request_id"),
            forked,
        )
    if event.kind == "status":
        extra = ", resumed after a stop" if data.get("resumed") else ""
        extra += ", retried" if data.get("retried") else ""
        migrated = data.get("migrated_from")
        extra += f", migrated from version {migrated}" if migrated else ""
        at = line(" at ", data["operation"]) if data.get("operation") else ""
        resolved = (
            line(" (", data["resolved"], " resolved by hand)") if data.get("resolved") else ""
        )
        reason = line(": ", data["reason"]) if data.get("reason") else ""
        return line(status_text(str(data.get("status"))), extra, at, resolved, reason)
    if event.kind == "model_completed":
        calls = ", ".join(
            plain_text(c.get("name")) for c in data.get("tool_calls", []) if isinstance(c, dict)
        )
        return line(key, " → ", line("call ", calls) if calls else short(data.get("text", ""), 60))
    if event.kind == "model_delta":
        return line(key, " ", short(data.get("text") or data.get("tool_calls") or "", 60))
    if event.kind == "model_attempt_failed":
        return line(key, attempt, ": ", short(data.get("error"), 80))
    if event.kind == "tool_started":
        return line(key, " ", data.get("tool"), attempt)
    if event.kind == "tool_completed":
        verdict = "failed: " if data.get("failed") else ""
        by_hand = " (resolved by hand)" if data.get("resolved") else ""
        return line(key, " → ", verdict, short(data.get("output"), 50), by_hand)
    if event.kind == "interaction_requested":
        what = data.get("tool") or data.get("kind")
        return line(
            key,
            " ",
            what,
            " ",
            short(data.get("arguments"), 50),
            " (",
            data.get("interaction_id"),
            ")",
        )
    if event.kind == "interaction_responded":
        response = data.get("response")
        words = response_words(response) if isinstance(response, dict) else plain_text(response)
        return line(key, " ", short(words, 60), " (", data.get("interaction_id"), ")")
    return _describe_task_event(event.kind, data, key, attempt)


def _describe_task_event(kind: str, data: dict[str, Any], key: Text, attempt: Text | str) -> Text:
    """The events of tasks, graphs and their children."""
    if kind == "effect_started":
        return line(key, " ", data.get("recovery"), attempt)
    if kind == "effect_completed":
        if data.get("failed"):
            return line(key, " → failed: ", short(data.get("error"), 60))
        by_hand = " (resolved by hand)" if data.get("resolved") else ""
        return line(key, " → ", short(data.get("output"), 50), by_hand)
    if kind == "timer_set":
        return line(key, " until ", data.get("until"))
    if kind == "signal_received":
        return line(
            data.get("name"), " #", data.get("number"), " (request ", data.get("request_id"), ")"
        )
    if kind in ("child_started", "child_completed"):
        what = line(" ", data.get("kind"), " ", data.get("definition")) if data.get("kind") else ""
        status = line(" → ", data.get("status")) if data.get("status") else ""
        return line(key, what, " run ", data.get("child_run_id"), status)
    if kind == "custom":
        return line(data.get("name"), " ", short(data.get("value"), 60))
    return line(key, attempt) if data.get("key") else short(data, 70)


def events_table(events: Sequence[Event]) -> Table:
    table = listing(
        Column("seq", justify="right", no_wrap=True),
        Column(f"time ({zone_name()})", no_wrap=True),
        Column("event", no_wrap=True),
        Column("detail", ratio=1),
        title="events",
    )
    for event in events:
        table.add_row(
            safe_text(event.sequence),
            safe_text(clock_time(event.created_at)),
            safe_text(event.kind),
            describe(event),
        )
    return table


def event_line(event: Event) -> Text:
    """One event as a line of a live stream (``--follow``)."""
    return line(
        safe_text(f"{event.sequence:>6}  ", style="dim"),
        safe_text(clock_time(event.created_at) + "  ", style="dim"),
        safe_text(f"{event.kind:<22}", style="bold"),
        " ",
        describe(event),
    )
