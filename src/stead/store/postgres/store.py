"""The PostgreSQL store: the same journal as SQLite, in a schema of a PostgreSQL database.

Opening connects, creates the schema if needed and applies the numbered migrations of the
``postgres`` dialect (``sql/postgres/NNNN_*.sql``) in one transaction under an advisory lock on
the schema, so processes opening the same schema at once migrate it once; a schema written by a
newer stead is refused. Writes go through :class:`~.writer.PostgresWriter` (group commit on a
thread; barriers commit with ``synchronous_commit = on``). The row SQL is the journal's shared
SQL (``..rows``), and every rule is a transition of :mod:`stead.journal.transitions`.

Several stead apps may share one database, each in its own schema (``schema="stead"`` by
default). A URL's password never appears in an error, a ``repr`` or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..._clock import Clock, SystemClock
from ...errors import OwnershipError, SchemaVersionError, StorageError, ValidationError
from ...journal.commands import Command
from ...journal.protocol import Durability
from ...journal.records import Event
from ..migrate import migrations
from .client import PostgresClient
from .tx import PostgresTx
from .writer import PostgresWriter

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

T = TypeVar("T")

#: The schema version this stead writes in the ``postgres`` dialect.
SCHEMA_VERSION = max(v for v, _ in migrations("postgres"))

#: Pauses between tries of the owner lock before a second owner is refused (None: give up).
_LOCK_PAUSES: tuple[float | None, ...] = (0.05, 0.1, 0.2, 0.4, None)
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SCHEMES = ("postgresql://", "postgres://")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise StorageError(
            "PostgresStore needs psycopg; install stead with the postgres extra: "
            "pip install 'stead[postgres]'"
        ) from exc
    return psycopg


class PostgresStore:
    """A journal kept in PostgreSQL.

    ``url`` is a ``postgresql://`` URL (libpq's: ``postgresql://user:password@host:port/db``,
    query parameters such as ``sslmode`` included). ``schema`` names the PostgreSQL schema that
    holds this app's tables; it is created if missing.
    """

    storage_errors: tuple[type[BaseException], ...]

    def __init__(self, url: str, *, schema: str = "stead", clock: Clock | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(_SCHEMES):
            shown = url if not isinstance(url, str) else redacted_url(url)
            raise ValidationError(
                f"PostgresStore takes a postgresql:// URL (postgresql://user@host:5432/dbname), "
                f"not {shown!r}; for a SQLite file use stead.SqliteStore(path)"
            )
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            raise ValidationError(
                f"schema must be a lowercase PostgreSQL identifier (letters, digits and _, "
                f"not starting with a digit, at most 63 characters), not {schema!r}"
            )
        self.url = url
        self.schema = schema
        self.clock: Clock = clock or SystemClock()
        self.where = _describe(url)
        #: The channel that wakes the owner when a client posts a command.
        self.channel = f"stead_{schema}"
        self._writer: PostgresWriter | None = None
        self._client: PostgresClient | None = None
        self._listener: _Listener | None = None

    @property
    def cli_args(self) -> str:
        """The ``stead`` command's options that name this store (without the password)."""
        return f"--db {shlex.quote(redacted_url(self.url))} --schema {self.schema}"

    def __repr__(self) -> str:
        return f"PostgresStore({redacted_url(self.url)!r}, schema={self.schema!r})"

    # -- connecting and migrating ------------------------------------------------------------

    def connect(self) -> Any:
        """A new connection with this store's schema on its search path (blocking). Every
        failure is one :class:`StorageError` naming the server and database, never the
        password."""
        psycopg = _psycopg()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StorageError(
                f"cannot connect to PostgreSQL {self.where}: {_reason(exc, self.url)}; check "
                "that the server is running and reachable, and the user, password and "
                "database name in the URL"
            ) from None
        try:
            conn.execute(f'SET search_path TO "{self.schema}"')
        except psycopg.Error as exc:
            conn.close()
            raise StorageError(
                f"cannot use schema {self.schema!r} on PostgreSQL {self.where}: "
                f"{_reason(exc, self.url)}"
            ) from None
        return conn

    def migrate(self, conn: Any) -> int:
        """Create or upgrade this store's schema (under an advisory lock); returns the schema
        version found before. A schema written by a newer stead is refused."""
        psycopg = _psycopg()
        try:
            conn.execute("BEGIN")
            try:
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"stead:{self.schema}",)
                )
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                found = conn.execute(
                    "SELECT to_regclass(%s)", (f'"{self.schema}".stead_meta',)
                ).fetchone()[0]
                version = 0
                if found is not None:
                    version = int(
                        conn.execute("SELECT schema_version FROM stead_meta").fetchone()[0]
                    )
                if version > SCHEMA_VERSION:
                    raise SchemaVersionError(
                        f"schema {self.schema!r} on PostgreSQL {self.where} has stead schema "
                        f"version {version}, newer than this stead reads ({SCHEMA_VERSION}); "
                        "upgrade stead"
                    )
                for number, script in migrations("postgres"):
                    if number > version:
                        conn.execute(script)
                if version == 0:
                    conn.execute(
                        "INSERT INTO stead_meta (singleton, schema_version) VALUES (1, %s)",
                        (SCHEMA_VERSION,),
                    )
                elif version < SCHEMA_VERSION:
                    conn.execute("UPDATE stead_meta SET schema_version = %s", (SCHEMA_VERSION,))
                conn.execute("COMMIT")
                return version
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except psycopg.Error as exc:
            raise StorageError(
                f"cannot create or upgrade schema {self.schema!r} on PostgreSQL {self.where}: "
                f"{_reason(exc, self.url)}"
            ) from None

    # -- the store as its owner uses it ------------------------------------------------------

    def acquire(
        self,
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[list[Event]], None],
        on_fatal: Callable[[StorageError], None],
    ) -> int:
        """Connect, migrate and start the writer (blocking; called on a thread)."""
        if self._writer is not None:
            raise StorageError(f"{self!r} is open already; open it once")
        conn = self.connect()
        try:
            found = self.migrate(conn)
        finally:
            conn.close()
        psycopg = _psycopg()
        self.storage_errors = (psycopg.Error, OSError, MemoryError)
        listener = _Listener(self)
        try:
            self._writer = PostgresWriter(
                self._connect_owner,
                lambda connection, read_only: PostgresTx(
                    connection, self.clock, read_only=read_only
                ),
                loop,
                on_commit,
                on_fatal,
                storage_errors=self.storage_errors,
                name=f"stead-postgres:{self.schema}",
            )
        except BaseException:
            listener.stop()
            raise
        self._listener = listener
        return found

    def _connect_owner(self) -> Any:
        """The writer's connection, holding the schema's owner lock for as long as it lives.
        A lock held by an owner that just died is freed once the server ends its session, a
        moment later: the lock is tried a few times before a live owner is assumed."""
        conn = self.connect()
        for pause in _LOCK_PAUSES:
            if self.guarded(lambda: self.try_owner_lock(conn)):
                return conn
            if pause is not None:
                time.sleep(pause)
        conn.close()
        raise OwnershipError(
            f"another stead runtime owns schema {self.schema!r} {self.where}; a schema has "
            "one live runtime at a time: stop that one first, or give this app its own "
            "schema (PostgresStore(url, schema=...))"
        )

    def try_owner_lock(self, conn: Any) -> bool:
        """Take the schema's owner lock on ``conn`` if nobody holds it (blocking)."""
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (self._owner_key,))
        return bool(row.fetchone()[0])

    def release_owner_lock(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (self._owner_key,))

    @property
    def _owner_key(self) -> str:
        return f"stead-owner:{self.schema}"

    def guarded(self, fn: Callable[[], T]) -> T:
        """``fn()``, with a failure of the server or the connection as one
        :class:`StorageError` naming the server (never the password)."""
        psycopg = _psycopg()
        try:
            return fn()
        except psycopg.Error as exc:
            raise StorageError(
                f"PostgreSQL {self.where} failed: {_reason(exc, self.url)}; nothing of the "
                "failed transaction was kept"
            ) from None

    def transact(
        self,
        fn: Callable[[PostgresTx], T],
        *,
        durability: Durability = "commit",
        isolated: bool = True,
    ) -> asyncio.Future[T]:
        """Queue ``fn(tx)`` on the writer; the future resolves once it is committed (with
        ``synchronous_commit = on`` for a ``barrier``). An ``isolated`` one runs inside a
        savepoint, so a refusal undoes its writes alone; otherwise its failure poisons the
        store."""
        writer = self._open_writer()
        return writer.submit(
            fn, barrier=durability == "barrier", checked=isolated and durability != "lazy"
        )

    def read(self, fn: Callable[[PostgresTx], T]) -> asyncio.Future[T]:
        """Queue a read; it sees every write queued before it."""
        return self._open_writer().submit(fn, read_only=True)

    def amend(self, queued: Awaitable[Any], fn: Callable[[PostgresTx], Any]) -> bool:
        """See :meth:`stead.journal.protocol.Store.amend`."""
        if self._writer is None or not isinstance(queued, asyncio.Future):
            return False
        return self._writer.amend(queued, fn)

    def changed_elsewhere(self) -> bool:
        """Whether a client posted a command since the last call (a notification), or, as a
        fallback for a lost one, a few seconds passed."""
        return self._listener is not None and self._listener.woken()

    async def aclose(self) -> None:
        """Commit what is queued, then close (the owner lock goes with the connection)."""
        writer, self._writer = self._writer, None
        listener, self._listener = self._listener, None
        if writer is not None:
            await writer.aclose()
        if listener is not None:
            await asyncio.to_thread(listener.stop)

    # -- the store as a Client in any process uses it ----------------------------------------

    def client_open(self) -> None:
        """Open this store for a :class:`~stead.Client` (blocking): a connection that reads,
        posts commands to the owner, or applies them when no runtime owns the schema."""
        if self._client is None:
            self._client = PostgresClient(self)

    def client_close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def client_read(self, fn: Callable[[PostgresTx], T]) -> T:
        self.client_open()
        assert self._client is not None
        return self._client.read(fn)

    async def client_command(self, command: Command, *, timeout: float) -> object:
        self.client_open()
        assert self._client is not None
        return await self._client.command(command, timeout=timeout)

    def _open_writer(self) -> PostgresWriter:
        if self._writer is None:
            raise StorageError(f"{self!r} is not open; open it with App.open(store)")
        return self._writer


