"""``stead resolve|retry|cancel|fork``: an operator's commands on a run.

Like every command that changes a run, each is applied exactly once: by the runtime that owns
the database (through its inbox), or in place when none is running.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text

from ..client import Client
from ..journal.records import Run, RunStatus
from ._common import db_option, emit_json, json_option, print_out, timeout_option, with_client
from ._render import inert, line, plain, safe_text, short, status_text

__all__ = ["cancel", "fork", "resolve", "retry"]


def _json_output(ctx: click.Context, param: click.Parameter, value: str) -> Any:
    try:
        return json.loads(value)
    except RecursionError:
        raise click.BadParameter("the JSON is nested too deeply to store") from None
    except ValueError as exc:
        raise click.BadParameter(
            inert(
                f"not JSON ({exc}): {value!r}. Quote it for the shell, e.g. --output "
                "'\"shipped\"' for a string or --output '{\"id\": 7}' for an object",
                one_line=True,
            )
        ) from None


def _after(run: Run, done: Text | str) -> None:
    print_out(
        line(
            done,
            "; run ",
            safe_text(run.id, style="bold"),
            " is now ",
            status_text(run.status.value),
        )
    )
    if run.status in (RunStatus.PENDING, RunStatus.QUEUED):
        print_out(
            safe_text(
                "it continues when a runtime runs it (the one that owns the database, or the next "
                "App.open)",
                style="dim",
            )
        )


@click.command()
@click.argument("run_id")
@click.argument("operation_key")
@click.option(
    "--output",
    "output",
    required=True,
    metavar="JSON",
    callback=_json_output,
    help="The operation's result, as JSON (a string is quoted: '\"shipped\"').",
)
@timeout_option
@db_option
@json_option
def resolve(
    run_id: str, operation_key: str, output: Any, timeout: float, db: str, as_json: bool
) -> None:
    """Supply by hand the result of the interrupted operation a needs_attention run names
    (`stead runs show RUN_ID` names it), after checking what it did in the outside world. The
    run continues from there; the operation does not run again."""

    async def act(client: Client) -> Run:
        await client.resolve(run_id, operation_key, output)
        return await client.run_record(run_id)

    run = with_client(db, act, timeout=timeout)
    if as_json:
        emit_json({"run": plain(run)})
        return
    _after(run, line("resolved ", operation_key, " with ", short(output, 80)))


@click.command()
@click.argument("run_id")
@timeout_option
@db_option
@json_option
def retry(run_id: str, timeout: float, db: str, as_json: bool) -> None:
    """Continue a failed or needs_attention run, keeping every committed result. An interrupted
    operation it needs attention at runs again."""

    async def act(client: Client) -> Run:
        await client.retry(run_id)
        return await client.run_record(run_id)

    run = with_client(db, act, timeout=timeout)
    if as_json:
        emit_json({"run": plain(run)})
        return
    _after(run, "retried")


@click.command()
@click.argument("run_id")
@click.option("--reason", default=None, help="Why (recorded with the run).")
@timeout_option
@db_option
@json_option
def cancel(run_id: str, reason: str | None, timeout: float, db: str, as_json: bool) -> None:
    """Cancel a run for good (it never restarts; effects already done are not undone)."""

    async def act(client: Client) -> tuple[bool, Run]:
        before = await client.run_record(run_id)
        await client.cancel(run_id, reason)
        return before.status != RunStatus.CANCELLED, await client.run_record(run_id)

    changed, run = with_client(db, act, timeout=timeout)
    if as_json:
        emit_json({"changed": changed, "run": plain(run)})
        return
    if changed:
        print_out(line("cancelled run ", safe_text(run.id, style="bold")))
    else:
        print_out(
            line("run ", safe_text(run.id, style="bold"), " was already cancelled; nothing changed")
        )


@click.command()
@click.argument("run_id")
@click.option(
    "--before",
    required=True,
    metavar="OPERATION_KEY",
    help="Reuse every committed operation positioned before this one (e.g. model:3).",
)
@click.option("--session", default=None, help="The new run's session (default: a new one).")
@click.option(
    "--version",
    "agent_version",
    default=None,
    help="Run the fork on this version of the agent (default: the source run's).",
)
@timeout_option
@db_option
@json_option
def fork(
    run_id: str,
    before: str,
    session: str | None,
    agent_version: str | None,
    timeout: float,
    db: str,
    as_json: bool,
) -> None:
    """Start a new run that reuses RUN_ID's journal up to (not including) operation --before
    and continues from there: to debug an agent, or try a new prompt or model from the middle
    of a real conversation. Prints the new run id (forking the same point again gives the
    same one)."""

    async def act(client: Client) -> Run:
        handle = await client.fork(run_id, before=before, session_id=session, version=agent_version)
        return await client.run_record(handle.id)

    run = with_client(db, act, timeout=timeout)
    if as_json:
        emit_json({"run_id": run.id, "forked_from": run_id, "before": before, "run": plain(run)})
        return
    click.echo(inert(run.id, one_line=True))
