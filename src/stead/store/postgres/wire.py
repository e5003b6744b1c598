"""A batch's statements sent through libpq's pipeline directly, as named prepared statements.

psycopg's cursor does a good deal for every statement (a cursor object, query conversion,
adaptation, its prepared-statement bookkeeping, a pipeline round of its own), about 30 µs here:
ten of them cost a journal write more than the server does. The writer's batches and the
commands send the same few statement texts over and over, so :class:`Wire` sends them itself:
each text is prepared once per connection under a name of its own (``stead_N``, apart from
psycopg's ``_pg3_N``), its parameters go as text (the server infers their types from the
statement, as it does for the columns they meet), and results are loaded by psycopg's own loaders.

psycopg has the server forget every prepared statement after it saw a ``ROLLBACK`` on the
connection (``DEALLOCATE ALL``), so whoever rolls back through psycopg calls :meth:`Wire.forget`;
a statement the server no longer knows raises :class:`Forgotten`, which the writer takes as a
batch to write again, and a command as one to apply again.
"""

from __future__ import annotations

import asyncio
import collections
import re
import select
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.errors import error_from_result

_MARK = re.compile(r"%s")
_OK = frozenset({pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK})
#: SQLSTATE of "prepared statement ... does not exist".
_UNKNOWN_STATEMENT = "26000"


class Forgotten(Exception):
    """The server forgot a statement this wire prepared (psycopg deallocated it): nothing of
    the batch was kept; write it again."""


class WouldWait(Exception):
    """A statement's answer was asked for on the event loop, which must not wait for the server
    (:meth:`Wire.open` with ``wait=False``): the batch is written on the writer's thread."""


class Statement:
    """One sent statement: its rows once the server answered (what a psycopg cursor gives)."""

    __slots__ = ("_result", "_rows", "_wire")

    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        self._result: pq.abc.PGresult | None = None
        self._rows: list[tuple[Any, ...]] | None = None

    def _answer(self) -> pq.abc.PGresult:
        if self._result is None:
            self._wire.wait_for(self)
        assert self._result is not None
        return self._result

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            result = self._answer()
            loader = self._wire.loader
            loader.set_pgresult(result)
            self._rows = loader.load_rows(0, result.ntuples, tuple)
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self.fetchall()
        return rows[0] if rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return int(self._answer().command_tuples or 0)


