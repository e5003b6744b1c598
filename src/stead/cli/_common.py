"""What every ``stead`` command shares: ``--db``, ``--json``, the client, errors and output.

A command reads and changes runs through :class:`stead.Client` only. Its errors end it with
status 1 and one line on stderr that says what went wrong and what to do; usage errors (an
unknown option value, malformed JSON) end it with status 2.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.console import Console, RenderableType

from ..client import Client
from ..errors import NotFoundError, SteadError
from ..store.postgres import PostgresStore
from ..store.postgres.store import redacted_url
from ..store.sqlite import SqliteStore
from ._render import inert

__all__ = [
    "DEFAULT_DB",
    "db_option",
    "emit_json",
    "fail",
    "json_option",
    "open_store",
    "print_out",
    "timeout_option",
    "with_client",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DB = "stead.db"

console = Console(highlight=False, soft_wrap=False)
err_console = Console(highlight=False, stderr=True)


_URL_SCHEMES = ("postgresql://", "postgres://")


def _remember_db(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A PostgreSQL URL is kept aside; commands see it without its password (they print it)."""
    if value.startswith(_URL_SCHEMES):
        ctx.meta["stead.url"] = value
        return redacted_url(value)
    return value


def _remember_schema(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.meta["stead.schema"] = value
    return value


def db_option(fn: F) -> F:
    fn = click.option(
        "--schema",
        default="stead",
        envvar="STEAD_SCHEMA",
        show_default=True,
        show_envvar=True,
        expose_value=False,
        callback=_remember_schema,
        help="The PostgreSQL schema that holds the journal (with a postgresql:// --db).",
    )(fn)
    return click.option(
        "--db",
        "db",
        default=DEFAULT_DB,
        envvar="STEAD_DB",
        show_default=True,
        show_envvar=True,
        metavar="PATH|URL",
        callback=_remember_db,
        help="The stead SQLite database (created by a runtime: App.open(stead.SqliteStore(path))), "
        "or a postgresql:// URL (the password is never printed).",
    )(fn)


def open_store(db: str) -> Any:
    """The store ``--db`` names: a PostgresStore for a postgresql:// URL, else a SqliteStore."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    url = meta.get("stead.url")
    if url is not None and redacted_url(url) == db:
        return PostgresStore(url, schema=meta.get("stead.schema", "stead"))
    if db.startswith(_URL_SCHEMES):
        return PostgresStore(db, schema=meta.get("stead.schema", "stead"))
    return SqliteStore(db)


def json_option(fn: F) -> F:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document (plain records: ids, statuses, ISO times, data) for "
        "scripts, instead of tables.",
    )(fn)


def timeout_option(fn: F) -> F:
    return click.option(
        "--timeout",
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        type=click.FloatRange(min=0, min_open=True, max=86_400),
        help="How long to wait for a live runtime that owns the database to apply the "
        "command. Past it the command stays queued (the runtime, or the next one to open the "
        "database, applies it) and the exit status is 1.",
    )(fn)


def fail(message: str) -> click.ClickException:
    """The error that ends a command with status 1 and ``message`` as one inert line."""
    return click.ClickException(inert(message, one_line=True))


def with_client(db: str, action: Callable[[Client], Awaitable[T]], *, timeout: float = 10.0) -> T:
    """Run ``action`` with a client of the database at ``db``; stead's errors become one line."""

    async def main() -> T:
        async with Client(open_store(db), command_timeout=timeout) as client:
            return await action(client)

    try:
        return asyncio.run(main())
    except click.ClickException:
        raise
    except NotFoundError as exc:
        message = str(exc)
        if message.startswith("no run "):
            where = inert(shlex.quote(db), one_line=True)
            message += f"; `stead runs list --db {where}` lists the runs"
        raise fail(message) from None
    except (SteadError, TimeoutError) as exc:
        raise fail(str(exc)) from None
    except BrokenPipeError:
        raise  # the reader went away (`| head`): click ends quietly
    except OSError as exc:
        raise fail(f"cannot use the stead database {db!r}: {exc}") from None
    except Exception as exc:  # a database error below stead's own: still one line
        raise fail(f"using the stead database {db!r} failed: {type(exc).__name__}: {exc}") from None


def print_out(renderable: RenderableType) -> None:
    """Print a rich renderable (journal text only inside ``safe_text``; never a bare str,
    which rich would parse as markup)."""
    console.print(renderable)


def emit_json(document: Any, *, lines: bool = False) -> None:
    """Print ``document`` as JSON: indented, or as one line (``lines``: a JSON-lines stream),
    all non-ASCII escaped so no journal text reaches a terminal raw."""
    text = json.dumps(document, ensure_ascii=True, indent=None if lines else 2, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
