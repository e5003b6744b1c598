"""``stead runs list|show|events``: read a journal without owning it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from ..errors import SteadError
from ..journal.records import Event, Operation, Run
from ..store.sqlite import open_reader
from ..store.sqlite import SqliteTx

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


# Characters a terminal would act on, or that would disguise the text around them: C0 controls
# (tab and newline only in one-line mode), DEL, C1 controls (0x9b is a one-byte CSI), the Unicode
# line/paragraph separators, and the bidi marks, embeddings, overrides and isolates.
_BIDI = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
_UNSAFE_ONE_LINE = re.compile(rf"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def _plain(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def safe_text(value: object, *, style: str = "", one_line: bool = False) -> Text:
    """``value`` as inert rich text: the one way journal data reaches the terminal.

    A str is taken as is, anything else as its JSON. The result is a :class:`rich.text.Text`,
    which rich never parses as markup (``[link=...]``, ``[/]``) or emoji codes, and every
    control character is replaced by a visible Python-style escape (``\\x1b``, ``\\r``,
    ``\\x9b``, ``\\u202e``): C0 controls except tab and newline (those too with
    ``one_line=True``), DEL, C1 controls, U+2028/U+2029 and the bidi controls. Backslashes
    themselves are left alone, so ``\\x1b`` in the output may also be those four characters.
    """
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return Text(pattern.sub(_visible, _plain(value)), style=style)


def _line(*parts: object, one_line: bool = False) -> Text:
    """Join ``parts`` into one text: :class:`Text` parts as they are, the rest via ``safe_text``."""
    line = Text()
    for part in parts:
        line.append_text(part if isinstance(part, Text) else safe_text(part, one_line=one_line))
    return line


def _short(value: object, width: int = 60) -> Text:
    """A one-line preview of ``value``: cut to ``width`` characters, then made safe."""
    text = _plain(value)
    return safe_text(text if len(text) <= width else text[: width - 1] + "…", one_line=True)


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
            safe_text(run.id),
            _line(run.agent_id, "@", run.version),
            safe_text(run.session_id),
            safe_text(run.request_id),
            safe_text(run.status.value),
            safe_text(run.created_at.strftime("%Y-%m-%d %H:%M:%S")),
        )
    console.print(table if found else "no runs")


def operations_table(operations: list[Operation]) -> Table:
    table = Table(
        "operation", "kind", "recovery", "status", "attempts", "result", title="operations"
    )
    for op in operations:
        result = (
            Text()
            if op.result is None
            else _short(
                op.result.get("text") or op.result.get("tool_calls")
                if op.kind == "model"
                else op.result.get("output")
            )
        )
        table.add_row(
            safe_text(op.key),
            safe_text(op.kind),
            safe_text(op.recovery),
            safe_text(op.status),
            safe_text(op.attempts),
            result,
        )
    return table


def describe(event: Event) -> Text:
    """One line a person can read for an event (journal values made safe by ``safe_text``)."""

    def line(*parts: object) -> Text:
        return _line(*parts, one_line=True)

    data = event.data
    key = line(data.get("key", ""))
    attempt = line(" (attempt ", data["attempt"], ")") if data.get("attempt", 1) != 1 else ""
    if event.kind == "submitted":
        return line(data["agent_id"], "@", data["version"], " request ", data["request_id"])
    if event.kind == "status":
        extra = ", resumed after a stop" if data.get("resumed") else ""
        reason = line(": ", data["reason"]) if data.get("reason") else ""
        return line(data["status"], extra, reason)
    if event.kind == "model_completed":
        calls = ", ".join(_plain(c["name"]) for c in data.get("tool_calls", []))
        return line(key, " → ", line("call ", calls) if calls else _short(data.get("text", ""), 60))
    if event.kind == "tool_started":
        return line(key, " ", data.get("tool"), attempt)
    if event.kind == "tool_completed":
        verdict = "failed: " if data.get("failed") else ""
        return line(key, " → ", verdict, _short(data.get("output"), 50))
    return line(key, attempt) if key else _short(data, 70)


def events_table(events: list[Event]) -> Table:
    table = Table("seq", "time", "event", "detail", title="events")
    for event in events:
        table.add_row(
            safe_text(event.sequence),
            safe_text(event.created_at.strftime("%H:%M:%S.%f")[:-3]),
            safe_text(event.kind),
            describe(event),
        )
    return table


def run_summary(run: Run) -> Text:
    lines = [
        _line(
            safe_text(run.id, style="bold"),
            "  ",
            run.agent_id,
            "@",
            run.version,
            "  session ",
            run.session_id,
            "  request ",
            run.request_id,
        ),
        _line("status: ", safe_text(run.status.value, style="bold")),
    ]
    if run.error:
        lines.append(_line("reason: ", run.error.get("reason")))
    if run.outcome:
        lines.append(_line("output: ", run.outcome.get("output")))
    return Text("\n").join(lines)


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
