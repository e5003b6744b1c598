"""``stead interactions list`` (the approval queue) and ``stead approve|deny|answer``.

A decision is recorded exactly once: through the inbox of the runtime that owns the database
(which applies it within a fraction of a second), or in place when no runtime is running — the
next one to open the database continues the run.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..agent.interactions import Answer, Approve, Deny, Response
from ..client import Client
from ..errors import ValidationError
from ..journal.records import Interaction, Run, RunStatus
from ._common import (
    console,
    db_option,
    emit_json,
    fail,
    json_option,
    print_out,
    timeout_option,
    with_client,
)
from ._render import inert, interactions_table, line, plain, safe_text, short, status_text

__all__ = ["answer", "approve", "deny", "interactions", "parse_value"]

F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def interactions() -> None:
    """The approval queue: tool calls waiting for approval, questions waiting for an answer."""


@interactions.command("list")
@click.option(
    "--status",
    default="pending",
    show_default=True,
    type=click.Choice(["pending", "responded", "cancelled", "all"]),
    help="Which interactions: those waiting for a person, answered, cancelled with their run, "
    "or all.",
)
@click.option("--session", default=None, help="Only interactions of runs of this session.")
@click.option("--run", "run_id", default=None, help="Only interactions of this run.")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="At most this many.",
)
@db_option
@json_option
def list_interactions(
    status: str, session: str | None, run_id: str | None, limit: int, db: str, as_json: bool
) -> None:
    """List interactions, oldest first, with their tool and arguments (by default the pending
    ones: the approval queue). Answer them with `stead approve`, `stead deny` or
    `stead answer`."""

    async def read(client: Client) -> list[Interaction]:
        return await client.list_interactions(
            status=None if status == "all" else status,
            session_id=session,
            run_id=run_id,
            limit=limit,
        )

    found = with_client(db, read)
    if as_json:
        emit_json({"interactions": [plain(i) for i in found], "more": len(found) == limit})
        return
    if not found:
        print_out(safe_text(f"no {'' if status == 'all' else status + ' '}interactions in {db}"))
        return
    print_out(interactions_table(found, width=console.width))
    if len(found) == limit:
        print_out(safe_text(f"there may be more than these {limit}; raise --limit (up to 1000)"))
    if any(i.status == "pending" for i in found):
        where = f"--db {shlex.quote(db)}"
        print_out(
            safe_text(
                f"approve: stead approve ID {where} · deny: stead deny ID --reason TEXT {where}"
                f" · answer a question: stead answer ID VALUE {where}",
                style="dim",
            )
        )


def _reviewer_option(fn: F) -> F:
    return click.option(
        "--reviewer", default=None, help="Who decides (recorded with the decision)."
    )(fn)


@dataclass(frozen=True, slots=True)
class _Recorded:
    before: Interaction
    after: Interaction
    run: Run


def _respond(
    db: str, interaction_id: str, response: Response, timeout: float, verb: str
) -> _Recorded:
    async def act(client: Client) -> _Recorded:
        before = await client.interaction(interaction_id)
        if (before.kind == "question") != isinstance(response, Answer):
            how = (
                f"stead answer {interaction_id} VALUE"
                if before.kind == "question"
                else f"stead approve {interaction_id} or stead deny {interaction_id} --reason R"
            )
            raise fail(
                f"interaction {interaction_id} is a{'n' if before.kind == 'approval' else ''} "
                f"{before.kind}, which cannot be {verb}; use {how}"
            )
        await client.respond(interaction_id, response)
        after = await client.interaction(interaction_id)
        run = await client.run_record(after.run_id)
        return _Recorded(before, after, run)

    return with_client(db, act, timeout=timeout)


def _report(recorded: _Recorded, verb: str, as_json: bool) -> None:
    before, after, run = recorded.before, recorded.after, recorded.run
    changed = before.status != "responded"
    if as_json:
        emit_json({"changed": changed, "interaction": plain(after), "run": plain(run)})
        return
    what = (
        line(after.tool or after.kind, " ", short(after.arguments, 80))
        if after.kind != "budget"
        else line("budget ", short(after.payload, 80))
    )
    head = (
        line(verb, " ", safe_text(after.interaction_id, style="bold"), " (", what, ")")
        if changed
        else line(
            safe_text(after.interaction_id, style="bold"),
            " was already ",
            verb,
            " with the same decision; nothing changed",
        )
    )
    print_out(head)
    if run.status == RunStatus.WAITING:
        tail = line(
            "run ",
            run.id,
            " is ",
            status_text(run.status.value),
            ": it waits for other interactions",
        )
    elif run.status in (RunStatus.PENDING, RunStatus.QUEUED):
        tail = line(
            "run ",
            run.id,
            " is ",
            status_text(run.status.value),
            ": it continues when a runtime runs it (the one that owns the database, or the next "
            "App.open)",
        )
    else:
        tail = line("run ", run.id, " is ", status_text(run.status.value))
    print_out(tail)


@click.command()
@click.argument("interaction_id")
@_reviewer_option
@click.option("--note", default=None, help="A note recorded with the approval.")
@timeout_option
@db_option
@json_option
def approve(
    interaction_id: str,
    reviewer: str | None,
    note: str | None,
    timeout: float,
    db: str,
    as_json: bool,
) -> None:
    """Approve a pending tool call (or going on past a budget): the call runs, once."""
    try:
        response = Approve(reviewer=reviewer, note=note)
    except ValidationError as exc:
        raise click.UsageError(inert(str(exc), one_line=True)) from None
    _report(_respond(db, interaction_id, response, timeout, "approved"), "approved", as_json)


@click.command()
@click.argument("interaction_id")
@click.option("--reason", required=True, help="Why: the model receives it as the tool's result.")
@_reviewer_option
@timeout_option
@db_option
@json_option
def deny(
    interaction_id: str, reason: str, reviewer: str | None, timeout: float, db: str, as_json: bool
) -> None:
    """Deny a pending tool call: it never runs; the model is told why."""
    try:
        response = Deny(reason=reason, reviewer=reviewer)
    except ValidationError as exc:
        raise click.UsageError(inert(str(exc), one_line=True)) from None
    _report(_respond(db, interaction_id, response, timeout, "denied"), "denied", as_json)


def parse_value(text: str) -> Any:
    """VALUE as JSON if it parses (``42``, ``true``, ``{"a": 1}``, ``"quoted"``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text
    except RecursionError:
        raise click.BadParameter("VALUE is JSON nested too deeply to store") from None


@click.command()
@click.argument("interaction_id")
@click.argument("value")
@_reviewer_option
@timeout_option
@db_option
@json_option
def answer(
    interaction_id: str, value: str, reviewer: str | None, timeout: float, db: str, as_json: bool
) -> None:
    """Answer a question the agent asked (ask_user). VALUE is parsed as JSON if it parses
    (42, true, {"size": "L"}), else taken as text."""
    try:
        response = Answer(value=parse_value(value), reviewer=reviewer)
    except ValidationError as exc:
        raise click.UsageError(inert(str(exc), one_line=True)) from None
    _report(_respond(db, interaction_id, response, timeout, "answered"), "answered", as_json)
