"""Schemas and their numbered migrations: ``sql/<dialect>/NNNN_*.sql``, applied in order on open.

A database newer than this stead is refused; an older one is migrated. After migrating, the
schema must be exactly what the migrations create — tables, columns, indexes, and no triggers
or views — so a file someone changed outside stead (a trigger that approves every interaction,
say) is refused instead of running their code inside stead's transactions.
"""

from __future__ import annotations

import sqlite3
from functools import cache
from importlib import resources

from ..errors import StorageError

__all__ = ["SCHEMA_VERSION", "migrations", "schema_version", "statements", "verify_schema"]


@cache
def migrations(dialect: str = "sqlite") -> tuple[tuple[int, str], ...]:
    """The numbered migration scripts of a dialect, in order."""
    folder = resources.files("stead.store").joinpath("sql").joinpath(dialect)
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    return tuple(sorted(found))


def statements(script: str) -> list[str]:
    """The SQL statements of a script, one by one."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip() and not current.strip().startswith("--"):
        out.append(current.strip())
    return [s for s in out if s]


SCHEMA_VERSION = max(v for v, _ in migrations())


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version of a stead SQLite database (0: empty); refuses a foreign one."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stead_meta'"
    ).fetchone()
    if not exists:
        others = conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
        if others:
            raise StorageError(
                "this SQLite file holds other tables and no stead journal; "
                "give stead a file of its own"
            )
        return 0
    row = conn.execute("SELECT schema_version FROM stead_meta").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, version: int) -> None:
    """Apply every migration newer than ``version`` (inside the caller's transaction)."""
    for number, script in migrations():
        if number > version:
            for statement in statements(script):
                conn.execute(statement)


def _expected_schema() -> dict[tuple[str, str], object]:
    """What the migrations create: every table with its columns, every index with its
    columns; computed once on an in-memory database."""
    conn = sqlite3.connect(":memory:")
    try:
        migrate(conn, 0)
        return _schema_of(conn)
    finally:
        conn.close()


def _schema_of(conn: sqlite3.Connection) -> dict[tuple[str, str], object]:
    found: dict[tuple[str, str], object] = {}
    rows = conn.execute(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    ).fetchall()
    for kind, name, table in rows:
        shape: object
        if kind == "table":
            shape = sorted(tuple(row[1:6]) for row in conn.execute(f'PRAGMA table_xinfo("{name}")'))
        elif kind == "index":
            shape = (table, [tuple(row) for row in conn.execute(f'PRAGMA index_xinfo("{name}")')])
        else:  # triggers and views: stead creates none
            shape = None
        found[(kind, name)] = shape
    return found


_EXPECTED_SCHEMA: dict[tuple[str, str], object] | None = None


def verify_schema(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a database whose schema is not what stead's migrations create: a trigger or a
    view someone added runs their code inside stead's transactions."""
    global _EXPECTED_SCHEMA
    if _EXPECTED_SCHEMA is None:
        _EXPECTED_SCHEMA = _expected_schema()
    actual = _schema_of(conn)
    unknown = sorted(f"{kind} {name!r}" for kind, name in actual.keys() - _EXPECTED_SCHEMA.keys())
    missing = sorted(f"{kind} {name!r}" for kind, name in _EXPECTED_SCHEMA.keys() - actual.keys())
    changed = sorted(
        f"{kind} {name!r}"
        for (kind, name), shape in actual.items()
        if (kind, name) in _EXPECTED_SCHEMA and _EXPECTED_SCHEMA[(kind, name)] != shape
    )
    if unknown or missing or changed:
        parts = []
        if unknown:
            parts.append("unknown " + ", ".join(unknown))
        if missing:
            parts.append("missing " + ", ".join(missing))
        if changed:
            parts.append("altered " + ", ".join(changed))
        raise StorageError(
            f"the stead database {path!r} has a schema stead did not create ({'; '.join(parts)}); "
            "it was modified outside stead, so it is not opened. Restore a backup, or remove "
            "what was added if you know why it is there"
        )
