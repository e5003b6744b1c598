"""How journal data reaches a terminal or a script: inert rich text, tables, plain JSON.

Everything here is pure: records in, renderables or JSON values out. Journal text (a model or a
tool wrote it; a prompt injection may have chosen it) goes through :func:`safe_text` and nothing
else, so it is never parsed as rich markup and never reaches the terminal as a control sequence.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Column, Table
from rich.text import Text

from ..agent.checkpoint import Checkpoint
from ..journal.records import Interaction, Operation, Run, RunStatus
from ..messages import AssistantMessage, Usage

__all__ = [
    "STATUS_STYLES",
    "Suggestion",
    "clock_time",
    "duration",
    "inert",
    "interaction_suggestions",
    "interactions_table",
    "line",
    "listing",
    "local_time",
    "money",
    "operation_result",
    "operations_table",
    "plain",
    "plain_text",
    "response_words",
    "run_suggestions",
    "run_summary",
    "runs_table",
    "safe_text",
    "short",
    "show_json",
    "show_run",
    "status_text",
    "suggestions",
    "tokens",
]

# -- inert text ----------------------------------------------------------------------------------

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


def plain_text(value: object) -> str:
    """``value`` as text: a str as it is, anything else as JSON (not yet made safe to print)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def inert(value: object, *, one_line: bool = False) -> str:
    """``value`` as a str with every control character replaced by a visible escape (see
    :func:`safe_text`); for text printed without rich, such as error messages."""
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(_visible, plain_text(value))


def safe_text(value: object, *, style: str = "", one_line: bool = False) -> Text:
    """``value`` as inert rich text: the one way journal data reaches the terminal.

    A str is taken as is, anything else as its JSON. The result is a :class:`rich.text.Text`,
    which rich never parses as markup (``[link=...]``, ``[/]``) or emoji codes, and every
    control character is replaced by a visible Python-style escape (``\\x1b``, ``\\r``,
    ``\\x9b``, ``\\u202e``): C0 controls except tab and newline (those too with
    ``one_line=True``), DEL, C1 controls, U+2028/U+2029 and the bidi controls. Backslashes
    themselves are left alone, so ``\\x1b`` in the output may also be those four characters.
    """
    return Text(inert(value, one_line=one_line), style=style)


def line(*parts: object, one_line: bool = True) -> Text:
    """Join ``parts`` into one text: :class:`Text` parts as they are, the rest via ``safe_text``."""
    joined = Text()
    for part in parts:
        joined.append_text(part if isinstance(part, Text) else safe_text(part, one_line=one_line))
    return joined


def short(value: object, width: int = 60) -> Text:
    """A one-line preview of ``value``: cut to ``width`` characters, then made safe."""
    text = plain_text(value)
    return safe_text(text if len(text) <= width else text[: width - 1] + "…", one_line=True)


# -- plain JSON for scripts ----------------------------------------------------------------------


def plain(value: object) -> Any:
    """A record (dataclass) as plain JSON values: datetimes as ISO 8601, enums as values."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


# -- small formats -------------------------------------------------------------------------------

STATUS_STYLES: Mapping[str, str] = {
    RunStatus.QUEUED: "dim",
    RunStatus.PENDING: "cyan",
    RunStatus.RUNNING: "bold blue",
    RunStatus.RETRY_WAIT: "yellow",
    RunStatus.WAITING: "bold magenta",
    RunStatus.NEEDS_ATTENTION: "bold yellow",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "bold red",
    RunStatus.CANCELLED: "dim red",
    "pending": "bold magenta",  # interactions
    "responded": "green",
    "cancelled": "dim red",
}


def status_text(status: str) -> Text:
    return safe_text(str(status), style=STATUS_STYLES.get(str(status), ""), one_line=True)


def zone_name(moment: datetime | None = None) -> str:
    local = (moment or datetime.now(UTC)).astimezone()
    return local.tzname() or local.strftime("%z")


def local_time(moment: datetime | None, *, with_date: bool = True) -> str:
    """``moment`` in the local time zone, with the zone's name; ``—`` for none."""
    if moment is None:
        return "—"
    local = moment.astimezone()
    shown = local.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")
    return f"{shown} {zone_name(moment)}"


def clock_time(moment: datetime) -> str:
    """The local time of day with milliseconds (the zone goes in a column header)."""
    return moment.astimezone().strftime("%H:%M:%S.%f")[:-3]


def seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f}ms"
    if value < 60:
        return f"{value:.1f}s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def duration(run: Run, now: datetime | None = None) -> str:
    """How long the run has run: start to finish, or start to now if it goes on."""
    if run.started_at is None:
        return "—"
    end = run.finished_at or (None if run.status.terminal else (now or datetime.now(UTC)))
    if end is None:
        return "—"
    took = seconds(max((end - run.started_at).total_seconds(), 0.0))
    return took if run.finished_at is not None else f"{took}…"


def money(cost: float | None) -> str:
    if cost is None:
        return "? (no price)"
    if cost == 0:
        return "$0"
    if cost < 0.01:
        return "$" + f"{cost:.8f}".rstrip("0").rstrip(".")
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def tokens(usage: Usage) -> str:
    return f"{usage.input_tokens:,} in / {usage.output_tokens:,} out"


def _quote(value: str) -> str:
    return shlex.quote(value)


# -- commands a person can run next --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A command that moves a run on: what it does, and the command line."""

    what: str
    command: str


def _stead(db: str, *words: str) -> str:
    return " ".join(["stead", *words, "--db", _quote(db)])


def interaction_suggestions(interaction: Interaction, db: str) -> list[Suggestion]:
    ident = _quote(interaction.interaction_id)
    if interaction.kind == "question":
        return [Suggestion("answer", _stead(db, "answer", ident, "'<answer>'"))]
    return [
        Suggestion("approve", _stead(db, "approve", ident)),
        Suggestion("deny", _stead(db, "deny", ident, "--reason", "'<why>'")),
    ]


def run_suggestions(run: Run, operations: Sequence[Operation], db: str) -> list[Suggestion]:
    """The commands that move ``run`` itself on (its interactions have their own)."""
    found: list[Suggestion] = []
    ident = _quote(run.id)
    if run.status == RunStatus.NEEDS_ATTENTION:
        op = next((o for o in operations if o.key == run.attention_key), None)
        if op is not None and op.kind in ("tool", "effect") and op.status == "started":
            found.append(
                Suggestion(
                    "if it did take effect, supply its result (JSON)",
                    _stead(db, "resolve", ident, _quote(op.key), "--output", "'<json>'"),
                )
            )
            found.append(Suggestion("run it again", _stead(db, "retry", ident)))
        else:
            found.append(Suggestion("continue", _stead(db, "retry", ident)))
        found.append(Suggestion("give up", _stead(db, "cancel", ident)))
    elif run.status == RunStatus.FAILED:
        found.append(
            Suggestion("continue, keeping every committed result", _stead(db, "retry", ident))
        )
    elif run.status == RunStatus.WAITING:
        found.append(Suggestion("give up", _stead(db, "cancel", ident)))
    return found


def suggestions(
    run: Run,
    operations: Sequence[Operation],
    pending: Sequence[Interaction],
    db: str,
) -> list[Suggestion]:
    """The commands that move ``run`` on from where it is: answers to its pending
    interactions first, then the commands on the run itself."""
    found: list[Suggestion] = []
    for interaction in pending:
        found.extend(interaction_suggestions(interaction, db))
    return found + run_suggestions(run, operations, db)


# -- runs ----------------------------------------------------------------------------------------


def listing(*columns: Column | str, title: str | None = None) -> Table:
    """The CLI's table of records, one row each: a rule under the header, no outer padding."""
    return Table(*columns, title=title, box=box.SIMPLE_HEAD, pad_edge=False)


def runs_table(
    runs: Sequence[Run],
    costs: Mapping[str, float | None],
    width: int = 200,
    *,
    definition: str = "agent",
) -> RenderableType:
    """One row per run; on a terminal narrower than 130 columns, two lines per run instead.
    ``definition`` heads the column of what the runs execute (``task`` for task runs)."""
    now = datetime.now(UTC)
    if width < 130:
        return Text("\n").join(_run_lines(run, costs, now) for run in runs)
    table = listing(
        Column("run", no_wrap=True),
        Column("status", no_wrap=True),
        definition,
        "session",
        "request",
        Column(f"created ({zone_name()})", no_wrap=True),
        Column("took", no_wrap=True),
        Column("tokens in/out", no_wrap=True),
        Column("cost", no_wrap=True),
    )
    for run in runs:
        usage = Usage.from_json(run.usage)
        table.add_row(
            safe_text(run.id, one_line=True),
            status_text(run.status.value),
            line(run.agent_id, "@", run.version),
            safe_text(run.session_id, one_line=True),
            safe_text(run.request_id, one_line=True),
            safe_text(local_time(run.created_at).rsplit(" ", 1)[0]),
            safe_text(duration(run, now)),
            safe_text(f"{usage.input_tokens:,}/{usage.output_tokens:,}"),
            safe_text(money(costs.get(run.id)) if run.id in costs else "—"),
        )
    return table


