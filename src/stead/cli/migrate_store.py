"""``stead migrate-store SQLITE_PATH URL``: copy a SQLite journal into PostgreSQL."""

from __future__ import annotations

import click
from rich.table import Table

from ..errors import SteadError
from ..store.postgres import PostgresStore
from ..store.postgres.store import redacted_url
from ..store.postgres.transfer import copy_sqlite_journal
from ._common import emit_json, fail, json_option, print_out

__all__ = ["migrate_store"]


@click.command("migrate-store")
@click.argument("source", metavar="SQLITE_PATH", type=click.Path(dir_okay=False))
@click.argument("url", metavar="URL")
@click.option(
    "--schema",
    default="stead",
    envvar="STEAD_SCHEMA",
    show_default=True,
    show_envvar=True,
    help="The PostgreSQL schema to copy into; it must hold no journal yet.",
)
@json_option
def migrate_store(source: str, url: str, schema: str, as_json: bool) -> None:
    """Copy the SQLite journal at SQLITE_PATH into an empty schema of the PostgreSQL database
    at URL (postgresql://...): runs in every status, operations, events with their sequences,
    interactions, blobs, history and the inbox. Counts and digests of every table are checked
    before the copy commits; the SQLite file is only read. Stop the runtime that owns the file
    first; afterwards, a runtime opened on the schema continues the unfinished runs."""
    try:
        copied = copy_sqlite_journal(source, PostgresStore(url, schema=schema))
    except SteadError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot read {source!r}: {exc}") from None
    where = f"{redacted_url(url)} (schema {schema})"
    if as_json:
        emit_json({"source": source, "target": where, "rows": copied.rows, "verified": True})
        return
    table = Table("table", "rows", title=f"{source} → {where}")
    for name, count in copied.rows.items():
        table.add_row(name, f"{count:,}")
    print_out(table)
    print_out("counts and digests match; the copy is committed")