def _conninfo(url: str) -> dict[str, Any]:
    try:
        from psycopg.conninfo import conninfo_to_dict

        return dict(conninfo_to_dict(url))
    except Exception:
        return {}


def _describe(url: str) -> str:
    """``host:port, database 'name'`` of a URL, for messages (never the password)."""
    info = _conninfo(url)
    host = info.get("host") or "the local socket"
    port = info.get("port")
    where = f"{host}:{port}" if port and info.get("host") else str(host)
    return f"at {where}, database {info.get('dbname') or info.get('user') or '(default)'!r}"


def redacted_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and ``repr``)."""
    return re.sub(r"(?<=://)([^:/@]*):[^@/]*@", r"\1:***@", url)


def _reason(exc: BaseException, url: str) -> str:
    """The server's or libpq's message, on one line, without the URL's password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    password = _conninfo(url).get("password")
    if password:
        text = text.replace(str(password), "***")
    return text


class _Listener:
    """LISTENs on the store's channel on a thread of its own and remembers being woken."""

    #: Seconds after which the owner looks at its inbox even without a notification.
    fallback = 2.0
    #: Seconds the thread waits for a notification before it looks whether to stop: closing
    #: a store waits at most this long for the thread.
    tick = 0.05

    def __init__(self, store: PostgresStore) -> None:
        self._conn = store.connect()
        self._conn.execute(f"LISTEN {store.channel}")
        self._notified = threading.Event()
        self._stopping = threading.Event()
        self._last = time.monotonic()
        self._thread = threading.Thread(
            target=self._main, name=f"stead-listen:{store.schema}", daemon=True
        )
        self._thread.start()

    def woken(self) -> bool:
        now = time.monotonic()
        if self._notified.is_set() or now - self._last >= self.fallback:
            self._notified.clear()
            self._last = now
            return True
        return False

    def _main(self) -> None:
        while not self._stopping.is_set():
            try:
                for _ in self._conn.notifies(timeout=self.tick):
                    self._notified.set()
            except Exception:  # the connection failed: the fallback keeps the owner looking
                self._stopping.wait(self.fallback)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self._conn.close()
