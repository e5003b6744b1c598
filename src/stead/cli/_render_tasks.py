"""How ``stead runs show`` reads and prints a task or graph run: its operations (what it waits
for: a signal, a timer, a child run) and the whole tree of runs it owns (a task's children, a
graph's nodes), each with its own session and status. Journal text reaches the terminal only
through ``safe_text``, as everywhere in the CLI."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Column, Table
from rich.text import Text
from rich.tree import Tree

from ..client import Client
from ..journal.records import Interaction, Operation, Run, RunStatus
from ._render import (
    Suggestion,
    inert,
    line,
    listing,
    local_time,
    operation_result,
    plain,
    run_suggestions,
    run_summary,
    safe_text,
    short,
    status_text,
)

__all__ = [
    "RunTree",
    "TaskRunView",
    "read_task_run",
    "run_output",
    "run_reason",
    "show_task_run",
    "stead_command",
    "suggestion_block",
    "task_show_json",
]


#: Runs of a tree read for ``stead runs show``; past it the rest is counted, not shown.
MAX_TREE_RUNS = 1000
#: Operation kinds a task run waits on.
WAIT_KINDS = ("signal", "timer", "child")


@dataclass(frozen=True, slots=True)
class RunTree:
    """A run and the runs it owns, recursively: ``operations`` of task and graph runs (what
    they wait for), the ``pending`` interactions of waiting agent runs."""

    run: Run
    operations: tuple[Operation, ...]
    pending: tuple[Interaction, ...]
    children: tuple[RunTree, ...]


@dataclass(frozen=True, slots=True)
class TaskRunView:
    """What ``stead runs show`` reads of a task or graph run: its tree, its event cursor, and
    how many runs of the tree were left out past :data:`MAX_TREE_RUNS`."""

    tree: RunTree
    cursor: int
    left_out: int


async def _children(client: Client, run_id: str) -> list[Run]:
    """The runs ``run_id`` owns, oldest first."""
    found: list[Run] = []
    after: str | None = None
    while len(found) < MAX_TREE_RUNS:
        page = await client.list_runs(parent_id=run_id, after=after, limit=1000)
        found.extend(page.runs)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    return sorted(found, key=lambda run: run.number)


async def _tree(
    client: Client, run: Run, operations: Sequence[Operation], budget: list[int]
) -> RunTree:
    pending: tuple[Interaction, ...] = ()
    if run.kind == "agent" and run.status == RunStatus.WAITING:
        found = await client.list_interactions(status="pending", run_id=run.id, limit=1000)
        pending = tuple(found)
    children: list[RunTree] = []
    for child in await _children(client, run.id):
        if budget[0] <= 0:
            budget[1] += 1
            continue
        budget[0] -= 1
        owned = () if child.kind == "agent" else (await client.snapshot(child.id)).operations
        children.append(await _tree(client, child, owned, budget))
    return RunTree(run, tuple(operations), pending, tuple(children))


async def read_task_run(client: Client, run_id: str) -> TaskRunView:
    """A task or graph run and every run it owns (each read after the run that owns it, so a
    child is never older than what its parent's operations say of it)."""
    snapshot = await client.snapshot(run_id)
    budget = [MAX_TREE_RUNS, 0]  # runs left to read, runs left out
    tree = await _tree(client, snapshot.run, snapshot.operations, budget)
    return TaskRunView(tree=tree, cursor=snapshot.cursor, left_out=budget[1])


# -- rendering a task or graph run ---------------------------------------------------------------


def _moment(value: object) -> str:
    """A journaled ISO time in the local zone (the text itself if it does not parse)."""
    try:
        return local_time(datetime.fromisoformat(str(value)))
    except ValueError:
        return inert(value, one_line=True)


def _error_words(error: object) -> str:
    if not isinstance(error, dict):
        return inert(error, one_line=True)
    kind = str(error.get("type", "")).rpartition(":")[2] or "error"
    return f"{kind}: {error.get('message', '')}"


def wait_words(op: Operation) -> Text:
    """What a wait operation (a signal, a timer, a child run) waits for, in a few words."""
    data = op.input if isinstance(op.input, dict) else {}
    until = data.get("until")
    if op.kind == "signal":
        return line(
            "signal ",
            safe_text(repr(str(data.get("signal"))), style="bold"),
            line(" until ", _moment(until)) if until else "",
        )
    if op.kind == "timer":
        return line("the time ", _moment(until))
    return line(
        "run ",
        safe_text(data.get("run_id", "?"), one_line=True),
        " (",
        data.get("kind", "?"),
        " ",
        data.get("definition", "?"),
        ")",
    )


def task_operation_result(op: Operation, width: int = 80) -> Text:
    """What an operation of a task or graph run did or waits for, in one line."""
    data = op.input if isinstance(op.input, dict) else {}
    result = op.result if isinstance(op.result, dict) else {}
    done = op.status == "completed"
    if op.kind in WAIT_KINDS and not done:
        return line(safe_text("waiting for ", style="magenta"), wait_words(op))
    if op.kind == "signal":
        if result.get("timeout"):
            return safe_text("timed out: no signal came in time", style="yellow")
        return line(
            short(result.get("value"), width),
            safe_text(" (request ", style="dim"),
            safe_text(result.get("request_id", "?"), style="dim", one_line=True),
            safe_text(")", style="dim"),
        )
    if op.kind == "timer":
        return safe_text("fired")
    if op.kind == "child":
        status = str(result.get("status"))
        if status == "completed":
            return line(status_text(status), " → ", short(result.get("output"), width))
        reason = result.get("reason")
        return line(status_text(status), line(": ", short(reason, width)) if reason else "")
    if op.kind in ("step", "effect") and done and result.get("failed"):
        return line(safe_text("failed: ", style="red"), short(_error_words(result.get("error"))))
    if op.kind == "emit":
        return line("event ", data.get("name", "?"), ": ", short(data.get("value"), width))
    if op.kind == "value" and done:
        return short(op.result, width)
    return operation_result(op, None, width)


def task_operations_table(operations: Sequence[Operation]) -> Table:
    """One row per operation of a task or graph run: its key, kind, status and result."""
    table = listing(
        Column("operation", no_wrap=True),
        Column("kind", no_wrap=True),
        Column("recovery", no_wrap=True),
        Column("status", no_wrap=True),
        Column("tries", no_wrap=True, justify="right"),
        Column("result", ratio=1),
        title="operations",
    )
    for op in operations:
        table.add_row(
            safe_text(op.key, one_line=True),
            safe_text(op.kind, one_line=True),
            safe_text(op.recovery),
            safe_text(op.status, style="" if op.status == "completed" else "yellow"),
            safe_text(op.attempts),
            task_operation_result(op),
        )
    return table


def _waits(operations: Sequence[Operation]) -> list[Operation]:
    return [op for op in operations if op.kind in WAIT_KINDS and op.status == "started"]


def _waits_json(operations: Sequence[Operation]) -> list[dict[str, Any]]:
    return [{"key": op.key, "kind": op.kind, "input": op.input} for op in _waits(operations)]


def run_reason(run: Run) -> Any:
    return run.error.get("reason") if isinstance(run.error, dict) else None


def run_output(run: Run) -> Any:
    if run.status != RunStatus.COMPLETED or not isinstance(run.outcome, dict):
        return None
    return run.outcome.get("output")


def _definition(run: Run) -> Text:
    if run.kind == "graph":
        return safe_text("graph")
    return line(run.kind, " ", run.agent_id, "@", run.version)


def _detail(tree: RunTree) -> Text:
    """Why a run of the tree is where it is, in a few words."""
    run = tree.run
    if run.status == RunStatus.COMPLETED:
        return line(safe_text("→ ", style="dim"), short(run_output(run), 60))
    if run.status == RunStatus.NEEDS_ATTENTION:
        why = line(": ", short(run_reason(run), 60)) if run_reason(run) else ""
        return line("needs attention at ", run.attention_key or "?", why)
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED) and run_reason(run):
        return short(run_reason(run), 70)
    if run.status == RunStatus.WAITING:
        waits = [
            line(item.kind, " ", item.tool or "", " (", item.interaction_id, ")")
            for item in tree.pending
        ] + [wait_words(op) for op in _waits(tree.operations)]
        if waits:
            return line(safe_text("waiting for ", style="dim"), Text(", ").join(waits))
    return Text()


