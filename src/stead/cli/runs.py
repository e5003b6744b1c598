"""``stead runs list|show|events``: read a journal without owning it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console
from rich.table import Column, Table

from ..errors import SteadError
from ..store.records import Event, Operation, Run
from ..store.sqlite import open_reader
from ..store.sqlite_tx import SqliteTx

console = Console(highlight=False)

db_option = click.option(
    "--db",
    "db",
    default="stead-demo.db",
    show_default=True,
    help="Path of the stead SQLite database.",
)


@contextmanager
def _reader(path: str) -> Iterator[SqliteTx]:
    try:
        tx = open_reader(path)
    except SteadError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield tx
    finally:
        tx.conn.close()


def _short(value: object, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@click.group()
def runs() -> None:
    """Inspect runs in a stead database."""


@runs.command("list")
@db_option
@click.option("--session", default=None, help="Only runs of this session.")
@click.option("--status", default=None, help="Only runs with this status.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
def list_runs(db: str, session: str | None, status: str | None, limit: int) -> None:
    """List runs, newest first."""
    with _reader(db) as tx:
        found = tx.list_runs(
            session_id=session,
            agent_id=None,
            statuses=[status] if status else None,
            before_number=None,
            limit=limit,
        )
    table = Table("agent", "session", "request", "status", "created")
    table.columns.insert(0, Column("run", no_wrap=True))
    for run in found:
        table.add_row(
            run.id,
            f"{run.agent_id}@{run.version}",
            run.session_id,
            run.request_id,
            run.status.value,
            run.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table if found else "no runs")


def operations_table(operations: list[Operation]) -> Table:
    table = Table(
        "operation", "kind", "recovery", "status", "attempts", "result", title="operations"
    )
    for op in operations:
        result = (
            ""
            if op.result is None
            else _short(
                op.result.get("text") or op.result.get("tool_calls")
                if op.kind == "model"
                else op.result.get("output")
            )
        )
        table.add_row(op.key, op.kind, op.recovery, op.status, str(op.attempts), result)
    return table


def describe(event: Event) -> str:
    """One line a person can read for an event."""
    data = event.data
    key = data.get("key", "")
    attempt = f" (attempt {data['attempt']})" if data.get("attempt", 1) != 1 else ""
    if event.type == "submitted":
        return f"{data['agent_id']}@{data['version']} request {data['request_id']}"
    if event.type == "status":
        extra = ", resumed after a stop" if data.get("resumed") else ""
        reason = f": {data['reason']}" if data.get("reason") else ""
        return f"{data['status']}{extra}{reason}"
    if event.type == "model_completed":
        calls = ", ".join(c["name"] for c in data.get("tool_calls", []))
        return f"{key} → " + (f"call {calls}" if calls else _short(data.get("text", ""), 60))
    if event.type == "tool_started":
        return f"{key} {data.get('tool')}{attempt}"
    if event.type == "tool_completed":
        verdict = "failed: " if data.get("failed") else ""
        return f"{key} → {verdict}{_short(data.get('output'), 50)}"
    return f"{key}{attempt}" if key else _short(data, 70)


def events_table(events: list[Event]) -> Table:
    table = Table("seq", "time", "event", "detail", title="events")
    for event in events:
        table.add_row(
            str(event.sequence),
            event.created_at.strftime("%H:%M:%S.%f")[:-3],
            event.type,
            describe(event),
        )
    return table


def run_summary(run: Run) -> str:
    lines = [
        f"[bold]{run.id}[/]  {run.agent_id}@{run.version}  session {run.session_id}  "
        f"request {run.request_id}",
        f"status: [bold]{run.status.value}[/]",
    ]
    if run.error:
        lines.append(f"reason: {run.error.get('reason')}")
    if run.outcome:
        lines.append(f"output: {run.outcome.get('output')}")
    return "\n".join(lines)


def _find(tx: SqliteTx, run_id: str) -> Run:
    run = tx.get_run(run_id)
    if run is None:
        raise click.ClickException(
            f"no run {run_id!r} in this database; `stead runs list` shows the runs it holds"
        )
    return run


@runs.command("show")
@click.argument("run_id")
@db_option
def show(run_id: str, db: str) -> None:
    """Show a run and its operations."""
    with _reader(db) as tx:
        run = _find(tx, run_id)
        operations = tx.operations(run_id)
    console.print(run_summary(run))
    console.print(operations_table(operations))


@runs.command("events")
@click.argument("run_id")
@db_option
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Only events after this sequence.",
)
def events(run_id: str, db: str, after: int) -> None:
    """Show a run's events."""
    with _reader(db) as tx:
        _find(tx, run_id)
        found = tx.events_after(run_id, after, 100_000)
    console.print(events_table(found))
