"""``stead submit-task|signal|tasks|graphs``: start task runs, signal them, list task and graph
runs, show a graph node by node.

Submitting and signalling are commands like any other: applied once, by the runtime that owns
the database or in place when none runs. A graph is shown by its nodes, since a node that has
not started yet has no run to show (``stead runs show`` prints the runs a graph owns as a tree).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Group, RenderableType
from rich.table import Column, Table
from rich.text import Text

from ..client import Client
from ..errors import ValidationError
from ..journal.records import Run, RunStatus
from ._common import (
    db_option,
    emit_json,
    fail,
    json_option,
    print_out,
    timeout_option,
    with_client,
)
from ._render import (
    Suggestion,
    duration,
    inert,
    line,
    listing,
    local_time,
    plain,
    run_suggestions,
    run_summary,
    safe_text,
    short,
    status_text,
    zone_name,
)
from ._render_tasks import run_output, run_reason, stead_command, suggestion_block
from .runs import next_page, page_options, show_page, status_option

__all__ = ["graphs", "signal", "submit_task", "tasks"]

STATUSES = [status.value for status in RunStatus]


# -- submit-task and signal ----------------------------------------------------------------------


def _json_value(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    flag = param.opts[0] if param.opts else "the value"
    try:
        return json.loads(value)
    except RecursionError:
        raise click.BadParameter("the JSON is nested too deeply to store") from None
    except ValueError as exc:
        raise click.BadParameter(
            inert(
                f"not JSON ({exc}): {value!r}. Quote it for the shell, e.g. {flag} "
                f"'\"T-17\"' for a string or {flag} '{{\"id\": 7}}' for an object",
                one_line=True,
            )
        ) from None


def _then(run: Run) -> None:
    """Say where the run is now, and what moves it on if nothing runs it yet."""
    print_out(line("run ", safe_text(run.id, style="bold"), " is ", status_text(run.status.value)))
    if run.status in (RunStatus.PENDING, RunStatus.QUEUED):
        print_out(
            safe_text(
                "it continues when a runtime runs it (the one that owns the database, or the next "
                "App.open)",
                style="dim",
            )
        )


@click.command("submit-task")
@click.argument("task")
@click.option("--session", "session_id", required=True, help="The session the run belongs to.")
@click.option(
    "--request",
    "request_id",
    required=True,
    help="The request id: with the session, the idempotency key (the same submission again "
    "prints the same run).",
)
@click.option(
    "--input",
    "input_value",
    default=None,
    metavar="JSON",
    callback=_json_value,
    help="The task's input, as JSON (a string is quoted: '\"T-17\"'). Default: null.",
)
@click.option(
    "--version",
    "task_version",
    default=None,
    help="Pin the run to this version of the task (default: the latest the runtime that owns "
    "the database registered; needed when none is running).",
)
@click.option(
    "--enqueue",
    is_flag=True,
    help="Queue the run behind a busy session's run instead of failing.",
)
@timeout_option
@db_option
@json_option
def submit_task(
    task: str,
    session_id: str,
    request_id: str,
    input_value: Any,
    task_version: str | None,
    enqueue: bool,
    timeout: float,
    db: str,
    as_json: bool,
) -> None:
    """Submit a run of task TASK and print its id. The runtime that owns the database runs it
    (it checks the input against the task's input type first); with none running it waits,
    pending, for the next one.

    \b
    Examples:
      stead submit-task triage --session t42 --request msg-1 --input '"T-17"'
      RUN=$(stead submit-task triage --session t42 --request msg-2 --version 1)
    """

    async def act(client: Client) -> Run:
        try:
            handle = await client.submit_task(
                task,
                input_value,
                session_id=session_id,
                request_id=request_id,
                enqueue=enqueue,
                version=task_version,
            )
        except ValidationError as exc:
            if exc.parameter == "version":  # no runtime to pick the latest version
                raise fail(
                    f"no worker owns this store to pick the latest version of task {task!r}; "
                    "pass --version V (see `stead tasks`), or submit while a worker runs"
                ) from None
            raise
        return await client.run_record(handle.id)

    run = with_client(db, act, timeout=timeout)
    if as_json:
        emit_json({"run_id": run.id, "run": plain(run)})
        return
    click.echo(inert(run.id, one_line=True))


@click.command("signal")
@click.argument("run_id")
@click.argument("name")
@click.option(
    "--value",
    default=None,
    metavar="JSON",
    callback=_json_value,
    help="The signal's value, as JSON (a string is quoted: '\"approved\"'). Default: null.",
)
@click.option(
    "--request-id",
    "request_id",
    required=True,
    help="Makes the signal idempotent: the same signal again under this id changes nothing; "
    "a different one is an error.",
)
@timeout_option
@db_option
@json_option
def signal(
    run_id: str,
    name: str,
    value: Any,
    request_id: str,
    timeout: float,
    db: str,
    as_json: bool,
) -> None:
    """Deliver signal NAME to task run RUN_ID. It is journaled at once, whether or not the task
    waits for it yet, and its waits for NAME take signals in the order they came."""

    async def act(client: Client) -> tuple[bool, Run]:
        new = await client.signal(run_id, name, value, request_id=request_id)
        return new, await client.run_record(run_id)

    new, run = with_client(db, act, timeout=timeout)
    if as_json:
        emit_json(
            {
                "changed": new,
                "signal": name,
                "value": value,
                "request_id": request_id,
                "run": plain(run),
            }
        )
        return
    if new:
        print_out(
            line(
                "delivered signal ",
                safe_text(repr(name), style="bold"),
                " to run ",
                safe_text(run.id, style="bold"),
                " with value ",
                short(json.dumps(value, ensure_ascii=False), 80),
            )
        )
    else:
        print_out(
            line(
                "signal ",
                safe_text(repr(name), style="bold"),
                " was already delivered to run ",
                safe_text(run.id, style="bold"),
                " under request id ",
                request_id,
                "; nothing changed",
            )
        )
    _then(run)


# -- listing task and graph runs -----------------------------------------------------------------


@click.command("tasks")
@status_option
@click.option("--session", default=None, help="Only runs of this session.")
@click.option("--task", "task_name", default=None, help="Only runs of this task.")
@click.option("--parent", default=None, metavar="RUN_ID", help="Only the runs this run owns.")
@page_options
@db_option
@json_option
def tasks(
    statuses: tuple[str, ...],
    session: str | None,
    task_name: str | None,
    parent: str | None,
    limit: int,
    after: str | None,
    db: str,
    as_json: bool,
) -> None:
    """List task runs, newest first (a task's child tasks too): status, local times, duration,
    tokens and cost. `stead runs show RUN_ID` shows one with the runs it owns.

    \b
    Examples:
      stead tasks --task triage --status waiting
      stead tasks --session t42 --json
    """

    show_page(
        db,
        as_json,
        command=["stead", "tasks"],
        noun="task runs",
        statuses=statuses,
        filters=[
            ("--session", "session", session),
            ("--task", "task", task_name),
            ("--parent", "parent", parent),
        ],
        limit=limit,
        after=after,
        definition="task",
        session_id=session,
        agent_id=task_name,
        kind="task",
        parent_id=parent,
    )


def _nodes(run: Run) -> list[dict[str, Any]]:
    """The nodes a graph run was submitted with (as its input keeps them)."""
    found = run.input.get("nodes") if isinstance(run.input, dict) else None
    return [n for n in found if isinstance(n, dict)] if isinstance(found, list) else []


def _node_runs(children: Sequence[Run]) -> dict[str, Run]:
    """The graph's node runs by node id (a node's run has the request id ``node:<id>``)."""
    return {
        run.request_id.removeprefix("node:"): run
        for run in children
        if run.request_id.startswith("node:")
    }


def _progress(run: Run, children: Sequence[Run]) -> tuple[int, int]:
    """How many of a graph's nodes completed, and how many it has."""
    nodes = _nodes(run)
    runs = _node_runs(children)
    done = sum(
        1
        for node in nodes
        if (child := runs.get(str(node.get("id")))) is not None
        and child.status == RunStatus.COMPLETED
    )
    return done, len(nodes)


def _graphs_table(found: Sequence[Run], children: Mapping[str, Sequence[Run]]) -> Table:
    table = listing(
        Column("run", no_wrap=True),
        Column("status", no_wrap=True),
        Column("nodes done", no_wrap=True, justify="right"),
        "session",
        "request",
        Column(f"created ({zone_name()})", no_wrap=True),
        Column("took", no_wrap=True),
    )
    for run in found:
        done, total = _progress(run, children.get(run.id, ()))
        table.add_row(
            safe_text(run.id, one_line=True),
            status_text(run.status.value),
            safe_text(f"{done}/{total}"),
            safe_text(run.session_id, one_line=True),
            safe_text(run.request_id, one_line=True),
            safe_text(local_time(run.created_at).rsplit(" ", 1)[0]),
            safe_text(duration(run)),
        )
    return table


_LIST_PARAMS = ("statuses", "session", "limit", "after", "db", "schema", "as_json")


@click.group("graphs", invoke_without_command=True)
@status_option
@click.option("--session", default=None, help="Only runs of this session.")
@page_options
@db_option
@json_option
@click.pass_context
def graphs(
    ctx: click.Context,
    statuses: tuple[str, ...],
    session: str | None,
    limit: int,
    after: str | None,
    db: str,
    as_json: bool,
) -> None:
    """List graph runs, newest first, with how many of their nodes completed; `stead graphs
    show RUN_ID` shows one node by node.

    \b
    Examples:
      stead graphs --status waiting
      stead graphs show RUN_ID --json
    """
    if ctx.invoked_subcommand is not None:
        given = [
            name
            for name in _LIST_PARAMS
            if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
        ]
        if given:
            raise click.UsageError(
                f"`stead graphs {ctx.invoked_subcommand}` takes its own options: put them after "
                f"{ctx.invoked_subcommand}, e.g. `stead graphs {ctx.invoked_subcommand} RUN_ID "
                "--db PATH`"
            )
        return

    async def read(client: Client) -> tuple[list[Run], str | None, dict[str, list[Run]]]:
        page = await client.list_runs(
            session_id=session,
            status=list(statuses) or None,
            after=after,
            limit=limit,
            kind="graph",
        )
        children: dict[str, list[Run]] = {}
        for run in page.runs:
            owned = await client.list_runs(parent_id=run.id, limit=1000)
            children[run.id] = list(owned.runs)
        return list(page.runs), page.next_cursor, children

    found, cursor, children = with_client(db, read)
    if as_json:
        documents = []
        for run in found:
            done, total = _progress(run, children.get(run.id, ()))
            documents.append({**plain(run), "nodes": total, "nodes_completed": done})
        emit_json({"runs": documents, "next_cursor": cursor})
        return
    if not found:
        filters = [f"status {' or '.join(statuses)}"] if statuses else []
        filters += [f"session {session!r}"] if session else []
        where = f" with {', '.join(filters)}" if filters else ""
        print_out(
            safe_text(f"no graph runs{where} in {db}" + (" after that cursor" if after else ""))
        )
        return
    print_out(_graphs_table(found, children))
    if cursor is not None:
        next_page(
            ["stead", "graphs"],
            statuses,
            [("--session", "session", session)],
            limit,
            cursor,
            db,
            len(found),
        )


def _node_json(node: Mapping[str, Any], run: Run | None) -> dict[str, Any]:
    kind = "agent" if node.get("agent_id") is not None else "task"
    return {
        "id": node.get("id"),
        "kind": kind,
        "definition": node.get("agent_id") if kind == "agent" else node.get("task"),
        "depends_on": list(node.get("depends_on") or []),
        "run_id": None if run is None else run.id,
        "status": "not started" if run is None else run.status.value,
        "output": None if run is None else run_output(run),
        "reason": None if run is None else run_reason(run),
    }


def _nodes_table(nodes: Sequence[dict[str, Any]]) -> Table:
    table = listing(
        Column("node", no_wrap=True),
        Column("runs", no_wrap=True),
        "depends on",
        Column("run", no_wrap=True),
        Column("status", no_wrap=True),
        Column("result", ratio=1),
        title="nodes",
    )
    for node in nodes:
        started = node["run_id"] is not None
        result = (
            short(node["output"], 60)
            if node["status"] == RunStatus.COMPLETED
            else short(node["reason"], 60)
            if node["reason"]
            else Text()
        )
        table.add_row(
            safe_text(node["id"], style="bold", one_line=True),
            line(node["kind"], " ", node["definition"]),
            safe_text(", ".join(map(str, node["depends_on"])) or "—", one_line=True),
            safe_text(node["run_id"] if started else "—", one_line=True),
            status_text(node["status"]) if started else safe_text("not started", style="dim"),
            result,
        )
    return table


@graphs.command("show")
@click.argument("run_id")
@db_option
@json_option
def show_graph(run_id: str, db: str, as_json: bool) -> None:
    """Show a graph run node by node: what each runs, what it depends on, its run and status
    ("not started" until its prerequisites completed)."""

    async def read(client: Client) -> tuple[Run, list[Run]]:
        run = await client.run_record(run_id)
        if run.kind != "graph":
            raise fail(
                f"run {run.id} is a{'n' if run.kind == 'agent' else ''} {run.kind} run, not a "
                f"graph; `stead runs show {run.id}` shows it"
            )
        owned = await client.list_runs(parent_id=run.id, limit=1000)
        return run, list(owned.runs)

    run, children = with_client(db, read)
    runs = _node_runs(children)
    nodes = [_node_json(node, runs.get(str(node.get("id")))) for node in _nodes(run)]
    steps = run_suggestions(run, [], db)
    for node in nodes:
        if node["status"] in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
            steps.append(
                Suggestion(
                    f"continue node {node['id']!r} (its dependents wait for it)",
                    stead_command(db, "retry", shlex.quote(str(node["run_id"]))),
                )
            )
    if as_json:
        emit_json(
            {
                "run": plain(run),
                "nodes": nodes,
                "next": [plain(s) for s in steps],
                "output": run_output(run),
            }
        )
        return
    parts: list[RenderableType] = [run_summary(run)]
    if steps:
        parts.append(suggestion_block(steps))
    parts.append(_nodes_table(nodes))
    print_out(Group(*parts))
