"""``stead demo``: kill an agent run with SIGKILL mid-flight, resume it, show the journal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from ..client import Client
from ..journal.records import Event, Run
from ._common import with_client
from ._render import events_table, safe_text
from .runs import RunView, read_run, render_run

console = Console(highlight=False)


def _command() -> str:
    """How the user can run ``stead`` again: plain ``stead`` if that is on PATH."""
    invoked = Path(sys.argv[0])
    found = shutil.which("stead")
    if invoked.name == "stead" and (found is None or Path(found).resolve() != invoked.resolve()):
        return os.path.relpath(invoked) if not invoked.is_absolute() else str(invoked)
    return "stead"


def _child(db: Path, ledger: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stead.cli._demo_app", str(db), str(ledger)],
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def _show(line: str) -> dict[str, object]:
    record: dict[str, object] = json.loads(line)
    if "kind" in record:
        data = record["data"]
        assert isinstance(data, dict)
        what = data.get("key") or data.get("status") or ""
        console.print(
            Text.assemble(
                ("  " + f"{record['sequence']:>3}", "dim"),
                "  ",
                safe_text(f"{record['kind']:<16} {what}", one_line=True),
            )
        )
    return record


async def _read_back(client: Client) -> tuple[RunView, list[Event]]:
    """The demo's run as ``stead runs show`` sees it, and all its events (it has ended)."""
    page = await client.list_runs(limit=1)
    run: Run = page.runs[0]
    return await read_run(client, run.id), [event async for event in client.events(run.id)]


@click.command()
@click.option(
    "--db",
    default="stead-demo.db",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Where to write the demo's SQLite journal (replaced if it exists).",
)
@click.option(
    "--kill-at",
    default=None,
    help="SIGKILL the run when this operation starts (default: the model call after the refund).",
)
def demo(db: str, kill_at: str | None) -> None:
    """Crash an agent run with SIGKILL and resume it: the refund runs exactly once.

    Offline by default (a scripted model). Set STEAD_MODEL to use a real one, for example
    STEAD_MODEL=openai:gpt-4.1-mini with OPENAI_API_KEY, STEAD_MODEL=anthropic:claude-sonnet-4-5
    with ANTHROPIC_API_KEY, or STEAD_MODEL=openai-compatible:llama3.1@http://localhost:11434/v1
    for a local Ollama.
    """
    model_name = os.environ.get("STEAD_MODEL") or "offline scripted model"
    path = Path(db)
    ledger = path.with_name(path.name + ".payments.jsonl")
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), ledger):
        stale.unlink(missing_ok=True)
    console.print(
        Panel.fit(
            "A support agent looks up order 17, refunds it through a payments API (an "
            "[bold]idempotent[/] tool), then writes its answer.\nThe process is killed with "
            f"[bold red]SIGKILL[/] when [bold]{kill_at or 'the model call after the refund'}[/] "
            "starts, then a new process resumes the run from the journal.",
            title="stead demo",
            border_style="cyan",
        )
    )

    console.print(f"\n[bold]1. first process[/] ({model_name}, journal [cyan]{path}[/])")
    child = _child(path, ledger)
    assert child.stdout is not None
    killed: str | None = None
    refunded = False
    for line in child.stdout:
        record = _show(line)
        data = record.get("data")
        if not isinstance(data, dict):
            continue
        if record.get("kind") == "tool_completed" and data.get("tool") == "refund":
            refunded = True
        key = data.get("key")
        if record.get("kind") == "model_started" and (key == kill_at if kill_at else refunded):
            os.kill(child.pid, signal.SIGKILL)
            killed = str(key)
            break
    child.wait()
    if killed is None:
        raise click.ClickException(
            f"the run never reached {kill_at or 'a model call after the refund'}; nothing was "
            "killed (with a real model, the agent may have answered without refunding)"
        )
    kill_at = killed
    console.print(
        f"  [bold red]✗ process {child.pid} killed with SIGKILL[/] "
        f"(exit status {child.returncode}) while {killed} was in progress\n"
    )

    console.print("[bold]2. second process[/]: opens the same file and resumes")
    child = _child(path, ledger)
    assert child.stdout is not None
    output = None
    for line in child.stdout:
        record = _show(line)
        if "output" in record:
            output = record["output"]
    if child.wait() != 0 or output is None:
        raise click.ClickException("the resumed run did not finish; see the output above")
    console.print(Text.assemble(("  ✓ completed: ", "bold green"), safe_text(output), "\n"))

    view, events = with_client(str(path), _read_back)
    run, operations = view.run, view.operations
    console.print(render_run(view, str(path)))
    console.print(events_table(events))

    refunds = [json.loads(x) for x in ledger.read_text().splitlines() if x.strip()]
    model3 = next((op for op in operations if op.key == kill_at), None)
    verdict = (
        "[bold green]exactly once[/]" if len(refunds) == 1 else f"[bold red]{len(refunds)} times[/]"
    )
    console.print(
        Panel.fit(
            f"payments ledger {ledger}: the refund ran {verdict}"
            + (f" (idempotency key {refunds[0]['idempotency_key']})" if refunds else "")
            + f"\n{kill_at} was attempted {model3.attempts if model3 else '?'} times: "
            "the interrupted "
            "model call was sent again; committed tool results were replayed, not re-run.",
            title="result",
            border_style="green" if len(refunds) == 1 else "red",
        )
    )
    command = _command()
    console.print(
        "Look further:\n"
        f"  {command} runs list --db {path}\n"
        f"  {command} runs show {run.id} --db {path}\n"
        f"  {command} runs events {run.id} --db {path}"
    )
    if len(refunds) != 1:
        raise SystemExit(1)