def _label(tree: RunTree, *, root: bool) -> Text:
    run = tree.run
    return line(
        "" if root else line(safe_text(run.request_id, style="bold", one_line=True), "  "),
        safe_text(run.id, style="bold" if root else "", one_line=True),
        "  ",
        _definition(run),
        "  ",
        status_text(run.status.value),
        "  ",
        _detail(tree),
    )


def run_tree(tree: RunTree) -> Tree:
    """The run and the runs it owns as a tree: each under the key of the operation that
    started it (``agent:summarizer``, ``node:a``)."""
    shown = Tree(_label(tree, root=True), guide_style="dim")

    def add(branch: Tree, children: Sequence[RunTree]) -> None:
        for child in children:
            add(branch.add(_label(child, root=False)), child.children)

    add(shown, tree.children)
    return shown


def stead_command(db: str, *words: str) -> str:
    return " ".join(["stead", *words, "--db", shlex.quote(db)])


def task_suggestions(run: Run, operations: Sequence[Operation], db: str) -> list[Suggestion]:
    """The commands that move a task or graph run on: a signal it waits for, then the commands
    every run has."""
    found = []
    if run.status == RunStatus.WAITING:
        names: list[str] = []
        for op in _waits(operations):
            name = op.input.get("signal") if isinstance(op.input, dict) else None
            if op.kind == "signal" and isinstance(name, str) and name not in names:
                names.append(name)
        for name in names:
            found.append(
                Suggestion(
                    f"deliver signal {name!r}",
                    stead_command(
                        db,
                        "signal",
                        shlex.quote(run.id),
                        shlex.quote(name),
                        "--value",
                        "'<json>'",
                        "--request-id",
                        "'<id>'",
                    ),
                )
            )
    return found + run_suggestions(run, operations, db)


