"""Commands and reads on a PostgreSQL store, from any process: a pool of connections.

Many workers share a schema, so there is no owner to post a command to: a command is one
transaction that applies the transition itself, and a notification on the schema's channel wakes
the workers (a cancelled run's worker stops executing it at once). What the command decides on
is locked before it is read — the run and the interaction (``FOR UPDATE``), the session (an
advisory lock) — so it and a worker's fenced write to that run, or another command, happen one
after the other, and each statement sees what committed before it (``READ COMMITTED``). A
command that collides with another transaction (a deadlock, a duplicate key raced in) is run
again from the start. Its statements go through libpq's pipeline (:class:`~.wire.Wire`): it
waits for the server where it reads, and once for its last writes and the commit. A runtime's
own command runs on its writer's connection instead when the writer is idle (``store.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..._ids import jitter
from ..._json import JSON
from ..._threads import run_store_call
from ...errors import NotFoundError, SchemaVersionError, StorageError
from ...journal import transitions
from ...journal.commands import Cancel, Command, Fork, Submit, SubmitTask
from ...journal.records import RUNNABLE_STATUSES, Claim
from .tx import PostgresTx

if TYPE_CHECKING:  # psycopg is the postgres extra's: imported once a store connects
    from .wire import Wire

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["PostgresClient"]

T = TypeVar("T")

#: How often a command that keeps colliding with other transactions is tried before it fails.
ATTEMPTS = 12


class Applied(NamedTuple):
    """What applying a command gave."""

    answer: JSON
    #: The run it submitted, claimed for the worker that asked (``claim_for``).
    claim: Claim | None
    #: Its execution, begun in the same transaction (``begin``).
    begun: transitions.Begun | None
    #: The event-sequence counter as the command left it (None if it handed out none).
    sequence: int | None


class PostgresClient:
    """The pool of a store's reads and commands; used from threads, each on its own connection."""

    def __init__(self, store: PostgresStore) -> None:
        from psycopg_pool import ConnectionPool, PoolTimeout

        self._store = store
        self._wires: weakref.WeakKeyDictionary[Any, Wire] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        conn = store.connect()  # one clear error for a server, database or schema we cannot use
        try:
            check_version(store, conn)
        finally:
            conn.close()
        self._pool = ConnectionPool(
            store.url,
            min_size=store.min_size,
            max_size=store.max_size,
            kwargs={"autocommit": True, "connect_timeout": 10},
            configure=store.configure,
            name=f"stead-postgres:{store.schema}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=15)
        except PoolTimeout:
            self._pool.close()
            raise StorageError(
                f"cannot open {store.min_size} connection(s) to PostgreSQL {store.where} within "
                "15s; check the server's max_connections and the store's min_size"
            ) from None

    def close(self) -> None:
        self._pool.close()

    def read(self, fn: Callable[[PostgresTx], T]) -> T:
        """``fn`` on one snapshot of the journal."""
        with self._pool.connection() as conn:
            return self._store.guarded(lambda: _read(conn, self._store, fn))

    async def command(self, command: Command, *, timeout: float) -> Any:
        """Apply ``command`` (a client has no registry: a submission without a version is
        pinned to the version a runtime registered last). ``timeout`` bounds the wait for a
        free connection of the pool."""
        applied = await run_store_call(self.apply, command, None, None, timeout=timeout)
        return applied.answer

    def apply(
        self,
        command: Command,
        version_of: transitions.VersionOf | None,
        max_pending: int | None,
        *,
        timeout: float = 30.0,
        claim_for: str | None = None,
        begin: Callable[[PostgresTx, str, bool], transitions.Begun | None] | None = None,
        on: tuple[Any, Wire] | None = None,
    ) -> Applied:
        """Apply ``command`` in its own transaction, run again while it collides (blocking).
        With ``claim_for`` (a worker's id), a run the command submits at its session's head is
        claimed for that worker in the same transaction, and its claim returned; with
        ``begin`` too, ``begin(tx, run_id, fresh)`` begins its execution there, and its answer
        is returned (``fresh``: the command inserted the run and wrote nothing else of it).
        ``on``: a connection and its wire to use instead of one of the pool's (the runtime's
        writer's, while it is idle). The commit is flushed to disk before this returns (a
        command is acknowledged), whatever the connection's own ``synchronous_commit``."""
        import psycopg.errors as pg
        from psycopg_pool import PoolTimeout

        from .wire import Forgotten

        # A statement the server forgot (the pool rolled the connection back) is one too.
        retryable = (pg.SerializationFailure, pg.DeadlockDetected, pg.UniqueViolation, Forgotten)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with self._connection(on, timeout) as (conn, wire):
                    return self._store.guarded(
                        lambda: self._apply(
                            conn, wire, command, version_of, max_pending, claim_for, begin
                        ),
                        passing=retryable,
                    )
            except retryable:
                if attempt == ATTEMPTS:
                    break
                time.sleep(jitter(0, 0.002 * 2**attempt))
            except PoolTimeout:
                raise TimeoutError(
                    f"no connection to PostgreSQL {self._store.where} was free within "
                    f"{timeout:g}s to apply {type(command).__name__.lower()}; nothing of it was "
                    f"kept. Raise the store's max_size ({self._store.max_size}) or try again"
                ) from None
        raise StorageError(
            f"{type(command).__name__.lower()} collided with other transactions on PostgreSQL "
            f"{self._store.where} {ATTEMPTS} times; nothing of it was kept — try again"
        )

    @contextlib.contextmanager
    def _connection(
        self, on: tuple[Any, Wire] | None, timeout: float
    ) -> Iterator[tuple[Any, Wire]]:
        """``on``, or a connection of the pool (waiting up to ``timeout``) and its wire."""
        if on is not None:
            yield on
            return
        with self._pool.connection(timeout=timeout) as conn:
            yield conn, self._wire(conn)

    def _apply(
        self,
        conn: Any,
        wire: Wire,
        command: Command,
        version_of: transitions.VersionOf | None,
        max_pending: int | None,
        claim_for: str | None,
        begin: Callable[[PostgresTx, str, bool], transitions.Begun | None] | None,
    ) -> Applied:
        store = self._store
        tx = PostgresTx(conn, store.clock, lease_seconds=store.lease_seconds, lock_runs=True)
        wire.open()
        tx.pipeline = wire  # the command waits for the server where it reads, and at its end
        try:
            tx.execute("BEGIN")
            tx.execute("SET LOCAL synchronous_commit = on")
            if (
                version_of is None
                and isinstance(command, Submit | SubmitTask)
                and command.version is None
            ):
                version_of = _registered(tx, "task" if isinstance(command, SubmitTask) else "agent")
            answer = transitions.apply(tx, command, version_of, max_pending=max_pending)
            notices = [store.worker]  # a runtime's own: it skips them ("" from a client)
            if isinstance(command, Cancel) and isinstance(answer, list):
                notices = [f"cancel:{run_id}" for run_id in answer] or notices
            claiming: str | None = None  # the run to claim for claim_for
            if (
                claim_for is not None
                and isinstance(command, Submit | SubmitTask | Fork)
                and isinstance(answer, dict)
                and answer["ready"]
            ):
                claiming = str(answer["run_id"])
                notices = []  # nothing for the other workers to take
            claimed = begun = None
            if claiming is not None and claim_for is not None:
                claimed = _claim_new(tx, claiming, claim_for, store.lease_seconds)
                if begin is not None:
                    # The run was inserted by this transaction, so nobody else can have
                    # claimed it: the claim holds, and its execution begins here too.
                    begun = begin(tx, claiming, transitions.inserts_fresh(command))
            # Nothing more is read: the events, the counter, the notifications and the commit
            # go to the server together, and the command waits for it once.
            tx.write_events()
            tx.write_sequence()
            for notice in notices:
                tx.execute("SELECT pg_notify(?, ?)", (store.channel, notice))
            tx.execute("COMMIT")
            tx.pipeline = None
            wire.close()
            epoch = claimed.fetchone() if claimed is not None else None
            if epoch is None:
                return Applied(answer, None, None, tx.sequence_written)
            claim = Claim(str(claiming), int(epoch[0]))
            return Applied(answer, claim, begun, tx.sequence_written)
        except BaseException:
            tx.pipeline = None
            with contextlib.suppress(Exception):  # what failed is already being raised
                wire.close()
            conn.execute("ROLLBACK")
            wire.forget()  # psycopg, seeing the ROLLBACK, has the server forget them
            raise

    def _wire(self, conn: Any) -> Wire:
        """The wire of a connection of the pool (its prepared statements live as long)."""
        from .wire import Wire

        with self._lock:
            wire = self._wires.get(conn)
            if wire is None:
                wire = self._wires[conn] = Wire(conn)
            return wire


def _claim_new(tx: PostgresTx, run_id: str, worker: str, lease_seconds: float) -> Any:
    """Claim for ``worker`` a run this transaction just submitted at its session's head: the
    statement whose row is the claim's epoch (none if the run was not runnable and unclaimed
    after all: the worker's scheduler then claims it as any other)."""
    ready = ", ".join(f"'{status}'" for status in RUNNABLE_STATUSES)
    return tx.execute(
        "UPDATE stead_runs SET claim_epoch = claim_epoch + 1, claimed_by = ?, "
        "lease_until = clock_timestamp() + make_interval(secs => ?) "
        f"WHERE id = ? AND claimed_by IS NULL AND status IN ({ready}) RETURNING claim_epoch",
        (worker, lease_seconds, run_id),
    )


def _read(conn: Any, store: PostgresStore, fn: Callable[[PostgresTx], T]) -> T:
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        answer = fn(PostgresTx(conn, store.clock, read_only=True))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")  # not ROLLBACK, which drops the prepared statements (see writer.py)
    return answer


def _registered(tx: PostgresTx, what: str) -> transitions.VersionOf:
    """The version a runtime declared latest for an agent or a task (when a client names
    none)."""

    def version_of(agent_id: str, version: str | None) -> str:
        if version is not None:
            return version
        row = tx.execute(
            "SELECT version FROM stead_agents WHERE agent_id = ? ORDER BY latest_at DESC LIMIT 1",
            (agent_id,),
        ).fetchone()
        if row is not None:
            return str(row[0])
        known = [r[0] for r in tx.execute("SELECT DISTINCT agent_id FROM stead_agents")]
        raise NotFoundError(
            f"unknown {what} {agent_id!r}: no worker on this schema registered it; registered "
            f"agents and tasks: {', '.join(sorted(known)) or 'none'}. Start a worker whose App "
            "has it"
        )

    return version_of


def check_version(store: PostgresStore, conn: Any) -> None:
    """The schema must hold a journal of exactly this stead's schema version."""
    from .store import SCHEMA_VERSION

    found = conn.execute("SELECT to_regclass(%s)", (f'"{store.schema}".stead_meta',)).fetchone()[0]
    version = (
        int(conn.execute("SELECT schema_version FROM stead_meta").fetchone()[0])
        if found is not None
        else 0
    )
    if version == SCHEMA_VERSION:
        return
    if version == 0:
        raise StorageError(
            f"schema {store.schema!r} {store.where} holds no stead journal; a runtime "
            "creates it: App.open(stead.PostgresStore(url, schema=...))"
        )
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema {store.schema!r} {store.where} has stead schema version {version}, "
            f"newer than this stead reads ({SCHEMA_VERSION}); upgrade stead"
        )
    raise SchemaVersionError(
        f"schema {store.schema!r} {store.where} has stead schema version {version}, "
        f"written by an older stead; open it once with a runtime of this stead "
        f"(App.open), which migrates it to version {SCHEMA_VERSION}"
    )
