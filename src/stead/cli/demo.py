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
from ..errors import SteadError
from ..journal.records import Event, Run
from ._common import with_client
from ._render import safe_text
from ._render_events import events_table
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


_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def _check_model(name: str | None) -> None:
    """Refuse a STEAD_MODEL that cannot work before any process starts: one clear line."""
    if not name:
        return
    from ..models.registry import resolve_model

    try:
        resolve_model(name)
    except (SteadError, ImportError) as exc:
        raise click.ClickException(f"STEAD_MODEL={name}: {exc}") from None
    key_env = _KEY_ENV.get(name.partition(":")[0])
    if key_env is not None and not os.environ.get(key_env):
        raise click.ClickException(
            f"STEAD_MODEL={name} needs an API key in {key_env}; set it, or unset STEAD_MODEL "
            "to run the demo offline on its scripted model"
        )


def _check_kill_at(kill_at: str | None) -> None:
    if kill_at is None:
        return
    kind, _, rest = kill_at.partition(":")
    valid = (kind == "model" and rest.isdigit()) or (
        kind == "tool" and rest.partition(":")[0].isdigit() and rest.partition(":")[2]
    )
    if not valid:
        raise click.BadParameter(
            f"{kill_at!r} is not an operation key; use model:N or tool:N:CALL_ID, for example "
            "model:3 or tool:2:call_refund",
            param_hint="--kill-at",
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
    _check_kill_at(kill_at)
    _check_model(os.environ.get("STEAD_MODEL"))
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
        if "error" in record:
            child.wait()
            raise click.ClickException(f"the run could not go on: {record['error']}")
        if record.get("kind") == "status" and data.get("status") in ("failed", "needs_attention"):
            child.kill()
            child.wait()
            raise click.ClickException(f"the run went {data['status']}: {data.get('reason')}")
        started = record.get("kind") in ("model_started", "tool_started")
        if started and (key == kill_at if kill_at else refunded and key != "tool:2:call_refund"):
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
        if "error" in record:
            child.wait()
            raise click.ClickException(f"the resumed run could not go on: {record['error']}")
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
    interrupted = next((op for op in operations if op.key == kill_at), None)
    what = "model call" if kill_at.startswith("model:") else "tool call"
    verdict = (
        "[bold green]exactly once[/]" if len(refunds) == 1 else f"[bold red]{len(refunds)} times[/]"
    )
    console.print(
        Panel.fit(
            f"payments ledger {ledger}: the refund ran {verdict}"
            + (f" (idempotency key {refunds[0]['idempotency_key']})" if refunds else "")
            + f"\n{kill_at} was attempted {interrupted.attempts if interrupted else '?'} times: "
            f"the interrupted {what} was started again (an idempotent one with the same "
            "idempotency key); committed results were replayed, not re-run.",
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