class Wire:
    """Statements of one connection in libpq's pipeline mode, between :meth:`open` and
    :meth:`close` (or :meth:`finish_soon`), while psycopg leaves the connection alone; used by
    one thread at a time (the event loop's or the writer's, handing over between batches)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._pgconn = conn.pgconn
        self.loader = Transformer(conn)
        self._dumper = Transformer(conn)
        self._names: dict[str, bytes] = {}
        self._texts: dict[str, bytes] = {}
        self._prepared = 0
        #: What each result the server will send belongs to, in order: a statement, or the
        #: text of a statement being prepared.
        self._expected: collections.deque[Statement | str] = collections.deque()
        self._failure: BaseException | None = None
        self._open = False
        self._unasked = False  # statements sent since the server was last asked to answer
        self._wait = True
        #: Whether the pipeline's end was sent (False) and its answer read (True).
        self._synced: bool | None = None
        self._pending: pq.abc.PGresult | None = None  # a result whose None is still due

    def forget(self) -> None:
        """The server forgot this connection's prepared statements (psycopg rolled back)."""
        self._names.clear()

    # -- the pipeline ------------------------------------------------------------------------

    def open(self, *, wait: bool = True) -> None:
        """Start a pipeline. Without ``wait`` (on the event loop) nothing may wait for an
        answer: :meth:`finish_soon` ends it, and a read raises :class:`WouldWait`."""
        self._failure = None
        self._unasked = False
        self._wait = wait
        self._pgconn.nonblocking = 1
        self._pgconn.enter_pipeline_mode()
        self._open = True

    def close(self) -> None:
        """End the pipeline: read every answer still due. Raises the first failure of the
        statements sent (the ones after it were not run)."""
        if not self._open:
            return
        try:
            if self._synced is None:
                self._pgconn.pipeline_sync()
                self._synced = False
            self._send()
            self._receive(until_sync=True)
        finally:
            self._end()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _end(self) -> None:
        self._open = False
        self._synced = None
        self._pending = None
        self._expected.clear()
        self._pgconn.exit_pipeline_mode()
        self._pgconn.nonblocking = 0

    def finish_soon(
        self,
        loop: asyncio.AbstractEventLoop,
        done: Callable[[BaseException | None], None],
        *,
        spin: float = 0.0,
    ) -> None:
        """End the pipeline without blocking the event loop for long: the answers are read as
        they come (``loop.add_reader``), and ``done(first failure or None)`` is called on the
        loop once the last is in and the connection is out of pipeline mode. With ``spin``
        (seconds), the answers are first looked for here, without sleeping, for that long:
        for a caller whose loop has nothing else to do meanwhile (see the writer), since a
        loop that sleeps in its selector is woken late on a machine whose idle CPUs halt."""
        pgconn = self._pgconn
        fd = pgconn.socket
        pgconn.pipeline_sync()
        self._synced = False

        over = False

        def finished(failure: BaseException | None) -> None:
            nonlocal over
            if over:
                return
            over = True
            loop.remove_reader(fd)
            loop.remove_writer(fd)
            try:
                self._end()
            except BaseException as exc:  # a connection left in a state libpq refuses
                failure = failure or exc
            self._failure = None
            done(failure)

        def readable() -> None:
            if over:
                return
            try:
                pgconn.consume_input()
                while not self._synced and not pgconn.is_busy():
                    self._take(pgconn.get_result())
            except BaseException as exc:
                finished(exc)
                return
            if self._synced:
                finished(self._failure)

        def writable() -> None:
            try:
                if not pgconn.flush():
                    loop.remove_writer(fd)
            except BaseException as exc:
                finished(exc)

        unsent = pgconn.flush()
        if spin > 0 and not unsent:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            until = time.perf_counter() + spin
            while time.perf_counter() < until:
                if poller.poll(0):
                    readable()
                    if over:
                        return
        loop.add_reader(fd, readable)
        if unsent:
            try:
                loop.add_writer(fd, writable)
            except BaseException:
                loop.remove_reader(fd)
                raise

    def _take(self, result: pq.abc.PGresult | None) -> None:
        """One more of the server's answers, read without waiting: a statement's result and
        the None after it, or (once none is due) the pipeline's end."""
        if not self._expected:
            if result is not None and result.status == pq.ExecStatus.PIPELINE_SYNC:
                self._synced = True
            return
        if result is not None:
            if self._pending is not None:
                raise psycopg.InterfaceError("the server sent more than one result a statement")
            self._pending = result
            return
        if self._pending is None:
            raise psycopg.InterfaceError("the server's answers ended before the pipeline's")
        answer, self._pending = self._pending, None
        self._settle(self._expected.popleft(), answer)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Statement:
        """Send ``sql`` (psycopg's ``%s`` marks) with ``params``; nothing waits for the server."""
        pgconn = self._pgconn
        name = self._names.get(sql)
        if name is None:
            self._prepared += 1
            name = self._names[sql] = f"stead_{self._prepared}".encode()
            text = self._texts.get(sql)
            if text is None:
                count = iter(range(1, len(params) + 2))
                text = self._texts[sql] = _MARK.sub(lambda _: f"${next(count)}", sql).encode()
            pgconn.send_prepare(name, text)
            self._expected.append(sql)
        statement = Statement(self)
        pgconn.send_query_prepared(name, [self._dump(value) for value in params])
        self._expected.append(statement)  # sent with the next sync (libpq flushes a full buffer)
        self._unasked = True
        return statement

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        for params in rows:
            self.execute(sql, params)

    def sync(self) -> None:
        """Wait for every statement sent so far; raise the first failure."""
        if self._expected:
            self._ask()
            self._receive(until_sync=False)
        self._raise()

    def wait_for(self, statement: Statement) -> None:
        """Wait until ``statement`` has its answer; raise the first failure."""
        self._ask()
        while statement._result is None and self._failure is None:
            self._receive_one()
        self._raise()

    # -- the socket --------------------------------------------------------------------------

    def _ask(self) -> None:
        """Have the server answer everything sent so far (once: later waits find it)."""
        if not self._wait:
            raise WouldWait
        if self._unasked:
            self._pgconn.send_flush_request()
            self._send()
            self._unasked = False

    def _send(self) -> None:
        """Flush what libpq holds to the server, reading answers meanwhile (a server that
        cannot write its answers stops reading)."""
        pgconn = self._pgconn
        while pgconn.flush():
            readable, _, _ = select.select([pgconn.socket], [pgconn.socket], [])
            if readable:
                pgconn.consume_input()

    def _receive(self, *, until_sync: bool) -> None:
        while self._expected:
            self._receive_one()
        if until_sync:
            while self._next_result().status != pq.ExecStatus.PIPELINE_SYNC:
                pass

    def _receive_one(self) -> None:
        """Read the answer of the next statement (or ``Prepare``) due."""
        expected = self._expected.popleft()
        result = self._next_result()
        if self._next_result_or_none() is not None:  # one result a statement; then nothing
            raise psycopg.InterfaceError("the server sent more than one result a statement")
        self._settle(expected, result)

    def _settle(self, expected: Statement | str, result: pq.abc.PGresult) -> None:
        if result.status in _OK:
            pass
        elif isinstance(expected, str):  # not prepared (failed, or after a failure)
            self._names.pop(expected, None)
        if result.status not in _OK and self._failure is None:
            if result.status == pq.ExecStatus.PIPELINE_ABORTED:
                failure: BaseException = psycopg.OperationalError("pipeline aborted")
            else:
                failure = error_from_result(result, self._conn.info.encoding)
                if getattr(failure, "sqlstate", None) == _UNKNOWN_STATEMENT:
                    self.forget()
                    forgotten = Forgotten(str(failure))
                    forgotten.__cause__ = failure
                    failure = forgotten
            self._failure = failure
        if isinstance(expected, Statement):
            expected._result = result

    def _next_result(self) -> pq.abc.PGresult:
        result = self._next_result_or_none()
        if result is None:
            raise psycopg.InterfaceError("the server's answers ended before the pipeline's")
        return result

    def _next_result_or_none(self) -> pq.abc.PGresult | None:
        pgconn = self._pgconn
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                return pgconn.get_result()
            select.select([pgconn.socket], [], [])

    def _raise(self) -> None:
        """Raise the first failure (again, until the pipeline closes: what was sent after it
        was not run)."""
        if self._failure is not None:
            raise self._failure

    def _dump(self, value: Any) -> bytes | None:
        if value is None:
            return None
        kind = type(value)
        if kind is str:
            return value.encode()  # type: ignore[no-any-return]
        if kind is int:
            return str(value).encode()
        if kind is bool:
            return b"true" if value else b"false"
        if kind is float:
            return repr(value).encode()
        dumped = self._dumper.get_dumper(value, PyFormat.TEXT).dump(value)
        return None if dumped is None else bytes(dumped)


__all__ = ["Forgotten", "Statement", "Wire", "WouldWait"]
