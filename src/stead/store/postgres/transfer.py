"""Copy a SQLite journal into an empty PostgreSQL schema (``stead migrate-store``).

Everything is copied as it is — runs in every status with their numbers, operations, events with
their sequences, interactions in their order, blobs, history, the inbox — in one PostgreSQL
transaction, then checked: the row count and a digest of every table must be the same on both
sides, or the transaction is rolled back and nothing is kept. The source is only read. While the
copy runs, the SQLite file's owner lock is held and the schema's tables are locked, so no runtime
changes either side; afterwards workers on the schema continue the unfinished runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._json import dumps
from ...errors import SchemaVersionError, StorageError, ValidationError
from ..migrate import SCHEMA_VERSION as SQLITE_SCHEMA_VERSION
from ..migrate import schema_version, verify_schema
from ..sqlite import SqliteStore
from ..sqlite.tx import MAX_SEQUENCE_SQL
from .store import PostgresStore

__all__ = ["TABLES", "Copied", "copy_sqlite_journal"]

#: The tables copied, parents first, each with the columns that order its rows.
TABLES: tuple[tuple[str, str], ...] = (
    ("stead_runs", "number"),
    ("stead_operations", "id"),
    ("stead_events", "sequence"),
    ("stead_interactions", "rowid"),
    ("stead_blobs", "hash"),
    ("stead_history", "hash"),
    ("stead_inbox", "id"),
    ("stead_signals", "run_id, request_id"),
    ("stead_schedules", "name"),
)
#: Tables whose integer key PostgreSQL generates: copied with OVERRIDING SYSTEM VALUE.
_IDENTITY = {"stead_runs": "number", "stead_inbox": "id"}
_TEXT_KEYED = {
    "stead_blobs",
    "stead_history",
    "stead_signals",
    "stead_schedules",
}
_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Copied:
    """What was copied: rows per table (each checked by count and digest)."""

    rows: dict[str, int]
    next_sequence: int


def copy_sqlite_journal(source: str | os.PathLike[str], target: PostgresStore) -> Copied:
    """Copy the SQLite journal at ``source`` into ``target``'s schema, which must hold no runs,
    events or other rows yet (it is created if missing). Blocking."""
    path = os.fspath(source)
    if not Path(path).is_file():
        raise ValidationError(f"no stead database at {path!r}; pass the path of a SQLite file")
    sqlite_store = SqliteStore(path)
    lock = sqlite_store.try_lock()
    if lock is None:
        raise StorageError(
            f"a runtime owns {path!r}; stop it first, so the copy is the journal as it stands"
        )
    try:
        src = _open_source(path)
        try:
            return _copy(src, path, target)
        finally:
            src.close()
    finally:
        os.close(lock)


def _open_source(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    try:
        version = schema_version(conn)
        if version != SQLITE_SCHEMA_VERSION:
            if version > SQLITE_SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{path!r} has schema version {version}, newer than this stead reads "
                    f"({SQLITE_SCHEMA_VERSION}); upgrade stead"
                )
            raise SchemaVersionError(
                f"{path!r} has schema version {version}, written by an older stead; open it "
                "once with a runtime of this stead (App.open), which migrates it, then copy it"
            )
        verify_schema(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _copy(src: sqlite3.Connection, path: str, target: PostgresStore) -> Copied:
    conn = target.connect()
    try:
        target.migrate(conn)
        return target.guarded(lambda: _copy_locked(src, path, conn, target))
    finally:
        conn.close()


def _copy_locked(src: sqlite3.Connection, path: str, conn: Any, target: PostgresStore) -> Copied:
    conn.execute("BEGIN")
    try:
        # No worker reads or writes the schema until the copy commits (or is rolled back).
        tables = ", ".join(table for table, _ in TABLES)
        conn.execute(f"LOCK TABLE stead_meta, {tables} IN ACCESS EXCLUSIVE MODE")
        for table, _ in TABLES:
            found = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            if found:
                raise StorageError(
                    f"schema {target.schema!r} {target.where} is not empty ({found} rows in "
                    f"{table}); migrate-store copies into an empty schema only: name a new one "
                    "with --schema"
                )
        src.execute("BEGIN")  # one snapshot of the source
        rows: dict[str, int] = {}
        for table, order in TABLES:
            columns = _shared_columns(src, conn, table)
            rows[table] = _copy_table(src, conn, table, columns, order)
        next_sequence = _next_sequence(src)
        conn.execute("UPDATE stead_meta SET next_sequence = %s", (next_sequence,))
        for table, column in _IDENTITY.items():
            conn.execute(
                "SELECT setval(pg_get_serial_sequence(%s, %s), "
                f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)",
                (f"{target.schema}.{table}", column),
            )
        for table, order in TABLES:
            columns = _shared_columns(src, conn, table)
            _check(src, conn, table, columns, order, path, target)
        src.execute("COMMIT")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        if src.in_transaction:
            src.execute("ROLLBACK")
        raise
    # Statistics for the planner at once, not when autovacuum comes round: with none, it reads
    # a session's runs through the status index (every completed run), as SQLite's does. The
    # copy stands if the server refuses: autovacuum gathers them later.
    with contextlib.suppress(Exception):
        for table, _ in TABLES:
            conn.execute(f"ANALYZE {table}")
    return Copied(rows=rows, next_sequence=next_sequence)


def _shared_columns(src: sqlite3.Connection, conn: Any, table: str) -> list[str]:
    mine = [row[1] for row in src.execute(f'PRAGMA table_info("{table}")')]
    theirs = {
        row[0]
        for row in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s",
            (table,),
        )
    }
    return [c for c in mine if c in theirs]


def _copy_table(
    src: sqlite3.Connection, conn: Any, table: str, columns: list[str], order: str
) -> int:
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    overriding = " OVERRIDING SYSTEM VALUE" if table in _IDENTITY else ""
    insert = f"INSERT INTO {table} ({names}){overriding} VALUES ({marks})"
    count = 0
    cursor = src.execute(f"SELECT {names} FROM {table} ORDER BY {order}")
    with conn.cursor() as out:
        while batch := cursor.fetchmany(_BATCH):
            out.executemany(insert, batch)
            count += len(batch)
    return count


def _next_sequence(src: sqlite3.Connection) -> int:
    """Above every sequence the source handed out or may have shown (its reservation)."""
    written = int(src.execute(MAX_SEQUENCE_SQL).fetchone()[0])
    reserved = src.execute("SELECT sequence_reserved_through FROM stead_meta").fetchone()
    return max(written, int(reserved[0] or 0) if reserved else 0) + 1


def _digest(rows: Iterator[tuple[Any, ...]]) -> tuple[int, str]:
    hasher = hashlib.sha256()
    count = 0
    for row in rows:
        hasher.update(dumps(list(row)).encode())
        hasher.update(b"\n")
        count += 1
    return count, hasher.hexdigest()


def _check(
    src: sqlite3.Connection,
    conn: Any,
    table: str,
    columns: list[str],
    order: str,
    path: str,
    target: PostgresStore,
) -> None:
    names = ", ".join(columns)
    # Text keys in byte order on both sides (SQLite's BINARY is PostgreSQL's "C").
    target_order = (
        "number"
        if order == "rowid"
        else ", ".join(f'{c.strip()} COLLATE "C"' for c in order.split(","))
        if table in _TEXT_KEYED
        else order
    )
    mine = _digest(iter(src.execute(f"SELECT {names} FROM {table} ORDER BY {order}")))
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {names} FROM {table} ORDER BY {target_order}")
        theirs = _digest(iter(cursor))
    if mine != theirs:
        raise StorageError(
            f"the copy of {table} differs from {path!r} ({mine[0]} rows there, {theirs[0]} in "
            f"schema {target.schema!r}); nothing was kept"
        )
