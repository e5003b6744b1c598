"""The ``stead`` command: act on the runs of a stead database from any process.

Every command takes ``--db PATH`` or ``--db postgresql://...`` with ``--schema`` (or
``$STEAD_DB``, ``$STEAD_SCHEMA``; default ``./stead.db``) and ``--json``.
Reads and changes go through :class:`stead.Client` only, so they work the same whether a
runtime owns the database (a change goes to its inbox and it applies it) or none is running
(the change is applied in place and the next runtime continues the run); on PostgreSQL a change
is applied where it is given and wakes the workers. ``stead worker APP`` runs an App's agents,
tasks and schedules.
"""

from __future__ import annotations

import click

from .demo import demo
from .interactions import answer, approve, deny, interactions
from .migrate_store import migrate_store
from .operator import cancel, fork, resolve, retry
from .runs import runs
from .tasks import graphs, signal, submit_task, tasks
from .worker import worker

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="stead")
def main() -> None:
    """stead: durable execution for LLM agent runs.

    \b
    Inspect runs:
      stead runs list [--status S] [--session S] [--agent A]
      stead runs show RUN_ID            status, why, and the command that moves it on
                                        (a task's or graph's runs as a tree)
      stead runs events RUN_ID --follow
    Run tasks and graphs:
      stead submit-task TASK --session S --request R [--input JSON] [--version V]
      stead signal RUN_ID NAME [--value JSON] --request-id ID
      stead tasks [--status S] [--session S] [--task NAME]
      stead graphs [--status S] | stead graphs show RUN_ID    each node, its run and status
    Answer the approval queue:
      stead interactions list
      stead approve ID | stead deny ID --reason R | stead answer ID VALUE
    Operate on runs:
      stead resolve RUN_ID KEY --output JSON | stead retry RUN_ID
      stead cancel RUN_ID | stead fork RUN_ID --before KEY
    Run agents (as many workers as you like on PostgreSQL; SIGTERM drains):
      stead worker module:app --db postgresql://URL [--concurrency N]
    Move to PostgreSQL:
      stead migrate-store SQLITE_PATH postgresql://URL [--schema S]

    Every command takes --db PATH or --db postgresql://URL with --schema (or STEAD_DB,
    STEAD_SCHEMA; default ./stead.db) and --json. Exit status: 0 done, 1 an error (one line
    on stderr says what to do), 2 a usage error.
    """


main.add_command(runs)
main.add_command(interactions)
main.add_command(approve)
main.add_command(deny)
main.add_command(answer)
main.add_command(resolve)
main.add_command(retry)
main.add_command(cancel)
main.add_command(fork)
main.add_command(submit_task)
main.add_command(signal)
main.add_command(tasks)
main.add_command(graphs)
main.add_command(demo)
main.add_command(migrate_store)
main.add_command(worker)