def _run_lines(run: Run, costs: Mapping[str, float | None], now: datetime) -> Text:
    usage = Usage.from_json(run.usage)
    cost = money(costs.get(run.id)) if run.id in costs else "—"
    return line(
        safe_text(run.id, style="bold", one_line=True),
        "  ",
        status_text(run.status.value),
        "  ",
        run.agent_id,
        "@",
        run.version,
        Text("\n"),
        safe_text("  session ", style="dim"),
        run.session_id,
        safe_text(" · request ", style="dim"),
        run.request_id,
        safe_text(
            f" · {local_time(run.created_at)} · took {duration(run, now)}"
            f" · {tokens(usage)} tokens · {cost}",
            style="dim",
        ),
    )


def interrupted_text(count: int) -> Text:
    """How often in a row the run's executions were cut off by a crash (its process died, or
    its worker lost the run)."""
    if count == 1:
        return safe_text("resumed once after a crash cut an execution off")
    return safe_text(
        f"resumed {count} times in a row after a crash cut an execution off, with nothing new "
        "committed in between; at the runtime's Limits(max_interruptions=) the run goes to "
        "needs_attention: look in the worker's log for what kills the process",
        style="yellow",
    )


def run_summary(run: Run) -> Text:
    """Who the run is, its status and why, its times, its output."""
    lines = [
        line(
            safe_text(run.id, style="bold", one_line=True),
            "  ",
            run.agent_id,
            "@",
            run.version,
            "  session ",
            run.session_id,
            "  request ",
            run.request_id,
        ),
        line("status: ", status_text(run.status.value)),
    ]
    error = run.error if isinstance(run.error, dict) else {}
    if run.status == RunStatus.NEEDS_ATTENTION and run.attention_key:
        lines.append(line("needs attention at: ", safe_text(run.attention_key, style="bold")))
    if error.get("reason"):
        lines.append(line("reason: ", safe_text(error["reason"])))
    if run.status == RunStatus.RETRY_WAIT and run.next_attempt_at is not None:
        lines.append(line("next attempt: ", local_time(run.next_attempt_at)))
    if run.interruptions and not run.status.terminal and run.status != RunStatus.NEEDS_ATTENTION:
        lines.append(line("interrupted: ", interrupted_text(run.interruptions)))
    if run.status in (RunStatus.PENDING, RunStatus.QUEUED) and run.kind == "graph":
        lines.append(
            line(
                "it starts when a runtime that registers every node's agent or task runs it "
                "(App.open on this database)"
            )
        )
    elif run.status in (RunStatus.PENDING, RunStatus.QUEUED):
        lines.append(
            line(
                "it starts when a runtime that registers ",
                "task " if run.kind == "task" else "agent ",
                run.agent_id,
                " version ",
                run.version,
                " runs it (App.open on this database)",
            )
        )
    times = [f"created {local_time(run.created_at)}"]
    if run.started_at is not None:
        times.append(f"started {local_time(run.started_at)}")
    if run.finished_at is not None:
        times.append(f"finished {local_time(run.finished_at)}")
    times.append(f"took {duration(run)}")
    lines.append(safe_text(" · ".join(times), style="dim"))
    if isinstance(run.outcome, dict) and "output" in run.outcome:
        lines.append(line("output: ", safe_text(run.outcome["output"]), one_line=False))
    return Text("\n").join(lines)


def _calls(message: AssistantMessage) -> str:
    return ", ".join(
        f"{call.name}({json.dumps(dict(call.arguments), ensure_ascii=False)})"
        for call in message.tool_calls
    )


