"""A PostgreSQL transaction: the shared row SQL (``..rows.SqlTx``) on one psycopg connection,
with PostgreSQL's savepoints and the event-sequence counter.

Event sequences come from the ``stead_meta`` row: the first event a transaction hands out locks
that row (``FOR UPDATE``) until the transaction ends, and the commit writes the next free number
back. Transactions that write events therefore commit one after another, in sequence order, so a
follower reading "after sequence N" never skips an event that commits later with a lower number,
however many workers share the database.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..._clock import Clock
from ..._json import dumps
from ...errors import LeaseLostError
from ...journal.records import Claim, Interaction, Notice, Run
from ..rows import POSTGRES, SqlTx
from ..rows._base import INTERACTION_SELECT, OPERATIONS_PER_RUN, interaction_of

if TYPE_CHECKING:  # psycopg is the postgres extra's: imported once a store connects
    from .wire import Statement, Wire

#: Statuses a run that leaves ``running`` may go to without anything becoming runnable: it
#: waits for people, or for its back-off (the workers' timers know when it ends).
_NOTHING_TO_TAKE = frozenset({"waiting", "retry_wait"})
_LOCK_COUNTER = "SELECT next_sequence FROM stead_meta WHERE singleton = 1 FOR UPDATE"
#: A claim's fence: extend its lease while it is still this worker's (a row), else nothing.
_EXTEND_LEASE = (
    "UPDATE stead_runs SET lease_until = clock_timestamp() + make_interval(secs => ?) "
    "WHERE id = ? AND claim_epoch = ? AND claimed_by IS NOT NULL RETURNING 1"
)


class Unpipelined(Exception):
    """A checked job of a pipelined batch answered with an error: write the batch again
    statement by statement, where its writes can be undone alone (a savepoint)."""


class PostgresTx(SqlTx):
    """One transaction (or a read) on a connection of the store. Used on one thread."""

    dialect = POSTGRES

    def __init__(
        self,
        conn: Any,
        clock: Clock,
        *,
        read_only: bool = False,
        lease_seconds: float = 15.0,
        lock_runs: bool = False,
        confirmed: dict[str, tuple[int, float]] | None = None,
        channel: str | None = None,
        sender: str = "",
    ) -> None:
        self.conn = conn
        self.clock = clock
        self.read_only = read_only
        self.lease_seconds = lease_seconds
        #: A command's transaction locks what it decides on before reading it — the run and
        #: the interaction (``FOR UPDATE``), the session (an advisory lock) — so it and a
        #: worker's write, or another command, happen one after the other, and each statement
        #: (``READ COMMITTED``) sees what committed before.
        self.lock_runs = lock_runs
        self.row_lock = " FOR UPDATE" if lock_runs else ""
        #: The fences this transaction checked: the run's row stays locked until it ends.
        self._fenced: dict[str, bool] = {}
        self._fenced_mark: dict[str, bool] = {}
        self._sessions: set[str] = set()
        #: The store's record of when each claim's lease was last extended (local monotonic
        #: time taken before the extending statement was sent): written on commit.
        self._confirmed = confirmed
        self._extended: dict[str, tuple[int, float]] = {}
        #: The workers' channel: a transaction that lets a run go wakes them.
        self.channel = channel
        #: The payload of its notifications: the worker that sends them (which skips its own).
        self.sender = sender
        #: The pipeline the transaction's statements go through, when they do (the writer's
        #: :class:`~.wire.Wire`).
        self.pipeline: Wire | None = None
        self._notified = self._notified_mark = False
        self.events: list[Notice] = []
        self.unwritten = []
        self._sequence: int | None = None  # the next free sequence, once the counter is locked
        self._counter: Statement | None = None  # the counter's lock, sent and not yet read
        self._mark: tuple[int | None, int] = (None, 0)
        self._now: datetime | None = None
        self._stamp = ""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self.pipeline is not None:
            return self.pipeline.execute(self.dialect.sql(sql), params)
        return self.conn.execute(self.dialect.sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        if self.pipeline is not None:
            return self.pipeline.executemany(self.dialect.sql(sql), rows)
        with self.conn.cursor() as cursor:
            cursor.executemany(self.dialect.sql(sql), rows)
            return cursor

    def changed(self, cursor: Any) -> int:
        if self.pipeline is not None:
            self.pipeline.sync()
        return int(cursor.rowcount)

    def complete_operation(
        self,
        run_id: str,
        key: str,
        result: Any,
        result_text: str | None = None,
        completed_seq: int | None = None,
        *,
        run_number: int,
        position: int,
    ) -> bool:
        """In a pipelined batch the server checks that the operation was in progress: if not,
        the statement fails (naming it) and the whole transaction with it, so the batch does
        not wait for the row count half way."""
        if self.pipeline is None:
            return super().complete_operation(
                run_id,
                key,
                result,
                result_text,
                completed_seq,
                run_number=run_number,
                position=position,
            )
        self.execute(
            "WITH done AS (UPDATE stead_operations SET status = 'completed', result = ?, "
            "updated_at = ?, completed_seq = ? WHERE id = ? AND key = ? "
            "AND status = 'started' RETURNING 1) "
            "SELECT CASE WHEN COUNT(*) = 1 THEN 0 ELSE ('stead: operation ' || ? || ' of run ' "
            "|| ? || ' was not in progress (' || COUNT(*) || ' rows)')::int END FROM done",
            (
                result_text if result_text is not None else dumps(result),
                self.stamp(),
                completed_seq,
                run_number * OPERATIONS_PER_RUN + position,
                key,
                key,
                run_id,
            ),
        )
        return True

    # -- claims and fences -------------------------------------------------------------------

    def get_interaction(self, interaction_id: str) -> Interaction | None:
        if not self.lock_runs:
            return super().get_interaction(interaction_id)
        row = self.execute(
            f"{INTERACTION_SELECT} WHERE i.id = ? FOR UPDATE OF i", (interaction_id,)
        ).fetchone()
        return interaction_of(row) if row else None

    def ask_find_request(self, session_id: str, request_id: str) -> Any:
        self.lock_session(session_id)
        return super().ask_find_request(session_id, request_id)

    def ask_unfinished_in_session(self, session_id: str) -> Any:
        self.lock_session(session_id)
        return super().ask_unfinished_in_session(session_id)

    def asked_submission(self) -> None:
        """A command's submission writes an event next: lock the sequence counter along with
        its questions, so their answer brings the counter's too (one wait for the server, not
        two). The session is locked already, and no run's row is locked after the counter (a
        fork locked its source before), so the locks are still taken in the workers' order."""
        asked = self._sequence is not None or self._counter is not None
        if self.lock_runs and self.pipeline is not None and not asked:
            self._counter = self.execute(_LOCK_COUNTER)

    def later_started(self, run: Run) -> Run | None:
        self.lock_session(run.session_id)
        return super().later_started(run)

    def lock_session(self, session_id: str) -> None:
        """A command deciding on a session's runs (a submission, a retry) holds the session
        until it commits, so two commands never decide on one session at once."""
        if self.lock_runs and session_id not in self._sessions:
            self.execute(
                "SELECT pg_advisory_xact_lock(hashtext(?))", (f"stead-session:{session_id}",)
            )
            self._sessions.add(session_id)

    def begin(self, *, durable: bool, fences: Sequence[Claim]) -> None:
        """Open the write transaction in one round trip: its durability, the fences of the
        claims its jobs write under (checked and locked: see :meth:`check_fence`), and — when
        there are fences, so executions will write events — the sequence counter."""
        from psycopg.sql import Literal

        parts = [f"BEGIN; SET LOCAL synchronous_commit = {'on' if durable else 'off'}"]
        for claim in fences:
            parts.append(
                "UPDATE stead_runs SET lease_until = clock_timestamp() + "
                f"make_interval(secs => {float(self.lease_seconds)!r}) "
                f"WHERE id = {Literal(claim.run_id).as_string(self.conn)} "
                f"AND claim_epoch = {int(claim.epoch)} AND claimed_by IS NOT NULL RETURNING 1"
            )
        if fences:
            parts.append(_LOCK_COUNTER)
        cursor = self.conn.cursor()
        sent = time.monotonic()
        cursor.execute("; ".join(parts), prepare=False)  # several statements: never prepared
        cursor.nextset()  # past BEGIN and SET
        for claim in fences:
            cursor.nextset()
            held = self._fenced[claim.run_id] = bool(cursor.fetchall())
            if held:
                self.extended(claim, sent)
        if fences:
            cursor.nextset()
            self._sequence = int(cursor.fetchone()[0])

    def begin_pipelined(
        self, *, durable: bool, fences: Sequence[Claim], next_sequence: int | None
    ) -> None:
        """Open the write transaction inside the pipeline, without waiting for the server: the
        claims' fences are assumed to hold, and the sequence counter (given ``next_sequence``)
        to be where this writer last left it, and the server checks it — a fence that does
        not hold, or a counter another writer moved, fails the statement, so the whole
        transaction and nothing of it is kept (the writer then runs the batch again the
        checked way: :meth:`begin`). Each message names something the server only knows when
        the statement runs (a count, a column): a constant one would be raised while the
        statement is planned, whatever the case. Without ``next_sequence``, the counter is
        locked and read when the first event needs it (by then its answer is usually in)."""
        self.execute("BEGIN", ())
        if durable:  # the writer's connection commits with it off unless told (store.py)
            self.execute("SET LOCAL synchronous_commit = on", ())
        sent = time.monotonic()
        for claim in fences:
            self.execute(
                f"WITH held AS ({_EXTEND_LEASE}) "
                "SELECT CASE WHEN COUNT(*) = 1 THEN 0 ELSE ('stead: assumed the claim on run ' "
                "|| ? || ' held (' || COUNT(*) || ' rows)')::int END FROM held",
                (self.lease_seconds, claim.run_id, claim.epoch, claim.run_id),
            )
            self._fenced[claim.run_id] = True
            self.extended(claim, sent)
        if next_sequence is None:
            if fences:
                self._counter = self.execute(_LOCK_COUNTER)
            return
        self.execute(
            "SELECT CASE WHEN next_sequence = ? THEN 0 ELSE "
            "('stead: assumed the sequence counter at ' || ?::text || ', found '"
            " || next_sequence)::int END FROM stead_meta WHERE singleton = 1 FOR UPDATE",
            (next_sequence, next_sequence),
        )
        self._sequence = next_sequence

    def check_fence(self, claim: Claim) -> None:
        """Before a worker's write to ``claim.run_id``: the claim must still be this worker's
        (same epoch), else :class:`LeaseLostError`. Holding, it extends the lease and locks the
        run's row until the transaction ends, so nobody takes the run over in between."""
        held = self._fenced.get(claim.run_id)
        if held is None:
            sent = time.monotonic()
            row = self.execute(
                _EXTEND_LEASE,
                (self.lease_seconds, claim.run_id, claim.epoch),
            ).fetchone()
            held = self._fenced[claim.run_id] = row is not None
            if held:
                self.extended(claim, sent)
        if not held:
            raise LeaseLostError(
                f"this worker lost its claim on run {claim.run_id} (epoch {claim.epoch}): the "
                "lease expired and another worker took the run over, or the run left running; "
                "nothing of the refused write was kept"
            )

    def extended(self, claim: Claim, sent: float) -> None:
        """``claim``'s lease was extended by a statement sent at ``sent`` (monotonic)."""
        self._extended[claim.run_id] = (claim.epoch, sent)

    def committed(self) -> None:
        """After the commit: the leases this transaction extended count as confirmed."""
        if self._confirmed is not None and self._extended:
            self._confirmed.update(self._extended)
            if len(self._confirmed) > 4096:  # forget claims long gone
                horizon = time.monotonic() - 10 * self.lease_seconds
                for run_id, (_, at) in list(self._confirmed.items()):
                    if at < horizon:
                        del self._confirmed[run_id]

    def claim_released(self, run_id: str, status: str) -> None:
        self._fenced[run_id] = False
        if self.channel is not None and status not in _NOTHING_TO_TAKE and not self._notified:
            # The run ended (its session's next run is up) or may go on at once: wake the
            # workers when this commits, whichever of them has room.
            self._notified = True
            self.execute("SELECT pg_notify(?, ?)", (self.channel, self.sender))

    # -- the sequence counter ----------------------------------------------------------------

    @property
    def next_sequence(self) -> int:
        if self._sequence is None:
            counter, self._counter = self._counter, None
            row: Any = (counter or self.execute(_LOCK_COUNTER)).fetchone()
            self._sequence = int(row[0])
        return self._sequence

    @next_sequence.setter
    def next_sequence(self, value: int) -> None:
        self._sequence = value

    @property
    def sequence_written(self) -> int | None:
        """The counter as this transaction leaves it, if it locked the counter (else None:
        another writer may have moved it meanwhile)."""
        if self._sequence is None and self._counter is not None and self.pipeline is None:
            return self.next_sequence  # locked in a closed pipeline: its answer is in
        return self._sequence

    def write_sequence(self) -> None:
        """Before commit: store the next free sequence (if this transaction handed any out)."""
        if self._sequence is not None:
            self.execute(
                "UPDATE stead_meta SET next_sequence = ? WHERE singleton = 1", (self._sequence,)
            )

    # -- transaction plumbing ----------------------------------------------------------------

    def savepoint(self) -> None:
        """Before a checked job. In a pipelined batch no savepoint is sent: a job whose answer
        is an error raises :class:`Unpipelined` at :meth:`rollback_savepoint`, and the writer
        writes the batch again statement by statement, with savepoints (rare: a refused
        command, a lost claim)."""
        self.write_events()
        if self.pipeline is None:
            self.conn.execute("SAVEPOINT job")
        self._mark = (self._sequence, len(self.events))
        self._fenced_mark = dict(self._fenced)
        self._notified_mark = self._notified
        self._now = None

    def rollback_savepoint(self) -> None:
        if self.pipeline is not None:
            raise Unpipelined
        self.conn.execute("ROLLBACK TO SAVEPOINT job")
        self.unwritten = []
        # A counter lock first taken after the savepoint was released with it: take it again.
        self._sequence, count = self._mark
        del self.events[count:]
        self._fenced = self._fenced_mark
        self._notified = self._notified_mark

    def release_savepoint(self) -> None:
        self.write_events()
        if self.pipeline is None:
            self.conn.execute("RELEASE SAVEPOINT job")


__all__ = ["PostgresTx", "Unpipelined"]