def suggestion_block(found: Sequence[Suggestion]) -> Text:
    return Text("\n").join(
        [
            Text("next:", style="bold"),
            *(
                line(safe_text(f"  {s.what}: ", style="dim"), safe_text(s.command, style="cyan"))
                for s in found
            ),
        ]
    )


def show_task_run(view: TaskRunView, db: str) -> RenderableType:
    """Everything ``stead runs show`` prints of a task or graph run: the run and why it is
    where it is, what moves it on, its operations and the tree of runs it owns."""
    tree = view.tree
    run = tree.run
    parts: list[RenderableType] = [run_summary(run)]
    if run.parent_id:
        parts.append(
            line(
                "owned by run ",
                safe_text(run.parent_id, style="bold", one_line=True),
                " (its operation ",
                run.request_id,
                ")",
            )
        )
    waits = _waits(tree.operations)
    if waits and run.status == RunStatus.WAITING:
        parts.append(
            Text("\n").join(
                [
                    Text("waiting for:", style="bold"),
                    *(
                        line("  ", wait_words(op), safe_text(f" (at {op.key})", style="dim"))
                        for op in waits
                    ),
                ]
            )
        )
    steps = task_suggestions(run, tree.operations, db)
    if steps:
        parts.append(suggestion_block(steps))
    if tree.operations:
        parts.append(task_operations_table(tree.operations))
    else:
        parts.append(safe_text("no operations yet", style="dim"))
    if tree.children:
        parts.append(Text("runs it owns:", style="bold"))
        parts.append(run_tree(tree))
    if view.left_out:
        parts.append(
            safe_text(
                f"{view.left_out} more runs of this tree are not shown (past {MAX_TREE_RUNS}); "
                "`stead runs list` and `stead runs show RUN_ID` show them",
                style="dim",
            )
        )
    return Group(*parts)


def tree_json(tree: RunTree) -> dict[str, Any]:
    """A run of the tree as a summary for scripts, with the runs it owns under ``children``."""
    run = tree.run
    return {
        "run_id": run.id,
        "key": run.request_id,
        "kind": run.kind,
        "definition": run.agent_id,
        "version": run.version,
        "status": run.status.value,
        "session_id": run.session_id,
        "parent_id": run.parent_id,
        "attention_key": run.attention_key,
        "reason": run_reason(run),
        "error_kind": run.error_kind,
        "interruptions": run.interruptions,
        "output": run_output(run),
        "waiting_for": _waits_json(tree.operations),
        "pending_interactions": [i.interaction_id for i in tree.pending],
        "created_at": plain(run.created_at),
        "finished_at": plain(run.finished_at),
        "children": [tree_json(child) for child in tree.children],
    }


def task_show_json(view: TaskRunView, db: str) -> dict[str, Any]:
    tree = view.tree
    run = tree.run
    return {
        "run": plain(run),
        "attention_key": run.attention_key,
        "reason": run_reason(run),
        "waiting_for": _waits_json(tree.operations),
        "next": [plain(s) for s in task_suggestions(run, tree.operations, db)],
        "operations": [plain(op) for op in tree.operations],
        "children": [tree_json(child) for child in tree.children],
        "children_left_out": view.left_out,
        "output": run_output(run),
        "cursor": view.cursor,
    }
