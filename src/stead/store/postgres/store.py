"""The PostgreSQL store: the same journal as SQLite, in a schema of a PostgreSQL database.

Opening connects, creates the schema if needed and applies the numbered migrations of the
``postgres`` dialect (``sql/postgres/NNNN_*.sql``) in one transaction under an advisory lock on
the schema, so processes opening the same schema at once migrate it once; a schema written by a
newer stead is refused. Writes go through :class:`~.writer.PostgresWriter` (group commit on a
thread; barriers commit with ``synchronous_commit = on``). The row SQL is the journal's shared
SQL (``..rows``), and every rule is a transition of :mod:`stead.journal.transitions`.

Many workers (runtimes, in any number of processes and hosts) share a schema. Each claims
runnable runs with ``FOR UPDATE SKIP LOCKED``, holding a lease it extends by heartbeat and with
every journal write; every write of an execution is fenced by the claim's epoch, so a worker that
lost a run commits nothing more for it. Commands are plain transactions plus a notification on
the schema's channel, which wakes the workers (with a polling fallback).

Several stead apps may share one database, each in its own schema (``schema="stead"`` by
default). A URL's password never appears in an error, a ``repr`` or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..._clock import Clock, SystemClock
from ..._ids import new_token
from ..._json import JSON
from ..._threads import run_store_call
from ...errors import SchemaVersionError, StorageError, ValidationError, shown
from ...journal import transitions
from ...journal.commands import Command
from ...journal.protocol import Durability
from ...journal.records import RUNNABLE_STATUSES, Claim, Notice
from ..migrate import migrations
from ..rows._base import TERMINAL_SQL
from .client import PostgresClient
from .tx import PostgresTx
from .writer import PostgresWriter

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

T = TypeVar("T")

#: The schema version this stead writes in the ``postgres`` dialect.
SCHEMA_VERSION = max(v for v, _ in migrations("postgres"))

#: A session that sits inside a transaction longer than this is ended by the server, so a
#: worker stopped mid-transaction (SIGSTOP, a frozen VM) cannot keep a run's row locked.
IDLE_IN_TRANSACTION_MS = 5000
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
    #: Many runtimes may execute this store's runs at once (claims with leases).
    shared = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "stead",
        min_size: int = 1,
        max_size: int = 10,
        lease_seconds: float = 15.0,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(_SCHEMES):
            found = url if not isinstance(url, str) else redacted_url(url)
            raise ValidationError(
                f"PostgresStore takes a postgresql:// URL (postgresql://user@host:5432/dbname), "
                f"not {found!r}; for a SQLite file use stead.SqliteStore(path)"
            )
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            raise ValidationError(
                f"schema must be a lowercase PostgreSQL identifier (letters, digits and _, "
                f"not starting with a digit, at most 63 characters), not {schema!r}"
            )
        for name, value, least in (("min_size", min_size, 0), ("max_size", max_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValidationError(
                    f"{name} must be an integer >= {least} (connections in the pool of "
                    f"commands and reads), got {shown(value)}"
                )
        if min_size > max_size:
            raise ValidationError(
                f"min_size ({min_size}) must not exceed max_size ({max_size}); raise max_size"
            )
        if (
            isinstance(lease_seconds, bool)
            or not isinstance(lease_seconds, int | float)
            or not math.isfinite(lease_seconds)
            or not 0.2 <= lease_seconds <= 3600
        ):
            raise ValidationError(
                f"lease_seconds must be a number of seconds from 0.2 to 3600 (how long a "
                f"worker's claim on a run outlives its last heartbeat), got {shown(lease_seconds)}"
            )
        self.url = url
        self.schema = schema
        self.min_size = min_size
        self.max_size = max_size
        self.lease_seconds = float(lease_seconds)
        self.clock: Clock = clock or SystemClock()
        self.where = _describe(url)
        #: The channel that wakes the workers when something became runnable or was cancelled.
        self.channel = f"stead_{schema}"
        #: This runtime's name in the claims it holds (``host:pid:random``), once opened.
        self.worker = ""
        #: When each claim's lease was last extended (run id → epoch, local monotonic time).
        self.confirmed: dict[str, tuple[int, float]] = {}
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
            self.configure(conn)
        except psycopg.Error as exc:
            conn.close()
            raise StorageError(
                f"cannot use schema {self.schema!r} on PostgreSQL {self.where}: "
                f"{_reason(exc, self.url)}"
            ) from None
        return conn

    def configure(self, conn: Any) -> None:
        """Set up a new connection: this store's schema first on its search path, no
        transaction left idle (a stopped process must not hold a run's row locked), and
        ``application_name`` ``stead:SCHEMA`` (``pg_stat_activity`` shows stead's sessions)."""
        conn.execute(
            f'SET search_path TO "{self.schema}"; '
            f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}; "
            f"SET application_name = 'stead:{self.schema}'"
        )

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
        on_commit: Callable[[list[Notice]], None],
        on_fatal: Callable[[StorageError], None],
    ) -> int:
        """Connect, migrate and start the writer and the listener (blocking; called on a
        thread). Any number of runtimes may do so on one schema at once."""
        if self._writer is not None:
            raise StorageError(f"{self!r} is open already; open it once")
        conn = self.connect()
        try:
            found = self.migrate(conn)
        finally:
            conn.close()
        psycopg = _psycopg()
        self.storage_errors = (psycopg.Error, OSError, MemoryError)
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{new_token()[:6]}"
        listener = _Listener(self, loop)
        try:
            self._writer = PostgresWriter(
                self._writer_connection,
                lambda connection, read_only: PostgresTx(
                    connection,
                    self.clock,
                    read_only=read_only,
                    lease_seconds=self.lease_seconds,
                    confirmed=self.confirmed,
                    channel=self.channel,
                    sender=self.worker,
                ),
                loop,
                on_commit,
                on_fatal,
                storage_errors=self.storage_errors,
                name=f"stead-postgres:{self.schema}",
            )
            self.client_open()  # the pool of commands: a first submission need not wait for it
        except BaseException:
            listener.stop()
            if self._writer is not None:
                self._writer.close_now()
                self._writer = None
            raise
        self._listener = listener
        return found

    def watch(self, on_notice: Callable[[str], None]) -> None:
        """Call ``on_notice(payload)`` on the loop for every notification on the schema's
        channel (``cancel:RUN_ID`` for a cancelled run; otherwise the id of the worker that
        sent it, or ``""`` from a client), but for the ones this worker sent itself, and with
        ``""`` every few seconds as a fallback for a lost one."""
        if self._listener is not None:
            self._listener.on_notice = on_notice

    # -- claims: many workers on one schema -------------------------------------------------

    def claim_runs(
        self, limit: int, exclude: Iterable[str]
    ) -> Awaitable[tuple[list[Claim], datetime | None]]:
        """Claim up to ``limit`` runnable runs (not ``exclude``) for this worker; with them,
        when to look again (a back-off ending, a lease of another worker running out)."""
        return self._open_writer().submit(
            functools.partial(self._claim, limit=limit, exclude=list(exclude))
        )

    def _claim(
        self, tx: PostgresTx, *, limit: int, exclude: list[str]
    ) -> tuple[list[Claim], datetime | None]:
        statuses = ", ".join(f"'{s}'" for s in (*RUNNABLE_STATUSES, "retry_wait"))
        ready = ", ".join(f"'{s}'" for s in RUNNABLE_STATUSES)
        claimed = tx.execute(
            "WITH ready AS (SELECT r.id FROM stead_runs AS r "
            f"WHERE (r.status IN ({ready}) OR (r.status = 'retry_wait' AND r.next_attempt_at <= ?) "
            # in the words of the timers' partial index, so a claim reads due timers only
            "OR (r.status = 'waiting' AND r.next_attempt_at IS NOT NULL "
            "AND r.next_attempt_at <= ?)) "
            "AND (r.lease_until IS NULL OR r.lease_until < clock_timestamp()) "
            "AND r.id <> ALL(?) "
            "AND NOT EXISTS (SELECT 1 FROM stead_runs AS p WHERE p.session_id = r.session_id "
            f"AND p.number < r.number AND p.status NOT IN {TERMINAL_SQL}) "
            "ORDER BY r.number LIMIT ? FOR UPDATE OF r SKIP LOCKED) "
            "UPDATE stead_runs AS s SET claim_epoch = s.claim_epoch + 1, claimed_by = ?, "
            "lease_until = clock_timestamp() + make_interval(secs => ?) "
            "FROM ready WHERE s.id = ready.id RETURNING s.id, s.claim_epoch, s.number",
            (tx.stamp(), tx.stamp(), exclude, limit, self.worker, self.lease_seconds),
        )
        # When to look again: a back-off ending, or another worker's lease running out (asked
        # before the claim's answer is read: in a pipelined batch, one wait for both).
        later = tx.execute(
            "SELECT LEAST("
            "(SELECT MIN(next_attempt_at) FROM stead_runs WHERE status = 'retry_wait'), "
            "(SELECT MIN(next_attempt_at) FROM stead_runs "
            "WHERE status = 'waiting' AND next_attempt_at IS NOT NULL)), "
            "(SELECT EXTRACT(EPOCH FROM MIN(lease_until) - clock_timestamp()) FROM stead_runs "
            f"WHERE status IN ({statuses}) AND lease_until IS NOT NULL AND claimed_by <> ?)",
            (self.worker,),
        )
        rows = claimed.fetchall()
        rows.sort(key=lambda row: row[2])
        claims = [Claim(run_id, int(epoch)) for run_id, epoch, _ in rows]
        due, expires = later.fetchone()
        wakeup = datetime.fromisoformat(due) if due is not None else None
        if expires is not None:
            expiry = tx.now() + timedelta(seconds=max(0.0, float(expires)) + 0.05)
            wakeup = expiry if wakeup is None else min(wakeup, expiry)
        return claims, wakeup

    async def extend_leases(self, claims: Sequence[Claim]) -> set[str]:
        """Heartbeat: extend the lease of every claim still held; returns the runs another
        worker took over since (it holds them now, or held them and let them go: finished
        them, say). A run that left ``running`` under the claim is finishing here, or was
        cancelled, which its notification reports."""
        if not claims:
            return set()
        return await self._open_writer().submit(
            functools.partial(self._extend, claims=list(claims))
        )

    def _extend(self, tx: PostgresTx, *, claims: list[Claim]) -> set[str]:
        sent = time.monotonic()
        rows = tx.execute(
            "UPDATE stead_runs AS s SET lease_until = clock_timestamp() + make_interval(secs => ?) "
            "FROM unnest(?::text[], ?::bigint[]) AS c(id, epoch) "
            "WHERE s.id = c.id AND s.claim_epoch = c.epoch AND s.claimed_by = ? RETURNING s.id",
            (
                self.lease_seconds,
                [c.run_id for c in claims],
                [c.epoch for c in claims],
                self.worker,
            ),
        ).fetchall()
        extended = {row[0] for row in rows}
        for claim in claims:
            if claim.run_id in extended:
                tx.extended(claim, sent)
        missing = [c for c in claims if c.run_id not in extended]
        if not missing:
            return set()
        # A run that left `running` under this claim has the next epoch and no holder (it ended
        # or parked here, or was cancelled, which its notification reports). Any other worker
        # holding it now, or having held it since (an epoch further on), took it over.
        taken = tx.execute(
            "SELECT s.id FROM stead_runs AS s "
            "JOIN unnest(?::text[], ?::bigint[]) AS c(id, epoch) ON s.id = c.id "
            "WHERE s.claimed_by IS NOT NULL OR s.claim_epoch > c.epoch + 1",
            ([c.run_id for c in missing], [c.epoch for c in missing]),
        ).fetchall()
        return {row[0] for row in taken}

    async def release_claims(self, claims: Sequence[Claim]) -> None:
        """Give runs up (this worker stops or hands them over): any worker may claim them at
        once and continue from their journals."""
        if claims:
            await self._open_writer().submit(
                functools.partial(self._release, claims=list(claims)), barrier=True
            )

    def _release(self, tx: PostgresTx, *, claims: list[Claim]) -> None:
        tx.execute(
            # Given back in good order, not interrupted: the count of executions interrupted in
            # a row starts again (transitions.begin).
            "UPDATE stead_runs AS s SET claimed_by = NULL, lease_until = NULL, "
            "interruptions = 0 "
            "FROM unnest(?::text[], ?::bigint[]) AS c(id, epoch) "
            "WHERE s.id = c.id AND s.claim_epoch = c.epoch",
            ([c.run_id for c in claims], [c.epoch for c in claims]),
        )
        tx.execute("SELECT pg_notify(?, ?)", (self.channel, self.worker))

    def fenced(self, claim: Claim) -> _Fenced:
        """This store as one execution writes to it: every transaction fenced by ``claim``."""
        return _Fenced(self, claim)

    async def declare_agents(self, latest: Mapping[str, str]) -> None:
        """Record the agent versions this runtime runs, each the latest of its agent, so a
        client with no registry pins a new submission as a runtime would."""
        if latest:
            await self._open_writer().submit(
                functools.partial(self._declare, latest=dict(latest)), barrier=True
            )

    def _declare(self, tx: PostgresTx, *, latest: dict[str, str]) -> None:
        tx.executemany(
            "INSERT INTO stead_agents (agent_id, version, latest_at) "
            "VALUES (?, ?, clock_timestamp()) "
            "ON CONFLICT (agent_id, version) DO UPDATE SET latest_at = EXCLUDED.latest_at",
            sorted(latest.items()),
        )

    async def apply_command(
        self,
        command: Command,
        version_of: transitions.VersionOf | None,
        max_pending: int | None,
        *,
        claim: bool = False,
        begin: Callable[[PostgresTx, str, bool], transitions.Begun | None] | None = None,
    ) -> tuple[JSON, Claim | None, transitions.Begun | None]:
        """Apply a command for a runtime: its own transaction, and a notification (see
        :mod:`.client`). The transaction runs on the writer's connection when the writer is
        idle (:meth:`PostgresWriter.run_alone`) — open, and warm from the runtime's own work,
        where a pool connection may be new — and on the pool otherwise, so that commands never
        wait behind the runs' writes. With ``claim``, a run it submits at its session's head is
        claimed for this worker in the same transaction (its claim is returned): the runtime
        starts it without asking again, and the other workers are not woken for it. With
        ``begin`` too, its execution begins in that transaction as well (``begin(tx, run_id,
        fresh)``, whose answer is returned): one transaction takes a new run from its
        submission to its first step."""
        if self._client is None:
            await asyncio.to_thread(self.client_open)
        assert self._client is not None
        apply = functools.partial(
            self._client.apply,
            command,
            version_of,
            max_pending,
            claim_for=self.worker if claim else None,
            begin=begin,
        )
        here = None
        if self._writer is not None:
            here = self._writer.run_alone(lambda conn, wire: apply(on=(conn, wire)))
        applied = await here if here is not None else await run_store_call(apply)
        if applied.sequence is not None and self._writer is not None:
            self._writer.observe_sequence(applied.sequence)
        return applied.answer, applied.claim, applied.begun

    def guarded(self, fn: Callable[[], T], *, passing: tuple[type[BaseException], ...] = ()) -> T:
        """``fn()``, with a failure of the server or the connection as one
        :class:`StorageError` naming the server (never the password); ``passing`` errors are
        raised as they are."""
        psycopg = _psycopg()
        try:
            return fn()
        except passing:
            raise
        except psycopg.Error as exc:
            raise StorageError(
                f"PostgreSQL {self.where} failed: {_reason(exc, self.url)}; nothing of the "
                "failed transaction was kept"
            ) from None

    def flush_here_when(self, alone: Callable[[], bool]) -> None:
        """While ``alone()`` says nothing else would run here meanwhile (the owner executes at
        most one run), the loop looks for the server's answer to a batch someone waits for
        before it sleeps; see ``PostgresWriter.spin``."""
        if self._writer is not None:
            self._writer.alone = alone

    def transact(
        self,
        fn: Callable[[PostgresTx], T],
        *,
        durability: Durability = "commit",
        isolated: bool = True,
        fence: Claim | None = None,
    ) -> asyncio.Future[T]:
        """Queue ``fn(tx)`` on the writer; the future resolves once it is committed (with
        ``synchronous_commit = on`` for a ``barrier``). An ``isolated`` one runs inside a
        savepoint, so a refusal undoes its writes alone; otherwise its failure poisons the
        store. A ``fence``d one runs only while this worker holds that claim; otherwise it
        fails with :class:`~stead.errors.LeaseLostError` and writes nothing."""
        writer = self._open_writer()
        return writer.submit(
            fn,
            # A lazy barrier goes as a barrier: its batch starts at the end of the loop's
            # turn, and the write the run queues next in the same step joins it.
            barrier=durability == "barrier" or durability == "lazy_barrier",
            checked=isolated and durability != "lazy",
            fence=fence,
            lazy=durability == "lazy",
        )

    def read(self, fn: Callable[[PostgresTx], T]) -> asyncio.Future[T]:
        """Queue a read; it sees every write queued before it."""
        return self._open_writer().submit(fn, read_only=True)

    def amend(self, queued: Awaitable[Any], fn: Callable[[PostgresTx], Any]) -> bool:
        """See :meth:`stead.journal.protocol.Store.amend`."""
        if self._writer is None or not isinstance(queued, asyncio.Future):
            return False
        return self._writer.amend(queued, fn)

    async def hold(self) -> None:
        """Writes that no claim fences have nothing to hold (an execution writes through
        :meth:`fenced`)."""

    def changed_elsewhere(self) -> bool:
        """Never: commands are applied where they are given (:meth:`watch` wakes workers)."""
        return False

    async def aclose(self) -> None:
        """Commit what is queued, then close the connections."""
        writer, self._writer = self._writer, None
        listener, self._listener = self._listener, None
        if writer is not None:
            await writer.aclose()
        if listener is not None:
            await asyncio.to_thread(listener.stop)
        await asyncio.to_thread(self.client_close)

    # -- the store as a Client in any process uses it ----------------------------------------

    def client_open(self) -> None:
        """Open this store for a :class:`~stead.Client` (blocking): the pool of connections
        that read and apply commands."""
        if self._client is None:
            self._client = PostgresClient(self)

    def client_close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def client_listen(
        self, loop: asyncio.AbstractEventLoop, on_notice: Callable[[str], None]
    ) -> Callable[[], None]:
        """For a :class:`~stead.Client` waiting for runs to end (blocking: it connects): call
        ``on_notice(payload)`` on ``loop`` for every notification on the schema's channel (a
        worker or a client let a run go), and with ``""`` every few seconds; returns what stops
        it (blocking too)."""
        return _Listener(self, loop, on_notice).stop

    def client_read(self, fn: Callable[[PostgresTx], T]) -> T:
        self.client_open()
        assert self._client is not None
        return self._client.read(fn)

    async def client_command(self, command: Command, *, timeout: float) -> object:
        self.client_open()
        assert self._client is not None
        return await self._client.command(command, timeout=timeout)

    def _writer_connection(self) -> Any:
        """The executions' connection: it runs the same few statements all day, so each is
        prepared on its first use (the server plans it once, not once a call)."""
        conn = self.connect()
        conn.prepare_threshold = 0
        # Their plans do not depend on the values (keys, stamps, a claim's limit): a custom
        # plan is planned again at every execution, 0.4-0.9 ms for a claim here.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        # Most of its commits are lazy: a barrier's transaction sets it on for itself.
        conn.execute("SET synchronous_commit = off")
        return conn

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
    """LISTENs on the store's channel on a thread of its own and hands every notification to
    the loop; reconnects after the server went away."""

    #: Seconds after which the workers look for work even without a notification.
    fallback = 2.0
    #: Seconds the thread waits for a notification before it looks whether to stop: closing
    #: a store waits at most this long for the thread.
    tick = 0.05

    def __init__(
        self,
        store: PostgresStore,
        loop: asyncio.AbstractEventLoop,
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._loop = loop
        self.on_notice = on_notice
        self._conn: Any = self._listen()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"stead-listen:{store.schema}", daemon=True
        )
        self._thread.start()

    def _listen(self) -> Any:
        conn = self._store.connect()
        try:
            conn.execute(f"LISTEN {self._store.channel}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _hand(self, payload: str) -> None:
        callback = self.on_notice
        if callback is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed
                self._loop.call_soon_threadsafe(callback, payload)

    def _main(self) -> None:
        last = time.monotonic()
        while not self._stopping.is_set():
            try:
                if self._conn is None:
                    self._conn = self._listen()
                    self._hand("")  # notifications may have been missed meanwhile
                for notice in self._conn.notifies(timeout=self.tick):
                    # A worker's own notifications are not news to it: it woke itself when it
                    # wrote them (a run it ended, a command it applied).
                    if not notice.payload or notice.payload != self._store.worker:
                        self._hand(notice.payload)
            except Exception:  # the server went away: the fallback keeps the workers looking
                with contextlib.suppress(Exception):
                    if self._conn is not None:
                        self._conn.close()
                self._conn = None
                self._stopping.wait(self.fallback)
            now = time.monotonic()
            if now - last >= self.fallback:
                last = now
                self._hand("")

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self._conn.close()


class _Fenced:
    """A store as one claimed execution writes to it: every transaction fenced by the claim."""

    def __init__(self, store: PostgresStore, claim: Claim) -> None:
        self._store = store
        self._claim = claim
        self.clock = store.clock

    def transact(
        self,
        fn: Callable[[PostgresTx], T],
        *,
        durability: Durability = "commit",
        isolated: bool = True,
    ) -> asyncio.Future[T]:
        return self._store.transact(fn, durability=durability, isolated=isolated, fence=self._claim)

    def read(self, fn: Callable[[PostgresTx], T]) -> asyncio.Future[T]:
        return self._store.read(fn)

    def amend(self, queued: Awaitable[Any], fn: Callable[[PostgresTx], Any]) -> bool:
        return self._store.amend(queued, fn)

    async def hold(self) -> None:
        """Return at once if the lease was extended within the last half lease (no other
        worker can have it yet); else extend it now, or raise ``LeaseLostError``."""
        claim = self._claim
        found = self._store.confirmed.get(claim.run_id)
        fresh = self._store.lease_seconds / 2
        if found is not None and found[0] == claim.epoch and time.monotonic() - found[1] < fresh:
            return
        await self._store.transact(_nothing, fence=claim)


def _nothing(tx: PostgresTx) -> None:
    """A transaction whose only work is its fence (it checks and extends the lease)."""