def operation_result(op: Operation, response: AssistantMessage | None, width: int = 80) -> Text:
    """What an operation produced, in one line: a model's text and tool calls, a tool's output."""
    if op.status != "completed":
        return safe_text(f"no result yet (started, attempt {op.attempts})", style="yellow")
    if op.kind == "model":
        if response is None:
            return safe_text("(response not stored)", style="dim")
        calls = _calls(response)
        text = response.text
        if calls and text:
            return line(
                short(text, width // 2),
                safe_text(" → call ", style="dim"),
                short(calls, width // 2),
            )
        if calls:
            return line(safe_text("call ", style="dim"), short(calls, width))
        return short(text, width)
    result = op.result if isinstance(op.result, dict) else {}
    if "output" not in result:
        return short(op.result, width)
    prefix = safe_text("failed: ", style="red") if result.get("failed") else Text()
    suffix = safe_text(" (resolved by hand)", style="dim") if result.get("resolved") else Text()
    return line(prefix, short(result.get("output"), width), suffix)


def operations_table(
    operations: Sequence[Operation], responses: Mapping[str, AssistantMessage]
) -> Table:
    """One row per operation (its key names its kind: ``model:2``, ``tool:1:call_x``)."""
    table = listing(
        Column("operation", no_wrap=True),
        Column("recovery", no_wrap=True),
        Column("status", no_wrap=True),
        Column("tries", no_wrap=True, justify="right"),
        Column("result", ratio=1),
        title="operations",
    )
    for op in operations:
        table.add_row(
            safe_text(op.key, one_line=True),
            safe_text(op.recovery),
            safe_text(op.status, style="" if op.status == "completed" else "yellow"),
            safe_text(op.attempts),
            operation_result(op, responses.get(op.key)),
        )
    return table


def interactions_table(
    interactions: Sequence[Interaction],
    *,
    title: str | None = None,
    with_run: bool = True,
    width: int = 200,
) -> RenderableType:
    """One row per interaction; on a terminal narrower than 130 columns, two lines each."""
    if width < 130:
        return Text("\n").join(_interaction_lines(item, with_run) for item in interactions)
    table = listing(
        Column("interaction", no_wrap=True),
        *([Column("run", no_wrap=True)] if with_run else []),
        "kind",
        "tool",
        "arguments",
        Column("status", no_wrap=True),
        Column(f"requested ({zone_name()})", no_wrap=True),
        "response",
        title=title,
    )
    for item in interactions:
        response = item.response if isinstance(item.response, dict) else None
        table.add_row(
            safe_text(item.interaction_id, one_line=True),
            *([safe_text(item.run_id, one_line=True)] if with_run else []),
            safe_text(item.kind),
            safe_text(item.tool or "—", one_line=True),
            short(_asked(item), 60),
            status_text(item.status),
            safe_text(local_time(item.requested_at).rsplit(" ", 1)[0]),
            short(response_words(response), 40) if response else Text("—"),
        )
    return table


def _asked(item: Interaction) -> object:
    return item.arguments if item.kind != "budget" else item.payload


def _interaction_lines(item: Interaction, with_run: bool) -> Text:
    response = item.response if isinstance(item.response, dict) else None
    details = [
        *([line(safe_text("run ", style="dim"), item.run_id)] if with_run else []),
        line(safe_text("session ", style="dim"), item.session_id),
        safe_text(f"requested {local_time(item.requested_at)}", style="dim"),
        *(
            [line(safe_text("response ", style="dim"), short(response_words(response), 60))]
            if response
            else []
        ),
    ]
    return line(
        safe_text(item.interaction_id, style="bold", one_line=True),
        "  ",
        status_text(item.status),
        "  ",
        item.kind,
        "  ",
        item.tool or "",
        " ",
        short(_asked(item), 80),
        Text("\n  "),
        safe_text(" · ", style="dim").join(details),
    )


def response_words(response: Mapping[str, Any]) -> str:
    """A response to an interaction in words: its kind, an answer's value, the reason, the
    reviewer and the note (not yet made safe to print)."""
    kind = str(response.get("kind"))
    words = [kind]
    if kind == "answer":
        words.append(plain_text(response.get("value")))
    if response.get("reason"):
        words.append(f"({response['reason']})")
    if response.get("reviewer"):
        words.append(f"by {response['reviewer']}")
    if response.get("note"):
        words.append(f"— {response['note']}")
    return " ".join(words)


def pending_block(pending: Sequence[Interaction], db: str) -> Text:
    """Each pending interaction, what it asks, and the commands that answer it."""
    lines: list[Text] = []
    for item in pending:
        if item.kind == "question":
            asked = line("question: ", short(item.arguments, 200))
        elif item.kind == "budget":
            asked = line("budget reached: ", short(item.payload, 200))
        else:
            asked = line(
                "approval of ",
                safe_text(item.tool or "?", style="bold"),
                " ",
                short(item.arguments, 200),
            )
            if item.payload is not None:
                asked.append_text(line("  ", short(item.payload, 100)))
        lines.append(
            line(
                safe_text("waiting for ", style="magenta"),
                safe_text(item.interaction_id, style="bold", one_line=True),
                " (",
                item.key,
                "): ",
                asked,
            )
        )
        lines.extend(_suggestion_lines(interaction_suggestions(item, db)))
    return Text("\n").join(lines)


def _suggestion_lines(found: Sequence[Suggestion]) -> list[Text]:
    return [
        line(safe_text(f"  {s.what}: ", style="dim"), safe_text(s.command, style="cyan"))
        for s in found
    ]


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def usage_line(checkpoint: Checkpoint) -> Text:
    usage = checkpoint.usage
    parts = [
        f"{usage.input_tokens:,} input tokens",
        f"{usage.output_tokens:,} output tokens",
    ]
    if usage.cache_read_tokens or usage.cache_write_tokens:
        parts.append(
            f"{usage.cache_read_tokens:,} cache read, {usage.cache_write_tokens:,} cache write"
        )
    parts.append(f"{_count(usage.requests, 'model request')}, {_count(checkpoint.turns, 'turn')}")
    parts.append(f"cost {money(checkpoint.cost_usd)}")
    if checkpoint.possibly_billed_attempts:
        parts.append(
            f"{checkpoint.possibly_billed_attempts} interrupted or failed model attempts "
            "the provider may have billed"
        )
    return line("usage: ", " · ".join(parts))


def show_run(
    run: Run,
    operations: Sequence[Operation],
    checkpoint: Checkpoint,
    responses: Mapping[str, AssistantMessage],
    interactions: Sequence[Interaction],
    db: str,
    width: int = 200,
) -> RenderableType:
    """Everything ``stead runs show`` prints: the run and why it is where it is, what moves it
    on, its interactions and operations, its usage."""
    pending = [i for i in interactions if i.status == "pending"]
    parts: list[RenderableType] = [run_summary(run)]
    if pending:
        parts.append(pending_block(pending, db))
    steps = run_suggestions(run, operations, db)
    if steps:
        parts.append(Text("\n").join([Text("next:", style="bold"), *_suggestion_lines(steps)]))
    answered = [i for i in interactions if i.status != "pending"]
    if answered:
        parts.append(
            interactions_table(answered, title="interactions", with_run=False, width=width)
        )
    parts.append(operations_table(operations, responses))
    parts.append(usage_line(checkpoint))
    return Group(*parts)


def show_json(
    run: Run,
    operations: Sequence[Operation],
    checkpoint: Checkpoint,
    responses: Mapping[str, AssistantMessage],
    interactions: Sequence[Interaction],
    cursor: int,
    db: str,
) -> dict[str, Any]:
    pending = [i for i in interactions if i.status == "pending"]
    ops = []
    for op in operations:
        item = plain(op)
        if op.kind == "model":
            response = responses.get(op.key)
            item["response"] = (
                None
                if response is None
                else {
                    "text": response.text,
                    "tool_calls": [call.to_json() for call in response.tool_calls],
                }
            )
        ops.append(item)
    return {
        "run": plain(run),
        "attention_key": run.attention_key,
        "reason": (run.error or {}).get("reason") if isinstance(run.error, dict) else None,
        "pending_interactions": [plain(i) for i in pending],
        "interactions": [plain(i) for i in interactions],
        "next": [plain(s) for s in suggestions(run, operations, pending, db)],
        "operations": ops,
        "usage": plain(checkpoint.usage),
        "cost_usd": checkpoint.cost_usd,
        "turns": checkpoint.turns,
        "possibly_billed_attempts": checkpoint.possibly_billed_attempts,
        "output": checkpoint.final_text,
        "cursor": cursor,
    }
