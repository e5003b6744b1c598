"""``stead runs list|show|events``: read runs through a :class:`stead.Client`, from any process,
whether or not a runtime owns the database. Reading never changes anything. A task or graph
run is shown with the tree of runs it owns (``_render_tasks``)."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from ..agent.checkpoint import Checkpoint
from ..client import Client
from ..journal.records import Event, Interaction, Operation, Run, RunStatus
from ..messages import AssistantMessage
from ._common import console, db_option, emit_json, json_option, print_out, with_client
from ._render import (
    local_time,
    plain,
    runs_table,
    safe_text,
    show_json,
    show_run,
)
from ._render_events import event_line, events_table
from ._render_tasks import TaskRunView, read_task_run, show_task_run, task_show_json

__all__ = ["RunView", "read_run", "runs", "safe_text"]

STATUSES = [status.value for status in RunStatus]


@click.group()
def runs() -> None:
    """Inspect runs: list them, show one (status, why, what to do next), follow its events."""


def status_option(fn: Any) -> Any:
    return click.option(
        "--status",
        "statuses",
        multiple=True,
        type=click.Choice(STATUSES),
        help="Only runs with this status (repeat for several).",
    )(fn)


def page_options(fn: Any) -> Any:
    fn = click.option(
        "--after",
        default=None,
        metavar="CURSOR",
        help="Continue a previous listing: the cursor it printed.",
    )(fn)
    return click.option(
        "--limit",
        default=50,
        show_default=True,
        type=click.IntRange(1, 1000),
        help="Runs per page.",
    )(fn)


def show_page(
    db: str,
    as_json: bool,
    *,
    command: list[str],
    noun: str,
    statuses: tuple[str, ...],
    filters: list[tuple[str, str, str | None]],
    limit: int,
    after: str | None,
    definition: str | None = None,
    **query: Any,
) -> None:
    """One page of runs (``query``: ``Client.list_runs`` filters) as a table or JSON, with
    the command that shows the next page. ``filters`` are (flag, word, value) of the options
    given; ``definition`` heads the column of what the runs execute (default: ``agent``, or
    ``definition`` when other kinds are listed beside agents)."""

    async def read(client: Client) -> tuple[list[Run], str | None, dict[str, float | None]]:
        page = await client.list_runs(
            status=list(statuses) or None, after=after, limit=limit, **query
        )
        found = list(page.runs)
        return found, page.next_cursor, await client.costs([run.id for run in found])

    found, cursor, costs = with_client(db, read)
    if as_json:
        emit_json(
            {
                "runs": [{**plain(run), "cost_usd": costs.get(run.id)} for run in found],
                "next_cursor": cursor,
            }
        )
        return
    given = [(flag, word, value) for flag, word, value in filters if value is not None]
    if not found:
        words = [f"status {' or '.join(statuses)}"] if statuses else []
        words += [f"{word} {value!r}" for _, word, value in given]
        where = f" with {', '.join(words)}" if words else ""
        print_out(safe_text(f"no {noun}{where} in {db}" + (" after that cursor" if after else "")))
        return
    if definition is None:
        mixed = any(run.kind != "agent" for run in found)  # agents beside tasks or graphs
        definition = "definition" if mixed else "agent"
    print_out(runs_table(found, costs, console.width, definition=definition))
    if cursor is not None:
        next_page(command, statuses, given, limit, cursor, db, len(found))


def next_page(
    command: list[str],
    statuses: tuple[str, ...],
    given: Sequence[tuple[str, str, str | None]],
    limit: int,
    cursor: str,
    db: str,
    shown: int,
) -> None:
    """Print the command that lists the next page (the same options, after ``cursor``)."""
    words = list(command)
    for status in statuses:
        words += ["--status", status]
    for flag, _, value in given:
        if value is not None:
            words += [flag, str(value)]
    if limit != 50:
        words += ["--limit", str(limit)]
    words += ["--after", cursor, "--db", db]
    print_out(
        safe_text(
            f"more runs than these {shown}; the next page: "
            + " ".join(shlex.quote(w) for w in words),
            one_line=True,
        )
    )


@runs.command("list")
@status_option
@click.option("--session", default=None, help="Only runs of this session.")
@click.option("--agent", default=None, help="Only runs of this agent id.")
@page_options
@db_option
@json_option
def list_runs(
    statuses: tuple[str, ...],
    session: str | None,
    agent: str | None,
    limit: int,
    after: str | None,
    db: str,
    as_json: bool,
) -> None:
    """List runs, newest first: status, local times, duration, tokens and cost.

    \b
    Examples:
      stead runs list --status waiting --status needs_attention
      stead runs list --session customer-42 --json
    """
    show_page(
        db,
        as_json,
        command=["stead", "runs", "list"],
        noun="runs",
        statuses=statuses,
        filters=[("--session", "session", session), ("--agent", "agent", agent)],
        limit=limit,
        after=after,
        session_id=session,
        agent_id=agent,
    )


@dataclass(frozen=True, slots=True)
class RunView:
    """What ``stead runs show`` reads of a run, in one place."""

    run: Run
    operations: list[Operation]
    checkpoint: Checkpoint
    responses: dict[str, AssistantMessage]
    interactions: list[Interaction]
    cursor: int


async def read_run(client: Client, run_id: str) -> RunView:
    snapshot = await client.snapshot(run_id)
    responses = await client.model_responses(run_id)
    interactions = await client.list_interactions(status=None, run_id=run_id, limit=1000)
    return RunView(
        run=snapshot.run,
        operations=list(snapshot.operations),
        checkpoint=snapshot.checkpoint,
        responses=responses,
        interactions=interactions,
        cursor=snapshot.cursor,
    )


def render_run(view: RunView, db: str) -> RenderableType:
    """``view`` as ``stead runs show`` prints it."""
    return show_run(
        view.run,
        view.operations,
        view.checkpoint,
        view.responses,
        view.interactions,
        db,
        console.width,
    )


@runs.command("show")
@click.argument("run_id")
@db_option
@json_option
def show(run_id: str, db: str, as_json: bool) -> None:
    """Show a run: its status and why, the commands that move it on (approve, deny, answer,
    resolve, retry), its interactions, its operations with their results (model text and tool
    calls, tool outputs), its usage and cost. For a task or graph run: what it waits for (a
    signal, a timer, a child run), its operations, and the runs it owns as a tree."""

    async def read(client: Client) -> RunView | TaskRunView:
        run = await client.run_record(run_id)
        if run.kind == "agent":
            return await read_run(client, run_id)
        return await read_task_run(client, run_id)

    view = with_client(db, read)
    if isinstance(view, TaskRunView):
        if as_json:
            emit_json(task_show_json(view, db))
        else:
            print_out(show_task_run(view, db))
        return
    if as_json:
        emit_json(
            show_json(
                view.run,
                view.operations,
                view.checkpoint,
                view.responses,
                view.interactions,
                view.cursor,
                db,
            )
        )
        return
    print_out(render_run(view, db))


@runs.command("events")
@click.argument("run_id")
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(0, 2**63 - 1),
    metavar="SEQUENCE",
    help="Only events after this sequence number.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing events as they are written (by this or another process) until the "
    "run ends; one JSON line per event with --json.",
)
@db_option
@json_option
def events(run_id: str, after: int, follow: bool, db: str, as_json: bool) -> None:
    """Show a run's events, or follow them live with --follow (it exits when the run ends)."""
    if follow:
        _follow(run_id, after, db, as_json)
        return

    async def read(client: Client) -> list[Event]:
        snapshot = await client.snapshot(run_id)
        found: list[Event] = []
        if snapshot.cursor <= after:
            return found
        stream = client.events(run_id, after)
        try:
            async for event in stream:
                found.append(event)
                if event.sequence >= snapshot.cursor:
                    break
        finally:
            await _close(stream)
        return found

    found = with_client(db, read)
    if as_json:
        emit_json({"run_id": run_id, "events": [plain(e) for e in found]})
        return
    if not found:
        print_out(safe_text(f"no events of run {run_id} after sequence {after}"))
        return
    print_out(events_table(found))


def _follow(run_id: str, after: int, db: str, as_json: bool) -> None:
    async def stream(client: Client) -> None:
        run = await client.run_record(run_id)
        if not as_json:
            print_out(
                Text.assemble(
                    ("following run ", "dim"),
                    safe_text(run.id, style="bold", one_line=True),
                    (f" ({run.status.value}) since {local_time(run.created_at)}", "dim"),
                    (" — ends when the run ends; Ctrl-C stops", "dim"),
                )
            )
        found = client.events(run_id, after)
        try:
            async for event in found:
                if as_json:
                    emit_json(plain(event), lines=True)
                else:
                    print_out(event_line(event))
                    console.file.flush()
        finally:
            await _close(found)

    try:
        with_client(db, stream)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


async def _close(stream: AsyncIterator[Event]) -> None:
    """End an event stream left early (it is an async generator)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
