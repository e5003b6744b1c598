"""Reading a journal as stead reads it, for tests that look at a database directly: a SQLite
file (a path) or a PostgreSQL schema (:class:`PgJournal`)."""

from __future__ import annotations

import functools
import os
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stead._clock import SystemClock
from stead.journal import transitions
from stead.journal.records import Event
from stead.store.sqlite.tx import SqliteTx

#: The lease of the tests' PostgreSQL workers (seconds): a killed worker's runs are taken over
#: this long after it died.
PG_LEASE = 1.0


@dataclass(frozen=True)
class PgJournal:
    """A journal in schema ``schema`` of the PostgreSQL database at ``url``."""

    url: str
    schema: str

    def store(self) -> Any:
        from stead.store.postgres import PostgresStore

        return PostgresStore(self.url, schema=self.schema, lease_seconds=PG_LEASE)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """``sql`` written with ``?`` marks, in one read-only transaction."""
        conn = self.store().connect()
        try:
            return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
        finally:
            conn.close()

    def events(self, run_id: str | None = None) -> list[Event]:
        from stead.store.postgres import PostgresTx

        conn = self.store().connect()
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            tx = PostgresTx(conn, SystemClock(), read_only=True)
            return tx.events_after(run_id, 0, 1 << 62)
        finally:
            conn.close()

    def drop(self) -> None:
        conn = self.store().connect()
        try:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        finally:
            conn.close()

    def __str__(self) -> str:
        return self.url


Journal = Path | str | PgJournal


def schema_at(conn: Any, version: int, dialect: str = "sqlite") -> None:
    """Create stead's schema as version ``version`` left it on ``conn`` (a ``sqlite3``
    connection, or a PostgreSQL one whose search path is the schema), with its meta row: a
    journal an older stead wrote, for a newer one to migrate."""
    from stead.store.migrate import migrations, statements

    for number, script in migrations(dialect):
        if number <= version:
            if dialect == "sqlite":
                for statement in statements(script):
                    conn.execute(statement)
            else:
                conn.execute(script)
    conn.execute(f"INSERT INTO stead_meta (singleton, schema_version) VALUES (1, {int(version)})")


def journal_events(db: Journal, run_id: str | None = None) -> list[Event]:
    """Every event of the journal (of one run), in sequence order: the event rows and the
    events that operation rows announce."""
    if isinstance(db, PgJournal):
        return db.events(run_id)
    conn = sqlite3.connect(db)
    try:
        tx = SqliteTx(conn, SystemClock(), 0, False, read_only=True)
        return tx.events_after(run_id, 0, 1 << 62)
    finally:
        conn.close()


def open_store(db: Journal, **options: Any) -> Any:
    """A new store on the journal (not opened); ``options`` such as ``clock``."""
    import stead

    if isinstance(db, PgJournal):
        from stead.store.postgres import PostgresStore

        options.setdefault("lease_seconds", PG_LEASE)
        return PostgresStore(db.url, schema=db.schema, **options)
    return stead.SqliteStore(db, **options)


def fresh_journals(backend: str, tmp_path: Path, prefix: str) -> Iterator[str | PgJournal]:
    """The body of a fixture parametrized over ``sqlite`` and ``postgres``: a fresh journal —
    a SQLite path, or a PostgreSQL schema of its own named ``<prefix>_...``, dropped afterwards
    (skipped without STEAD_TEST_POSTGRES_URL)."""
    if backend == "sqlite":
        yield str(tmp_path / "stead.db")
        return
    url = os.environ.get("STEAD_TEST_POSTGRES_URL")
    if not url:
        import pytest

        pytest.skip("STEAD_TEST_POSTGRES_URL is not set")
    journal = PgJournal(url, f"{prefix}_{secrets.token_hex(6)}")
    try:
        yield journal
    finally:
        journal.drop()


def submission(
    run_id: str = "run-1", session_id: str = "s", request_id: str = "r", **extra: Any
) -> Any:
    """The transition that submits a run of agent ``a`` version 1 (for ``store.transact``),
    as a runtime would; ``extra`` overrides its other arguments."""
    args: dict[str, Any] = {
        "run_id": run_id,
        "session_id": session_id,
        "request_id": request_id,
        "agent_id": "a",
        "version": "1",
        "input": {"prompt": "go"},
        "submission": f"digest-{session_id}-{request_id}",
        "enqueue": False,
        "max_pending": None,
    }
    args.update(extra)
    return functools.partial(transitions.submit, **args)
